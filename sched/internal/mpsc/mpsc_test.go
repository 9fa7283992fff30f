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

func TestPushSequenceAndTaken(t *testing.T) {
	var q Queue[string]
	if a, b := q.Push("a"), q.Push("b"); a != 1 || b != 2 {
		t.Fatalf("sequence numbers %d, %d; want 1, 2", a, b)
	}
	if q.Taken() != 0 {
		t.Fatalf("Taken before any Swap = %d", q.Taken())
	}
	batch := q.Swap(nil)
	c := q.Push("c")
	if q.Taken() != 2 || c != 3 {
		t.Fatalf("after one swap: Taken %d (want 2), next seq %d (want 3)", q.Taken(), c)
	}
	q.Swap(batch)
	if q.Taken() < c {
		t.Fatalf("Taken %d after taking seq %d", q.Taken(), c)
	}
}
