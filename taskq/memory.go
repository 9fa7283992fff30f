package taskq

import (
	"math"
	"runtime/debug"
	rtmetrics "runtime/metrics"
)

// memoryInUse is the process's Go memory in use (heap objects, stacks and
// runtime structures: what GOMEMLIMIT counts, less released memory) and its
// soft limit (GOMEMLIMIT or debug.SetMemoryLimit; 0 when none is set).
func memoryInUse() (inUse, limit int64) {
	s := []rtmetrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() == rtmetrics.KindUint64 && s[1].Value.Kind() == rtmetrics.KindUint64 {
		inUse = int64(s[0].Value.Uint64() - s[1].Value.Uint64())
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		limit = l
	}
	return inUse, limit
}
