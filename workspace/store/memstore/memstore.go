// Package memstore is an in-memory workspace store for tests: the same
// methods and the same compare-and-set conditions as store.Store, on a map
// under one mutex. Times are kept at millisecond resolution, as the SQL
// stores keep them. The conformance test (TestMatchesTheDatabases in
// memstore_test.go, driving diff_test.go) checks it against SQLite and
// Postgres, so a reconciler test that passes on it means what it would on a
// database. memstore.go holds the Store and its reads, writes.go its writes.
package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/store"
)

// row is a workspace plus the columns only the TTL manager reads.
type row struct {
	w            workspace.Workspace
	version      int64      // desired_version
	lastActivity *time.Time // last_activity_at
}

// Store is an in-memory store. The zero value is not usable; call New.
type Store struct {
	// mu protects rows.
	mu   sync.Mutex
	rows map[string]*row
}

// New returns an empty store.
func New() *Store { return &Store{rows: map[string]*row{}} }

var (
	_ store.DesiredWriter = (*Store)(nil)
)

func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() }

func msPtr(t time.Time) *time.Time { v := ms(t); return &v }

// snapshot copies a row so callers never share its pointers.
func snapshot(r *row) workspace.Workspace {
	w := r.w
	if w.ErrorInfo != nil {
		info := *w.ErrorInfo
		w.ErrorInfo = &info
	}
	return w
}

func copyInfo(info *workspace.ErrorInfo) *workspace.ErrorInfo {
	if info == nil {
		return nil
	}
	c := *info
	return &c
}

// with runs fn on id's row under the lock; fn reports whether it wrote.
func (s *Store) with(id string, fn func(r *row) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[id]
	return ok && fn(r)
}

// Create inserts a new workspace (observed PENDING, no archive).
func (s *Store) Create(_ context.Context, n workspace.NewWorkspace, now time.Time) (workspace.Workspace, error) {
	if err := n.Validate(); err != nil {
		return workspace.Workspace{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return workspace.Workspace{}, err
	}
	if n.ID != "" {
		if id, err = uuid.Parse(n.ID); err != nil {
			return workspace.Workspace{}, fmt.Errorf("%w: workspace id %q: %v", workspace.ErrBadInput, n.ID, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows {
		if r.w.Name == n.Name && r.w.Owner == n.Owner {
			return workspace.Workspace{}, fmt.Errorf("%w: %q", workspace.ErrNameTaken, n.Name)
		}
	}
	r := &row{w: workspace.Workspace{ID: id.String(), Name: n.Name, Owner: n.Owner, Image: n.Image, Command: n.Command,
		Spec: n.Spec, DesiredState: n.Desired, ObservedStatus: workspace.Pending, Operation: workspace.OpNone,
		ArchiveKey: n.ArchiveKey, CreatedAt: ms(now), UpdatedAt: ms(now)}}
	s.rows[r.w.ID] = r
	return snapshot(r), nil
}

func (s *Store) lookupLocked(id string) (*row, error) {
	if r, ok := s.rows[id]; ok {
		return r, nil
	}
	var found *row
	for _, r := range s.rows {
		if r.w.Name == id {
			if found != nil {
				return nil, fmt.Errorf("%w: several owners have a workspace named %q; use its id", workspace.ErrConflict, id)
			}
			found = r
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: %q", workspace.ErrNotFound, id)
	}
	return found, nil
}

// Get reads one workspace by id (or, failing that, by name).
func (s *Store) Get(_ context.Context, id string) (workspace.Workspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.lookupLocked(id)
	if err != nil {
		return workspace.Workspace{}, err
	}
	return snapshot(r), nil
}

func (s *Store) filter(keep func(r *row) bool) []workspace.Workspace {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []workspace.Workspace
	for _, r := range s.rows {
		if keep(r) {
			out = append(out, snapshot(r))
		}
	}
	slices.SortFunc(out, func(a, b workspace.Workspace) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// List reads every workspace, oldest first.
// ListStates is List (store.Store's leaves the spec out).
func (s *Store) ListStates(ctx context.Context) ([]workspace.Workspace, error) { return s.List(ctx) }

func (s *Store) List(context.Context) ([]workspace.Workspace, error) {
	return s.filter(func(*row) bool { return true }), nil
}

// ListActionable: an operation in flight, or desired ≠ observed outside
// ERROR (DELETED acts even on ERROR).
func (s *Store) ListActionable(context.Context) ([]workspace.Workspace, error) {
	return s.filter(actionable), nil
}

// ListActionableIDs is ListActionable's ids.
func (s *Store) ListActionableIDs(context.Context) ([]string, error) {
	var ids []string
	for _, w := range s.filter(actionable) {
		ids = append(ids, w.ID)
	}
	return ids, nil
}

func actionable(r *row) bool {
	w := r.w
	return w.Operation != workspace.OpNone || (w.DesiredState != w.ObservedStatus &&
		(w.ObservedStatus != workspace.Error || w.DesiredState == workspace.Deleted)) ||
		(w.RestartPending && w.ObservedStatus == workspace.Running && w.DesiredState == workspace.Running)
}
