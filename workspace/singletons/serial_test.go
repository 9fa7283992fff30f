package singletons

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// slowObserve is a fake provider whose next Observe, once armed, reads the
// container's state and then waits for release before it returns it: an
// observation overtaken by a change.
type slowObserve struct {
	*fake.Provider
	mu       sync.Mutex
	armed    bool
	entered  chan struct{}
	released chan struct{}
}

func (s *slowObserve) Observe(ctx context.Context, id string) (provider.ContainerState, error) {
	st, err := s.Provider.Observe(ctx, id)
	s.mu.Lock()
	armed := s.armed
	s.armed = false
	s.mu.Unlock()
	if armed {
		close(s.entered)
		<-s.released
	}
	return st, err
}

// TestObservationsOfOneWorkspaceDoNotOvertake: an observation that saw a
// command running, slow to write, and a second one, asked for after the
// command ended, must leave the row at what the second saw. Two at once
// left it RUNNING until the next pass (the second found the row's STANDBY
// unchanged and wrote nothing; the first wrote RUNNING last); the monitor
// now runs one observation of a workspace at a time and observes again
// when another was asked for meanwhile.
func TestObservationsOfOneWorkspaceDoNotOvertake(t *testing.T) {
	for _, be := range wstest.Backends {
		t.Run(be.Name, func(t *testing.T) {
			ctx := t.Context()
			st := wstest.OpenStore(t, be.DSN(t))
			id := wstest.CreateMany(t, st, 1, workspace.Running)[0]
			fk := &slowObserve{Provider: fake.New(0), entered: make(chan struct{}), released: make(chan struct{})}
			if err := fk.Provision(ctx, id); err != nil {
				t.Fatal(err)
			}
			m := NewHealthMonitor(MonitorConfig{Clock: clock.NewFake(time.Now())}, st, fk, fk, hints.NewLocal())
			if err := m.Pass(ctx); err != nil { // the row: observed STANDBY
				t.Fatal(err)
			}
			if err := fk.Start(ctx, provider.Spec{ID: id}); err != nil {
				t.Fatal(err)
			}
			fk.mu.Lock()
			fk.armed = true
			fk.mu.Unlock()
			first := make(chan struct{})
			go func() {
				defer close(first)
				m.observeID(ctx, id) // sees RUNNING, then waits
			}()
			<-fk.entered
			if err := fk.Stop(ctx, id); err != nil { // the command ends
				t.Fatal(err)
			}
			m.observeID(ctx, id) // the hint of the end
			close(fk.released)
			<-first
			w, err := st.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if w.ObservedStatus != workspace.Standby {
				t.Fatalf("after the command ended and both observations returned: %s, want observed STANDBY", wstest.Describe(w))
			}
			if len(m.inFlight.again) != 0 {
				t.Errorf("observations still marked in flight: %v", m.inFlight.again)
			}
		})
	}
}

// hungObserve is a fake provider whose Observe, once armed, never answers
// on its own: it returns only when its context ends.
type hungObserve struct {
	*fake.Provider
	mu   sync.Mutex
	hung bool
}

func (h *hungObserve) Observe(ctx context.Context, id string) (provider.ContainerState, error) {
	h.mu.Lock()
	hung := h.hung
	h.mu.Unlock()
	if hung {
		<-ctx.Done()
		return provider.Missing, ctx.Err()
	}
	return h.Provider.Observe(ctx, id)
}

// TestAHungObservationFailsAndFreesTheWorkspace: a provider call that never
// answers must not hold the workspace's observations (they run one at a
// time) for ever: past ObserveTimeout it shows as ObserveFailed, and the
// next observation, the provider answering again, clears it.
func TestAHungObservationFailsAndFreesTheWorkspace(t *testing.T) {
	for _, be := range wstest.Backends {
		t.Run(be.Name, func(t *testing.T) {
			ctx := t.Context()
			st := wstest.OpenStore(t, be.DSN(t))
			id := wstest.CreateMany(t, st, 1, workspace.Running)[0]
			fk := &hungObserve{Provider: fake.New(0), hung: true}
			if err := fk.Provision(ctx, id); err != nil {
				t.Fatal(err)
			}
			m := NewHealthMonitor(MonitorConfig{Clock: clock.NewFake(time.Now()), ObserveTimeout: 50 * time.Millisecond}, st, fk, fk, hints.NewLocal())
			done := make(chan struct{})
			go func() {
				defer close(done)
				m.observeID(ctx, id)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("an observation whose provider hangs did not end")
			}
			w, err := st.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if w.ErrorInfo == nil || w.ErrorInfo.Reason != workspace.ReasonObserveFailed || !strings.Contains(w.ErrorInfo.LastError, "did not answer within 50ms") {
				t.Fatalf("after a hung observation: %s, want ObserveFailed naming the timeout", wstest.Describe(w))
			}
			fk.mu.Lock()
			fk.hung = false
			fk.mu.Unlock()
			m.observeID(ctx, id)
			if w, err = st.Get(ctx, id); err != nil {
				t.Fatal(err)
			}
			if w.ErrorInfo != nil || w.ObservedStatus != workspace.Standby {
				t.Fatalf("after the provider answered again: %s, want observed STANDBY and no error", wstest.Describe(w))
			}
		})
	}
}
