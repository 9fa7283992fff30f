package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/workspace"
)

// row is one (provider, mode, load)'s figures.
type row struct {
	provider, mode, load string
	running, exec        durations
	starts, misses       int    // starts measured; warm: the pool did not serve them
	failures             int    // starts that failed (not in the figures)
	duringBulk           int    // starts that ended before the bulk's last create
	note                 string // the bulk's progress, why exec is not measured
	server               string // the server's own figures (serverSide)
	loadavg              string // at the row's end
}

// maxFailures ends a row: a server that fails this many starts in a row
// is not measured further.
const maxFailures = 5

const templateName = "startbench"

// measureRow starts a server for provider p, brings the load and the
// pool up, and measures -n starts.
func (b *bench) measureRow(ctx context.Context, p, mode, load string) (row, error) {
	r := row{provider: p, mode: mode, load: load}
	exec := p != "kubernetes"
	if !exec {
		r.note = "kwok: no container runs, so create → exec is not measured"
	}
	s, err := b.startServer(ctx, p, fmt.Sprintf("%s-%s-%s", p, mode, load))
	if err != nil {
		return r, err
	}
	defer s.close()
	var convergeStop func() string
	if load == "converge" {
		convergeStop = s.watchConverge(ctx)
	}
	var bl *bulkLoad
	if load == "bulk" {
		if bl, err = s.startBulk(ctx); err != nil {
			return r, err
		}
		defer bl.stop()
	}
	n := workspace.NewWorkspace{Command: wsCommand, Desired: workspace.Running}
	if mode == "warm" {
		if err := s.startPool(ctx); err != nil {
			return r, err
		}
		defer s.stopPool()
		n = workspace.NewWorkspace{Template: templateName, Desired: workspace.Running}
	}
	err = s.measureStarts(ctx, &r, n, exec)
	r.server = s.serverSide(ctx)
	if bl != nil {
		r.note = bl.stop()
	}
	if convergeStop != nil {
		r.note = join(r.note, convergeStop())
	}
	r.loadavg = loadavg()
	return r, err
}

// measureStarts measures -n starts of n (named s1, s2, …), deleting each
// workspace after its start; warm, each start waits for a full pool.
// Under the converge load the starts must all fall within the
// convergence (some 20 s): they begin -pace apart, a warm one waits only
// for one ready member (a start the pool misses counts as a cold miss),
// and each workspace is deleted without waiting for it to be gone.
func (s *server) measureStarts(ctx context.Context, r *row, n workspace.NewWorkspace, exec bool) error {
	inRow := 0
	t0 := time.Now()
	paced := r.load == "converge"
	var deletes sync.WaitGroup
	var deleteErr atomic.Pointer[error]
	defer deletes.Wait()
	next := time.Now()
	for i := 1; i <= s.b.cfg.n && ctx.Err() == nil; i++ {
		if err := s.beforeStart(ctx, r, paced, next); err != nil {
			return err
		}
		next = time.Now().Add(s.b.cfg.pace)
		n.Name = fmt.Sprintf("s%d", i)
		smp, id, err := s.measureStart(ctx, n, exec)
		switch {
		case id != "" && paced:
			deletes.Go(func() {
				if derr := s.remove(ctx, id); derr != nil {
					deleteErr.CompareAndSwap(nil, &derr)
				}
			})
		case id != "":
			if derr := s.remove(ctx, id); derr != nil && err == nil {
				err = derr
			}
		}
		if err != nil {
			r.failures++
			inRow++
			log.Printf("start %d: %v", i, err)
			if inRow >= maxFailures {
				return fmt.Errorf("%d starts in a row failed; the last: %w\nserver log (tail):\n%s", inRow, err, s.logTail())
			}
			continue
		}
		inRow = 0
		r.add(smp, exec, s.bulk != nil && !s.bulk.allIn.Load() || s.converging.Load())
		if s.b.cfg.verbose {
			log.Printf("start %d: RUNNING %v, exec %v, pooled %v", i, smp.running, smp.exec, smp.pooled)
		} else if i%50 == 0 {
			log.Printf("%d starts in %v", i, time.Since(t0).Round(time.Millisecond))
		}
	}
	deletes.Wait()
	if e := deleteErr.Load(); e != nil && ctx.Err() == nil {
		return *e
	}
	return ctx.Err()
}

// beforeStart waits until the next start may begin: warm, for a full
// pool (paced: one ready member); paced, until next.
func (s *server) beforeStart(ctx context.Context, r *row, paced bool, next time.Time) error {
	if paced {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(next)):
		}
	}
	if r.mode != "warm" {
		return nil
	}
	want := s.b.cfg.pool
	if paced {
		want = 1
	}
	return s.waitPool(ctx, want)
}

// add counts one measured start (during the bulk's creates or not).
func (r *row) add(smp sample, exec, duringBulk bool) {
	r.starts++
	r.running = append(r.running, smp.running)
	if exec {
		r.exec = append(r.exec, smp.exec)
	}
	if duringBulk {
		r.duringBulk++
	}
	if r.mode == "warm" && !smp.pooled {
		r.misses++
	}
}
