package live

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/gantryhq/gantry/workspace"
)

// View is what an event tells about a workspace: what the page shows and
// nothing of its spec (image, command, environment, limits). The JSON
// names are the workspace's own, so a client may decode a View into a
// workspace.Workspace. Its size does not depend on what a user put in the
// spec: an event costs every subscriber a few hundred bytes, however big
// the workspace's command (up to the API's 1 MiB body).
type View struct {
	ID             string              `json:"id"`
	Name           string              `json:"name"`
	Owner          string              `json:"owner"`
	DesiredState   workspace.Status    `json:"desired_state"`
	ObservedStatus workspace.Status    `json:"observed_status"`
	ObservedAt     *time.Time          `json:"observed_at,omitempty"`
	Operation      workspace.Operation `json:"operation"`
	ArchiveKey     string              `json:"archive_key,omitempty"`
	ErrorCount     int                 `json:"error_count"`
	ErrorInfo      *ErrorSummary       `json:"error_info"`
	CreatedAt      time.Time           `json:"created_at"`
	UpdatedAt      time.Time           `json:"updated_at"`
}

// ErrorSummary is a workspace's error info as events carry it: without
// the command's output, and LastError cut to MaxLastError bytes.
type ErrorSummary struct {
	Reason     string              `json:"reason"`
	Operation  workspace.Operation `json:"operation"`
	IsTerminal bool                `json:"is_terminal"`
	ErrorCount int                 `json:"error_count"`
	LastError  string              `json:"last_error,omitempty"`
	ExitStatus string              `json:"exit_status,omitempty"`
	OccurredAt time.Time           `json:"occurred_at"`
}

// MaxLastError bounds ErrorSummary.LastError (bytes, before the "…" that
// marks a cut); GET /v1/workspaces/{id} has the whole error.
const MaxLastError = 512

// ViewOf is w as events show it.
func ViewOf(w workspace.Workspace) View {
	v := View{ID: w.ID, Name: w.Name, Owner: w.Owner, DesiredState: w.DesiredState, ObservedStatus: w.ObservedStatus,
		ObservedAt: w.ObservedAt, Operation: w.Operation, ArchiveKey: w.ArchiveKey, ErrorCount: w.ErrorCount,
		CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt}
	if e := w.ErrorInfo; e != nil {
		v.ErrorInfo = &ErrorSummary{Reason: e.Reason, Operation: e.Operation, IsTerminal: e.IsTerminal, ErrorCount: e.ErrorCount,
			LastError: cut(e.LastError, MaxLastError), ExitStatus: cut(e.ExitStatus, MaxLastError), OccurredAt: e.OccurredAt}
	}
	return v
}

// cut returns s if it has at most n bytes, else its first n bytes or
// fewer (never half a UTF-8 sequence) and "…".
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// changed says whether b differs from a in anything a user sees (times
// alone are no change: they ride along with the next one).
func changed(a, b View) bool {
	if a.ObservedStatus != b.ObservedStatus || a.DesiredState != b.DesiredState || a.Operation != b.Operation ||
		a.ErrorCount != b.ErrorCount || a.ArchiveKey != b.ArchiveKey || a.Name != b.Name || (a.ErrorInfo == nil) != (b.ErrorInfo == nil) {
		return true
	}
	return a.ErrorInfo != nil && *a.ErrorInfo != *b.ErrorInfo
}

// entry is one workspace as subscribers were last told: its view and the
// JSON of its event after the seq, encoded once for every subscriber.
// An entry is never changed once made (a change makes a new one), so
// subscribers read it without the hub's lock.
type entry struct {
	view View
	tail []byte // what follows `{"seq":N` in a "state" event's data
	gen  uint64 // the hub's resync that last saw the row (Hub.gen; under Hub.mu)
}

func newEntry(v View) *entry {
	return &entry{view: v, tail: eventTail(Event{Type: "state", Workspace: &v, ID: v.ID})}
}

// event is e's "state" event at seq.
func (e *entry) event(seq uint64) Event {
	return Event{Seq: seq, Type: "state", Workspace: &e.view, ID: e.view.ID, Owner: e.view.Owner, tail: e.tail}
}

// seqZero is how an Event's JSON starts when its Seq is 0.
const seqZero = `{"seq":0`

// eventTail is e's JSON after `{"seq":N`: the part every subscriber shares.
func eventTail(e Event) []byte {
	e.Seq = 0
	b, _ := json.Marshal(e)
	return b[len(seqZero):]
}
