package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/rueidis"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/internal/testutil/browser"
	"github.com/gantryhq/gantry/taskq"
	"github.com/gantryhq/gantry/taskq/dashboard"
)

const token = "dashboard-test-token-0123456789"

// stack is a dashboard on its own Redis database with a worker running.
type stack struct {
	url string
	c   *taskq.Client
	in  *taskq.Inspector
}

func newStack(t *testing.T) *stack {
	t.Helper()
	addr := "redis://" + testutil.Redis(t) + "/11" // a database of its own: the page shows only this test's queues
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	in, err := taskq.NewInspector(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	rc := taskqRedis(t, addr)
	rc()
	t.Cleanup(rc)
	d := dashboard.New(dashboard.Config{Client: c, Inspector: in, TokenHash: dashboard.HashToken(token),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Interval: 300 * time.Millisecond})
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return &stack{url: srv.URL, c: c, in: in}
}

// taskqRedis returns a func that empties the test's database (queues,
// cron entries, worker records).
func taskqRedis(t *testing.T, addr string) func() {
	return func() {
		opt, err := rueidis.ParseURL(addr)
		if err != nil {
			t.Fatal(err)
		}
		opt.DisableCache = true
		c, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Do(context.WithoutCancel(t.Context()), c.B().Flushdb().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// The API refuses requests without the token and changes without the
// page's header; the login sets an HttpOnly, SameSite=Strict cookie.
func TestAPIAuth(t *testing.T) {
	s := newStack(t)
	do := func(method, path, body string, h map[string]string) *http.Response {
		req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r
	}
	bearer := map[string]string{"Authorization": "Bearer " + token}
	for _, c := range []struct {
		method, path, body string
		h                  map[string]string
		want               int
	}{
		{"GET", "/api/overview", "", nil, 401},
		{"GET", "/api/overview", "", map[string]string{"Authorization": "Bearer wrong"}, 401},
		{"GET", "/api/overview", "", bearer, 200},
		{"POST", "/api/queue/pause", `{"queue":"q"}`, bearer, 403},
		{"POST", "/api/queue/pause", `{"queue":"q"}`, map[string]string{"Authorization": "Bearer " + token, "X-Taskq-UI": "1"}, 200},
		{"POST", "/api/queue/explode", `{"queue":"q"}`, map[string]string{"Authorization": "Bearer " + token, "X-Taskq-UI": "1"}, 400},
		{"POST", "/api/task/cancel", `{"queue":"q","id":"nope"}`, map[string]string{"Authorization": "Bearer " + token, "X-Taskq-UI": "1"}, 404},
		{"GET", "/api/tasks?queue=q&state=bogus", "", bearer, 400},
		{"GET", "/api/tasks?queue=q", "", bearer, 400},
		{"GET", "/api/tasks?queue=q&state=pending&cursor=garbage", "", bearer, 400},
		{"GET", "/api/tasks?queue=q&state=pending", "", bearer, 200},
		{"POST", "/api/login", `{"token":"wrong"}`, nil, 401},
		{"GET", "/", "", nil, 200},
	} {
		if r := do(c.method, c.path, c.body, c.h); r.StatusCode != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, r.StatusCode, c.want)
		}
	}
	r := do("POST", "/api/login", `{"token":"`+token+`"}`, nil)
	ck := r.Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login cookie %+v", ck)
	}
}

// The dashboard in headless Chromium: the token link logs in; tenants
// with weights and fair shares, a paused queue and a limit appear, live;
// a running task shows its progress; pausing a tenant and requeueing a
// dead task from the page reach Redis; the screenshot goes to
// $GANTRY_SCREENSHOT (docs/queue-ui.png) or the test's temp dir.
func TestDashboardInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	s := newStack(t)
	ctx := t.Context()
	for _, tn := range []struct {
		name   string
		weight float64
		n      int
	}{{"acme", 3, 400}, {"globex", 1, 300}, {"initech", 1, 200}} {
		tasks := make([]*taskq.Task, tn.n)
		for i := range tasks {
			tasks[i] = taskq.NewTask("send", nil, taskq.Queue("emails"), taskq.Tenant(tn.name), taskq.Weight(tn.weight))
		}
		if _, err := s.c.EnqueueBatch(ctx, tasks); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.c.Enqueue(ctx, taskq.NewTask("report", nil, taskq.Queue("reports"), taskq.Tenant("acme"))); err != nil {
		t.Fatal(err)
	}
	dead, err := s.c.Enqueue(ctx, taskq.NewTask("broken", nil, taskq.Queue("emails"), taskq.Tenant("initech"), taskq.Priority(255)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.in.Pause(ctx, "reports", "", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.in.SetLimit(ctx, "emails", "globex", taskq.Limit{Rate: 5, MaxActive: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.CronAdd(ctx, taskq.CronEntry{Name: "nightly-report", Spec: "0 0 2 * * *", Queue: "reports", Type: "report", TZ: "Europe/Berlin"}); err != nil {
		t.Fatal(err)
	}
	w, err := taskq.NewWorker(taskq.WorkerConfig{Redis: "redis://" + testutil.Redis(t) + "/11", Queues: []taskq.QueueSpec{{Name: "emails"}},
		Concurrency: 4, DisableSteal: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("send", func(ctx context.Context, tk *taskq.Task) error {
		for i := 1; i <= 4; i++ {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(150 * time.Millisecond): // real time: a task that takes a while, reporting progress
			}
			tk.Progress(ctx, float64(25*i), fmt.Sprintf("batch %d of 4", i))
		}
		return nil
	})
	w.Handle("broken", func(context.Context, *taskq.Task) error { return fmt.Errorf("smtp refused: %w", taskq.SkipRetry) })
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.Run(wctx); close(done) }()
	defer func() { stopWorker(); <-done }()
	testutil.WaitFor(t, 10*time.Second, "the broken task dead", func() (bool, string) {
		d, err := s.in.Get(ctx, "emails", dead.ID)
		return err == nil && d.State == taskq.StateDead, fmt.Sprint(d.State, err)
	})

	bctx := browser.Start(t, ctx, 1280, 900)
	click := func(sel string) chromedp.Action[chromedp.Void] {
		// Clicked from inside the page: rows are re-rendered on every event.
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			ok, err := chromedp.Evaluate[bool](`(() => { const b = document.querySelector(`+strconv.Quote(sel)+`); if (!b) return false; b.click(); return true })()`)(ctx, tg)
			if err == nil && !ok {
				err = fmt.Errorf("nothing matches %s", sel)
			}
			return err
		})
	}
	emails, globex := `tr.queue[data-queue="emails"]`, `tr.tenant[data-queue="emails"][data-tenant="globex"]`
	steps := []struct {
		name string
		a    chromedp.Action[chromedp.Void]
	}{
		{"open the token link", chromedp.Navigate(s.url + "/#token=" + token)},
		{"live", chromedp.WaitVisible(`#conn.on`)},
		{"tenants listed", chromedp.WaitVisible(`tr.tenant[data-tenant="initech"]`)},
		{"the paused queue", chromedp.WaitVisible(`tr.queue[data-queue="reports"] .badge.paused`)},
		{"the limit", chromedp.WaitVisible(globex + ` .badge.limit`)},
		{"the cron entry", chromedp.WaitVisible(`tr[data-cron="nightly-report"]`)},
		{"a rate", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`parseFloat(document.querySelector(`+strconv.Quote(emails+` td:nth-child(10)`)+`).textContent) > 0`)(ctx, tg)
			return err
		})},
		{"list active tasks", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`(() => { document.getElementById("f-queue").value = "emails"; document.getElementById("f-state").value = "active"; document.getElementById("f-load").click(); return true })()`)(ctx, tg)
			return err
		})},
		{"progress bars", chromedp.WaitVisible(`#task-rows .bar`)},
	}
	run := func(name string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 20*time.Second)
		defer cancel()
		if _, err := chromedp.Run(sctx, a); err != nil {
			html, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("browser step %q: %v\npage: %s", name, err, html)
		}
	}
	for _, st := range steps {
		run(st.name, st.a)
	}
	shares, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('tr.tenant[data-queue="emails"] td:nth-child(3)')].map(td => td.textContent)`))
	if err != nil || strings.Join(shares, ",") != "60%,20%,20%" {
		t.Errorf("fair shares acme,globex,initech = %v (%v), want 60%%,20%%,20%%", shares, err)
	}
	browser.Screenshot(t, bctx, "queue-ui.png")

	// Pause a tenant from the page.
	run("pause initech", click(`tr.tenant[data-tenant="initech"] button[data-action="pause"]`))
	run("initech shown paused", chromedp.WaitVisible(`tr.tenant[data-tenant="initech"] .badge.paused`))
	run("shares without the paused tenant", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Poll[bool](`[...document.querySelectorAll('tr.tenant[data-queue="emails"] td:nth-child(3)')].map(td => td.textContent).join() === "75%,25%,–"`)(ctx, tg)
		return err
	}))
	st, err := s.c.Stats(ctx)
	if err != nil || st.Queues["emails"].Tenants["initech"].PausedUntil.IsZero() {
		t.Errorf("initech not paused in Redis: %+v %v", st.Queues["emails"].Tenants["initech"], err)
	}
	// The dead letters: run the dead task again from the page.
	run("list dead", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](`(() => { document.getElementById("f-state").value = "dead"; document.getElementById("f-load").click(); return true })()`)(ctx, tg)
		return err
	}))
	row := `#task-rows tr[data-id="` + dead.ID + `"]`
	run("the dead task listed", chromedp.WaitVisible(row))
	run("run it", click(row+` button[data-action="run"]`))
	testutil.WaitFor(t, 10*time.Second, "the dead task out of the dead letters", func() (bool, string) {
		d, err := s.in.Get(ctx, "emails", dead.ID)
		return err == nil && d.State != taskq.StateDead, fmt.Sprint(d.State, err)
	})
	// Log out: the API refuses the page.
	run("log out", click(`#logout`))
	run("login form", chromedp.WaitVisible(`#login`))
	code, err := chromedp.Run(bctx, chromedp.Evaluate[int](`fetch("/api/overview").then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || code != http.StatusUnauthorized {
		t.Errorf("after logout: %d %v, want 401", code, err)
	}
}

// api does an API request with the token (and the page's header on a
// POST), decodes the JSON answer into out (if not nil) and returns the
// status.
func (s *stack) api(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, s.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if method == http.MethodPost {
		req.Header.Set("X-Taskq-UI", "1")
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if out != nil && r.StatusCode == http.StatusOK {
		if err := json.NewDecoder(r.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return r.StatusCode
}

type wfNode struct {
	Name, ID, Type, State string
	Parents               []string
	Depth                 int
}

type wfView struct {
	ID, Queue string
	Nodes     []wfNode
}

// The workflow API: the list with node and state counts (the newest 20
// only counted), one workflow's nodes in a topological order with parents
// and depths (the longest path from a root), the cancel; bad input is 400,
// an unknown workflow 404, and every route needs the token (a cancel, the
// page's header too).
func TestWorkflowAPI(t *testing.T) {
	s := newStack(t)
	ctx := t.Context()
	task := func(typ string) *taskq.Task { return taskq.NewTask(typ, nil) }
	// fetch → a, b, side; a, b → join → report; fetch, join → late
	diamond, err := s.c.EnqueueWorkflow(ctx, taskq.NewWorkflow().Add("fetch", task("fetch")).Add("a", task("part"), "fetch").
		Add("b", task("part"), "fetch").Add("side", task("part"), "fetch").Add("join", task("join"), "a", "b").
		Add("report", task("report"), "join").Add("late", task("report"), "fetch", "join"), taskq.Queue("flows"))
	if err != nil {
		t.Fatal(err)
	}
	chain := make([]*taskq.Task, 12)
	for i := range chain {
		chain[i] = task("step")
	}
	long, err := s.c.EnqueueWorkflow(ctx, taskq.Chain(chain...), taskq.Queue("flows"))
	if err != nil {
		t.Fatal(err)
	}

	var list struct {
		Workflows []struct {
			ID     string
			Nodes  int
			States map[string]int
		}
	}
	if code := s.api(t, "GET", "/api/workflows?queue=flows", "", &list); code != 200 || len(list.Workflows) != 2 {
		t.Fatalf("list: %d %+v", code, list)
	}
	for _, w := range list.Workflows {
		want := map[string]string{diamond.ID: "7 map[pending:1 waiting:6]", long.ID: "12 map[pending:1 waiting:11]"}[w.ID]
		if got := fmt.Sprint(w.Nodes, " ", w.States); got != want {
			t.Errorf("list: workflow %s: %s, want %q", w.ID, got, want)
		}
	}

	var v wfView
	if code := s.api(t, "GET", "/api/workflow?queue=flows&id="+diamond.ID, "", &v); code != 200 || v.ID != diamond.ID || v.Queue != "flows" {
		t.Fatalf("get: %d %+v", code, v)
	}
	wantDepth := map[string]int{"fetch": 0, "a": 1, "b": 1, "side": 1, "join": 2, "report": 3, "late": 3}
	wantParents := map[string]string{"fetch": "", "a": "fetch", "b": "fetch", "side": "fetch", "join": "a b", "report": "join", "late": "fetch join"}
	seen := map[string]bool{}
	for _, n := range v.Nodes {
		for _, p := range n.Parents {
			if !seen[p] {
				t.Errorf("node %s comes before its parent %s: %+v", n.Name, p, v.Nodes)
			}
		}
		seen[n.Name] = true
		if n.Depth != wantDepth[n.Name] || strings.Join(n.Parents, " ") != wantParents[n.Name] || n.ID != diamond.Tasks[n.Name] {
			t.Errorf("node %+v: want depth %d, parents %q, id %s", n, wantDepth[n.Name], wantParents[n.Name], diamond.Tasks[n.Name])
		}
		if want := map[bool]string{true: taskq.StatePending, false: taskq.StateWaiting}[n.Name == "fetch"]; n.State != want {
			t.Errorf("node %s is %s, want %s", n.Name, n.State, want)
		}
	}
	if len(seen) != 7 || v.Nodes[0].Type != "fetch" {
		t.Errorf("nodes %+v, want the 7, fetch first", v.Nodes)
	}
	if s.api(t, "GET", "/api/workflow?queue=flows&id="+long.ID, "", &v) != 200 {
		t.Fatal("get the chain")
	}
	var names []string
	for i, n := range v.Nodes {
		names = append(names, n.Name)
		if n.Depth != i {
			t.Errorf("chain node %s at depth %d, want %d", n.Name, n.Depth, i)
		}
	}
	if strings.Join(names, " ") != "1 2 3 4 5 6 7 8 9 10 11 12" {
		t.Errorf("chain order %v", names)
	}

	var res struct{ Cancelled int }
	if code := s.api(t, "POST", "/api/workflow/cancel", `{"queue":"flows","id":"`+diamond.ID+`"}`, &res); code != 200 || res.Cancelled < 1 {
		t.Fatalf("cancel: %d %+v", code, res)
	}
	nodes, err := s.in.Workflow(ctx, diamond)
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range nodes {
		if d.State != taskq.StateCancelled {
			t.Errorf("after the cancel, node %s is %s", name, d.State)
		}
	}
	if s.api(t, "GET", "/api/workflow?queue=flows&id="+diamond.ID, "", &v); v.Nodes[len(v.Nodes)-1].State != taskq.StateCancelled {
		t.Errorf("the page's view after the cancel: %+v", v.Nodes)
	}
	if code := s.api(t, "POST", "/api/workflow/cancel", `{"queue":"flows","id":"`+diamond.ID+`"}`, &res); code != 200 || res.Cancelled != 0 {
		t.Errorf("cancel again: %d %+v, want 200 and none", code, res)
	}
	if d, err := s.in.Get(ctx, "flows", long.Tasks["1"]); err != nil || d.State != taskq.StatePending {
		t.Errorf("the other workflow touched: %s %v", d.State, err)
	}

	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/api/workflows", "", 400},
		{"GET", "/api/workflows?queue=" + url.QueryEscape("bad{queue}"), "", 400},
		{"GET", "/api/workflow?queue=flows", "", 400},
		{"GET", "/api/workflow?id=" + diamond.ID, "", 400},
		{"GET", "/api/workflow?queue=flows&id=nope", "", 404},
		{"GET", "/api/workflow?queue=other&id=" + diamond.ID, "", 404},
		{"POST", "/api/workflow/cancel", `{"queue":"flows"}`, 400},
		{"POST", "/api/workflow/cancel", `{"id":"` + diamond.ID + `"}`, 400},
		{"POST", "/api/workflow/cancel", `not json`, 400},
		{"POST", "/api/workflow/cancel", `{"queue":"flows","id":"nope"}`, 404},
	} {
		if code := s.api(t, c.method, c.path, c.body, nil); code != c.want {
			t.Errorf("%s %s %s: %d, want %d", c.method, c.path, c.body, code, c.want)
		}
	}
	for _, c := range []struct {
		method, path, body string
		h                  map[string]string
		want               int
	}{
		{"GET", "/api/workflows?queue=flows", "", nil, 401},
		{"GET", "/api/workflow?queue=flows&id=" + long.ID, "", nil, 401},
		{"POST", "/api/workflow/cancel", `{"queue":"flows","id":"` + long.ID + `"}`, map[string]string{"X-Taskq-UI": "1"}, 401},
		{"POST", "/api/workflow/cancel", `{"queue":"flows","id":"` + long.ID + `"}`, map[string]string{"Authorization": "Bearer " + token}, 403},
	} {
		req, _ := http.NewRequestWithContext(ctx, c.method, s.url+c.path, strings.NewReader(c.body))
		for k, v := range c.h {
			req.Header.Set(k, v)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != c.want {
			t.Errorf("%s %s with %v: %d, want %d", c.method, c.path, c.h, r.StatusCode, c.want)
		}
	}
	if d, err := s.in.Get(ctx, "flows", long.Tasks["1"]); err != nil || d.State != taskq.StatePending {
		t.Errorf("a refused cancel cancelled: %s %v", d.State, err)
	}

	// Past the newest 20, the list gives node counts without states.
	for range 22 {
		if _, err := s.c.EnqueueWorkflow(ctx, taskq.Chain(task("step"), task("step")), taskq.Queue("many")); err != nil {
			t.Fatal(err)
		}
	}
	if s.api(t, "GET", "/api/workflows?queue=many", "", &list) != 200 || len(list.Workflows) != 22 {
		t.Fatalf("list of 22: %+v", list)
	}
	for i, w := range list.Workflows {
		if w.Nodes != 2 || (i < 20) != (w.States != nil) {
			t.Errorf("workflow %d of the list: %+v", i, w)
		}
	}
}

// The workflows in headless Chromium: a queue's workflows listed with
// their state counts; one opened as a graph, a node per SVG group in
// columns by depth, coloured by its state, following along as a worker
// runs it (completed, active, waiting); cancelled from the page, which
// reaches Redis and shows; a chord of 100 members and its callback drawn
// whole. The screenshot goes to $GANTRY_SCREENSHOT or the test's temp
// dir.
func TestWorkflowsInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	s := newStack(t)
	ctx := t.Context()
	task := func(typ string) *taskq.Task { return taskq.NewTask(typ, nil) }
	// fetch → hold → report; fetch → notify. hold runs until cancelled.
	flow, err := s.c.EnqueueWorkflow(ctx, taskq.NewWorkflow().Add("fetch", task("step")).Add("hold", task("hold"), "fetch").
		Add("report", task("step"), "hold").Add("notify", task("step"), "fetch"), taskq.Queue("flows"))
	if err != nil {
		t.Fatal(err)
	}
	members := make([]*taskq.Task, 100)
	for i := range members {
		members[i] = task("part")
	}
	chord, err := s.c.EnqueueWorkflow(ctx, taskq.Chord(members, task("sum")), taskq.Queue("bulk")) // no worker: stays pending
	if err != nil {
		t.Fatal(err)
	}
	bctx := browser.Start(t, ctx, 1280, 900)
	run := func(name string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 20*time.Second)
		defer cancel()
		if _, err := chromedp.Run(sctx, a); err != nil {
			html, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("browser step %q: %v\npage: %s", name, err, html)
		}
	}
	js := func(expr string) chromedp.Action[chromedp.Void] { // run in the page; false fails the step
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			ok, err := chromedp.Evaluate[bool](expr)(ctx, tg)
			if err == nil && !ok {
				err = fmt.Errorf("false: %s", expr)
			}
			return err
		})
	}
	poll := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](expr)(ctx, tg)
			return err
		})
	}
	show := func(queue string) string {
		return `(() => { const s = document.getElementById("wf-queue"); if (![...s.options].some(o => o.value === ` + strconv.Quote(queue) +
			`)) return false; s.value = ` + strconv.Quote(queue) + `; document.getElementById("wf-load").click(); return true })()`
	}
	node := func(name, state string) string {
		return `#wf-graph svg g.wf-node[data-node="` + name + `"][data-state="` + state + `"]`
	}
	open := func(id string) string {
		return `(() => { const a = document.querySelector('#wf-rows tr[data-workflow="` + id + `"] a'); if (!a) return false; a.click(); return true })()`
	}
	run("open the token link", chromedp.Navigate(s.url+"/#token="+token))
	run("live", chromedp.WaitVisible(`#conn.on`))
	run("the queue to choose", poll(show("flows")))
	run("the workflow listed", chromedp.WaitVisible(`#wf-rows tr[data-workflow="`+flow.ID+`"] .badge.st-waiting`))
	run("open it", js(open(flow.ID)))
	run("fetch pending", chromedp.WaitVisible(node("fetch", "pending")))
	run("hold waiting", chromedp.WaitVisible(node("hold", "waiting")))

	// A worker runs it: the open graph follows.
	w, err := taskq.NewWorker(taskq.WorkerConfig{Redis: "redis://" + testutil.Redis(t) + "/11", Queues: []taskq.QueueSpec{{Name: "flows"}},
		Concurrency: 2, DisableSteal: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	w.Handle("step", func(context.Context, *taskq.Task) error { return nil })
	w.Handle("hold", func(ctx context.Context, _ *taskq.Task) error { <-ctx.Done(); held <- ctx.Err(); return ctx.Err() })
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.Run(wctx); close(done) }()
	defer func() { stopWorker(); <-done }()
	states := func() string {
		nodes, err := s.in.Workflow(ctx, flow)
		return strings.Join([]string{nodes["fetch"].State, nodes["hold"].State, nodes["report"].State, nodes["notify"].State, fmt.Sprint(err)}, " ")
	}
	testutil.WaitFor(t, 10*time.Second, "fetch and notify done, hold running", func() (bool, string) {
		st := states()
		return st == "completed active waiting completed <nil>", st
	})

	for _, n := range [][2]string{{"fetch", "completed"}, {"hold", "active"}, {"report", "waiting"}, {"notify", "completed"}} {
		run("node "+n[0]+" "+n[1], chromedp.WaitVisible(node(n[0], n[1])))
	}
	run("list again", js(show("flows")))
	run("the workflow listed with its states", chromedp.WaitVisible(`#wf-rows tr[data-workflow="`+flow.ID+`"] .badge.st-active`))
	counts, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#wf-rows tr[data-workflow="`+flow.ID+`"]').innerText`))
	if err != nil || !strings.Contains(counts, "active 1") || !strings.Contains(counts, "completed 2") || !strings.Contains(counts, "waiting 1") {
		t.Errorf("the list's row: %q %v, want active 1, completed 2, waiting 1", counts, err)
	}
	run("four nodes, edges from parents to children, columns by depth", js(`(() => {
		const g = document.querySelectorAll("#wf-graph g.wf-node"), x = (n) => document.querySelector('#wf-graph g[data-node="' + n + '"]').getBoundingClientRect().x;
		const edges = [...document.querySelectorAll("#wf-graph path.wf-edge")].map(e => e.dataset.from + ">" + e.dataset.to).sort().join();
		return g.length === 4 && edges === "fetch>hold,fetch>notify,hold>report" && x("fetch") < x("hold") && x("hold") === x("notify") && x("hold") < x("report");
	})()`))
	browser.Screenshot(t, bctx, "queue-ui-workflow.png")

	run("cancel it", js(`(() => { const b = document.getElementById("wf-cancel"); if (b.hidden) return false; b.click(); return true })()`))
	run("hold shown cancelled", chromedp.WaitVisible(node("hold", "cancelled")))
	run("report shown cancelled", chromedp.WaitVisible(node("report", "cancelled")))
	run("nothing left to cancel", poll(`document.getElementById("wf-cancel").hidden`))
	if st := states(); st != "completed cancelled cancelled completed <nil>" {
		t.Errorf("in Redis after the cancel: %s", st)
	}
	select {
	case err := <-held:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("hold's handler ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("hold's handler still running after the cancel")
	}

	run("the chord's queue", js(show("bulk")))
	run("the chord listed", chromedp.WaitVisible(`#wf-rows tr[data-workflow="`+chord.ID+`"] .badge.st-pending`))
	run("open the chord", js(open(chord.ID)))
	run("the callback", chromedp.WaitVisible(node("callback", "waiting")))
	run("100 members in one column, the callback right of them", js(`(() => {
		const m = [...document.querySelectorAll('#wf-graph g.wf-node[data-state="pending"]')], cb = document.querySelector('#wf-graph g[data-node="callback"]');
		const xs = new Set(m.map(g => g.getBoundingClientRect().x)), ys = new Set(m.map(g => g.getBoundingClientRect().y));
		return m.length === 100 && xs.size === 1 && ys.size === 100 && cb.getBoundingClientRect().x > [...xs][0] &&
			document.querySelectorAll("#wf-graph path.wf-edge").length === 100 && m[99].dataset.node === "100";
	})()`))
	run("the graph scrolls", js(`(() => { const d = document.getElementById("wf-graph"); return d.scrollHeight > d.clientHeight })()`))
}
