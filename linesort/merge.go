package linesort

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
)

// cursor is one sorted source of a merge (a spilled run read back). line
// and key are valid until next.
type cursor interface {
	// next moves to the source's next line; false at its end.
	next() (bool, error)
	// current is the line (without its newline) and its sort key.
	current() (line, key []byte)
}

// runCursor reads a spilled run, a file of sorted lines, and derives each
// line's key again (cheaper than storing it).
type runCursor struct {
	ord  *Order
	r    *bufio.Reader
	f    *os.File // nil when reading a Reader's segment
	name string   // for errors
	long []byte   // a line longer than r's buffer, gathered here
	ln   []byte
	key  []byte
}

func openRun(ord *Order, path string, bufSize int) (*runCursor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("linesort: run: %w", err)
	}
	return &runCursor{ord: ord, f: f, name: path, r: bufio.NewReaderSize(f, bufSize)}, nil
}

func (c *runCursor) next() (bool, error) {
	ln, err := c.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		c.long = append(c.long[:0], ln...)
		for errors.Is(err, bufio.ErrBufferFull) {
			ln, err = c.r.ReadSlice('\n')
			c.long = append(c.long, ln...)
		}
		ln = c.long
	}
	if err == io.EOF && len(ln) == 0 {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("linesort: run %s: %w", c.name, err)
	}
	c.ln = ln[:len(ln)-1]
	if !c.ord.raw {
		c.key = c.ord.AppendKey(c.key[:0], c.ln)
	}
	return true, nil
}

func (c *runCursor) current() (line, key []byte) {
	if c.ord.raw {
		return c.ln, c.ln
	}
	return c.ln, c.key
}

func (c *runCursor) Close() error {
	if c.f == nil {
		return nil
	}
	return c.f.Close()
}

// merger is a binary heap of cursors ordered by their current lines; ties
// go to the earlier cursor (earlier input), which keeps a merge stable.
type merger struct {
	ord  *Order
	heap []int // indexes into cur
	cur  []cursor
	ln   [][]byte // each cursor's current line and key
	key  [][]byte
	pre  []uint64 // and its key's first 8 bytes (entry.pre)
}

// newMerger starts a merge of cur (each not yet advanced).
func newMerger(ord *Order, cur []cursor) (*merger, error) {
	m := &merger{ord: ord, cur: cur, ln: make([][]byte, len(cur)), key: make([][]byte, len(cur)), pre: make([]uint64, len(cur))}
	for i, c := range cur {
		ok, err := c.next()
		if err != nil {
			return nil, err
		}
		if ok {
			m.load(i)
			m.heap = append(m.heap, i)
		}
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return m, nil
}

// load takes cursor i's current line.
func (m *merger) load(i int) {
	m.ln[i], m.key[i] = m.cur[i].current()
	m.pre[i] = prefixOf(m.ord, m.key[i], 0)
}

func (m *merger) less(a, b int) bool {
	if m.pre[a] != m.pre[b] {
		return m.pre[a] < m.pre[b]
	}
	if c := m.ord.Compare(m.key[a], m.ln[a], m.key[b], m.ln[b]); c != 0 {
		return c < 0
	}
	return a < b
}

func (m *merger) down(i int) {
	h := m.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && m.less(h[r], h[l]) {
			j = r
		}
		if !m.less(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// each calls fn with every line in merged order.
func (m *merger) each(fn func(line []byte) error) error {
	for len(m.heap) > 0 {
		top := m.heap[0]
		if err := fn(m.ln[top]); err != nil {
			return err
		}
		ok, err := m.cur[top].next()
		if err != nil {
			return err
		}
		if ok {
			m.load(top)
		} else {
			last := len(m.heap) - 1
			m.heap[0] = m.heap[last]
			m.heap = m.heap[:last]
		}
		m.down(0)
	}
	return nil
}

// lineWriter writes lines, each followed by a newline, through a buffer.
type lineWriter struct {
	w *bufio.Writer
	n int64
}

// put writes line and its newline; a write error is sticky and comes back
// from the next put or the flush.
func (l *lineWriter) put(line []byte) error {
	l.w.Write(line)
	l.n += int64(len(line)) + 1
	return l.w.WriteByte('\n')
}
