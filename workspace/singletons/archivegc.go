package singletons

import (
	"context"
	"log/slog"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/provider"
)

// Archive GC defaults (ws serve --keep-archives, --archive-retention).
const (
	DefaultKeepArchives     = 3
	DefaultArchiveRetention = 7 * 24 * time.Hour
	// leftoverAge is how old an uncommitted archive (a write interrupted
	// before its .meta) must be before the GC removes it: far longer than
	// any archive write takes.
	leftoverAge = 24 * time.Hour
)

// ArchiveGC removes the archives nobody will restore, once per Interval, on
// the leader (RunSingletons):
//
//   - of a workspace that exists, every committed archive but the newest
//     Keep and the one its next restore uses (archive_key), and the
//     uncommitted leftovers older than a day;
//   - of a workspace that no longer exists, every blob once Retention has
//     passed since its deletion (its tombstone) or, for an id this
//     database never deleted, since its newest blob. An empty database
//     removes nothing it did not delete itself: a new database pointed at
//     an old bucket must not wipe it.
//
// The archive storage belongs to one gantry database: two deployments
// sharing a bucket need different prefixes (s3://bucket/prefix).
type ArchiveGC struct {
	Store interface {
		List(ctx context.Context) ([]workspace.Workspace, error)
		Get(ctx context.Context, id string) (workspace.Workspace, error)
	}
	Storage   provider.ArchiveStore
	Keep      int           // zero = DefaultKeepArchives; negative = keep every archive
	Retention time.Duration // zero = DefaultArchiveRetention; negative = keep a deleted workspace's archives forever
	Interval  time.Duration // zero = 5 min
	Clock     clock.Clock
	Logger    *slog.Logger
}

// Run collects at once and then every Interval until ctx ends.
func (g *ArchiveGC) Run(ctx context.Context) error {
	c := clock.Or(g.Clock)
	every := g.Interval
	if every <= 0 {
		every = 5 * time.Minute
	}
	for {
		if _, err := g.Collect(ctx, c.Now()); err != nil && ctx.Err() == nil {
			g.log().Warn("workspace: archive GC", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.After(every):
		}
	}
}

func (g *ArchiveGC) log() *slog.Logger {
	if g.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return g.Logger
}

// Collect runs one pass at now and returns how many archives (or whole
// workspaces' blobs) it removed.
func (g *ArchiveGC) Collect(ctx context.Context, now time.Time) (int, error) {
	holders, err := g.Storage.Holders(ctx)
	if err != nil || len(holders) == 0 {
		return 0, err
	}
	rows, err := g.Store.List(ctx)
	if err != nil {
		return 0, err
	}
	live := make(map[string]bool, len(rows))
	for _, w := range rows {
		live[w.ID] = true
	}
	removed := 0
	for id, h := range holders {
		if ctx.Err() != nil {
			return removed, ctx.Err()
		}
		var n int
		var err error
		if live[id] {
			n, err = g.prune(ctx, id, h, now)
		} else {
			n, err = g.forget(ctx, h, len(rows) == 0, now)
		}
		removed += n
		if err != nil {
			g.log().Warn("workspace: archive GC", "workspace", id, "err", err)
		}
	}
	return removed, nil
}

// prune removes an existing workspace's surplus archives.
func (g *ArchiveGC) prune(ctx context.Context, id string, h *provider.ArchiveHolder, now time.Time) (int, error) {
	keep := g.Keep
	if keep == 0 {
		keep = DefaultKeepArchives
	}
	removed, committed := 0, 0
	for _, a := range h.Archives {
		surplus := false
		if a.Committed {
			committed++
			surplus = keep > 0 && committed > keep
		} else {
			surplus = now.Sub(a.Created) > leftoverAge
		}
		if !surplus {
			continue
		}
		// Read the row now, not at the pass's start: a restore may have
		// just chosen this archive.
		w, err := g.Store.Get(ctx, id)
		if err != nil || w.ArchiveKey == a.Key {
			continue
		}
		if err := g.Storage.DeleteArchive(ctx, a.Key); err != nil {
			return removed, err
		}
		removed++
		g.log().Info("workspace: archive removed", "workspace", id, "key", a.Key, "committed", a.Committed, "keep", keep)
	}
	return removed, nil
}

// forget removes every blob of a workspace that no longer exists, once
// its retention has passed.
func (g *ArchiveGC) forget(ctx context.Context, h *provider.ArchiveHolder, emptyDB bool, now time.Time) (int, error) {
	keep := g.Retention
	if keep == 0 {
		keep = DefaultArchiveRetention
	}
	since := h.Deleted
	if since.IsZero() {
		if emptyDB {
			return 0, nil
		}
		since = h.Newest
	}
	if keep < 0 || now.Sub(since) < keep {
		return 0, nil
	}
	if err := g.Storage.Forget(ctx, h.ID); err != nil {
		return 0, err
	}
	g.log().Info("workspace: a deleted workspace's archives removed", "workspace", h.ID, "archives", len(h.Archives),
		"deleted", !h.Deleted.IsZero(), "since", since)
	return 1, nil
}
