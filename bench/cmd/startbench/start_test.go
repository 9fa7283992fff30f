package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/client"
)

// fakeAPI plays the routes startbench drives: a cold create turns RUNNING
// startDelay after it (no event: the bench's Get sees it), a create from
// the template claims a ready pool member (RUNNING at once, "pooled"),
// refilled refillDelay later; exec is refused (409) until RUNNING.
type fakeAPI struct {
	startDelay, refillDelay time.Duration

	mu           sync.Mutex
	seq          int
	ws           map[string]*workspace.Workspace
	size, ready  int
	claims       int
	claimNotFull int // claims made while the pool was not full
	refused      int // exec refused as not RUNNING
}

func (f *fakeAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: synced\nid: 1\ndata: {\"seq\":1,\"count\":0}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("POST /v1/workspaces", f.create)
	mux.HandleFunc("GET /v1/workspaces/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		ws, ok := f.ws[r.PathValue("id")]
		if !ok {
			http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(ws)
	})
	mux.HandleFunc("DELETE /v1/workspaces/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.ws, r.PathValue("id"))
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte("{}"))
	})
	mux.HandleFunc("POST /v1/workspaces/{id}/exec", f.exec)
	mux.HandleFunc("POST /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"name":"` + templateName + `","version":1}`))
	})
	mux.HandleFunc("/v1/templates/{name}/pool", f.pool)
	return mux
}

func (f *fakeAPI) create(w http.ResponseWriter, r *http.Request) {
	var n workspace.NewWorkspace
	if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
		http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := "w" + strconv.Itoa(f.seq)
	ws := &workspace.Workspace{ID: id, Name: n.Name, DesiredState: n.Desired, ObservedStatus: workspace.Pending, Operation: workspace.OpProvisioning}
	f.ws[id] = ws
	pooled := false
	if n.Template != "" && f.ready > 0 {
		if f.ready < f.size {
			f.claimNotFull++
		}
		f.ready--
		f.claims++
		pooled = true
		ws.ObservedStatus, ws.Operation = workspace.Running, workspace.OpNone
		time.AfterFunc(f.refillDelay, func() { f.mu.Lock(); f.ready++; f.mu.Unlock() })
	} else {
		time.AfterFunc(f.startDelay, func() {
			f.mu.Lock()
			ws.ObservedStatus, ws.Operation = workspace.Running, workspace.OpNone
			f.mu.Unlock()
		})
	}
	w.WriteHeader(http.StatusCreated)
	out := *ws
	out.Pooled = pooled
	json.NewEncoder(w).Encode(out)
}

func (f *fakeAPI) exec(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	ws, ok := f.ws[r.PathValue("id")]
	running := ok && ws.ObservedStatus == workspace.Running
	if !running {
		f.refused++
	}
	f.mu.Unlock()
	if !running {
		http.Error(w, `{"error":"not RUNNING"}`, http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusOK)
	api.WriteFrame(w, api.FrameExit, []byte("0"))
}

func (f *fakeAPI) pool(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method == http.MethodPut {
		var body struct{ Size int }
		json.NewDecoder(r.Body).Decode(&body)
		f.size = body.Size
		f.ready = body.Size // the fake fills it at once
	}
	json.NewEncoder(w).Encode(workspace.PoolStatus{Template: templateName, Size: f.size, Ready: f.ready})
}

func fakeServer(t *testing.T, f *fakeAPI) *server {
	f.ws = map[string]*workspace.Workspace{}
	hs := httptest.NewServer(f.handler())
	t.Cleanup(hs.Close)
	cfg := config{n: 5, pool: 3, timeout: 10 * time.Second, execRetry: 50 * time.Millisecond, poll: 5 * time.Millisecond}
	s := &server{b: &bench{cfg: cfg}, base: hs.URL,
		admin: &client.Client{Base: hs.URL, Token: "admin", HTTP: newHTTP()},
		user:  &client.Client{Base: hs.URL, Token: "user", HTTP: newHTTP()}}
	w, err := startWatcher(t.Context(), hs.URL, "user")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	s.watch = w
	return s
}

// A cold start is timed to RUNNING (seen by Get, with no event) and to
// exec returning 0 (refused until RUNNING); each workspace is gone after.
func TestColdStarts(t *testing.T) {
	f := &fakeAPI{startDelay: 30 * time.Millisecond}
	s := fakeServer(t, f)
	r := row{mode: "cold"}
	if err := s.measureStarts(t.Context(), &r, workspace.NewWorkspace{Command: wsCommand, Desired: workspace.Running}, true); err != nil {
		t.Fatal(err)
	}
	if r.starts != 5 || r.failures != 0 || len(r.running) != 5 || len(r.exec) != 5 {
		t.Fatalf("5 starts: got %d measured, %d failed, %d RUNNING and %d exec samples", r.starts, r.failures, len(r.running), len(r.exec))
	}
	for i := range r.running {
		if r.running[i] < f.startDelay || r.exec[i] < r.running[i] {
			t.Errorf("start %d: RUNNING after %v, exec after %v; want RUNNING ≥ %v (the fake's start) and exec after it", i+1, r.running[i], r.exec[i], f.startDelay)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused < 5 || len(f.ws) != 0 {
		t.Errorf("exec refused %d times (want ≥ 1 a start: sent before RUNNING), %d workspaces left (want 0)", f.refused, len(f.ws))
	}
}

// A warm start claims a member of a full pool: RUNNING in the create's
// answer, no miss; the bench waits for the refill before the next start.
func TestWarmStarts(t *testing.T) {
	f := &fakeAPI{startDelay: time.Second, refillDelay: 20 * time.Millisecond}
	s := fakeServer(t, f)
	if err := s.startPool(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := row{mode: "warm"}
	if err := s.measureStarts(t.Context(), &r, workspace.NewWorkspace{Template: templateName, Desired: workspace.Running}, true); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.starts != 5 || r.misses != 0 || f.claims != 5 || f.claimNotFull != 0 || f.size != 3 {
		t.Fatalf("5 warm starts on a pool of 3: %d measured, %d misses, %d claims, %d of them from a pool not full, pool size %d", r.starts, r.misses, f.claims, f.claimNotFull, f.size)
	}
	for i, d := range r.running {
		if d >= f.startDelay || r.exec[i] < d {
			t.Errorf("start %d: RUNNING after %v, exec after %v: want the create's answer (not a cold start of %v), exec after", i+1, d, r.exec[i], f.startDelay)
		}
	}
}
