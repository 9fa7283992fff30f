package testutil

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantryhq/gantry/record"
)

// RecordOptions shapes RandomRecords' output. The zero value gives binary
// records with uniformly random keys.
type RecordOptions struct {
	// ASCII makes every byte printable and ends each record with CR LF, as
	// gensort -a does.
	ASCII bool
	// HotKey, when set, is copied over the start of about HotShare of the
	// records: a skewed input with many equal keys.
	HotKey   []byte
	HotShare float64
}

// RandomRecords returns n random records drawn from rng. For one rng
// state and options the output is always the same.
func RandomRecords(rng *rand.Rand, n int, o RecordOptions) []byte {
	buf := make([]byte, n*record.Size)
	for i := range n {
		rec := buf[i*record.Size : (i+1)*record.Size]
		for j := range rec {
			if o.ASCII {
				rec[j] = byte(' ' + rng.IntN(95))
			} else {
				rec[j] = byte(rng.Uint32())
			}
		}
		if o.ASCII {
			rec[record.Size-2], rec[record.Size-1] = '\r', '\n'
		}
		if o.HotKey != nil && rng.Float64() < o.HotShare {
			copy(rec, o.HotKey)
		}
	}
	return buf
}

// WriteRecords writes data to path (0644), creating its directory; it
// fails the test on error.
func WriteRecords(tb testing.TB, path string, data []byte) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}
