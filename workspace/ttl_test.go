package workspace

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

var ttlT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// seedConverged makes a workspace that converged to status at t0.
func seedConverged(t *testing.T, st *store.Store, name string, status Status) string {
	t.Helper()
	ctx := t.Context()
	w, err := st.Create(ctx, NewWorkspace{Name: name, Desired: status}, ttlT0)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": status, "observed_at": ttlT0})
	return w.ID
}

func TestTTLRules(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			st := openStore(t, b.dsn(t))
			idle, archive := 30*time.Minute, 7*24*time.Hour
			running := seedConverged(t, st, "run", Running)
			touched := seedConverged(t, st, "touched", Running)
			standby := seedConverged(t, st, "standby", Standby)
			freshStandby := seedConverged(t, st, "fresh", Standby)
			// freshStandby entered STANDBY 6 days in.
			storetest.Force(t, st, freshStandby, map[string]any{"observed_at": ttlT0.Add(6 * 24 * time.Hour)})

			clk := clock.NewFake(ttlT0)
			m, err := NewTTLManager(TTLConfig{IdleTimeout: idle, ArchiveAfter: archive, Clock: clk}, st)
			if err != nil {
				t.Fatal(err)
			}
			desired := func(id string) Status {
				w, err := st.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				return w.DesiredState
			}
			// Just before the idle timeout: nothing.
			clk.Set(ttlT0.Add(idle - time.Second))
			if n, err := m.Pass(ctx); err != nil || n != 0 {
				t.Fatalf("pass before the timeout changed %d (%v)", n, err)
			}
			if err := st.Touch(ctx, touched, clk.Now()); err != nil {
				t.Fatal(err)
			}
			clk.Set(ttlT0.Add(idle))
			if n, err := m.Pass(ctx); err != nil || n != 1 {
				t.Fatalf("pass at the idle timeout changed %d (%v); want 1", n, err)
			}
			if got := desired(running); got != Standby {
				t.Errorf("idle RUNNING: desired %s, want STANDBY", got)
			}
			if got := desired(touched); got != Running {
				t.Errorf("touched RUNNING: desired %s, want RUNNING (activity resets the idle clock)", got)
			}
			clk.Set(ttlT0.Add(archive))
			m.Pass(ctx)
			if got := desired(standby); got != Pending {
				t.Errorf("STANDBY for 7d: desired %s, want PENDING", got)
			}
			if got := desired(freshStandby); got != Standby {
				t.Errorf("STANDBY for 1d: desired %s, want STANDBY", got)
			}
			if err := st.Touch(ctx, "no-such-id", clk.Now()); err == nil {
				t.Error("Touch of an unknown id succeeded")
			}
		})
	}
}

// The TTL manager reads an idle workspace, then the user presses "up" before
// the TTL write lands: the CAS on desired_version must reject the TTL write.
func TestTTLLosesToUserRequest(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			st := openStore(t, b.dsn(t))
			id := seedConverged(t, st, "raced", Running)
			now := ttlT0.Add(time.Hour)
			m, err := NewTTLManager(TTLConfig{Clock: clock.NewFake(now)}, st)
			if err != nil {
				t.Fatal(err)
			}
			m.beforeWrite = func(wid string) {
				if _, err := st.SetDesired(ctx, wid, Running, now); err != nil {
					t.Error(err)
				}
			}
			n, err := m.Pass(ctx)
			if err != nil || n != 0 {
				t.Fatalf("pass = %d, %v; want 0 writes (the user request won)", n, err)
			}
			if w, _ := st.Get(ctx, id); w.DesiredState != Running {
				t.Fatalf("desired %s after the race; the user's RUNNING was lost", w.DesiredState)
			}
		})
	}
}

// Many workspaces, TTL passes and user requests running concurrently: every
// workspace whose user asked for RUNNING ends desired RUNNING.
func TestTTLRaceConcurrent(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			st := openStore(t, b.dsn(t))
			const n = 40
			ids := make([]string, n)
			for i := range ids {
				ids[i] = seedConverged(t, st, fmt.Sprintf("w%02d", i), Running)
			}
			userNow := ttlT0.Add(DefaultIdleTimeout)
			ttlNow := userNow.Add(time.Second) // idle unless touched at userNow
			m, err := NewTTLManager(TTLConfig{Clock: clock.NewFake(ttlNow)}, st)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				for range 3 {
					if _, err := m.Pass(ctx); err != nil {
						t.Error(err)
					}
				}
			}()
			go func() {
				defer wg.Done()
				for _, id := range ids {
					if _, err := st.SetDesired(ctx, id, Running, userNow); err != nil {
						t.Error(err)
					}
				}
			}()
			wg.Wait()
			for _, id := range ids {
				w, err := st.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if w.DesiredState != Running {
					t.Errorf("workspace %s: desired %s; the user's RUNNING was lost", w.Name, w.DesiredState)
				}
			}
		})
	}
}
