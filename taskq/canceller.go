package taskq

import (
	"context"
	"log/slog"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// cancellerParams configure a canceller.
type cancellerParams struct {
	r        *rdb.RDB
	inflight *inflightSet
	clock    clock.Clock
	log      *slog.Logger
}

// canceller listens for cancelled tasks (cancel.lua publishes "queue \0 id"
// on rdb.CancelChannel) and cancels the handler of any this worker runs. A
// message missed while the subscription was down costs nothing but time:
// cancel.lua already took the lease away, so the lease keeper's next beat
// finds it lost and cancels the handler then.
type canceller struct {
	p cancellerParams
	loop
}

func newCanceller(p cancellerParams) *canceller { return &canceller{p: p} }

// start subscribes until stop or until ctx ends, resubscribing after a
// failure (backing off up to 5 s).
func (c *canceller) start(ctx context.Context) { c.launch(ctx, c.run) }

func (c *canceller) run(ctx context.Context) {
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.p.r.SubscribeCancels(ctx, func(q, id string) {
			if c.p.inflight.cancelTask(inflightKey{q, id}) {
				c.p.log.Info("taskq: cancelling a running task", "queue", q, "id", id)
			}
		})
		if ctx.Err() != nil {
			return
		}
		c.p.log.Debug("taskq: cancel subscription ended; resubscribing", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-c.p.clock.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}
