package singletons

import (
	"context"
	"log/slog"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
)

// DefaultAuditRetention is how long audit rows are kept by default.
const DefaultAuditRetention = 90 * 24 * time.Hour

// Retention removes audit rows older than Audit and expired page sessions,
// once per Interval; it runs on the leader (RunSingletons).
type Retention struct {
	// Store is the accounts' store (store.Accounts).
	Store interface {
		Prune(ctx context.Context, before, now time.Time) (int64, error)
	}
	Audit    time.Duration // zero = DefaultAuditRetention; negative = keep audit rows forever
	Interval time.Duration // zero = 1h
	Clock    clock.Clock
	Logger   *slog.Logger
}

// Run prunes at once and then every Interval until ctx ends.
func (r *Retention) Run(ctx context.Context) error {
	c := clock.Or(r.Clock)
	every := r.Interval
	if every <= 0 {
		every = time.Hour
	}
	for {
		r.Prune(ctx, c.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-c.After(every):
		}
	}
}

// Prune runs one pass at now.
func (r *Retention) Prune(ctx context.Context, now time.Time) {
	keep := r.Audit
	if keep == 0 {
		keep = DefaultAuditRetention
	}
	before := time.Time{} // keep forever: remove nothing older than the epoch
	if keep > 0 {
		before = now.Add(-keep)
	}
	n, err := r.Store.Prune(ctx, before, now)
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case err != nil && ctx.Err() == nil:
		log.Warn("workspace: pruning the audit log", "err", err)
	case n > 0:
		log.Info("workspace: pruned the audit log", "rows", n, "older_than", before)
	}
}
