package taskq

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestMessageRoundTrip: a message encoded in format 1 decodes to the same
// task (id and queue from where it is stored), whatever its payload bytes,
// with max retries 0 kept apart from the default; the bytes hold no id, no
// queue and no base64.
func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []message{
		{Type: "noop", MaxRetries: DefaultMaxRetries, EnqueuedAt: 1_700_000_000_000},
		{Type: "email", Payload: []byte{0, 1, '{', 0, 0xff}, MaxRetries: 0, TimeoutMS: 5, RetentionMS: 6, DeadlineMS: 7, EnqueuedAt: 8,
			Headers: map[string]string{"trace": "a\x00b"}, Workflow: "wf", Parents: []string{"p1", "p2"}, Batch: []string{"b1"}, Group: "g"},
		{Type: "json", Payload: []byte(`{"to":"x"}`), MaxRetries: 3},
	} {
		b, err := encodeMessage(&m)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != formatCompact || bytes.Contains(b, []byte("queue-x")) || bytes.Contains(b, []byte("id-x")) {
			t.Errorf("%q: want format 1 without id and queue", b)
		}
		got, err := decodeMessage("id-x", "queue-x", b)
		if err != nil {
			t.Fatalf("decode %q: %v", b, err)
		}
		want := m
		want.ID, want.Queue = "id-x", "queue-x"
		if len(want.Payload) == 0 {
			want.Payload = nil
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("decode %q:\n got %+v\nwant %+v", b, *got, want)
		}
	}
	b, _ := encodeMessage(&message{Type: "noop", MaxRetries: DefaultMaxRetries, EnqueuedAt: 1_700_000_000_000})
	if string(b) != "\x01noop{\"e\":1700000000000}" {
		t.Errorf("a no-op task is stored as %q", b)
	}
}

// TestDecodeEarlierFormat: a message of an earlier release (long-key JSON,
// base64 payload) decodes, and its id and queue fields must match where
// it is stored.
func TestDecodeEarlierFormat(t *testing.T) {
	old, _ := json.Marshal(message{ID: "i", Type: "x", Payload: []byte{0, 1}, Queue: "q", Tenant: "t", MaxRetries: 0, EnqueuedAt: 5})
	m, err := decodeMessage("i", "q", old)
	if err != nil || m.Type != "x" || !bytes.Equal(m.Payload, []byte{0, 1}) || m.MaxRetries != 0 || m.Tenant != "t" || m.EnqueuedAt != 5 {
		t.Fatalf("decode %s: %+v, %v", old, m, err)
	}
	for _, c := range []struct{ id, q, why string }{{"other", "q", `field "id"`}, {"i", "other", `field "queue"`}} {
		if _, err := decodeMessage(c.id, c.q, old); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("stored as %s in %s: %v, want a malformed %s", c.id, c.q, err, c.why)
		}
	}
	for _, bad := range []string{"\x01noop", "\x01{}", "\x01x{\"r\":-1}", "\x01x{bad"} {
		if _, err := decodeMessage("i", "q", []byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "malformed task") {
			t.Errorf("decode %q: %v, want malformed", bad, err)
		}
	}
}
