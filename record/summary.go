package record

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"

	"github.com/gantryhq/gantry/internal/fsutil"
)

// Summary is valsort's result for a sequence of records. It is also the JSON
// document `gantry valsort -o` writes and `gantry valsort -s` reads, so a
// multi-machine output can be validated piece by piece and the pieces
// combined without moving data.
//
// Invariants (Check enforces them on everything parsed or combined):
// Records == 0 means every other field is zero/empty and FirstUnordered is
// -1; otherwise both keys hold KeySize bytes, Duplicates+Unordered <=
// Records-1, FirstUnordered is -1 exactly when Unordered is 0 and otherwise
// an index in [1, Records-1].
type Summary struct {
	Records    uint64 // records in the sequence
	Duplicates uint64 // records whose key equals the previous record's
	Unordered  uint64 // records whose key is below the previous record's
	// FirstUnordered is the 0-based index of the first unordered record, or
	// -1 if there is none (valsort prints it as "First unordered record is
	// record N").
	FirstUnordered int64
	Checksum       Checksum
	FirstKey       []byte // key of the first record (hex in JSON)
	LastKey        []byte // key of the last record (hex in JSON)
	// ChecksumOnly marks a summary made without checking order
	// (--checksum-only): Duplicates and Unordered are not counted.
	ChecksumOnly bool
}

// Sorted reports whether the summarized records are in order.
func (s Summary) Sorted() bool { return s.Unordered == 0 && !s.ChecksumOnly }

// ErrBadSummary reports a summary that breaks Summary's invariants.
var ErrBadSummary = errors.New("record: invalid summary")

// Check returns an error wrapping ErrBadSummary if s breaks Summary's
// invariants (a hand-edited or corrupted summary file).
func (s Summary) Check() error {
	if s.Records == 0 {
		return s.checkEmpty()
	}
	for _, check := range []func() string{s.checkKeyLengths, s.checkCounts, s.checkFirstUnordered, s.checkKeyOrder, s.checkChecksum} {
		if msg := check(); msg != "" {
			return fmt.Errorf("%w: %s", ErrBadSummary, msg)
		}
	}
	return nil
}

// checkEmpty checks a summary of 0 records: everything else zero or empty.
func (s Summary) checkEmpty() error {
	if s.Duplicates != 0 || s.Unordered != 0 || s.FirstUnordered != -1 || s.Checksum != (Checksum{}) ||
		len(s.FirstKey) != 0 || len(s.LastKey) != 0 {
		return fmt.Errorf("%w: 0 records but duplicates, unordered, first_unordered, checksum or keys set", ErrBadSummary)
	}
	return nil
}

// The checks below run on a summary of at least one record, in Check's
// order; each returns what is wrong, or "" if nothing is.

func (s Summary) checkKeyLengths() string {
	if len(s.FirstKey) != KeySize || len(s.LastKey) != KeySize {
		return fmt.Sprintf("first_key and last_key must be %d bytes (%d hex digits), got %d and %d bytes",
			KeySize, 2*KeySize, len(s.FirstKey), len(s.LastKey))
	}
	return ""
}

func (s Summary) checkCounts() string {
	if s.Duplicates > s.Records-1 || s.Unordered > s.Records-1-s.Duplicates {
		return fmt.Sprintf("%d duplicates + %d unordered is more than records-1 = %d", s.Duplicates, s.Unordered, s.Records-1)
	}
	if s.ChecksumOnly && (s.Duplicates != 0 || s.Unordered != 0) {
		return "checksum_only summary with duplicates or unordered counted"
	}
	return ""
}

func (s Summary) checkFirstUnordered() string {
	switch {
	case s.Unordered == 0 && s.FirstUnordered != -1:
		return fmt.Sprintf("first_unordered is %d but there are no unordered records (want -1)", s.FirstUnordered)
	case s.Unordered > 0 && (s.FirstUnordered < 1 || uint64(s.FirstUnordered) >= s.Records):
		return fmt.Sprintf("first_unordered %d is not a record index in [1, %d]", s.FirstUnordered, s.Records-1)
	}
	return ""
}

func (s Summary) checkKeyOrder() string {
	if s.Records == 1 && !bytes.Equal(s.FirstKey, s.LastKey) {
		return "one record but first_key != last_key"
	}
	if s.Sorted() && bytes.Compare(s.FirstKey, s.LastKey) > 0 {
		return "no unordered records but first_key > last_key"
	}
	return ""
}

func (s Summary) checkChecksum() string {
	// Each crc32 is below 2^32, so the checksum is at most Records·(2^32-1).
	hi, lo := bits.Mul64(s.Records, math.MaxUint32)
	if s.Checksum.Hi > hi || (s.Checksum.Hi == hi && s.Checksum.Lo > lo) {
		return fmt.Sprintf("checksum %s is larger than %d records of crc32 can sum to", s.Checksum, s.Records)
	}
	return ""
}

// Combine summarizes the concatenation of the sequences that parts
// summarize, in order, as valsort -s does: it adds counts and checksums and
// compares each part's first key with the previous non-empty part's last key
// (a seam where order can break or a duplicate can hide). Empty parts are
// skipped. If any part is ChecksumOnly, the result is too and order is not
// checked. Combine of no parts is the empty summary.
func Combine(parts []Summary) (Summary, error) {
	res := Summary{FirstUnordered: -1}
	var prevLast []byte
	checksumOnly := false
	for i, p := range parts {
		if err := p.Check(); err != nil {
			return Summary{}, fmt.Errorf("part %d: %w", i, err)
		}
		checksumOnly = checksumOnly || p.ChecksumOnly
	}
	for i, p := range parts {
		if p.Records == 0 {
			continue
		}
		if res.Records > math.MaxUint64-p.Records {
			return Summary{}, fmt.Errorf("%w: part %d: record count overflows", ErrBadSummary, i)
		}
		if prevLast != nil {
			switch c := bytes.Compare(prevLast, p.FirstKey); {
			case c == 0:
				res.Duplicates++
			case c > 0:
				if res.FirstUnordered < 0 {
					res.FirstUnordered = int64(res.Records)
				}
				res.Unordered++
			}
		} else {
			res.FirstKey = bytes.Clone(p.FirstKey)
		}
		if res.FirstUnordered < 0 && p.FirstUnordered >= 0 {
			res.FirstUnordered = int64(res.Records) + p.FirstUnordered
		}
		res.Records += p.Records
		res.Duplicates += p.Duplicates
		res.Unordered += p.Unordered
		res.Checksum = res.Checksum.Plus(p.Checksum)
		prevLast = p.LastKey
	}
	res.LastKey = bytes.Clone(prevLast)
	if res.Records > math.MaxInt64 {
		return Summary{}, fmt.Errorf("%w: %d records is more than gantry counts", ErrBadSummary, res.Records)
	}
	if checksumOnly {
		res.ChecksumOnly = true
		res.Duplicates, res.Unordered, res.FirstUnordered = 0, 0, -1
	}
	return res, nil
}

// Locate turns an index into a sequence made of parts with the given record
// counts into the part that holds it and the index within that part.
// ok is false if index is outside the sequence.
func Locate(counts []uint64, index int64) (part int, offset uint64, ok bool) {
	if index < 0 {
		return 0, 0, false
	}
	i := uint64(index)
	for p, n := range counts {
		if i < n {
			return p, i, true
		}
		i -= n
	}
	return 0, 0, false
}

// summaryJSON is the wire form. Pointers tell a missing field from a zero.
type summaryJSON struct {
	Records        *uint64   `json:"records"`
	Duplicates     uint64    `json:"duplicates"`
	Unordered      uint64    `json:"unordered"`
	FirstUnordered *int64    `json:"first_unordered"`
	Checksum       *Checksum `json:"checksum"`
	FirstKey       string    `json:"first_key,omitempty"`
	LastKey        string    `json:"last_key,omitempty"`
	ChecksumOnly   bool      `json:"checksum_only,omitempty"`
}

// MarshalJSON writes the summary with hex keys and the checksum in valsort's
// form, e.g. {"records":1000,…,"checksum":"1f6b0b6c5e3","first_key":"…"}.
func (s Summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(summaryJSON{
		Records:        &s.Records,
		Duplicates:     s.Duplicates,
		Unordered:      s.Unordered,
		FirstUnordered: &s.FirstUnordered,
		Checksum:       &s.Checksum,
		FirstKey:       hex.EncodeToString(s.FirstKey),
		LastKey:        hex.EncodeToString(s.LastKey),
		ChecksumOnly:   s.ChecksumOnly,
	})
}

// UnmarshalJSON reads the form MarshalJSON writes and checks the result:
// records and checksum are required, first_unordered defaults to -1.
func (s *Summary) UnmarshalJSON(b []byte) error {
	var w summaryJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Records == nil {
		return fmt.Errorf("%w: no \"records\" field", ErrBadSummary)
	}
	if w.Checksum == nil {
		return fmt.Errorf("%w: no \"checksum\" field", ErrBadSummary)
	}
	v := Summary{Records: *w.Records, Duplicates: w.Duplicates, Unordered: w.Unordered,
		FirstUnordered: -1, Checksum: *w.Checksum, ChecksumOnly: w.ChecksumOnly}
	if w.FirstUnordered != nil {
		v.FirstUnordered = *w.FirstUnordered
	}
	var err error
	if v.FirstKey, err = decodeKey("first_key", w.FirstKey); err != nil {
		return err
	}
	if v.LastKey, err = decodeKey("last_key", w.LastKey); err != nil {
		return err
	}
	if err := v.Check(); err != nil {
		return err
	}
	*s = v
	return nil
}

func decodeKey(field, h string) ([]byte, error) {
	if h == "" {
		return nil, nil
	}
	k, err := hex.DecodeString(h)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %q is not hex", ErrBadSummary, field, h)
	}
	return k, nil
}

// ParseSummaries reads the summaries in data: one JSON summary, several one
// after another (what `cat a.sum b.sum > all.sum` makes, as with valsort), or
// a JSON array of them.
func ParseSummaries(data []byte) ([]Summary, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var out []Summary
		if err := json.Unmarshal(trimmed, &out); err != nil {
			return nil, fmt.Errorf("summary array: %w", err)
		}
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var out []Summary
	for {
		var s Summary
		err := dec.Decode(&s)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("summary %d: %w", len(out)+1, err)
		}
		out = append(out, s)
	}
}

// ReadSummaryFiles reads every summary in the files, in order (see
// ParseSummaries), and says which summaries came from which file.
func ReadSummaryFiles(paths []string) (sums []Summary, from []string, err error) {
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, err
		}
		s, err := ParseSummaries(data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: not a summary file as `gantry valsort -o` writes: %w", p, err)
		}
		if len(s) == 0 {
			return nil, nil, fmt.Errorf("%s: no summaries in the file (want the JSON that `gantry valsort -o` writes)", p)
		}
		sums = append(sums, s...)
		for range s {
			from = append(from, p)
		}
	}
	return sums, from, nil
}

// WriteSummaryFile writes s as one line of JSON to path, through a temporary
// file and a rename so a reader never sees half a summary.
func WriteSummaryFile(path string, s Summary) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := fsutil.WriteFileAtomic(path, b, 0o644); err != nil {
		return fmt.Errorf("record: write summary: %w", err)
	}
	return nil
}
