package sched

import (
	"sync"
	"testing"
)

func TestPIDMapStalePIDMissesAfterSlotReuse(t *testing.T) {
	var pm pidMap
	pid1, sl := pm.alloc()
	p1 := &proc{pid: pid1}
	pm.put(p1, sl)
	if pm.get(pid1) != p1 {
		t.Fatal("get after put missed")
	}
	pm.del(p1)
	if pm.get(pid1) != nil {
		t.Fatal("get after del found the process")
	}
	// Drain the shard's free list until the freed slot comes back.
	var reused *proc
	for i := 0; i < freeShards*freshChunk*2 && reused == nil; i++ {
		pid, sl := pm.alloc()
		p := &proc{pid: pid}
		pm.put(p, sl)
		if uint32(pid) == uint32(pid1) {
			reused = p
		}
	}
	if reused == nil {
		t.Fatal("freed slot never reused")
	}
	if reused.pid == pid1 {
		t.Fatalf("reused slot got the same PID %x", pid1)
	}
	if pm.get(pid1) != nil {
		t.Fatal("stale PID reached the slot's new process")
	}
	if pm.get(reused.pid) != reused {
		t.Fatal("new PID missed")
	}
	if pm.get(0) != nil || pm.get(PID(1)<<40) != nil {
		t.Fatal("never-assigned PIDs found something")
	}
}

// TestPIDMapConcurrentChurn: goroutines allocate, look up and free slots at
// once; a live PID must always find its own process and no two live
// processes may share a PID.
func TestPIDMapConcurrentChurn(t *testing.T) {
	var pm pidMap
	var live sync.Map // PID → *proc
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []*proc
			for i := 0; i < 20000; i++ {
				if len(mine) > 0 && i%3 == 0 {
					p := mine[len(mine)-1]
					mine = mine[:len(mine)-1]
					live.Delete(p.pid)
					pm.del(p)
					continue
				}
				pid, sl := pm.alloc()
				p := &proc{pid: pid}
				if other, dup := live.LoadOrStore(pid, p); dup {
					t.Errorf("PID %v handed out twice (%p, %p)", pid, other, p)
					return
				}
				pm.put(p, sl)
				mine = append(mine, p)
				for _, q := range mine[max(0, len(mine)-3):] {
					if got := pm.get(q.pid); got != q {
						t.Errorf("get(%v) = %p, want %p", q.pid, got, q)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
