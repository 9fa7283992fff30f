package sched

import "sync"

const pidShards = 64 // power of two

// pidMap routes PIDs to processes. It is sharded by PID so that spawns and
// completions on different workers rarely share a lock; PIDs are sequential,
// so consecutive spawns land on different shards.
type pidMap struct {
	shards [pidShards]pidShard
}

type pidShard struct {
	mu sync.Mutex
	// m is guarded by mu.
	m map[PID]*proc
	_ [64]byte // keep neighbouring shards' locks off one cache line
}

func (pm *pidMap) shard(pid PID) *pidShard { return &pm.shards[pid&(pidShards-1)] }

func (pm *pidMap) put(p *proc) {
	s := pm.shard(p.pid)
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[PID]*proc)
	}
	s.m[p.pid] = p
	s.mu.Unlock()
}

func (pm *pidMap) get(pid PID) *proc {
	s := pm.shard(pid)
	s.mu.Lock()
	p := s.m[pid]
	s.mu.Unlock()
	return p
}

func (pm *pidMap) del(pid PID) {
	s := pm.shard(pid)
	s.mu.Lock()
	delete(s.m, pid)
	s.mu.Unlock()
}

// all returns a snapshot of every process in the map.
func (pm *pidMap) all() []*proc {
	var out []*proc
	for i := range pm.shards {
		s := &pm.shards[i]
		s.mu.Lock()
		for _, p := range s.m {
			out = append(out, p)
		}
		s.mu.Unlock()
	}
	return out
}
