package reconcile

import (
	"context"
	"sync"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
)

// workerPool is the benchmark baseline for the sched processes: a fixed
// pool of goroutines, a FIFO of workspace ids and a per-id in-flight set so
// one workspace still never has two steps at once.
type workerPool struct {
	r *Reconciler
	n int
	// mu protects the fields below.
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []string
	queued   map[string]bool
	inflight map[string]bool
	latest   map[string]*workspace.Workspace
	closed   bool
}

func (p *workerPool) poke(id string, w *workspace.Workspace) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if _, ok := p.latest[id]; !ok || w == nil {
		p.latest[id] = w
	}
	if p.queued[id] {
		return
	}
	p.queued[id] = true
	if !p.inflight[id] {
		p.queue = append(p.queue, id)
		p.cond.Signal()
	}
}

// usePool makes r dispatch through a pool of n goroutines instead of its
// sched processes.
func usePool(r *Reconciler, n int) {
	p := &workerPool{r: r, n: n, queued: map[string]bool{}, inflight: map[string]bool{}, latest: map[string]*workspace.Workspace{}}
	p.cond = sync.NewCond(&p.mu)
	r.alt = p
}

func (p *workerPool) run(ctx context.Context) error {
	r := p.r
	var wg sync.WaitGroup
	for range p.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				p.mu.Lock()
				for len(p.queue) == 0 && !p.closed {
					p.cond.Wait()
				}
				if p.closed {
					p.mu.Unlock()
					return
				}
				id := p.queue[0]
				p.queue = p.queue[1:]
				w := p.latest[id]
				delete(p.latest, id)
				delete(p.queued, id)
				p.inflight[id] = true
				p.mu.Unlock()
				res := r.step(ctx, id, w)
				p.mu.Lock()
				delete(p.inflight, id)
				if res.again && !p.queued[id] {
					p.queued[id] = true
					p.latest[id] = res.next
				}
				if p.queued[id] {
					p.queue = append(p.queue, id)
					p.cond.Signal()
				}
				p.mu.Unlock()
			}
		}()
	}
	hinted, cancel := r.hints.Subscribe(hints.ChanWorkspace)
	defer cancel()
	t := r.cfg.Clock.NewTicker(r.cfg.Interval)
	defer t.Stop()
	r.Tick(ctx)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C():
			r.Tick(ctx)
		case id := <-hinted:
			r.poke(id, nil)
		}
	}
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	wg.Wait()
	r.calls.Wait()
	return nil
}
