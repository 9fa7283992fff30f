// Package handoff is the in-process mailbox through which the reconciler
// and the health monitor of one process leave each other the row a hint
// is about to announce, so that its receiver need not read it. The server
// makes one Mailbox and gives it to both (reconcile.Config.Handoff,
// singletons.MonitorConfig.Handoff); a component given none reads every
// row. It speaks no SQL and imports nothing of gantry but the root
// package's Workspace.
//
// A handed row is the row as the component that wrote it last knew it,
// not a read: whoever takes one must treat it as possibly stale (a write
// whose compare-and-set covers what it decided from, or a read before
// deciding to do nothing).
//
// Tour:
//
//	handoff.go  Mailbox, New; Box (ToMonitor, ToReconciler); Hand, Take, Drop
package handoff

import (
	"sync"

	"github.com/gantryhq/gantry/workspace"
)

// Box names one direction of a Mailbox.
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

// Mailbox is the boxes of rows handed between the components of one
// process. Its methods are safe for concurrent use.
type Mailbox struct {
	// mu protects boxes.
	mu    sync.Mutex
	boxes [nBoxes]map[string]workspace.Workspace
}

// New returns an empty Mailbox.
func New() *Mailbox { return &Mailbox{} }

// Hand leaves w in box for the next Take of its id (the row a hint is
// about to announce: its receiver may skip the read). A later Hand of the
// same id replaces it.
func (m *Mailbox) Hand(box Box, w workspace.Workspace) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.boxes[box]
	if b == nil || len(b) >= maxHanded {
		b = map[string]workspace.Workspace{}
		m.boxes[box] = b
	}
	b[w.ID] = w
}

// Take removes and returns the row handed in box for id, if any. It is a
// hint of what the row holds, never a read.
func (m *Mailbox) Take(box Box, id string) (workspace.Workspace, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.boxes[box][id]
	if ok {
		delete(m.boxes[box], id)
	}
	return w, ok
}

// Drop removes the row handed in box for id, if any: its receiver acts on
// a row of its own.
func (m *Mailbox) Drop(box Box, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.boxes[box], id)
}
