package provider

import (
	"sync"
	"testing"
)

// TestIDLocks: calls for one id never overlap, and no lock outlives its users.
func TestIDLocks(t *testing.T) {
	var l IDLocks
	var wg sync.WaitGroup
	in := map[string]int{}
	var mu sync.Mutex
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			defer l.Lock(id)()
			mu.Lock()
			in[id]++
			n := in[id]
			mu.Unlock()
			if n != 1 {
				t.Errorf("%d calls for %s at once", n, id)
			}
			mu.Lock()
			in[id]--
			mu.Unlock()
		}([]string{"a", "b", "c"}[i%3])
	}
	wg.Wait()
	if len(l.locks) != 0 {
		t.Fatalf("%d locks left after every call returned", len(l.locks))
	}
}
