package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sync"

	"github.com/gantryhq/gantry/internal/fsutil"
)

// genBlockRecords is how many records one worker generates per block: large
// enough that a block is one efficient write (≈1.6 MB), small enough that
// workers × 2 blocks stay a few MB.
const genBlockRecords = 16 * 1024

// ErrRange reports a record range that does not fit gensort's record numbers
// as gantry handles them (first+count must not pass 2^64).
var ErrRange = errors.New("record: record range past 2^64-1")

// CheckRange returns ErrRange (wrapped, with the numbers) if records first ..
// first+count-1 do not all fit in a uint64.
func CheckRange(first, count uint64) error {
	if count > 0 && first > math.MaxUint64-(count-1) {
		return fmt.Errorf("%w: first %d + count %d", ErrRange, first, count)
	}
	return nil
}

// GenerateFile writes count records starting at record first to path, exactly
// as `gensort [-a] [-s] -b<first> <count> <path>` would, and returns their
// checksum (what gensort -c prints).
//
// The range is cut into blocks that `workers` goroutines (0 = GOMAXPROCS)
// generate independently through the generator's skip-ahead; one writer puts
// the blocks in order, so the output is the same for any worker count.
// progress, if not nil, is called with the bytes written after each write.
//
// A regular file is written under a temporary name in the same directory and
// renamed onto path only when complete, so an interrupted run never leaves a
// partial file that looks finished. On an error or when ctx ends the partial
// file is removed. A path that exists and is not a regular file (/dev/null, a
// FIFO) is written in place.
func GenerateFile(ctx context.Context, path string, first, count uint64, opt GenOptions, workers int, progress func(n int64)) (Checksum, error) {
	if err := CheckRange(first, count); err != nil {
		return Checksum{}, err
	}
	if count > math.MaxInt64/Size {
		return Checksum{}, fmt.Errorf("record: %d records is more bytes than a file can hold", count)
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		if st.IsDir() {
			return Checksum{}, fmt.Errorf("record: %s is a directory, want a file name", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return Checksum{}, err
		}
		sum, err := generateTo(ctx, f, first, count, opt, workers, progress)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return sum, err
	}

	// gensort's fopen gives 0666 less umask; 0644 is that under the usual umask.
	var sum Checksum
	// In aligned blocks: the file is then cached in huge folios, and a sort
	// that maps it as its input maps it with huge pages (fsutil.AlignedWriter).
	err := fsutil.WriteAtomic(path, 0o644, func(w io.Writer) error {
		aw := fsutil.NewAlignedWriter(w)
		var err error
		if sum, err = generateTo(ctx, aw, first, count, opt, workers, progress); err != nil {
			return err
		}
		return aw.Flush()
	})
	if err != nil {
		return Checksum{}, fmt.Errorf("record: %w", err)
	}
	return sum, nil
}

// genBlock is one block of generated records on its way to the writer.
type genBlock struct {
	buf []byte
}

// genLane is one generating worker's pair of channels: full carries its
// blocks to the writer in order, free brings the buffers back.
type genLane struct {
	full chan genBlock
	free chan genBlock
	sum  Checksum // of the lane's blocks; read after the lane is done
}

func newGenLane() *genLane {
	ln := &genLane{full: make(chan genBlock, 2), free: make(chan genBlock, 2)}
	for range 2 {
		ln.free <- genBlock{buf: make([]byte, genBlockRecords*Size)}
	}
	return ln
}

// generate fills blocks id, id+stride, … below blocks and sends each on
// ln.full; it closes ln.full when done or when ctx ends.
func (ln *genLane) generate(ctx context.Context, id, stride, blocks, first, count uint64, opt GenOptions) {
	defer close(ln.full)
	for b := id; b < blocks; b += stride {
		var blk genBlock
		select {
		case blk = <-ln.free:
		case <-ctx.Done():
			return
		}
		start := b * genBlockRecords
		n := min(genBlockRecords, count-start)
		buf := blk.buf[:n*Size]
		Generate(buf, first+start, opt)
		ln.sum.AddAll(buf)
		select {
		case ln.full <- genBlock{buf: buf}:
		case <-ctx.Done():
			return
		}
	}
}

// generateTo writes records first..first+count-1 to w in order.
//
// Block b goes to worker b % workers, and the writer takes block b from that
// worker's channel, so blocks arrive in order without a reorder buffer. Each
// worker owns two buffers that cycle through its free channel: it can fill
// one while the writer writes the other.
func generateTo(ctx context.Context, w io.Writer, first, count uint64, opt GenOptions, workers int, progress func(n int64)) (Checksum, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	blocks := (count + genBlockRecords - 1) / genBlockRecords
	if uint64(workers) > blocks {
		workers = max(1, int(blocks))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	lanes := make([]*genLane, workers)
	var wg sync.WaitGroup
	for i := range lanes {
		ln := newGenLane()
		lanes[i] = ln
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			ln.generate(ctx, uint64(id), uint64(workers), blocks, first, count, opt)
		}(i)
	}

	var werr error
	for b := uint64(0); b < blocks && werr == nil; b++ {
		ln := lanes[b%uint64(workers)]
		blk, ok := <-ln.full
		if !ok {
			werr = ctx.Err()
			break
		}
		if err := ctx.Err(); err != nil {
			werr = err
			break
		}
		if _, err := w.Write(blk.buf); err != nil {
			werr = err
			break
		}
		if progress != nil {
			progress(int64(len(blk.buf)))
		}
		ln.free <- genBlock{buf: blk.buf[:cap(blk.buf)]}
	}
	cancel()
	wg.Wait()
	if werr != nil {
		return Checksum{}, werr
	}
	var sum Checksum
	for _, ln := range lanes {
		sum = sum.Plus(ln.sum)
	}
	return sum, nil
}

// PartPaths names the files of a --parts K run: path.0000, path.0001, …
// (at least 4 digits, more when K needs them, so names sort in order).
func PartPaths(path string, k int) []string {
	width := max(4, len(fmt.Sprint(k-1)))
	out := make([]string, k)
	for i := range out {
		out[i] = fmt.Sprintf("%s.%0*d", path, width, i)
	}
	return out
}

// SplitCount cuts count records into k consecutive parts as evenly as
// possible (the first count%k parts get one more) and returns each part's
// first record number, starting at first, and its record count.
func SplitCount(first, count uint64, k int) (firsts, counts []uint64) {
	firsts, counts = make([]uint64, k), make([]uint64, k)
	q, r := count/uint64(k), count%uint64(k)
	next := first
	for i := range k {
		n := q
		if uint64(i) < r {
			n++
		}
		firsts[i], counts[i] = next, n
		next += n
	}
	return firsts, counts
}
