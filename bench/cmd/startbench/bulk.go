package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/client"
)

// bulkLoad creates -bulk workspaces desired STANDBY (the process provider
// provisions a volume for each) as another user, -bulk-workers creates at
// a time (the API has no batch create); when it stops, that user's list
// tells how many are observed STANDBY. (Not an event stream of that user:
// one that falls behind is dropped and starts again with the whole state.)
type bulkLoad struct {
	total   int
	t0      time.Time
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	next    atomic.Int64
	created atomic.Int64
	allIn   atomic.Bool  // every create answered
	refused atomic.Int64 // 429/503 answers, retried
	errs    atomic.Int64
	client  *client.Client
	summary string // stop's, once stopped
}

// bulkHead is how many bulk workspaces are created before the measured
// starts begin: the server is then busy with them.
const bulkHead = 1000

// startBulk starts the bulk load and returns once bulkHead (or all) of
// its workspaces are created.
func (s *server) startBulk(ctx context.Context) (*bulkLoad, error) {
	s.bulkRan = true
	owner := "bulk-" + s.b.runID
	tok, err := s.admin.CreateToken(ctx, api.TokenRequest{Owner: owner})
	if err != nil {
		return nil, fmt.Errorf("create the bulk user's token: %w", err)
	}
	c := &client.Client{Base: s.base, Token: tok.Secret, HTTP: newHTTP()}
	bl := &bulkLoad{total: s.b.cfg.bulk, t0: time.Now(), client: c}
	s.bulk = bl
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	bl.cancel = cancel
	for range s.b.cfg.bulkWorkers {
		bl.wg.Add(1)
		go bl.worker(bctx, c)
	}
	head := int64(min(bulkHead, bl.total))
	for bl.created.Load() < head {
		select {
		case <-ctx.Done():
			bl.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if bl.errs.Load() > 100 {
			bl.stop()
			return nil, fmt.Errorf("bulk: over 100 creates failed\n%s", s.logTail())
		}
	}
	log.Printf("bulk: %d workspaces created in %v; measuring", head, time.Since(bl.t0).Round(time.Millisecond))
	return bl, nil
}

// worker creates bulk workspaces until all are or ctx ends; a refusal
// for load (429, 503) is retried after 10 ms.
func (bl *bulkLoad) worker(ctx context.Context, c *client.Client) {
	defer bl.wg.Done()
	for {
		i := bl.next.Add(1)
		if i > int64(bl.total) {
			return
		}
		n := workspace.NewWorkspace{Name: fmt.Sprintf("b%d", i), Command: wsCommand, Desired: workspace.Standby}
		for {
			_, err := c.Create(ctx, n)
			if err == nil {
				if bl.created.Add(1) == int64(bl.total) {
					bl.allIn.Store(true)
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			var ae *client.APIError
			if errors.As(err, &ae) && (ae.Status == http.StatusTooManyRequests || ae.Status == http.StatusServiceUnavailable) {
				bl.refused.Add(1)
				select {
				case <-ctx.Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			if bl.errs.Add(1) <= 3 {
				log.Printf("bulk: create %s: %v", n.Name, err)
			}
			break
		}
	}
}

// stop ends the creates and returns how far the bulk got: created, and
// observed STANDBY (the list read just after).
func (bl *bulkLoad) stop() string {
	if bl.summary != "" {
		return bl.summary
	}
	el := time.Since(bl.t0)
	bl.cancel()
	bl.wg.Wait()
	created := bl.created.Load()
	conv := "?"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if all, err := bl.client.List(ctx); err != nil {
		log.Printf("bulk: list: %v", err)
	} else {
		n := 0
		for _, w := range all {
			if w.ObservedStatus == workspace.Standby && w.Operation == workspace.OpNone {
				n++
			}
		}
		conv = fmt.Sprint(n)
	}
	bl.summary = fmt.Sprintf("bulk when the measurement ended: %d of %d created, %s observed STANDBY, after %.0f s (%.0f creates/s",
		created, bl.total, conv, el.Seconds(), float64(created)/el.Seconds())
	if r := bl.refused.Load(); r > 0 {
		bl.summary += fmt.Sprintf(", %d refused for load and retried", r)
	}
	if e := bl.errs.Load(); e > 0 {
		bl.summary += fmt.Sprintf(", %d failed", e)
	}
	bl.summary += ")"
	log.Print(bl.summary)
	return bl.summary
}
