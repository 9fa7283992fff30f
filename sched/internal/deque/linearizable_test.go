package deque

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// A small linearizability check (Wing & Gong search) of Push, Pop and Steal
// against a sequential deque. Histories are short (about a dozen calls), so
// an exhaustive search is instant; many random histories are checked.
//
// Sequential spec: Push(x) appends at the bottom; Pop takes the bottom item
// and returns nil only if the deque is empty; Steal takes the top item or
// returns nil, and may return nil at any time (a thief that loses a CAS
// gives up, which Chase-Lev allows).

type opKind uint8

const (
	opPush opKind = iota
	opPop
	opSteal
)

type call struct {
	kind     opKind
	arg, ret int // item value; ret -1 means nil
	inv, res int64
}

func (c call) String() string {
	return fmt.Sprintf("%v(%d)=%d@[%d,%d]", []string{"push", "pop", "steal"}[c.kind], c.arg, c.ret, c.inv, c.res)
}

// linearizable reports whether some order of calls, respecting real time
// (a call that returned before another was invoked comes first), is a legal
// sequential history.
func linearizable(calls []call) bool {
	done := make([]bool, len(calls))
	var state []int // top … bottom
	var search func(left int) bool
	search = func(left int) bool {
		if left == 0 {
			return true
		}
		// A call may go next only if no pending call returned before it
		// was invoked.
		minRes := int64(1 << 62)
		for i, c := range calls {
			if !done[i] && c.res < minRes {
				minRes = c.res
			}
		}
		for i, c := range calls {
			if done[i] || c.inv > minRes {
				continue
			}
			saved := append([]int(nil), state...)
			ok := true
			switch c.kind {
			case opPush:
				state = append(state, c.arg)
			case opPop:
				if len(state) == 0 {
					ok = c.ret == -1
				} else {
					ok = c.ret == state[len(state)-1]
					state = state[:len(state)-1]
				}
			case opSteal:
				if c.ret != -1 {
					ok = len(state) > 0 && c.ret == state[0]
					if ok {
						state = state[1:]
					}
				}
			}
			if ok {
				done[i] = true
				if search(left - 1) {
					return true
				}
				done[i] = false
			}
			state = saved
		}
		return false
	}
	return search(len(calls))
}

func TestLinearizableSmallHistories(t *testing.T) {
	iters := 3000
	if testing.Short() {
		iters = 300
	}
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for it := 0; it < iters; it++ {
				if calls := recordHistory(it); !linearizable(calls) {
					t.Fatalf("iteration %d: history not linearizable:\n%v", it, calls)
				}
			}
		})
	}
}

// recordHistory runs one owner (pushes and pops) and two thieves (steals) on
// a 2-slot deque (so it grows) and returns every call with invocation and
// response times from one shared counter.
func recordHistory(seed int) []call {
	d := New[int](2)
	xs := ints(8)
	var clock atomic.Int64
	var mu sync.Mutex
	var calls []call
	record := func(c call) { mu.Lock(); calls = append(calls, c); mu.Unlock() }
	val := func(x *int) int {
		if x == nil {
			return -1
		}
		return *x
	}
	var wg sync.WaitGroup
	for th := 0; th < 2; th++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				inv := clock.Add(1)
				r := val(d.Steal())
				record(call{kind: opSteal, ret: r, inv: inv, res: clock.Add(1)})
			}
		}()
	}
	pattern := seed % 4 // vary how pops interleave with pushes
	for i, x := range xs[:6] {
		inv := clock.Add(1)
		d.Push(x)
		record(call{kind: opPush, arg: *x, inv: inv, res: clock.Add(1)})
		if (i+pattern)%2 == 1 {
			inv := clock.Add(1)
			r := val(d.Pop())
			record(call{kind: opPop, ret: r, inv: inv, res: clock.Add(1)})
		}
	}
	wg.Wait()
	return calls
}

// TestLinearizabilityCheckerRejectsBadHistories keeps the checker honest.
func TestLinearizabilityCheckerRejectsBadHistories(t *testing.T) {
	for _, tc := range []struct {
		name  string
		calls []call
		want  bool
	}{
		{"push then pop", []call{{kind: opPush, arg: 1, inv: 1, res: 2}, {kind: opPop, ret: 1, inv: 3, res: 4}}, true},
		{"duplicate: steal and pop both get 1", []call{
			{kind: opPush, arg: 1, inv: 1, res: 2},
			{kind: opSteal, ret: 1, inv: 3, res: 6},
			{kind: opPop, ret: 1, inv: 4, res: 5},
		}, false},
		{"pop says empty after a completed push", []call{{kind: opPush, arg: 1, inv: 1, res: 2}, {kind: opPop, ret: -1, inv: 3, res: 4}}, false},
		{"steal takes the newest", []call{
			{kind: opPush, arg: 1, inv: 1, res: 2},
			{kind: opPush, arg: 2, inv: 3, res: 4},
			{kind: opSteal, ret: 2, inv: 5, res: 6},
		}, false},
		{"failed steal is fine", []call{{kind: opPush, arg: 1, inv: 1, res: 2}, {kind: opSteal, ret: -1, inv: 3, res: 4}}, true},
	} {
		if got := linearizable(tc.calls); got != tc.want {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.want)
		}
	}
}
