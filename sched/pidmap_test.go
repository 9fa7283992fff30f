package sched

import (
	"sync"
	"testing"
)

// newPIDMap is a pidMap as New makes it, without a scheduler.
func newPIDMap() *pidMap { return &pidMap{} }

// publish makes p live under pid, as Spawn does.
func publish(p *proc, pid PID) {
	p.pid = pid
	p.state.Store(uint64(pid>>32)<<32 | uint64(StateReady))
}

// retire completes p and frees its record, as finish does.
func retire(pm *pidMap, p *proc) {
	for {
		old := p.state.Load()
		if p.state.CompareAndSwap(old, withState(old, StateComplete)) {
			break
		}
	}
	pm.release(p, nil)
}

func TestPIDMapStalePIDMissesAfterRecordReuse(t *testing.T) {
	pm := newPIDMap()
	p1, pid1 := pm.alloc(nil)
	publish(p1, pid1)
	if pm.get(pid1) != p1 {
		t.Fatal("get after publish missed")
	}
	retire(pm, p1)
	if pm.get(pid1) != nil {
		t.Fatal("get after completion found the process")
	}
	p2, pid2 := pm.alloc(nil)
	if p2 != p1 {
		t.Fatal("freed record not reused first")
	}
	if pid2 == pid1 || uint32(pid2) != uint32(pid1) {
		t.Fatalf("reused record: PID %v after %v, want same index, next generation", pid2, pid1)
	}
	if pm.get(pid2) != nil {
		t.Fatal("an unpublished record is reachable")
	}
	publish(p2, pid2)
	if pm.get(pid1) != nil {
		t.Fatal("stale PID reached the record's new process")
	}
	if pm.get(pid2) != p2 {
		t.Fatal("new PID missed")
	}
	if pm.get(0) != nil || pm.get(PID(1)<<40) != nil {
		t.Fatal("never-assigned PIDs found something")
	}
}

// TestPIDMapConcurrentChurn: goroutines allocate, look up and free records
// at once; a live PID must always find its own record and no two live
// processes may share a PID.
func TestPIDMapConcurrentChurn(t *testing.T) {
	pm := newPIDMap()
	var live sync.Map // PID → *proc
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []PID
			for i := 0; i < 20000; i++ {
				if len(mine) > 0 && i%3 == 0 {
					pid := mine[len(mine)-1]
					mine = mine[:len(mine)-1]
					live.Delete(pid)
					retire(pm, pm.get(pid))
					continue
				}
				p, pid := pm.alloc(nil)
				if other, dup := live.LoadOrStore(pid, p); dup {
					t.Errorf("PID %v handed out twice (%p, %p)", pid, other, p)
					return
				}
				publish(p, pid)
				mine = append(mine, pid)
				for _, q := range mine[max(0, len(mine)-3):] {
					if got, _ := live.Load(q); pm.get(q) != got {
						t.Errorf("get(%v) = %p, want %p", q, pm.get(q), got)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
