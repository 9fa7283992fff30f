package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace"
)

// watcher follows one token's event stream (GET /events, SSE: the state
// of each workspace the token sees, then every committed change) and
// tells the bench when a workspace changed, runs, or is gone. It
// reconnects when the stream ends (the server may drop a slow subscriber:
// the new stream starts with the whole state again).
type watcher struct {
	base, token string
	cancel      context.CancelFunc
	done        chan struct{}
	ready       chan struct{} // closed at the first "synced"

	mu      sync.Mutex
	state   map[string]wsState
	gone    map[string]bool
	waiters map[string][]chan struct{} // closed at the workspace's next event
}

// wsState is what an event says of a workspace.
type wsState struct {
	Observed workspace.Status    `json:"observed_status"`
	Desired  workspace.Status    `json:"desired_state"`
	Op       workspace.Operation `json:"operation"`
	Error    *errorSummary       `json:"error_info"`
}

type errorSummary struct {
	Reason    string `json:"reason"`
	LastError string `json:"last_error"`
}

// running reports what `ws wait ID RUNNING` waits for.
func (s wsState) running() bool { return s.Observed == workspace.Running && s.Op == workspace.OpNone }

// failed reports a workspace in ERROR with its error info.
func (s wsState) failed() bool { return s.Observed == workspace.Error && s.Error != nil }

type event struct {
	Type      string   `json:"type"`
	ID        string   `json:"id"`
	Workspace *wsState `json:"workspace"`
}

// startWatcher connects and returns once the initial state is read.
func startWatcher(ctx context.Context, base, token string) (*watcher, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &watcher{base: base, token: token, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{}),
		state: map[string]wsState{}, gone: map[string]bool{}, waiters: map[string][]chan struct{}{}}
	go w.loop(wctx)
	select {
	case <-w.ready:
		return w, nil
	case <-time.After(30 * time.Second):
		w.close()
		return nil, fmt.Errorf("the event stream (GET /events) sent no synced event in 30s")
	case <-ctx.Done():
		w.close()
		return nil, ctx.Err()
	}
}

func (w *watcher) close() {
	w.cancel()
	<-w.done
}

func (w *watcher) loop(ctx context.Context) {
	defer close(w.done)
	var once sync.Once
	for ctx.Err() == nil {
		err := w.stream(ctx, func() { once.Do(func() { close(w.ready) }) })
		if ctx.Err() != nil {
			return
		}
		log.Printf("event stream: %v; reconnecting", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stream reads one connection's events until it ends.
func (w *watcher) stream(ctx context.Context, synced func()) error {
	req, err := http.NewRequestWithContext(ctx, "GET", w.base+"/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /events: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var kind string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && kind == "synced":
			synced()
		case strings.HasPrefix(line, "data: "):
			var e event
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e); err != nil {
				return fmt.Errorf("event %q: %w", line, err)
			}
			w.apply(e)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("stream ended")
}

func (w *watcher) apply(e event) {
	w.mu.Lock()
	switch {
	case e.Type == "deleted":
		delete(w.state, e.ID)
		w.gone[e.ID] = true
	case e.Workspace != nil:
		w.state[e.ID] = *e.Workspace
		delete(w.gone, e.ID)
	}
	ws := w.waiters[e.ID]
	delete(w.waiters, e.ID)
	w.mu.Unlock()
	for _, c := range ws {
		close(c)
	}
}

// get returns workspace id's last state and whether it is gone, with a
// channel closed at its next event.
func (w *watcher) get(id string) (wsState, bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := make(chan struct{})
	w.waiters[id] = append(w.waiters[id], c)
	return w.state[id], w.gone[id], c
}

// goneCh returns a channel closed once workspace id is gone (a "deleted"
// event came; at once if one came already).
func (w *watcher) goneCh(ctx context.Context, id string) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		for {
			_, gone, next := w.get(id)
			if gone {
				close(out)
				return
			}
			select {
			case <-next:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// forget drops what the watcher knows of id (after the bench is done
// with it).
func (w *watcher) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.state, id)
	delete(w.gone, id)
}
