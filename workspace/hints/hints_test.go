package hints_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// Each Hints implementation delivers a published id to a subscriber of the
// same channel (and not to other channels).
func TestHintsDeliver(t *testing.T) {
	type runner interface{ Run(context.Context) error }
	mk := map[string]func(t *testing.T) hints.Bus{
		"local": func(*testing.T) hints.Bus { return hints.NewLocal() },
		"postgres": func(t *testing.T) hints.Bus {
			dsn := storetest.PostgresDSN(t)
			return &hints.Postgres{DB: storetest.DB(t, dsn), DSN: dsn}
		},
		"redis": func(t *testing.T) hints.Bus {
			addr := testutil.Redis(t) // starts it through scripts/services.sh if needed
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			if err != nil {
				t.Fatalf("Redis at %s is not reachable (run scripts/services.sh redis): %v", addr, err)
			}
			t.Cleanup(c.Close)
			return &hints.Redis{Client: c}
		},
	}
	for name, f := range mk {
		t.Run(name, func(t *testing.T) {
			h := f(t)
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			mon, c1 := h.Subscribe(hints.ChanMonitor)
			defer c1()
			ws, c2 := h.Subscribe(hints.ChanWorkspace)
			defer c2()
			if r, ok := h.(runner); ok {
				wg.Add(1)
				go func() { defer wg.Done(); r.Run(ctx) }()
			}
			// Postgres and Redis channels are shared with every other gantry
			// (and test process) on that server: hints for other ids are
			// theirs and ignored; this test's id is unique.
			id := "ws-" + name + "-" + uuid.NewString()
			// Subscriptions of the remote kinds start asynchronously: publish
			// until one arrives. Other tests sharing the server publish on
			// the same channels: their ids are skipped, ours must arrive on
			// the right channel only.
			deadline := time.After(10 * time.Second)
			for got := false; !got; {
				h.Publish(ctx, hints.ChanWorkspace, id)
				select {
				case v := <-ws:
					got = v == id
				case v := <-mon:
					if v == id {
						t.Fatalf("workspace hint %q arrived on %s", v, hints.ChanMonitor)
					}
				case <-time.After(50 * time.Millisecond):
				case <-deadline:
					t.Fatal("no hint delivered")
				}
			}
			h.Publish(ctx, hints.ChanMonitor, id)
			waitHint(t, mon, id, hints.ChanMonitor)
			// The urgent channels deliver apart from the plain ones.
			for _, c := range []string{hints.ChanWorkspaceUrgent, hints.ChanMonitorUrgent} {
				sub, cancel := h.Subscribe(c)
				defer cancel()
				h.Publish(ctx, c, id)
				waitHint(t, sub, id, c)
			}
		})
	}
}

// waitHint waits for id on c (other tests' ids may come first).
func waitHint(t *testing.T, c <-chan string, id, channel string) {
	t.Helper()
	for timeout := time.After(10 * time.Second); ; {
		select {
		case v := <-c:
			if v == id {
				return
			}
		case <-timeout:
			t.Fatalf("no hint on %s", channel)
		}
	}
}

// TestLocalNeverDropsAHint: a burst far larger than any buffer, published
// while nobody reads, arrives whole, each id once and in published order;
// an id published again after it was delivered arrives again; cancel
// stops the feeding.
func TestLocalNeverDropsAHint(t *testing.T) {
	h := hints.NewLocal()
	c, cancel := h.Subscribe(hints.ChanWorkspace)
	const n = 100_000
	for i := range n {
		h.Publish(t.Context(), hints.ChanWorkspace, fmt.Sprint(i))
	}
	for i := range n {
		select {
		case id := <-c:
			if id != fmt.Sprint(i) {
				t.Fatalf("hint %d is %q, want %d", i, id, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d hints arrived", i, n)
		}
	}
	h.Publish(t.Context(), hints.ChanWorkspace, "0")
	select {
	case id := <-c:
		if id != "0" {
			t.Fatalf("got %q, want 0 again", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an id published again after delivery did not arrive")
	}
	select {
	case id := <-c:
		t.Fatalf("extra hint %q", id)
	case <-time.After(50 * time.Millisecond): // real time: nothing more may come
	}
	before := runtime.NumGoroutine()
	cancel()
	cancel()
	h.Publish(t.Context(), hints.ChanWorkspace, "after")
	select {
	case id := <-c:
		t.Fatalf("hint %q after cancel", id)
	case <-time.After(50 * time.Millisecond): // real time: nothing may come
	}
	testutil.WaitFor(t, 5*time.Second, "the feed goroutine to end after cancel", func() (bool, string) {
		n := runtime.NumGoroutine()
		return n < before, fmt.Sprintf("%d goroutines after cancel, %d before", n, before)
	})
}
