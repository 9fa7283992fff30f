//go:build unix

package extsort

import (
	"context"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gantryhq/gantry/internal/par"
)

// mapAlign is where each input file starts in the mapped range: a huge
// page boundary, so that the kernel can map the page cache's huge folios
// whole where it has them.
const mapAlign = 2 << 20

// populateStep is how much of a mapping one populate call covers: the
// workers populate the input in parallel, a step at a time.
const populateStep = 64 << 20

// mapInputs maps inputs (total bytes, total > 0) read-only into one
// address range, each file at a mapAlign boundary, and populates the page
// tables (reading what the page cache does not hold) with up to workers
// goroutines. It returns nil and no error when the system will not map
// them (the caller reads them instead), and an error when an input cannot
// be opened or read.
func mapInputs(ctx context.Context, inputs []Input, workers int) (*inputMap, error) {
	starts := make([]int64, len(inputs))
	var span int64
	for i, in := range inputs {
		starts[i] = span
		span += (in.Size + mapAlign - 1) &^ (mapAlign - 1)
	}
	// Reserve the range (no access, no memory), then map each file over
	// its part of it.
	res, err := unix.Mmap(-1, 0, int(span+mapAlign), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, nil
	}
	free := func() { unix.Munmap(res) }
	skip := int((mapAlign - uintptr(unsafe.Pointer(&res[0]))%mapAlign) % mapAlign)
	mem := res[skip : skip+int(span)]
	m := &inputMap{mem: mem, starts: starts, mapped: true, free: free}
	var steps []populateRange
	for i, in := range inputs {
		if in.Size == 0 {
			continue
		}
		part := mem[starts[i] : starts[i]+in.Size]
		if mapped, err := mapFile(in.Path, part); err != nil || !mapped {
			free()
			return nil, err // not mapped (a file system that will not): the caller reads
		}
		adviseHugePages(part)
		for off := int64(0); off < in.Size; off += populateStep {
			steps = append(steps, populateRange{path: in.Path, off: off, mem: part[off:min(off+populateStep, in.Size)]})
		}
	}
	if err := par.Do(ctx, len(steps), workers, func(_ context.Context, i int) error { return steps[i].populate() }); err != nil {
		free()
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		free()
		return nil, err
	}
	return m, nil
}

// mapFile maps the file at path over part (its size), read-only, and
// reports whether it did: a file that opens but will not map (its file
// system does not support it) is no error, the caller reads it instead.
func mapFile(path string, part []byte) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	defer f.Close()
	_, err = unix.MmapPtr(int(f.Fd()), 0, unsafe.Pointer(&part[0]), uintptr(len(part)), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED)
	return err == nil, nil
}

// populateRange is one step of populating a mapped file.
type populateRange struct {
	path string
	off  int64
	mem  []byte
}

func (p populateRange) populate() error {
	err := populateRead(p.mem)
	switch {
	case err == unix.EFAULT: // pages past the file's end
		return fmt.Errorf("%w: %s shrank while being read (wanted %d bytes at offset %d)", ErrBadInput, p.path, len(p.mem), p.off)
	case err != nil:
		return fmt.Errorf("%w: read %s at %d: %v", ErrBadInput, p.path, p.off, err)
	}
	return nil
}

// mapSegment maps s's bytes of its file read-only and populates them; it
// returns nil (and no error) when the system will not map the file.
func mapSegment(s Segment) (mem []byte, unmap func(), err error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	start := s.Offset &^ (int64(os.Getpagesize()) - 1)
	m, err := unix.Mmap(int(f.Fd()), start, int(s.Offset+s.Length-start), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, nil
	}
	mem = m[s.Offset-start:]
	if err := populateRead(mem); err != nil {
		unix.Munmap(m)
		return nil, nil, fmt.Errorf("read %s: %w", s.Path, err)
	}
	return mem, func() { unix.Munmap(m) }, nil
}
