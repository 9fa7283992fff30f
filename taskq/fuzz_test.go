package taskq

import (
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
