package taskq

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// fetcherParams configure a fetcher.
type fetcherParams struct {
	r        *rdb.RDB
	queues   []QueueSpec
	strict   bool
	assigned map[string]bool
	batch    int           // most tasks per dequeue call
	lease    time.Duration // the lease a dequeue grants
	stealer  *stealer      // steal targets; nil when stealing is off
	// adaptive supplies the knobs it polls with: the pause before a
	// dequeue, the longest wake-list block, the queue weight factors.
	adaptive *adaptiveController
	health   *redisHealth
	clock    clock.Clock
	m        *metrics

	// persist outlives the worker's ctx: a dequeue already sent, and the
	// requeue of tasks not handed over, still reach Redis.
	persist context.Context
	// tasks receives the leased tasks; slots holds a token per free place
	// (a running or waiting task holds one); its capacity has room for
	// the prefetcher's extra slots too.
	tasks chan<- rdb.Dequeued
	slots chan struct{}
	// prefetch puts extra slots in circulation while tasks are short
	// (prefetch.go).
	prefetch *prefetcher
}

// fetcher takes tasks for free slots, one dequeue call per batch over all
// eligible queues (assigned first, then steal targets), and blocks on the
// wake-up lists when there is nothing. It requeues what it could not hand
// over when its context ends.
type fetcher struct {
	p fetcherParams
	loop
	// backlog is each queue's pending count as the last dequeue call
	// counted it (seed §2.1: selection considers queue lengths); the
	// fetcher's goroutine alone reads and writes it.
	backlog map[string]int64
	// retry is when the last dequeue call said a rate-throttled tenant or
	// queue gets its next token (zero: none waits); the fetcher's
	// goroutine alone uses it.
	retry time.Time
}

func newFetcher(p fetcherParams) *fetcher {
	if p.prefetch == nil { // no extra slots: the slots given are all
		p.prefetch = newPrefetcher(&runTimes{}, cap(p.slots), 0)
	}
	return &fetcher{p: p, backlog: map[string]int64{}}
}

func (f *fetcher) run(ctx context.Context) {
	fails := 0
	for {
		n, ok := f.takeSlots(ctx)
		if !ok {
			return
		}
		if d := f.p.adaptive.pollDelay(); d > 0 && sleep(ctx, f.p.clock, d) != nil {
			f.giveSlots(n)
			return
		}
		order, nAssigned := f.order()
		if ctx.Err() != nil {
			return
		}
		ds, retry, err := f.dequeue(order, n)
		f.retry = retry
		if err != nil {
			if ctx.Err() != nil || f.p.health.failed(ctx, &fails, "dequeue", err) != nil {
				return
			}
			continue
		}
		f.p.health.ok(&fails)
		if !f.handOver(ctx, ds) {
			return
		}
		if len(ds) > 0 {
			continue
		}
		f.p.m.emptyDequeues.Inc()
		if len(order) > nAssigned {
			f.p.stealer.noteMiss()
		}
		if err := f.idle(ctx, order, retry); err != nil && ctx.Err() == nil {
			if f.p.health.failed(ctx, &fails, "wait", err) != nil {
				return
			}
		}
	}
}

// start runs the fetcher until stop or until ctx ends.
func (f *fetcher) start(ctx context.Context) { f.launch(ctx, f.run) }

// takeSlots waits for one free slot, then takes the others free now, up
// to the batch size. While leased tasks still wait for a handler (the
// tasks buffer is not empty) it waits on for half a batch (or half the
// slots): the handlers are not starved meanwhile, and a fuller batch costs
// Redis less per task (a dequeue call's fixed work is most of a small
// batch's). A slot the prefetcher retires is not counted. ok is false when
// ctx ended.
func (f *fetcher) takeSlots(ctx context.Context) (n int, ok bool) {
	for n == 0 {
		select {
		case <-f.p.slots:
			n += f.kept()
		case <-ctx.Done():
			return 0, false
		}
	}
	enough := min(f.p.batch, f.p.prefetch.circulating()) / 2
	var waited *time.Timer
	defer func() {
		if waited != nil {
			waited.Stop()
		}
	}()
	for n < f.p.batch {
		select {
		case <-f.p.slots:
			n += f.kept()
			continue
		default:
		}
		// A throttled tenant's token that is due is taken now, with the
		// slots at hand: waiting for half a batch behind a busy tenant's
		// deep buffer would leave the token unspent and the rate short.
		untilToken := time.Duration(math.MaxInt64)
		if !f.retry.IsZero() {
			untilToken = f.retry.Sub(f.p.clock.Now())
		}
		if n >= enough || len(f.p.tasks) == 0 || untilToken <= 0 {
			return n, true
		}
		// The buffer is re-checked when a slot comes back, and at least
		// every call time: a handler may have taken the last waiting task
		// meanwhile and be idle now, with no slot to come for long.
		wait := min(max(f.p.prefetch.call, 200*time.Microsecond), untilToken)
		if waited == nil {
			waited = time.NewTimer(wait)
		} else {
			waited.Reset(wait)
		}
		select {
		case <-f.p.slots:
			n += f.kept()
		case <-waited.C:
		case <-ctx.Done():
			f.giveSlots(n)
			return 0, false
		}
	}
	return n, true
}

// kept is 1 for a slot just taken that is for use, 0 for one the
// prefetcher retired.
func (f *fetcher) kept() int {
	if f.p.prefetch.keep() {
		return 1
	}
	return 0
}

// dequeue leases up to n tasks from the queues in order and gives back
// the slots it could not fill. The call is not cut short by shutdown: the
// script may already have leased the tasks, which would then wait for
// their lease to expire.
func (f *fetcher) dequeue(order []string, n int) ([]rdb.Dequeued, time.Time, error) {
	now := f.p.clock.Now()
	dctx, cancel := context.WithTimeout(f.p.persist, 10*time.Second)
	began := time.Now()
	res, err := f.p.r.Dequeue(dctx, order, n, now, now.Add(f.p.lease))
	cancel()
	f.p.m.dequeues.Inc()
	f.giveSlots(n - len(res.Tasks))
	if err == nil && len(res.Tasks) > 0 {
		f.p.prefetch.observe(time.Since(began))
		f.giveSlots(f.p.prefetch.adjust())
	}
	for q, p := range res.Pending {
		f.backlog[q] = p
	}
	return res.Tasks, res.Retry, err
}

// idle waits for work: on the wake-up lists, or asleep when a throttled
// tenant's next token is due sooner than the idle wait and near.
func (f *fetcher) idle(ctx context.Context, order []string, retry time.Time) (err error) {
	idleFrom := f.p.clock.Now()
	f.p.m.idle.Set(1)
	d, byToken := f.idleWait(retry)
	if byToken && d <= nearToken {
		// Redis times a blocked pop out only on its 100 ms timer (hz 10).
		err = sleep(ctx, f.p.clock, d)
	} else {
		_, err = f.p.r.WaitWake(ctx, order, d)
	}
	f.p.m.idle.Set(0)
	f.p.m.idleSeconds.Add(f.p.clock.Since(idleFrom).Seconds())
	return err
}

// nearToken is the wait for a rate-limited tenant's next token below which
// the fetcher sleeps instead of blocking on the wake-up lists: Redis checks
// blocked-pop timeouts only on its 100 ms timer, which would stretch a 50 ms
// wait (a 20/s rate) to 100 ms. New work waits at most this long meanwhile.
const nearToken = 100 * time.Millisecond

// idleWait is how long to block on the wake-up lists: the adaptive idle
// wait, or less when a rate-limited tenant gets its next token sooner
// (nothing pushes a wake-up token for that; byToken says so).
func (f *fetcher) idleWait(retry time.Time) (d time.Duration, byToken bool) {
	d = f.p.adaptive.idleWait()
	if !retry.IsZero() {
		if until := max(time.Millisecond, retry.Sub(f.p.clock.Now())); until < d {
			return until, true
		}
	}
	return d, false
}

// giveSlots returns n slots taken for a dequeue that did not fill them.
func (f *fetcher) giveSlots(n int) {
	for range n {
		f.p.slots <- struct{}{}
	}
}

// handOver passes ds to the processors; if ctx ends first it gives the
// rest back and reports false.
func (f *fetcher) handOver(ctx context.Context, ds []rdb.Dequeued) bool {
	for i, d := range ds {
		if !f.p.assigned[d.Queue] {
			f.p.stealer.noteSteal(d.Queue)
		}
		select {
		case f.p.tasks <- d:
		case <-ctx.Done():
			giveBack(f.p.persist, f.p.r, f.p.health, ds[i:])
			return false
		}
	}
	return true
}

// order returns the queues for one dequeue call and how many of them are
// assigned: assigned queues first (strict order, or a weighted random order
// drawn per call), then steal targets by backlog. Because one script serves
// them in this order, a task is never stolen while an assigned queue, of any
// priority, has work.
//
// In the weighted order a queue weighs its configured weight × the adaptive
// controller's factor (1 unless actions 4 or 6 moved it) × its backlog
// factor, 1 + its share of the assigned queues' backlog as the last dequeue
// counted it (seed §2.1: selection considers the queue lengths): with equal
// backlogs the weights alone decide, and the longest queue weighs at most
// twice its weight, so a weight's priority holds.
func (f *fetcher) order() ([]string, int) {
	qs := f.p.queues
	out := make([]string, 0, len(qs)+4)
	if f.p.strict || len(qs) == 1 {
		for _, q := range qs {
			out = append(out, q.Name)
		}
	} else {
		var total int64
		for _, q := range qs {
			total += f.backlog[q.Name]
		}
		out = weightedOrder(qs, out, func(q string) float64 {
			return f.p.adaptive.weight(q) * backlogFactor(f.backlog[q], total)
		})
	}
	n := len(out)
	if f.p.stealer != nil {
		out = append(out, f.p.stealer.current()...)
	}
	return out, n
}

// backlogFactor is 1 + a queue's share of the backlog (1 when there is
// none).
func backlogFactor(pending, total int64) float64 {
	if total <= 0 || pending <= 0 {
		return 1
	}
	return 1 + float64(pending)/float64(total)
}

// weightedOrder appends qs's names to out in a random order where each
// next queue is drawn with probability proportional to its weight times
// factor(name) (the adaptive and backlog factors).
func weightedOrder(qs []QueueSpec, out []string, factor func(string) float64) []string {
	w := make([]float64, len(qs))
	total := 0.0
	for i, q := range qs {
		w[i] = float64(q.Weight) * factor(q.Name)
		total += w[i]
	}
	used := make([]bool, len(qs))
	for range qs {
		x := rand.Float64() * total
		last := -1
		for i := range qs {
			if used[i] {
				continue
			}
			last = i
			if x < w[i] {
				break
			}
			x -= w[i]
		}
		used[last] = true
		total -= w[last]
		out = append(out, qs[last].Name)
	}
	return out
}

// giveBack requeues leased tasks that no handler will run.
func giveBack(persist context.Context, r *rdb.RDB, h *redisHealth, ds []rdb.Dequeued) {
	for _, d := range ds {
		_ = retryRedis(persist, h, "requeue", func(c context.Context) error {
			c, cancel := context.WithTimeout(c, 5*time.Second)
			defer cancel()
			_, err := r.Requeue(c, d.Queue, []string{d.ID})
			return err
		})
	}
}
