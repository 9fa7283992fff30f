//go:build unix

package extsort

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxMappedFiles bounds the files SortInMemory maps (each is one mapping,
// and the kernel limits a process's mappings); more are read instead. A
// var so tests can make it read.
var maxMappedFiles = 1024

// mapAlign is where each file starts in the mapped range: a multiple of
// the page size (mmap needs it) and of recSize (so record i of the range is
// at i*recSize). 102400 = lcm(4096, 100); pages of other sizes fall back to
// reading.
const mapAlign = 102400

// mapInputs maps inputs read-only into one range (see Sorted) and returns
// it with each input's span of records. It returns a nil Sorted, and no
// error, when mapping is not possible here (too many files, an unusual page
// size, a file system that cannot map): the caller then reads the input.
func mapInputs(inputs []Input) (*Sorted, []span, error) {
	if len(inputs) > maxMappedFiles || mapAlign%os.Getpagesize() != 0 {
		return nil, nil, nil
	}
	var spans []span
	var size int64
	for _, in := range inputs {
		if in.Size == 0 {
			continue
		}
		start := (size + mapAlign - 1) / mapAlign * mapAlign
		spans = append(spans, span{first: int(start / recSize), n: int(in.Size / recSize)})
		size = start + in.Size
	}
	region, err := unix.Mmap(-1, 0, int(size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, nil, nil
	}
	k := 0
	for _, in := range inputs {
		if in.Size == 0 {
			continue
		}
		if ok, err := mapFile(in, region[spans[k].first*recSize:]); !ok || err != nil {
			unix.Munmap(region)
			return nil, nil, err
		}
		k++
	}
	// Start reading whatever of the input is not in the page cache.
	_ = unix.Madvise(region, unix.MADV_WILLNEED)
	return &Sorted{buf: region[:size], mapped: true, free: func() { unix.Munmap(region) }}, spans, nil
}

// mapFile maps in over the start of at (MAP_FIXED); ok is false when the
// file cannot be mapped, err set when it is not what ScanInputs saw.
func mapFile(in Input, at []byte) (ok bool, err error) {
	f, err := os.Open(in.Path)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	defer f.Close()
	if _, err := unix.MmapPtr(int(f.Fd()), 0, unsafe.Pointer(unsafe.SliceData(at)), uintptr(in.Size),
		unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED|unix.MAP_POPULATE); err != nil {
		return false, nil
	}
	// A file that shrank after ScanInputs would fault when read past its
	// end; refuse it now.
	if st, err := f.Stat(); err != nil || st.Size() < in.Size {
		return false, fmt.Errorf("%w: %s shrank while being read (had %d bytes)", ErrBadInput, in.Path, in.Size)
	}
	return true, nil
}
