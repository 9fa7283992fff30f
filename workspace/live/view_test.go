package live

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
)

// The data the hub builds from its once-encoded tail is the event's JSON.
func TestEventDataIsItsJSON(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	w := workspace.Workspace{ID: "id-1", Name: "n\"<é>", Owner: "alice", DesiredState: workspace.Running, ObservedStatus: workspace.Standby,
		Operation: workspace.OpStarting, ErrorInfo: &workspace.ErrorInfo{Reason: "Exited", LastError: "x\u2028y"}, CreatedAt: now, UpdatedAt: now}
	deleted := Event{Type: "deleted", ID: "id-1", Owner: "alice"}
	deleted.tail = eventTail(deleted)
	deleted.Seq = 42
	events := []Event{
		newEntry(ViewOf(w)).event(0),
		newEntry(ViewOf(w)).event(18446744073709551615),
		deleted,
		{Seq: 7, Type: "deleted", ID: "x"}, // no tail: Data encodes it
	}
	for _, e := range events {
		want, _ := json.Marshal(e)
		if got := e.Data(); string(got) != string(want) {
			t.Errorf("Data() = %s\nwant     %s", got, want)
		}
	}
}

func TestCut(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"aé", 2, "a…"}, // é is 2 bytes: never half of it
		{"日本", 4, "日…"},
		{"日本", 2, "…"},
	} {
		if got := cut(c.s, c.n); got != c.want {
			t.Errorf("cut(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
	long := strings.Repeat("é", MaxLastError)
	v := ViewOf(workspace.Workspace{ErrorInfo: &workspace.ErrorInfo{LastError: long, Output: long}})
	if n := len(v.ErrorInfo.LastError); n > MaxLastError+len("…") {
		t.Errorf("last_error of %d bytes, want at most %d", n, MaxLastError+len("…"))
	}
}
