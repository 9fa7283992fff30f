//go:build linux

package fsutil

import (
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Direct writes (WriteAtomicDirect) go out in blocks of directBlock bytes from directBufs
// buffers: one being filled by the caller while the others are written. Offsets and
// lengths are multiples of the page size, which O_DIRECT needs; the last block is padded
// with zeros and the file cut back to its length.
const (
	// 40 * lcm(4096, 100): a multiple of the record size of gantry's sorts
	// too, so a merge filling the lent buffer (Block) never has a record
	// left over at its end.
	directBlock = 40 * 102400
	directBufs  = 3
	directAlign = 4096
)

// directWriter is an io.Writer over a second, O_DIRECT descriptor of a file. Write copies
// into the current buffer; a full buffer goes to the writer goroutine, which writes it at
// its offset. If the file system refuses a direct write (EINVAL), the goroutine turns
// O_DIRECT off on its descriptor and writes through the page cache instead.
type directWriter struct {
	fd    *os.File
	cur   []byte
	off   int64 // bytes handed to the goroutine
	bufs  [][]byte
	free  chan []byte
	queue chan directJob
	done  chan struct{}

	mu  sync.Mutex
	err error // the goroutine's first error
}

type directJob struct {
	buf []byte
	off int64
}

// newDirectWriter opens f's file again with O_DIRECT; it fails where that is refused, and
// the caller then writes f through the page cache.
func newDirectWriter(f *os.File) (*directWriter, error) {
	fd, err := os.OpenFile(f.Name(), os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil, err
	}
	w := &directWriter{fd: fd, free: make(chan []byte, directBufs), queue: make(chan directJob, directBufs),
		done: make(chan struct{})}
	for range directBufs {
		b, err := directBlocks.get()
		if err != nil {
			w.unmap()
			fd.Close()
			return nil, err
		}
		w.bufs = append(w.bufs, b)
		w.free <- b[:0]
	}
	w.cur = <-w.free
	go w.run()
	return w, nil
}

func (w *directWriter) run() {
	defer close(w.done)
	for j := range w.queue {
		if w.failed() == nil {
			_, err := w.fd.WriteAt(j.buf, j.off)
			if errors.Is(err, unix.EINVAL) && w.buffered() == nil {
				_, err = w.fd.WriteAt(j.buf, j.off)
			}
			if err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
			}
		}
		w.free <- j.buf[:0]
	}
}

// buffered turns O_DIRECT off on w.fd.
func (w *directWriter) buffered() error {
	fl, err := unix.FcntlInt(w.fd.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	_, err = unix.FcntlInt(w.fd.Fd(), unix.F_SETFL, fl&^unix.O_DIRECT)
	return err
}

func (w *directWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *directWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if err := w.failed(); err != nil {
			return n - len(p), err
		}
		k := copy(w.cur[len(w.cur):cap(w.cur)], p)
		p = p[k:]
		w.Commit(k)
	}
	return n, nil
}

// Block lends the free space of the current buffer, to be filled in place
// and handed over with Commit (extsort's merge does so).
func (w *directWriter) Block() []byte {
	if w.failed() != nil {
		return nil
	}
	return w.cur[len(w.cur):cap(w.cur)]
}

// Commit takes the first n bytes of the space Block lent as written; a
// full buffer goes to the writer goroutine.
func (w *directWriter) Commit(n int) error {
	if w.free == nil { // finished: the buffers are the pool's
		return w.failed()
	}
	w.cur = w.cur[:len(w.cur)+n]
	if len(w.cur) == cap(w.cur) {
		w.queue <- directJob{buf: w.cur, off: w.off}
		w.off += int64(len(w.cur))
		w.cur = <-w.free
	}
	return w.failed()
}

// finish writes the tail (if flush), waits for the goroutine, cuts the file to its length
// and releases the buffers and the descriptor.
func (w *directWriter) finish(flush bool) error {
	size := w.off + int64(len(w.cur))
	if flush && len(w.cur) > 0 {
		n := (len(w.cur) + directAlign - 1) / directAlign * directAlign
		tail := w.cur[:n]
		clear(tail[len(w.cur):])
		w.queue <- directJob{buf: tail, off: w.off}
	}
	close(w.queue)
	<-w.done
	err := w.failed()
	if flush && err == nil {
		err = w.fd.Truncate(size)
	}
	err = errors.Join(err, w.fd.Close())
	// The buffers go back to the pool: a late Write, Block or Commit
	// fails instead of touching them (another writer may have them).
	w.mu.Lock()
	if w.err == nil {
		w.err = os.ErrClosed
	}
	w.mu.Unlock()
	w.cur, w.free = nil, nil
	w.unmap()
	return err
}

func (w *directWriter) unmap() {
	for _, b := range w.bufs {
		directBlocks.put(b)
	}
	w.bufs = nil
}

// directBlocks keeps the buffers of finished direct writers for the next
// ones, up to directKeep: a sort writing one file after another then
// reuses memory already faulted in, where new buffers cost a page fault
// and a zeroed page every 4 KiB (on a virtual machine, each fault may also
// exit to the host). It keeps no more than writers used at once.
var directBlocks blockPool

// directKeep is the most buffers directBlocks keeps: those of four writers.
const directKeep = 4 * directBufs

type blockPool struct {
	mu   sync.Mutex
	free [][]byte
}

// get returns a kept buffer, or maps a new one.
func (p *blockPool) get() ([]byte, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return b, nil
	}
	p.mu.Unlock()
	return unix.Mmap(-1, 0, directBlock, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
}

// put keeps b for the next writer, or unmaps it when enough are kept.
func (p *blockPool) put(b []byte) {
	b = b[:cap(b)]
	p.mu.Lock()
	if len(p.free) < directKeep {
		p.free = append(p.free, b)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	unix.Munmap(b)
}
