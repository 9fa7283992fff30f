package deque

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func ints(n int) []*int {
	out := make([]*int, n)
	for i := range out {
		v := i
		out[i] = &v
	}
	return out
}

func vals(xs []*int) []int {
	out := make([]int, 0, len(xs))
	for _, x := range xs {
		out = append(out, *x)
	}
	return out
}

func TestPushPopIsLIFOAndStealIsFIFO(t *testing.T) {
	d := New[int](2) // tiny, so the pushes below grow it twice
	for _, x := range ints(6) {
		d.Push(x)
	}
	if got := d.Len(); got != 6 {
		t.Fatalf("Len = %d, want 6", got)
	}
	var got []*int
	got = append(got, d.Steal(), d.Steal(), d.Pop(), d.Pop(), d.Steal(), d.Pop())
	if d.Pop() != nil || d.Steal() != nil {
		t.Fatal("deque not empty after taking all six items")
	}
	if diff := cmp.Diff([]int{0, 1, 5, 4, 2, 3}, vals(got)); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
}

func TestStealHalfTakesHalfRoundedUpAndRespectsMax(t *testing.T) {
	for _, tc := range []struct{ n, max, want int }{
		{0, 16, 0}, {1, 16, 1}, {2, 16, 1}, {7, 16, 4}, {10, 16, 5}, {100, 16, 16},
	} {
		t.Run(fmt.Sprintf("n=%d,max=%d", tc.n, tc.max), func(t *testing.T) {
			src, dst := New[int](4), New[int](4)
			for _, x := range ints(tc.n) {
				src.Push(x)
			}
			if got := src.StealHalfInto(dst, tc.max); got != tc.want {
				t.Fatalf("moved %d, want %d", got, tc.want)
			}
			if src.Len()+dst.Len() != tc.n {
				t.Fatalf("src %d + dst %d != %d", src.Len(), dst.Len(), tc.n)
			}
			// The stolen items are the oldest ones, in order.
			var stolen []int
			for x := dst.Steal(); x != nil; x = dst.Steal() {
				stolen = append(stolen, *x)
			}
			want := []int{}
			for i := 0; i < tc.want; i++ {
				want = append(want, i)
			}
			if diff := cmp.Diff(want, append([]int{}, stolen...)); diff != "" {
				t.Fatalf("stolen (-want +got):\n%s", diff)
			}
		})
	}
}

// naiveStealHalfInto is the original runtime's algorithm, reproduced here only
// to show the defect: copy [top, top+n), then CAS top from t to t+n once,
// without re-reading bottom.
func naiveStealHalfInto(d *Deque[int], dst []*int) []*int {
	t := d.top.Load()
	b := d.bottom.Load()
	n := max((b-t)/2, 1)
	r := d.buf.Load()
	for i := int64(0); i < n; i++ {
		dst = append(dst, r.load(t+i))
	}
	if d.beforeStealCAS != nil {
		d.beforeStealCAS()
	}
	if !d.top.CompareAndSwap(t, t+n) {
		return dst[:0]
	}
	return dst
}

// TestStealHalfInterleavingFromTheNote replays, deterministically, the
// scenario that breaks the original: a deque of 10 items; the thief has read
// its items and is about to CAS; the owner pops 9, 8, …, 3. The original hands
// 3 and 4 to both; ours hands every item out once.
func TestStealHalfInterleavingFromTheNote(t *testing.T) {
	setup := func() (*Deque[int], *[]int) {
		d := New[int](16)
		for _, x := range ints(10) {
			d.Push(x)
		}
		var ownerGot []int
		fired := false
		d.beforeStealCAS = func() {
			if fired {
				return
			}
			fired = true
			for i := 0; i < 7; i++ {
				if x := d.Pop(); x != nil {
					ownerGot = append(ownerGot, *x)
				}
			}
		}
		return d, &ownerGot
	}
	counts := func(lists ...[]int) map[int]int {
		m := map[int]int{}
		for _, l := range lists {
			for _, v := range l {
				m[v]++
			}
		}
		return m
	}
	wantOnce := map[int]int{0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1, 8: 1, 9: 1}

	t.Run("original duplicates", func(t *testing.T) {
		d, owner := setup()
		thief := vals(naiveStealHalfInto(d, nil))
		got := counts(thief, *owner)
		if got[3] != 2 || got[4] != 2 {
			t.Fatalf("expected the original to duplicate 3 and 4; thief=%v owner=%v", thief, *owner)
		}
	})
	t.Run("ours exactly once", func(t *testing.T) {
		d, owner := setup()
		dst := New[int](16)
		n := d.StealHalfInto(dst, 16)
		var thief []int
		for x := dst.Pop(); x != nil; x = dst.Pop() {
			thief = append(thief, *x)
		}
		sort.Ints(thief)
		if diff := cmp.Diff([]int{0, 1, 2}, thief); diff != "" || n != 3 {
			t.Fatalf("thief moved %d, got (-want +got):\n%s", n, diff)
		}
		if diff := cmp.Diff(wantOnce, counts(thief, *owner)); diff != "" {
			t.Fatalf("multiset (-want +got):\n%s", diff)
		}
	})
}

// TestExactlyOnceUnderConcurrency checks the multiset property: one owner
// pushes and pops (growing the deque from 4 slots), three thieves alternate
// Steal and StealHalfInto; every item must come out exactly once. It runs
// under GOMAXPROCS 1 and 2; -race randomizes the schedule further.
func TestExactlyOnceUnderConcurrency(t *testing.T) {
	iters, items := 40, 4000
	if testing.Short() {
		iters = 8
	}
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for it := 0; it < iters; it++ {
				runExactlyOnce(t, uint64(it), items)
				if t.Failed() {
					return
				}
			}
		})
	}
}

func runExactlyOnce(t *testing.T, seed uint64, n int) {
	t.Helper()
	d := New[int](4)
	xs := ints(n)
	seen := make([]atomic.Int32, n)
	take := func(x *int) {
		if x != nil {
			seen[*x].Add(1)
		}
	}
	var ownerDone atomic.Bool
	var wg sync.WaitGroup
	const thieves = 3
	for i := 0; i < thieves; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			mine := New[int](4)
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for !ownerDone.Load() || d.Len() > 0 {
				if rng.IntN(2) == 0 {
					take(d.Steal())
				} else {
					d.StealHalfInto(mine, 1+rng.IntN(8))
					for x := mine.Pop(); x != nil; x = mine.Pop() {
						take(x)
					}
				}
				if rng.IntN(8) == 0 {
					runtime.Gosched()
				}
			}
		}(i)
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	for i := 0; i < n; i++ {
		d.Push(xs[i])
		if rng.IntN(3) == 0 {
			take(d.Pop())
		}
		if rng.IntN(64) == 0 {
			runtime.Gosched()
		}
	}
	for x := d.Pop(); x != nil; x = d.Pop() {
		take(x)
	}
	// The owner's Pop can return nil while a thief still has an index to
	// claim; the thieves keep going until the deque reads empty.
	ownerDone.Store(true)
	wg.Wait()
	bad := map[int]int32{}
	for i := range seen {
		if c := seen[i].Load(); c != 1 {
			bad[i] = c
		}
	}
	if diff := cmp.Diff(map[int]int32{}, bad); diff != "" {
		t.Fatalf("seed %d: items not taken exactly once (item: count):\n%s", seed, diff)
	}
}
