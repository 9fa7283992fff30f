package dsort

import (
	"context"
	"sync"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/record"
)

// chunkBytes is the payload of one ShuffleDataChunk: whole records, at most
// 1 MiB, so a message never nears gRPC's 4 MiB limit.
const chunkBytes = (1 << 20) / record.Size * record.Size

// pieceServer answers ShuffleData: it streams to the receiver that owns a
// partition this worker's records of it, merged from its sorted runs, at
// most one stream per core at once (pieceSource.streams). It serves nothing until the sort phase
// hands it its output (ready); it keeps serving until the job ends, so that
// a restarted peer can fetch again.
type pieceServer struct {
	tempDir string // the merges' scratch space
	fault   func(ctx context.Context, point string)

	mu  sync.Mutex   // protects src
	src *pieceSource // nil until ready, then fixed
}

// pieceSource is what the piece server serves from: the sort phase's
// output.
type pieceSource struct {
	format recordFormat
	sorted *sortedInput
	layout jobLayout
	epoch  int64         // this worker's, stamped on every chunk
	memory int64         // each stream's merge (memoryPlan.serve)
	sem    chan struct{} // bounds concurrent streams (ready)
}

func newPieceServer(tempDir string, fault func(context.Context, string)) *pieceServer {
	return &pieceServer{tempDir: tempDir, fault: fault}
}

// ready starts serving from src, at most streams streams at once.
func (s *pieceServer) ready(src *pieceSource, streams int) {
	src.sem = make(chan struct{}, max(streams, 1))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.src = src
}

// close frees the input kept in memory. The gRPC server must be stopped:
// no stream may read it any more.
func (s *pieceServer) close() {
	s.mu.Lock()
	src := s.src
	s.src = nil
	s.mu.Unlock()
	if src != nil {
		src.sorted.free()
	}
}

// serve sends receiver its piece of partition p (this worker's records of
// p, merged from its runs' slices) through send, in chunks.
func (s *pieceServer) serve(ctx context.Context, receiver, p int, send func(*dsortpb.ShuffleDataChunk) error) error {
	s.mu.Lock()
	src := s.src
	s.mu.Unlock()
	if src == nil {
		return errorf(ErrNotReady, "dsort: this worker has not finished sorting")
	}
	l := src.layout
	if n := l.partitions(); p < 0 || p >= n {
		return errorf(ErrBadRequest, "dsort: no partition %d (the job has %d)", p, n)
	}
	if receiver < 0 || receiver >= l.workers || p/l.ppw != receiver {
		return errorf(ErrNotOwner, "dsort: worker %d does not own partition %d", receiver, p)
	}
	select {
	case src.sem <- struct{}{}:
		defer func() { <-src.sem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	self := int32(l.self)
	cw := &chunkWriter{send: send, sender: self, epoch: src.epoch, partition: int32(p), buf: *sendBuffers.Get(chunkBytes)}
	defer func() { sendBuffers.Put(&cw.buf) }()
	if segs := src.sorted.segments(p); len(segs) > 0 {
		if err := src.format.merge(ctx, extsort.Config{Memory: src.memory, TempDir: s.tempDir, Workers: 1}, segs, cw, nil); err != nil {
			return err
		}
	}
	if err := cw.flush(); err != nil {
		return err
	}
	s.fault(ctx, "serve-last-chunk")
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return send(&dsortpb.ShuffleDataChunk{Sender: self, SenderEpoch: src.epoch, Partition: int32(p),
		Offset: cw.off, IsLastChunk: true, TotalBytes: cw.off})
}

// chunkWriter cuts a byte stream into ShuffleDataChunks.
type chunkWriter struct {
	send      func(*dsortpb.ShuffleDataChunk) error
	sender    int32
	epoch     int64
	partition int32
	buf       []byte
	off       int64 // bytes sent so far
}

var _ extsort.BlockWriter = (*chunkWriter)(nil)

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := copy(c.Block(), p)
		p = p[k:]
		if err := c.Commit(k); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// Block lends the chunk buffer's free space (extsort.BlockWriter): the
// merge of a piece gathers or merges its records straight into the chunk.
// chunkBytes is whole records, so a block never ends mid-record.
func (c *chunkWriter) Block() []byte { return c.buf[len(c.buf):cap(c.buf)] }

// Commit takes n bytes of the lent space as written; a full chunk is sent.
func (c *chunkWriter) Commit(n int) error {
	c.buf = c.buf[:len(c.buf)+n]
	if len(c.buf) == cap(c.buf) {
		return c.flush()
	}
	return nil
}

// flush sends the buffered bytes. The codec (chunkCodec) hands the buffer
// itself to gRPC, which gives it back to sendBuffers once written, so the
// next chunk goes into another buffer.
func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := c.send(&dsortpb.ShuffleDataChunk{Sender: c.sender, SenderEpoch: c.epoch, Partition: c.partition,
		Offset: c.off, Data: c.buf})
	c.off += int64(len(c.buf))
	c.buf = *sendBuffers.Get(chunkBytes)
	return err
}
