package clock

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-c:
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestFakeTimerFiresAtDeadline(t *testing.T) {
	f := NewFake(t0)
	tm := f.NewTimer(10 * time.Second)
	f.Advance(9 * time.Second)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("timer fired before its deadline")
	}
	f.Advance(time.Second)
	v, ok := fired(tm.C())
	if !ok || !v.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("timer: fired=%v at %v, want at t0+10s", ok, v)
	}
	if f.Waiters() != 0 {
		t.Fatalf("a fired timer stays armed")
	}
	if tm.Stop() {
		t.Fatal("Stop on a fired timer reported true")
	}
}

func TestFakeTimerStopAndReset(t *testing.T) {
	f := NewFake(t0)
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop on an armed timer reported false")
	}
	f.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("stopped timer fired")
	}
	tm.Reset(time.Minute)
	f.Advance(time.Minute)
	if _, ok := fired(tm.C()); !ok {
		t.Fatal("reset timer did not fire")
	}
}

func TestFakeTickerTicksEachPeriod(t *testing.T) {
	f := NewFake(t0)
	tk := f.NewTicker(time.Second)
	for i := 1; i <= 3; i++ {
		f.Advance(time.Second)
		v, ok := fired(tk.C())
		if !ok || !v.Equal(t0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("tick %d: fired=%v at %v", i, ok, v)
		}
	}
	tk.Stop()
	f.Advance(time.Hour)
	if _, ok := fired(tk.C()); ok {
		t.Fatal("stopped ticker ticked")
	}
}

func TestFakeOrderAndNow(t *testing.T) {
	f := NewFake(t0)
	late, early := f.NewTimer(2*time.Second), f.NewTimer(time.Second)
	f.Advance(5 * time.Second)
	a, _ := fired(early.C())
	b, _ := fired(late.C())
	if !a.Before(b) || !f.Now().Equal(t0.Add(5*time.Second)) || f.Since(t0) != 5*time.Second {
		t.Fatalf("early=%v late=%v now=%v", a, b, f.Now())
	}
	f.Set(t0) // never backwards
	if !f.Now().Equal(t0.Add(5 * time.Second)) {
		t.Fatal("Set moved the clock backwards")
	}
}

func TestBlockUntil(t *testing.T) {
	f := NewFake(t0)
	got := make(chan time.Time)
	go func() { got <- <-f.After(time.Minute) }()
	f.BlockUntil(1)
	f.Advance(time.Minute)
	select {
	case v := <-got:
		if !v.Equal(t0.Add(time.Minute)) {
			t.Fatalf("After delivered %v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("After never fired")
	}
}

func TestRealClock(t *testing.T) {
	c := Or(nil)
	start := c.Now()
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	if c.Since(start) < time.Millisecond {
		t.Fatal("real timer fired early")
	}
	tk := c.NewTicker(time.Millisecond)
	<-tk.C()
	tk.Stop()
}
