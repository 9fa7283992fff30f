package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
