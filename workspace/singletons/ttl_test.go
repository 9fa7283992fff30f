package singletons

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

func TestTTLRules(t *testing.T) {
	for _, b := range wstest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := wstest.OpenStore(t, b.DSN(t))
			idle, archive := 30*time.Minute, 7*24*time.Hour
			running := wstest.SeedConverged(t, st, "run", workspace.Running)
			touched := wstest.SeedConverged(t, st, "touched", workspace.Running)
			standby := wstest.SeedConverged(t, st, "standby", workspace.Standby)
			freshStandby := wstest.SeedConverged(t, st, "fresh", workspace.Standby)
			// freshStandby entered STANDBY 6 days in.
			storetest.Force(t, st, freshStandby, map[string]any{"observed_at": wstest.T0.Add(6 * 24 * time.Hour)})

			clk := clock.NewFake(wstest.T0)
			m, err := NewTTLManager(TTLConfig{IdleTimeout: idle, ArchiveAfter: archive, Clock: clk}, st)
			if err != nil {
				t.Fatal(err)
			}
			desired := func(id string) workspace.Status {
				w, err := st.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				return w.DesiredState
			}
			// Just before the idle timeout: nothing.
			clk.Set(wstest.T0.Add(idle - time.Second))
			if n, err := m.Pass(ctx); err != nil || n != 0 {
				t.Fatalf("pass before the timeout changed %d (%v)", n, err)
			}
			if err := st.Touch(ctx, touched, clk.Now()); err != nil {
				t.Fatal(err)
			}
			clk.Set(wstest.T0.Add(idle))
			if n, err := m.Pass(ctx); err != nil || n != 1 {
				t.Fatalf("pass at the idle timeout changed %d (%v); want 1", n, err)
			}
			if got := desired(running); got != workspace.Standby {
				t.Errorf("idle RUNNING: desired %s, want STANDBY", got)
			}
			if got := desired(touched); got != workspace.Running {
				t.Errorf("touched RUNNING: desired %s, want RUNNING (activity resets the idle clock)", got)
			}
			clk.Set(wstest.T0.Add(archive))
			m.Pass(ctx)
			if got := desired(standby); got != workspace.Pending {
				t.Errorf("STANDBY for 7d: desired %s, want PENDING", got)
			}
			if got := desired(freshStandby); got != workspace.Standby {
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
	for _, b := range wstest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := wstest.OpenStore(t, b.DSN(t))
			id := wstest.SeedConverged(t, st, "raced", workspace.Running)
			now := wstest.T0.Add(time.Hour)
			m, err := NewTTLManager(TTLConfig{Clock: clock.NewFake(now)}, st)
			if err != nil {
				t.Fatal(err)
			}
			m.beforeWrite = func(wid string) {
				if _, err := st.SetDesired(ctx, wid, workspace.Running, now); err != nil {
					t.Error(err)
				}
			}
			n, err := m.Pass(ctx)
			if err != nil || n != 0 {
				t.Fatalf("pass = %d, %v; want 0 writes (the user request won)", n, err)
			}
			if w, _ := st.Get(ctx, id); w.DesiredState != workspace.Running {
				t.Fatalf("desired %s after the race; the user's RUNNING was lost", w.DesiredState)
			}
		})
	}
}

// Many workspaces, TTL passes and user requests running concurrently: every
// workspace whose user asked for RUNNING ends desired RUNNING.
func TestTTLRaceConcurrent(t *testing.T) {
	for _, b := range wstest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := wstest.OpenStore(t, b.DSN(t))
			const n = 40
			ids := make([]string, n)
			for i := range ids {
				ids[i] = wstest.SeedConverged(t, st, fmt.Sprintf("w%02d", i), workspace.Running)
			}
			userNow := wstest.T0.Add(DefaultIdleTimeout)
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
					if _, err := st.SetDesired(ctx, id, workspace.Running, userNow); err != nil {
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
				if w.DesiredState != workspace.Running {
					t.Errorf("workspace %s: desired %s; the user's RUNNING was lost", w.Name, w.DesiredState)
				}
			}
		})
	}
}
