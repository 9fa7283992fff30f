package sched

import "testing"

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
