package singletons

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// PoolStore is what the PoolFiller needs of the store (store.Pools).
type PoolStore interface {
	Sizes(ctx context.Context) (map[string]int, error)
	Deficit(ctx context.Context, name string, version, size int) (int, error)
	Refill(ctx context.Context, name string, version, size int, prepared []workspace.NewWorkspace, now time.Time) (store.Refilled, error)
	PendingAdoptions(ctx context.Context) ([]store.Adoption, error)
	Adopted(ctx context.Context, id string) error
}

var _ PoolStore = (*store.Pools)(nil)

// TemplateReader reads a template's latest version (store.Templates).
type TemplateReader interface {
	Get(ctx context.Context, name string, version int) (workspace.Template, error)
}

// PoolFiller keeps the warm pools full, on the leader (RunSingletons):
// every Interval, for each template with a pool, it drains the members of
// an older version and the failed ones, trims a pool above its size, and
// adds the members it lacks (each with a copy of the template's files, if
// it has some), then hints the reconciler to start them at once. All of a
// pool's changes are one transaction under its lock (store.Pools.Refill),
// so a deposed leader's pass and the new leader's take turns and the pool
// never exceeds its size; a pass killed midway leaves either its whole
// change or none (file copies it made for nothing are collected by the
// archive GC, as any archive of an id the database never held).
type PoolFiller struct {
	Pools     PoolStore      // required
	Templates TemplateReader // required
	// Files copies a template's files for a new member; nil = templates
	// with files get no pool (a warning says so).
	Files provider.Forker
	// Drop removes a copy no member took; nil = left to the archive GC.
	Drop func(ctx context.Context, key string) error
	// Adopter, if the container provider is one, hands claimed members to
	// their owners, AdoptAfter (zero: 1 s) after their claim: off the path
	// of the owner's first commands (Docker moves the container between
	// networks, which slows an exec the engine serves meanwhile).
	Adopter    provider.Adopter
	AdoptAfter time.Duration
	Hints      hints.Bus     // nil = the reconciler finds new members at its next tick
	Interval   time.Duration // zero = 500 ms
	Clock      clock.Clock
	Logger     *slog.Logger
}

// Run fills the pools at once, then every Interval and whenever a claim
// says a pool lost a member (hints.ChanPool), until ctx ends.
func (f *PoolFiller) Run(ctx context.Context) error {
	c := clock.Or(f.Clock)
	every := f.Interval
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	var claimed <-chan string
	if f.Hints != nil {
		ch, cancel := f.Hints.Subscribe(hints.ChanPool)
		defer cancel()
		claimed = ch
	}
	for {
		if err := f.Fill(ctx, c.Now()); err != nil && ctx.Err() == nil {
			f.log().Warn("workspace: warm pools", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.After(every):
		case <-claimed:
			drain(claimed) // one pass serves every claim so far
		}
	}
}

// drain empties c's queued values without waiting.
func drain(c <-chan string) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

func (f *PoolFiller) log() *slog.Logger {
	if f.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return f.Logger
}

// Fill does one pass over every pool; the first error is returned after
// the other pools had theirs.
func (f *PoolFiller) Fill(ctx context.Context, now time.Time) error {
	sizes, err := f.Pools.Sizes(ctx)
	if err != nil {
		return err
	}
	first := f.adopt(ctx, now)
	for name, size := range sizes {
		if err := f.fillOne(ctx, name, size, now); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (f *PoolFiller) fillOne(ctx context.Context, name string, size int, now time.Time) error {
	t, err := f.Templates.Get(ctx, name, 0)
	if errors.Is(err, workspace.ErrNotFound) {
		return nil // deleted since Sizes read it: Delete dropped its pool
	}
	if err != nil {
		return err
	}
	if err := f.canPool(t); err != nil && size > 0 {
		f.log().Warn("workspace: warm pool drained", "template", name, "why", err)
		size = 0
	}
	deficit, err := f.Pools.Deficit(ctx, name, t.Version, size)
	if err != nil {
		return err
	}
	prepared, err := f.prepare(ctx, t, deficit)
	if err == nil {
		var r store.Refilled
		r, err = f.Pools.Refill(ctx, name, t.Version, size, prepared, now)
		if err == nil {
			f.dropFiles(ctx, r.Unused)
			f.announce(ctx, name, r)
			return nil
		}
	}
	f.dropFiles(ctx, prepared)
	return err
}

// adopt hands the members claimed at least AdoptAfter ago to their owners.
func (f *PoolFiller) adopt(ctx context.Context, now time.Time) error {
	if f.Adopter == nil {
		return nil
	}
	after := f.AdoptAfter
	if after <= 0 {
		after = time.Second
	}
	pending, err := f.Pools.PendingAdoptions(ctx)
	for _, a := range pending {
		if now.Sub(a.Claimed) < after {
			continue
		}
		if err = f.Adopter.Adopt(ctx, a.ID, a.Owner); err == nil {
			err = f.Pools.Adopted(ctx, a.ID)
		}
		if err != nil {
			return err
		}
		f.log().Debug("workspace: warm pool: a claimed member handed to its owner", "id", a.ID, "owner", a.Owner)
	}
	return err
}

// canPool says why t cannot have members now, or nil.
func (f *PoolFiller) canPool(t workspace.Template) error {
	if err := t.PoolReady(); err != nil {
		return err
	}
	if t.Files != "" && f.Files == nil {
		return errors.New("the template has files and this server's storage cannot copy them")
	}
	return nil
}

// prepare makes n members of t, each with its copy of t's files.
func (f *PoolFiller) prepare(ctx context.Context, t workspace.Template, n int) ([]workspace.NewWorkspace, error) {
	out := make([]workspace.NewWorkspace, 0, max(n, 0))
	for range n {
		id, err := uuid.NewV7()
		if err != nil {
			return out, err
		}
		m, err := t.PoolMember(id.String())
		if err != nil {
			return out, err
		}
		if t.Files != "" {
			m.ArchiveKey = provider.ArchiveKey(m.ID, "template")
			if err := f.Files.CopyArchive(ctx, t.Files, m.ArchiveKey); err != nil {
				return out, err
			}
		}
		out = append(out, m)
	}
	return out, nil
}

func (f *PoolFiller) dropFiles(ctx context.Context, unused []workspace.NewWorkspace) {
	for _, m := range unused {
		if m.ArchiveKey == "" || f.Drop == nil {
			continue
		}
		if err := f.Drop(context.WithoutCancel(ctx), m.ArchiveKey); err != nil {
			f.log().Warn("workspace: warm pool: removing an unused copy", "key", m.ArchiveKey, "err", err)
		}
	}
}

func (f *PoolFiller) announce(ctx context.Context, name string, r store.Refilled) {
	if len(r.Created) > 0 || len(r.Drained) > 0 {
		f.log().Info("workspace: warm pool refilled", "template", name, "added", len(r.Created), "drained", len(r.Drained))
	}
	if f.Hints == nil {
		return
	}
	// New members go ahead of bulk work (a night's convergence of 100,000
	// workspaces): a pool is there for the next user's create. Drained
	// ones can wait their turn.
	urgent := urgency.Hints{Bus: f.Hints}
	for _, id := range r.Created {
		if err := urgent.Publish(urgency.Mark(ctx), hints.ChanWorkspace, id); err != nil {
			f.log().Warn("workspace: warm pool: hint", "id", id, "err", err)
		}
	}
	for _, id := range r.Drained {
		if err := f.Hints.Publish(ctx, hints.ChanWorkspace, id); err != nil {
			f.log().Warn("workspace: warm pool: hint", "id", id, "err", err)
		}
	}
}
