package live

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/handoff"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/fs"
	"github.com/gantryhq/gantry/workspace/provider/process"
	"github.com/gantryhq/gantry/workspace/reconcile"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
	)
}

// stack is a whole single-process gantry wired as `gantry ws serve` wires
// it: SQLite, process containers, fs archives, the reconciler (with its
// metrics), the monitor, the main API with the live server mounted on it,
// over httptest with a short WriteTimeout (that SSE must survive).
type stack struct {
	st    *store.Store
	srv   *Server
	url   string
	reg   *prometheus.Registry
	hc    *http.Client // sends token
	token string       // an admin token, or the one of as()
}

// as is the stack seen with another token.
func (s *stack) as(token string) *stack {
	c := *s
	c.hc, c.token = &http.Client{Transport: bearer(token)}, token
	return &c
}

// auditRows reads the audit log from the store.
func auditRows(t *testing.T, s *stack) []auth.AuditEntry {
	t.Helper()
	es, err := s.st.Accounts().Audit(t.Context(), auth.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// bearer adds a token to every request.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

func newStack(t *testing.T, hintsOn bool) *stack {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "ws.db"))
	if err != nil {
		t.Fatal(err)
	}
	var hb hints.Bus = hints.Drop{}
	if hintsOn {
		hb = hints.NewLocal()
	}
	c := &process.Container{RunDir: filepath.Join(dir, "run"), StopGrace: time.Second}
	storage := &archive.Storage{Root: filepath.Join(dir, "volumes"), Blobs: &fs.BlobStore{Dir: filepath.Join(dir, "blobs")}}
	reg := prometheus.NewRegistry()
	metrics := reconcile.NewMetrics(reg)
	box := handoff.New()
	rec, err := reconcile.NewReconciler(reconcile.Config{Interval: 150 * time.Millisecond, RetryBackoff: 100 * time.Millisecond,
		Metrics: metrics, Handoff: box}, st, c, storage, hb)
	if err != nil {
		t.Fatal(err)
	}
	mon := singletons.NewHealthMonitor(singletons.MonitorConfig{Interval: 150 * time.Millisecond, Metrics: metrics, Handoff: box}, st, c, storage, hb)
	var srvHints hints.Bus
	if hintsOn {
		srvHints = hb
	}
	srv, err := NewServer(Config{Store: st, Hints: srvHints, ResyncInterval: 25 * time.Millisecond, KeepAlive: 100 * time.Millisecond, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	api := api.NewAPI(api.APIConfig{Store: st, Accounts: st.Accounts(), Storage: storage, Hints: hb, AppsURL: "http://localhost"})
	api.Handle("/", srv)
	hs := httptest.NewUnstartedServer(api)
	hs.Config.WriteTimeout = 500 * time.Millisecond
	hs.Start()
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{rec.Run, mon.Run, srv.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); run(ctx) }()
	}
	t.Cleanup(func() {
		// Stop the reconciler first (it would start a stopped process
		// again), then down every workspace's process before the temp dir
		// goes.
		hs.CloseClientConnections()
		hs.Close()
		cancel()
		wg.Wait()
		ws, _ := st.List(context.WithoutCancel(t.Context()))
		for _, w := range ws {
			stopCtx, stop := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
			if err := c.Stop(stopCtx, w.ID); err != nil {
				t.Errorf("stop %s: %v", w.ID, err)
			}
			stop()
		}
		st.Close()
	})
	return (&stack{st: st, srv: srv, url: hs.URL, reg: reg}).as(storetest.Token(t, st, "admin", true))
}

func (s *stack) post(t *testing.T, path string, body any) map[string]any {
	t.Helper()
	return s.send(t, "POST", path, body)
}

func (s *stack) send(t *testing.T, method, path string, body any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, s.url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %s %v", method, path, resp.Status, out)
	}
	return out
}

// statusStream follows /workspaces/{id}/events and sends each distinct
// observed status, in order, on the returned channel.
func statusStream(t *testing.T, ctx context.Context, hc *http.Client, url string) <-chan workspace.Status {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %s %s", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	out := make(chan workspace.Status, 64)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		var last workspace.Status
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e Event
			if err := json.Unmarshal([]byte(data), &e); err != nil || e.Workspace == nil {
				continue
			}
			if s := e.Workspace.ObservedStatus; s != last {
				last = s
				out <- s
			}
		}
	}()
	return out
}

// An SSE client sees every state a workspace holds, in order, through
// PENDING → STANDBY → RUNNING → STANDBY → PENDING, with hints on and with
// hints off (resync only), on a server whose WriteTimeout is far shorter
// than the stream. Each state is held until the client has seen it: the
// hub promises states that last longer than a resync, not the ones a
// transition passes through (a STANDBY between RUNNING and PENDING may
// last less than the hub's read of the row under load, and is then
// coalesced; an earlier form of this test asked for it and failed so).
func TestSSETransitionsInOrder(t *testing.T) {
	for _, hintsOn := range []bool{true, false} {
		t.Run(fmt.Sprintf("hints=%v", hintsOn), func(t *testing.T) {
			s := newStack(t, hintsOn)
			w := s.post(t, "/v1/workspaces", map[string]any{"name": "demo", "desired_state": "PENDING"})
			id := w["id"].(string)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			statuses := statusStream(t, ctx, s.hc, s.url+"/workspaces/"+id+"/events")
			var seen []workspace.Status
			next := func() workspace.Status {
				select {
				case st, ok := <-statuses:
					if !ok {
						t.Fatalf("stream ended after %v", seen)
					}
					seen = append(seen, st)
					return st
				case <-ctx.Done():
					t.Fatalf("timed out; saw %v", seen)
				}
				return ""
			}
			if st := next(); st != workspace.Pending {
				t.Fatalf("first event %s, want PENDING", st)
			}
			for _, to := range []workspace.Status{workspace.Standby, workspace.Running, workspace.Standby, workspace.Pending} {
				if to == workspace.Standby && seen[len(seen)-1] == workspace.Running {
					time.Sleep(700 * time.Millisecond) // real time: the stream must outlive the server's 500 ms WriteTimeout
				}
				s.send(t, "PUT", "/v1/workspaces/"+id+"/desired", map[string]string{"desired_state": string(to)})
				if st := next(); st != to {
					t.Fatalf("after asking for %s the stream showed %s (seen %v)", to, st, seen)
				}
			}
			want := []workspace.Status{workspace.Pending, workspace.Standby, workspace.Running, workspace.Standby, workspace.Pending}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Fatalf("transitions seen %v, want %v", seen, want)
			}
		})
	}
}

func TestProbesAndMetrics(t *testing.T) {
	s := newStack(t, true)
	w := s.post(t, "/v1/workspaces", map[string]any{"name": "m1", "desired_state": "RUNNING"})
	id := w["id"].(string)
	testutil.WaitFor(t, 30*time.Second, "RUNNING", func() (bool, string) {
		ws, err := s.st.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return ws.ObservedStatus == workspace.Running && ws.Operation == workspace.OpNone, fmt.Sprintf("%+v", ws)
	})
	get := func(path string) (int, string) {
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("/readyz %d %s", code, body)
	}
	// Operations are counted when they end, by the reconciler or by the
	// monitor whose observation ends them (right after the row says so);
	// the status gauge may trail by one hub resync.
	want := []string{
		`gantry_ws_workspaces{status="RUNNING"} 1`,
		`gantry_ws_operations_started_total{type="PROVISIONING"} 1`,
		`gantry_ws_operations_started_total{type="STARTING"} 1`,
		`gantry_ws_operations_total{result="ok",type="PROVISIONING"} 1`,
		`gantry_ws_operations_total{result="ok",type="STARTING"} 1`,
		`gantry_ws_operation_duration_seconds_count{result="ok",type="STARTING"} 1`,
		`gantry_ws_provider_calls_total{result="ok",type="STARTING"} 1`,
		`gantry_ws_provider_call_duration_seconds_count{type="STARTING"} 1`,
	}
	var body string
	testutil.WaitFor(t, 30*time.Second, "the metrics on /metrics", func() (bool, string) {
		_, body = get("/metrics")
		for _, m := range want {
			if !strings.Contains(body, m+"\n") {
				return false, "missing " + m + " in:\n" + body
			}
		}
		return true, ""
	})
	for _, m := range []string{"gantry_ws_reconcile_tick_seconds_count", "gantry_ws_reconcile_step_seconds_count", "gantry_ws_hint_lag_seconds_count", "gantry_ws_sse_clients"} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	// Served without a token: no workspace name, owner or command.
	for _, name := range []string{"m1", "admin", "sleep", w["id"].(string)} {
		if strings.Contains(body, `"`+name+`"`) || strings.Contains(body, name+`"}`) {
			t.Errorf("/metrics names %q", name)
		}
	}
	if strings.Contains(body, `result="error"`) {
		t.Errorf("/metrics counts an error for a clean run:\n%s", body)
	}
	if code, _ := get("/workspaces/nope/events"); code != 401 {
		t.Errorf("events without a token: %d, want 401", code)
	}
	if resp, err := s.hc.Get(s.url + "/workspaces/nope/events"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != 404 {
		t.Errorf("events of an unknown workspace: %d, want 404", resp.StatusCode)
	}
	// Writes go through the main API only (its validation, its hints).
	req, _ := http.NewRequest("PUT", s.url+"/v1/workspaces/"+id+"/desired", strings.NewReader(`{"desired_state":"FLYING"}`))
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 {
		t.Errorf("bad desired state: %d, want 400", resp.StatusCode)
	}
	resp.Body.Close()
	resp, _ = s.hc.Post(s.url+"/v1/workspaces/"+id+"/touch", "", nil)
	if resp.StatusCode != 204 {
		t.Errorf("touch: %d", resp.StatusCode)
	}
	resp.Body.Close()
	resp, _ = s.hc.Post(s.url+"/workspaces", "application/json", strings.NewReader(`{"name":"side-door"}`))
	if resp.StatusCode/100 == 2 {
		t.Errorf("POST /workspaces (the page's old private API) answered %d; want only /v1", resp.StatusCode)
	}
	resp.Body.Close()
}
