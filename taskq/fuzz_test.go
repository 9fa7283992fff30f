package taskq

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeMessage: whatever bytes sit in Redis, decoding never panics,
// and it either yields a task with a type, the right id and queue, or a
// reason starting with "malformed task".
func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte(`{"id":"i","type":"noop","queue":"q","tenant":"t","max_retries":3}`))
	f.Add([]byte(`{"id":"i","queue":"q"}`))
	f.Add([]byte("\xff\x00{"))
	f.Add([]byte(`{"id":"i","type":"x","queue":"q","payload":"not base64!"}`))
	f.Add([]byte(`{"id":"i","type":"x","queue":"q","max_retries":-1}`))
	f.Add([]byte("\x01noop{\"e\":1700000000000}"))
	f.Add([]byte("\x01x{\"r\":-1}\x00payload"))
	f.Add([]byte("\x01{}"))
	f.Add([]byte("\x01x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage("i", "q", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "malformed task") {
				t.Fatalf("reason %q", err)
			}
			return
		}
		if m.Type == "" || m.ID != "i" || m.Queue != "q" || m.MaxRetries < 0 {
			t.Fatalf("accepted %+v", m)
		}
	})
}

// FuzzParseFlat: the hot path's reader of a message's JSON object accepts
// only what encoding/json reads the same way, and reads it the same.
func FuzzParseFlat(f *testing.F) {
	for _, s := range []string{`{}`, `{"e":1700000000000}`, `{"r":3,"o":100,"k":5,"d":9,"e":1}`, `{"r":-0}`,
		`{"r":0,"r":7}`, `{"e":01}`, `{"e":1.5}`, `{"e":1e3}`, `{"e":-}`, `{"e":1} `, `{"E":1}`, `{"h":{"a":"b"}}`,
		`{"e":1,}`, `{"e":123456789012345678}`, `{"e":1234567890123456789}`, `{`, `{"e"`, `{"e":`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, j []byte) {
		var got compact
		if !parseFlat(j, &got) {
			return
		}
		var want compact
		if err := json.Unmarshal(j, &want); err != nil {
			t.Fatalf("parseFlat accepted %q, encoding/json refuses it: %v", j, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: parseFlat read %+v, encoding/json %+v", j, got, want)
		}
	})
}
