package taskq

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The stored message of a task comes in two formats:
//
//   - format 1 (this release on): the byte 0x01, the type (which holds no
//     '{'), a JSON object with short keys holding only what cannot be
//     derived (no id, no queue: known from where it is stored; no tenant:
//     in the member; max retries only when not DefaultMaxRetries), then, if
//     the task has a payload, a NUL and the payload's raw bytes (JSON never
//     holds a raw NUL). A later format starts with another byte.
//   - format 0 (earlier releases): a JSON object with long keys (message),
//     the payload base64 inside it. Still read, never written.
//
// Lua edits format 1 in one place: lib.lua's flush_group makes a batch's
// message from its first member's (keys b, g, e).

// compact is format 1's JSON object.
type compact struct {
	MaxRetries  *int              `json:"r,omitempty"` // nil: DefaultMaxRetries
	TimeoutMS   int64             `json:"o,omitempty"`
	RetentionMS int64             `json:"k,omitempty"`
	DeadlineMS  int64             `json:"d,omitempty"`
	EnqueuedAt  int64             `json:"e,omitempty"`
	Headers     map[string]string `json:"h,omitempty"`
	Workflow    string            `json:"w,omitempty"`
	Parents     []string          `json:"p,omitempty"`
	Batch       []string          `json:"b,omitempty"`
	Group       string            `json:"g,omitempty"`
}

const formatCompact = 1

// encodeMessage is m in format 1 (m's ID, Queue and Tenant are not stored).
func encodeMessage(m *message) ([]byte, error) {
	c := compact{TimeoutMS: m.TimeoutMS, RetentionMS: m.RetentionMS, DeadlineMS: m.DeadlineMS,
		EnqueuedAt: m.EnqueuedAt, Headers: m.Headers, Workflow: m.Workflow, Parents: m.Parents, Batch: m.Batch, Group: m.Group}
	if m.MaxRetries != DefaultMaxRetries {
		c.MaxRetries = &m.MaxRetries
	}
	j, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 1+len(m.Type)+len(j)+1+len(m.Payload))
	b = append(append(append(b, formatCompact), m.Type...), j...)
	if len(m.Payload) > 0 {
		b = append(append(b, 0), m.Payload...)
	}
	return b, nil
}

// parseMessage reads a stored message of either format; legacy is true for
// format 0, whose id and queue fields the caller may check.
func parseMessage(b []byte) (m *message, legacy bool, err error) {
	if len(b) > 0 && b[0] == formatCompact {
		return parseCompact(b[1:])
	}
	m = &message{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, true, fmt.Errorf("bad JSON: %v", err)
	}
	return m, true, nil
}

func parseCompact(b []byte) (*message, bool, error) {
	i := bytes.IndexByte(b, '{')
	if i < 0 {
		return nil, false, fmt.Errorf("no JSON object after the type")
	}
	j, payload, hasPayload := bytes.Cut(b[i:], []byte{0})
	var c compact
	if !parseFlat(j, &c) {
		c = compact{}
		if err := json.Unmarshal(j, &c); err != nil {
			return nil, false, fmt.Errorf("bad JSON: %v", err)
		}
	}
	m := &message{Type: string(b[:i]), MaxRetries: DefaultMaxRetries, TimeoutMS: c.TimeoutMS, RetentionMS: c.RetentionMS, DeadlineMS: c.DeadlineMS,
		EnqueuedAt: c.EnqueuedAt, Headers: c.Headers, Workflow: c.Workflow, Parents: c.Parents, Batch: c.Batch, Group: c.Group}
	if c.MaxRetries != nil {
		m.MaxRetries = *c.MaxRetries
	}
	if hasPayload {
		m.Payload = payload
	}
	return m, false, nil
}

// parseFlat reads j into c when j is what encodeMessage writes for most
// tasks: an object of only the integer keys (r, o, k, d, e), no spaces,
// integers of at most 18 digits; false for anything else (the caller
// then decodes j with encoding/json, whose reading of such an object this
// one equals: a key given twice keeps its last value). It spares the
// worker's hot path encoding/json's reflection (an eighth of the CLI
// worker's CPU on no-op tasks).
func parseFlat(j []byte, c *compact) bool {
	if len(j) < 2 || j[0] != '{' {
		return false
	}
	if len(j) == 2 {
		return j[1] == '}'
	}
	for i := 1; ; {
		// "k":
		if i+4 > len(j) || j[i] != '"' || j[i+2] != '"' || j[i+3] != ':' {
			return false
		}
		v, n, ok := flatInt(j[i+4:])
		if !ok || !c.setInt(j[i+1], v) {
			return false
		}
		i += 4 + n
		switch {
		case i == len(j)-1 && j[i] == '}':
			return true
		case i < len(j) && j[i] == ',':
			i++
		default:
			return false
		}
	}
}

// setInt sets c's integer field of key to v; false for another key.
func (c *compact) setInt(key byte, v int64) bool {
	switch key {
	case 'r':
		r := int(v)
		c.MaxRetries = &r
	case 'o':
		c.TimeoutMS = v
	case 'k':
		c.RetentionMS = v
	case 'd':
		c.DeadlineMS = v
	case 'e':
		c.EnqueuedAt = v
	default:
		return false
	}
	return true
}

// flatInt reads a JSON integer (no fraction, no exponent, at most 18
// digits) at the start of b: its value and length.
func flatInt(b []byte) (v int64, n int, ok bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		n = 1
	}
	start := n
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		v = v*10 + int64(b[n]-'0')
		n++
	}
	digits := n - start
	if digits == 0 || digits > 18 || (digits > 1 && b[start] == '0') {
		return 0, 0, false
	}
	if n < len(b) && (b[n] == '.' || b[n] == 'e' || b[n] == 'E') {
		return 0, 0, false
	}
	if neg {
		v = -v
	}
	return v, n, true
}
