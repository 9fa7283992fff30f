package store

import (
	"sync"

	"github.com/gantryhq/gantry/workspace"
)

// Box names a mailbox of handed rows (Store.Hand).
type Box int

const (
	// ToMonitor holds rows the reconciler leaves for the monitor it hints
	// after an executed operation.
	ToMonitor Box = iota
	// ToReconciler holds rows the monitor leaves after writing an
	// observation, and the rows the reconciler leaves itself after a
	// completion, for the step its hint causes.
	ToReconciler
	nBoxes
)

// maxHanded bounds each box: a row is taken or dropped by the next step or
// observation of its workspace, so the bound is only reached if that never
// comes; then the box is emptied (a handed row only saves a read).
const maxHanded = 1 << 18

// handoff is the mailboxes of rows handed between the components of one
// process that share the store. A handed row is the row as the component
// that wrote it last knew it, not a read: whoever takes one must treat it
// as possibly stale (a write whose compare-and-set covers what it decided
// from, or a read before deciding to do nothing).
type handoff struct {
	// mu protects boxes.
	mu    sync.Mutex
	boxes [nBoxes]map[string]workspace.Workspace
}

// Hand leaves w in box for the next Take of its id in this process (the
// row a hint is about to announce: its receiver may skip the read).
// A later Hand of the same id replaces it.
func (s *Store) Hand(box Box, w workspace.Workspace) {
	h := &s.handed
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.boxes[box]
	if m == nil || len(m) >= maxHanded {
		m = map[string]workspace.Workspace{}
		h.boxes[box] = m
	}
	m[w.ID] = w
}

// Take removes and returns the row handed in box for id, if any. It is a
// hint of what the row holds, never a read (see handoff).
func (s *Store) Take(box Box, id string) (workspace.Workspace, bool) {
	h := &s.handed
	h.mu.Lock()
	defer h.mu.Unlock()
	w, ok := h.boxes[box][id]
	if ok {
		delete(h.boxes[box], id)
	}
	return w, ok
}

// Drop removes the row handed in box for id, if any: its receiver acts on
// a row of its own.
func (s *Store) Drop(box Box, id string) {
	h := &s.handed
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.boxes[box], id)
}
