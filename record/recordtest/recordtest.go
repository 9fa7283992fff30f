// Package recordtest makes random record data for tests of the packages that
// sort or check records (dsort, extsort, the CLI). It sits above record, not in
// internal/testutil: internal/ holds only the ground floor, which imports
// nothing of the module above it (codecheck's internalfloor rule).
//
// The files: recordtest.go (this comment, [Options] and [Random], n random
// records, binary or ASCII, optionally skewed towards one hot key). Write the
// result to a file with testutil.WriteRecords.
package recordtest

import (
	"math/rand/v2"

	"github.com/gantryhq/gantry/record"
)

// Options shapes Random's output. The zero value gives binary records with
// uniformly random keys.
type Options struct {
	// ASCII makes every byte printable and ends each record with CR LF, as
	// gensort -a does.
	ASCII bool
	// HotKey, when set, is copied over the start of about HotShare of the
	// records: a skewed input with many equal keys.
	HotKey   []byte
	HotShare float64
}

// Random returns n random records drawn from rng. For one rng state and
// options the output is always the same.
func Random(rng *rand.Rand, n int, o Options) []byte {
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
