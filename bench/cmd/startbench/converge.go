package main

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/store"
)

// The converge load: -bulk workspaces desired STANDBY (observed PENDING)
// written into the server's database before it starts, so that the
// measured starts run while its reconciler converges them (provisioning a
// volume each: what "100,000 workspaces converge in the background"
// means), with no client competing for the API.

const convergeOwner = "converge"

// seed writes n workspaces desired STANDBY of convergeOwner into dsn, 64
// creates at a time (the store batches them).
func seed(ctx context.Context, dsn string, n int) error {
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				_, err := st.Create(ctx, workspace.NewWorkspace{Name: fmt.Sprint("c", i), Owner: convergeOwner, Desired: workspace.Standby}, time.Now())
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("seeding %d workspaces: %w", n, err)
	}
	log.Printf("converge: %d workspaces seeded (desired STANDBY) in %v", n, time.Since(t0).Round(time.Millisecond))
	return nil
}

// convergeDSN is the database the server s uses.
func (s *server) convergeDSN() string {
	if s.db != nil {
		return s.db.url
	}
	return "sqlite:" + filepath.Join(s.data, "workspaces.db")
}

// watchConverge keeps s.converging up to date (a count every 2 s) until
// the seeded workspaces are all STANDBY or the returned stop is called,
// which says how far they got.
func (s *server) watchConverge(ctx context.Context) (stop func() string) {
	s.converging.Store(true)
	t0 := time.Now()
	done := make(chan struct{})
	var last atomic.Int64
	var took atomic.Int64
	go func() {
		for {
			n, err := s.converged(ctx)
			if err == nil {
				last.Store(int64(n))
			}
			if n >= s.b.cfg.bulk {
				took.Store(int64(time.Since(t0)))
				s.converging.Store(false)
				return
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()
	return func() string {
		close(done)
		if d := time.Duration(took.Load()); d > 0 {
			return fmt.Sprintf("all %d converged %v after the server's start", s.b.cfg.bulk, d.Round(time.Second))
		}
		return fmt.Sprintf("%d of %d converged when the starts ended (%v)", last.Load(), s.b.cfg.bulk, time.Since(t0).Round(time.Second))
	}
}

// converged counts the seeded workspaces observed STANDBY, on a store of
// its own over the server's database.
func (s *server) converged(ctx context.Context) (int, error) {
	st, err := store.Open(ctx, s.convergeDSN())
	if err != nil {
		return 0, err
	}
	defer st.Close()
	all, err := st.ListOwned(ctx, convergeOwner)
	n := 0
	for _, w := range all {
		if w.ObservedStatus == workspace.Standby {
			n++
		}
	}
	return n, err
}
