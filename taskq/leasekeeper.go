package taskq

import (
	"context"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// leaseKeeperParams configure a lease keeper.
type leaseKeeperParams struct {
	r        *rdb.RDB
	inflight *inflightSet
	lease    time.Duration // each extension runs this long from now
	interval time.Duration // HeartbeatInterval
	clock    clock.Clock
}

// leaseKeeper is the heartbeat of the running tasks: every interval it
// extends their leases, and cancels a task whose lease was lost (another
// worker reaped it and may run it).
type leaseKeeper struct {
	p leaseKeeperParams
	loop
}

func newLeaseKeeper(p leaseKeeperParams) *leaseKeeper { return &leaseKeeper{p: p} }

func (k *leaseKeeper) run(ctx context.Context) {
	tickLoop(ctx, k.p.clock, k.p.interval, func() bool {
		k.beat(ctx)
		return true
	})
}

// start runs the lease keeper until stop or until ctx ends.
func (k *leaseKeeper) start(ctx context.Context) { k.launch(ctx, k.run) }

// beat extends every running task's lease once.
func (k *leaseKeeper) beat(ctx context.Context) {
	until := k.p.clock.Now().Add(k.p.lease)
	for q, runs := range k.p.inflight.byQueue() {
		leases := make([]rdb.Lease, len(runs))
		for i, r := range runs {
			leases[i] = r.lease
		}
		lost, err := k.p.r.Extend(ctx, q, until, leases)
		// On an error the lease runs on; the next beat tries again, with
		// this beat's end among those the run may hold.
		k.p.inflight.extended(runs, until, err == nil)
		if err != nil {
			continue
		}
		for _, id := range lost {
			for _, r := range runs {
				if r.lease.ID == id {
					k.p.inflight.lose(r.t)
				}
			}
		}
	}
}
