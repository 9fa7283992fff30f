package singletons

import (
	"context"
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
