package mpsc

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSwapReturnsPushOrderAndReusesBuffers(t *testing.T) {
	var q Queue[int]
	if !q.Empty() {
		t.Fatal("zero queue not empty")
	}
	q.Push(1)
	q.Push(2)
	a := q.Swap(nil)
	if diff := cmp.Diff([]int{1, 2}, a); diff != "" {
		t.Fatalf("first batch (-want +got):\n%s", diff)
	}
	q.Push(3)
	b := q.Swap(a)
	if diff := cmp.Diff([]int{3}, b); diff != "" {
		t.Fatalf("second batch (-want +got):\n%s", diff)
	}
	if q.Len() != 0 {
		t.Fatalf("Len after swap = %d", q.Len())
	}
	allocs := testing.AllocsPerRun(100, func() {
		q.Push(4)
		b = q.Swap(b)
	})
	if allocs != 0 {
		t.Fatalf("steady-state push+swap allocates %.1f times", allocs)
	}
}

func TestManyProducersEveryItemOnceInPerProducerOrder(t *testing.T) {
	type item struct{ producer, seq int }
	var q Queue[item]
	const producers, each = 4, 5000
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				q.Push(item{p, i})
			}
		}(p)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	next := make([]int, producers)
	var batch []item
	consume := func() {
		batch = q.Swap(batch)
		for _, it := range batch {
			if it.seq != next[it.producer] {
				t.Fatalf("producer %d: got seq %d, want %d", it.producer, it.seq, next[it.producer])
			}
			next[it.producer]++
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		consume()
	}
	consume()
	want := []int{each, each, each, each}
	if diff := cmp.Diff(want, next); diff != "" {
		t.Fatalf("items per producer (-want +got):\n%s", diff)
	}
}

func TestCloseReturnsTheRestAndRefusesLaterPushes(t *testing.T) {
	var q Queue[int]
	q.Push(1)
	q.Push(2)
	if got := q.Swap(nil); len(got) != 2 {
		t.Fatalf("Swap = %v", got)
	}
	if !q.Push(3) {
		t.Fatal("Push before Close refused")
	}
	if diff := cmp.Diff([]int{3}, q.Close()); diff != "" {
		t.Fatalf("Close (-want +got):\n%s", diff)
	}
	if q.Push(4) || !q.Empty() {
		t.Fatal("Push after Close accepted")
	}
}

// TestEveryPushIsSwappedClosedOrRefused: producers race with Close; every
// accepted item comes out exactly once, through Swap or Close.
func TestEveryPushIsSwappedClosedOrRefused(t *testing.T) {
	for trial := 0; trial < 50; trial++ {
		var q Queue[int]
		var wg sync.WaitGroup
		accepted := make([][]int, 4)
		for g := range accepted {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					v := g*1000 + i
					if q.Push(v) {
						accepted[g] = append(accepted[g], v)
					}
				}
			}()
		}
		seen := map[int]int{}
		var batch []int
		for i := 0; i < 20; i++ {
			batch = q.Swap(batch)
			for _, v := range batch {
				seen[v]++
			}
		}
		for _, v := range q.Close() {
			seen[v]++
		}
		wg.Wait()
		n := 0
		for _, vs := range accepted {
			for _, v := range vs {
				n++
				if seen[v] != 1 {
					t.Fatalf("accepted item %d came out %d times", v, seen[v])
				}
			}
		}
		if n != len(seen) {
			t.Fatalf("%d items accepted, %d came out", n, len(seen))
		}
	}
}
