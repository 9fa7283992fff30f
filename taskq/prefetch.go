package taskq

import (
	"sync/atomic"
	"time"
)

// Short tasks get a deeper prefetch. A worker's slots (running + leased and
// waiting) are Concurrency + Prefetch; that is right for tasks that run
// longer than a dequeue round trip, and too few for short ones: the
// handlers then empty the buffer faster than a dequeue refills it, and the
// worker waits on Redis round trips with Redis half idle (measured: no-op
// tasks at concurrency 16 drained at 28k/s with 32 slots, 49k/s with 128,
// the Redis CPU per task down from 20 to 14 µs as the batches grew). So up
// to ShortPrefetch more slots circulate while the handlers' mean run time
// says one dequeue call's worth of tasks (Concurrency × call time / run
// time, twice over) exceeds the configured buffer; they are retired, one
// at a time as they come back, when the tasks get longer. Until then a
// buffer filled during short tasks may hold long ones: a task whose lease
// ran out while it waited is not run (process.go freshLease).
const ShortPrefetch = 128

// runTimes sums the handlers' run times; processors Add, the fetcher reads
// the mean since its last look.
type runTimes struct {
	n, nanos atomic.Int64
}

func (r *runTimes) add(d time.Duration) {
	r.nanos.Add(int64(d))
	r.n.Add(1)
}

// prefetcher is the fetcher's side of the extra slots (its goroutine alone
// uses it).
type prefetcher struct {
	runs      *runTimes
	base      int   // Concurrency + Prefetch: the slots that always circulate
	spare     int   // extra slots not circulating now (ShortPrefetch at first)
	retire    int   // circulating extra slots to take out as they come back
	lastN     int64 // runs' n and nanos at the last look
	lastNanos int64
	mean      time.Duration // handlers' mean run time, smoothed
	call      time.Duration // dequeue call time, smoothed
	conc      int
}

func newPrefetcher(runs *runTimes, concurrency, prefetch int) *prefetcher {
	return &prefetcher{runs: runs, base: concurrency + prefetch, spare: ShortPrefetch, conc: concurrency}
}

// observe records one dequeue call's time and reads the handlers' mean run
// time since the last call.
func (p *prefetcher) observe(call time.Duration) {
	p.call = smooth(p.call, call)
	n, nanos := p.runs.n.Load(), p.runs.nanos.Load()
	if n > p.lastN {
		p.mean = smooth(p.mean, time.Duration((nanos-p.lastNanos)/(n-p.lastN)))
		p.lastN, p.lastNanos = n, nanos
	}
}

// smooth is an exponentially weighted mean (weight 1/4 on the new value).
func smooth(avg, v time.Duration) time.Duration {
	if avg == 0 {
		return v
	}
	return avg + (v-avg)/4
}

// want is how many extra slots should circulate now: enough that the
// buffer holds twice the tasks the handlers finish during one call.
func (p *prefetcher) want() int {
	if p.mean <= 0 || p.call <= 0 {
		return 0
	}
	need := 2 * float64(p.conc) * float64(p.call) / float64(p.mean)
	return int(min(float64(ShortPrefetch), max(0, need-float64(p.base))))
}

// adjust moves extra slots in or out of circulation towards want: it
// returns how many to add to the slots now (the caller sends them); those
// to take out are retired as they come back (keep).
func (p *prefetcher) adjust() (add int) {
	circulating := ShortPrefetch - p.spare - p.retire
	switch w := p.want(); {
	case w > circulating:
		need := w - circulating
		r := min(p.retire, need) // cancel pending retirements first
		p.retire -= r
		add = min(need-r, p.spare)
		p.spare -= add
	case w < circulating:
		p.retire += circulating - w
	}
	return add
}

// circulating is how many slots circulate (running, waiting, free).
func (p *prefetcher) circulating() int { return p.base + ShortPrefetch - p.spare }

// keep reports whether a slot the fetcher just took is for use (false: it
// is retired into spare instead).
func (p *prefetcher) keep() bool {
	if p.retire == 0 {
		return true
	}
	p.retire--
	p.spare++
	return false
}
