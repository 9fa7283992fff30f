package record

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"runtime"
	"sync"
)

// ErrPartialRecord reports input whose length is not a whole number of
// records. The concrete error is a *PartialRecordError naming the file.
var ErrPartialRecord = errors.New("record: partial record found at end")

// PartialRecordError is a file (or stream) whose size is not a multiple of
// Size.
type PartialRecordError struct {
	Path string
	Size int64 // bytes in the file (or read from the stream)
}

func (e *PartialRecordError) Error() string {
	whole := "records"
	if e.Size/Size == 1 {
		whole = "record"
	}
	return fmt.Sprintf("%s: partial record found at end: %d bytes is %d whole %d-byte %s and %d bytes over",
		e.Path, e.Size, e.Size/Size, Size, whole, e.Size%Size)
}

// Is makes errors.Is(err, ErrPartialRecord) true.
func (e *PartialRecordError) Is(target error) bool { return target == ErrPartialRecord }

// ValidateOptions tunes Validate. The zero value checks order and sums
// checksums with every core.
type ValidateOptions struct {
	// Workers is how many goroutines validate chunks of the sequence
	// (0 = GOMAXPROCS).
	Workers int
	// ChecksumOnly counts records and sums checksums without checking order,
	// for unsorted inputs (compare an input's checksum with a sort's output).
	ChecksumOnly bool
	// BlockSize is the size of each read in bytes (0 = 4 MiB), rounded down
	// to a whole number of records.
	BlockSize int
	// Progress, if not nil, is called with the bytes validated after each
	// read. It may be called from several goroutines at once.
	Progress func(n int64)
}

const defaultBlockSize = 4 << 20

// Validate reads the files as ONE sequence of records, in the order given,
// and summarizes it as valsort does: records, duplicate keys (equal to the
// previous key), unordered records (key below the previous one) and the
// 0-based index of the first, first and last key, and the checksum.
// Directories are expanded with ExpandPaths first (ExpandInputPaths with
// ChecksumOnly, since an unsorted input set's files may have any names).
//
// Regular files are cut into one chunk per worker; each chunk is validated on
// its own and the chunk summaries are combined in order, which also checks
// the seams between chunks and between files. Other files (pipes, devices)
// are read in one pass.
//
// An empty sequence gives a Summary with Records == 0 and no error: valsort
// refuses it, and callers decide. A file whose size is not a multiple of
// Size gives a *PartialRecordError; unreadable input gives its I/O error.
func Validate(ctx context.Context, paths []string, opt ValidateOptions) (Summary, error) {
	expand := ExpandPaths
	if opt.ChecksumOnly {
		expand = ExpandInputPaths
	}
	files, err := expand(paths)
	if err != nil {
		return Summary{}, err
	}
	opt = opt.withDefaults()

	segs := make([]segment, 0, len(files))
	var total int64
	streaming := false
	for _, p := range files {
		st, err := os.Stat(p)
		if err != nil {
			return Summary{}, err
		}
		if st.IsDir() {
			return Summary{}, fmt.Errorf("record: %s is a directory inside a directory; only partition.<n> files may be there", p)
		}
		if !st.Mode().IsRegular() {
			streaming = true
			continue
		}
		if st.Size()%Size != 0 {
			return Summary{}, &PartialRecordError{Path: p, Size: st.Size()}
		}
		segs = append(segs, segment{path: p, start: total / Size, records: st.Size() / Size})
		total += st.Size()
	}
	if streaming {
		return validateStream(ctx, files, opt)
	}
	return validateChunks(ctx, segs, total/Size, opt)
}

// withDefaults fills in opt's zero values: GOMAXPROCS workers, the default
// block size, and a block size that is a whole number of records.
func (opt ValidateOptions) withDefaults() ValidateOptions {
	if opt.Workers <= 0 {
		opt.Workers = runtime.GOMAXPROCS(0)
	}
	if opt.BlockSize <= 0 {
		opt.BlockSize = defaultBlockSize
	}
	opt.BlockSize = max(Size, opt.BlockSize/Size*Size)
	return opt
}

// segment is one file's place in the sequence, in records.
type segment struct {
	path    string
	start   int64 // index of the file's first record in the whole sequence
	records int64
}

// scanner accumulates one contiguous run of records into a Summary.
type scanner struct {
	sum          Summary
	checksumOnly bool
	prevHi       uint64
	prevLo       uint16
}

func newScanner(checksumOnly bool) *scanner {
	return &scanner{sum: Summary{FirstUnordered: -1, ChecksumOnly: checksumOnly}, checksumOnly: checksumOnly}
}

// feed validates the whole records in buf (len a multiple of Size), which
// follow the records fed before.
func (s *scanner) feed(buf []byte) {
	if len(buf) == 0 {
		return
	}
	if s.sum.Records == 0 {
		s.sum.FirstKey = append([]byte(nil), buf[:KeySize]...)
		s.prevHi, s.prevLo = keyParts(buf)
	}
	var crcs uint64 // < 2^32 per record: a 4 MiB buffer cannot overflow it
	for off := 0; off+Size <= len(buf); off += Size {
		rec := buf[off : off+Size : off+Size]
		crcs += uint64(crc32.ChecksumIEEE(rec))
	}
	s.sum.Checksum.addUint64(crcs)

	n := uint64(len(buf) / Size)
	if !s.checksumOnly {
		start := 0
		if s.sum.Records == 0 {
			start = Size // the first record has no predecessor
		}
		idx := s.sum.Records + uint64(start/Size)
		ph, pl := s.prevHi, s.prevLo
		var dups, unord uint64
		for off := start; off+Size <= len(buf); off += Size {
			h, l := keyParts(buf[off : off+KeySize])
			switch {
			case h == ph && l == pl:
				dups++
			case h < ph || (h == ph && l < pl):
				if unord == 0 && s.sum.Unordered == 0 {
					s.sum.FirstUnordered = int64(idx)
				}
				unord++
			}
			ph, pl = h, l
			idx++
		}
		s.sum.Duplicates += dups
		s.sum.Unordered += unord
	}
	last := buf[len(buf)-Size:]
	s.prevHi, s.prevLo = keyParts(last)
	s.sum.Records += n
	if s.sum.LastKey == nil {
		s.sum.LastKey = make([]byte, KeySize)
	}
	copy(s.sum.LastKey, last[:KeySize])
}

// validateChunks validates regular files in parallel: the sequence is cut
// into one contiguous run of records per worker.
func validateChunks(ctx context.Context, segs []segment, records int64, opt ValidateOptions) (Summary, error) {
	workers := int64(opt.Workers)
	// Chunks below a few blocks are not worth a goroutine.
	if minChunk := int64(opt.BlockSize / Size); records/workers < minChunk {
		workers = max(1, records/minChunk)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	parts := make([]Summary, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := records*w/workers, records*(w+1)/workers
		wg.Go(func() {
			parts[w], errs[w] = validateRange(ctx, segs, lo, hi, opt)
			if errs[w] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	// Report the first real failure, not a cancellation it caused elsewhere.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return Summary{}, err
		}
	}
	for _, err := range errs {
		if err != nil {
			return Summary{}, err
		}
	}
	return Combine(parts)
}

// validateRange validates records [lo, hi) of the sequence.
func validateRange(ctx context.Context, segs []segment, lo, hi int64, opt ValidateOptions) (Summary, error) {
	sc := newScanner(opt.ChecksumOnly)
	buf := make([]byte, opt.BlockSize)
	for _, sg := range segs {
		a, b := max(lo, sg.start), min(hi, sg.start+sg.records)
		if a >= b {
			continue
		}
		if err := scanFileRange(ctx, sc, sg.path, (a-sg.start)*Size, (b-sg.start)*Size, buf, opt.Progress); err != nil {
			return Summary{}, err
		}
	}
	return sc.sum, nil
}

func scanFileRange(ctx context.Context, sc *scanner, path string, from, to int64, buf []byte, progress func(int64)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for off := from; off < to; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := int(min(int64(len(buf)), to-off))
		m, err := f.ReadAt(buf[:n], off)
		if m < n {
			if err == nil || err == io.EOF {
				err = fmt.Errorf("%s: file shrank while being read (%d bytes at offset %d, expected %d)", path, m, off, n)
			}
			return fmt.Errorf("record: read %w", err)
		}
		sc.feed(buf[:n])
		if progress != nil {
			progress(int64(n))
		}
		off += int64(n)
	}
	return nil
}

// ValidateReader reads r to its end as one sequence of records and
// summarizes it as Validate does, in a single pass (opt.Workers is not
// used): the form for a stream, such as an object read from a store, whose
// summaries the caller combines in order with Combine. name is r's name in
// errors. A stream whose length is not a multiple of Size gives a
// *PartialRecordError naming it; a read error is returned wrapped, with the
// name.
func ValidateReader(ctx context.Context, name string, r io.Reader, opt ValidateOptions) (Summary, error) {
	opt = opt.withDefaults()
	sc := newScanner(opt.ChecksumOnly)
	if err := scanStream(ctx, sc, name, r, make([]byte, opt.BlockSize), opt.Progress); err != nil {
		return Summary{}, err
	}
	return sc.sum, nil
}

// scanStream feeds sc the records read from r until its end; name is r's
// name in errors.
func scanStream(ctx context.Context, sc *scanner, name string, r io.Reader, buf []byte, progress func(int64)) error {
	var size int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, rerr := io.ReadFull(r, buf)
		size += int64(n)
		whole := n / Size * Size
		sc.feed(buf[:whole])
		if progress != nil && n > 0 {
			progress(int64(n))
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("record: read %s: %w", name, rerr)
		}
	}
	if size%Size != 0 {
		return &PartialRecordError{Path: name, Size: size}
	}
	return nil
}

// validateStream validates the files one after another in a single pass; it
// serves inputs that are not regular files, and is the reference the tests
// compare the chunked path with.
func validateStream(ctx context.Context, files []string, opt ValidateOptions) (Summary, error) {
	sc := newScanner(opt.ChecksumOnly)
	buf := make([]byte, opt.BlockSize)
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return Summary{}, err
		}
		err = scanStream(ctx, sc, p, f, buf, opt.Progress)
		f.Close()
		if err != nil {
			return Summary{}, err
		}
	}
	return sc.sum, nil
}
