package live

import (
	"context"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
)

// hookSource is a fakeSource whose States calls during(i) before it
// yields its i-th row (and during(len) after the last): what happens
// while a resync reads the table.
type hookSource struct {
	*fakeSource
	during func(i int)
}

func (s hookSource) States(ctx context.Context) iter.Seq2[workspace.Workspace, error] {
	rows := s.fakeSource.States(ctx)
	return func(yield func(workspace.Workspace, error) bool) {
		i := 0
		for w, err := range rows {
			s.during(i)
			i++
			if !yield(w, err) {
				return
			}
		}
		s.during(i)
	}
}

func (f *fakeSource) set(ws ...workspace.Workspace) {
	f.mu.Lock()
	f.ws = ws
	f.mu.Unlock()
}

func row(id string, at time.Time) workspace.Workspace {
	return workspace.Workspace{ID: id, Name: id, Owner: "alice", DesiredState: workspace.Running,
		ObservedStatus: workspace.Standby, Operation: workspace.OpStarting, UpdatedAt: at}
}

// TestResyncRacesHints: rows a hint deletes while a resync reads the table
// are not brought back by its older read, and rows a hint adds meanwhile
// are not taken for deleted because the read missed them; each ends as
// its store row is, with one deleted event for the deleted one.
func TestResyncRacesHints(t *testing.T) {
	ctx := t.Context()
	now := time.Now()
	fs := &fakeSource{}
	fs.set(row("a", now), row("b", now))
	var h *Hub
	src := hookSource{fakeSource: fs, during: func(int) {}}
	h = NewHub(HubConfig{}, src)
	h.resync(ctx)
	sub, cancel := h.Subscribe("", nil)
	defer cancel()

	src.during = func(i int) {
		if i != 1 {
			return
		}
		// After the read yielded a (and before b): a is deleted, c
		// created, each announced by a hint the hub handles at once.
		fs.set(row("b", now), row("c", now))
		h.refresh(ctx, "a")
		h.refresh(ctx, "c")
	}
	h.src = src
	fs.set(row("a", now), row("b", now)) // what the read starts from
	h.resync(ctx)

	got := map[string]bool{}
	for _, v := range h.Snapshot() {
		got[v.ID] = true
	}
	if len(got) != 2 || !got["b"] || !got["c"] {
		t.Fatalf("after the resync: %v; want b and c (a deleted meanwhile, c created meanwhile)", got)
	}
	var events []string
	for len(sub.C) > 0 {
		e := <-sub.C
		events = append(events, e.Type+" "+e.ID)
	}
	want := []string{"deleted a", "state c"}
	if len(events) != len(want) || events[0] != want[0] || events[1] != want[1] {
		t.Fatalf("events: %v; want %v", events, want)
	}
}

// TestResyncSpacing: a resync of a big table that took d is followed by
// the next no sooner than resyncSpacing·d, so reading it costs a bounded
// share of a core; a quick one, or any read of a small table (however
// slow the machine made it), keeps the configured interval.
func TestResyncSpacing(t *testing.T) {
	now := time.Now()
	big := make([]workspace.Workspace, resyncSpacedRows)
	for i := range big {
		big[i] = row(fmt.Sprint("w", i), now)
	}
	const slow = 30 * time.Millisecond
	slowRead := func(i int) {
		if i == 0 {
			<-time.After(slow) // real time: the read's duration is what is under test
		}
	}
	for _, c := range []struct {
		name    string
		rows    []workspace.Workspace
		during  func(int)
		atLeast time.Duration
		exactly bool
	}{
		{"a slow read of a big table", big, slowRead, resyncSpacing * slow, false},
		{"a quick read of a big table", big, func(int) {}, 0, false},
		{"a slow read of a small table", big[:1], slowRead, 100 * time.Millisecond, true},
	} {
		fs := &fakeSource{}
		fs.set(c.rows...)
		h := NewHub(HubConfig{ResyncInterval: 100 * time.Millisecond}, hookSource{fakeSource: fs, during: c.during})
		next := h.resync(t.Context())
		if next < max(c.atLeast, 100*time.Millisecond) || c.exactly && next != 100*time.Millisecond {
			t.Errorf("%s: next resync in %v; want the interval (100ms), or %v if longer", c.name, next, c.atLeast)
		}
	}
}
