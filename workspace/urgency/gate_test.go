package urgency_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace/urgency"
)

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestGateCountsHolds: Idle is closed exactly while no hold is in flight,
// an end counts once however often it is called, and concurrent holds all
// count.
func TestGateCountsHolds(t *testing.T) {
	g := urgency.NewGate(0)
	if g.MaxYield() != urgency.DefaultMaxYield {
		t.Fatalf("MaxYield = %s, want the default %s", g.MaxYield(), urgency.DefaultMaxYield)
	}
	if !isClosed(g.Idle()) || g.InFlight() != 0 {
		t.Fatalf("a new gate: idle %v, %d in flight", isClosed(g.Idle()), g.InFlight())
	}
	end1 := g.BeginUrgent()
	idle := g.Idle()
	end2 := g.BeginUrgent()
	if isClosed(idle) || g.InFlight() != 2 {
		t.Fatalf("two holds: idle %v, %d in flight", isClosed(idle), g.InFlight())
	}
	end1()
	end1() // a second end does nothing
	if isClosed(idle) || g.InFlight() != 1 {
		t.Fatalf("one hold left: idle %v, %d in flight", isClosed(idle), g.InFlight())
	}
	end2()
	if !isClosed(idle) || g.InFlight() != 0 {
		t.Fatalf("no hold left: idle %v, %d in flight", isClosed(idle), g.InFlight())
	}
	var wg sync.WaitGroup
	ends := make(chan func(), 100)
	for range 100 {
		wg.Go(func() { ends <- g.BeginUrgent() })
	}
	wg.Wait()
	close(ends)
	if n := g.InFlight(); n != 100 || isClosed(g.Idle()) {
		t.Fatalf("100 concurrent holds: %d in flight, idle %v", n, isClosed(g.Idle()))
	}
	for end := range ends {
		wg.Go(end)
	}
	wg.Wait()
	if n := g.InFlight(); n != 0 || !isClosed(g.Idle()) {
		t.Fatalf("all ended: %d in flight, idle %v", n, isClosed(g.Idle()))
	}
}

// TestAwaitNone: it returns at once with nothing in flight, when the hold
// ends, and after MaxYield under a hold that never ends.
func TestAwaitNone(t *testing.T) {
	g := urgency.NewGate(time.Hour) // never ends on its own here
	t0 := time.Now()
	g.AwaitNone()
	if el := time.Since(t0); el > time.Second {
		t.Fatalf("AwaitNone with nothing in flight took %s", el)
	}
	end := g.BeginUrgent()
	done := make(chan struct{})
	go func() { g.AwaitNone(); close(done) }()
	select {
	case <-done:
		t.Fatal("AwaitNone returned while a hold was in flight")
	case <-time.After(50 * time.Millisecond): // real time: long enough for it to return
	}
	end()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitNone still waiting after the hold ended")
	}

	g = urgency.NewGate(100 * time.Millisecond)
	defer g.BeginUrgent()()
	t0 = time.Now()
	g.AwaitNone()
	if el := time.Since(t0); el < 100*time.Millisecond || el > 5*time.Second {
		t.Fatalf("AwaitNone under a hold that never ends took %s, want the 100ms bound", el)
	}
}

// TestNilGateHoldsNothing: a component given no gate neither holds nor
// waits.
func TestNilGateHoldsNothing(t *testing.T) {
	var g *urgency.Gate
	end := g.BeginUrgent()
	end()
	g.AwaitNone()
	if g.InFlight() != 0 || !isClosed(g.Idle()) || g.MaxYield() != 0 {
		t.Fatalf("nil gate: %d in flight, idle %v, max yield %s", g.InFlight(), isClosed(g.Idle()), g.MaxYield())
	}
}
