package dsort

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/par"
	"github.com/gantryhq/gantry/record"
)

// chunkBytes is the payload of one ShuffleDataChunk: whole records, at most
// 1 MiB, so a message never nears gRPC's 4 MiB limit.
const chunkBytes = (1 << 20) / record.Size * record.Size

// servePiece sends receiver its piece of partition p (this worker's
// records of p, merged from its runs' slices) through send, in chunks.
func (w *Worker) servePiece(ctx context.Context, receiver, p int, send func(*dsortpb.ShuffleDataChunk) error) error {
	w.mu.Lock()
	ready, n, self, epoch, nw, mem := w.sorted, w.ppw*w.numWorkers, w.index, w.epoch, w.numWorkers, w.mem
	w.mu.Unlock()
	if !ready {
		return errorf(ErrNotReady, "dsort: this worker has not finished sorting")
	}
	if p < 0 || p >= n {
		return errorf(ErrBadRequest, "dsort: no partition %d (the job has %d)", p, n)
	}
	if receiver < 0 || receiver >= nw || p/(n/nw) != receiver {
		return errorf(ErrNotOwner, "dsort: worker %d does not own partition %d", receiver, p)
	}
	select {
	case w.serveSem <- struct{}{}:
		defer func() { <-w.serveSem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	cw := &chunkWriter{send: send, sender: int32(self), epoch: epoch, partition: int32(p),
		buf: make([]byte, 0, chunkBytes)}
	if err := w.writePiece(ctx, p, cw, mem.serve); err != nil {
		return err
	}
	if err := cw.flush(); err != nil {
		return err
	}
	w.fault(ctx, "serve-last-chunk")
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return send(&dsortpb.ShuffleDataChunk{Sender: int32(self), SenderEpoch: epoch, Partition: int32(p),
		Offset: cw.off, IsLastChunk: true, TotalBytes: cw.off})
}

// ownSegments returns this worker's records of partition p: one segment
// per run, in run (input) order.
func (w *Worker) ownSegments(p int) []extsort.Segment {
	w.mu.Lock()
	defer w.mu.Unlock()
	var segs []extsort.Segment
	for i, run := range w.runs {
		lo, hi := w.splits[i][p], w.splits[i][p+1]
		if hi > lo {
			segs = append(segs, extsort.Segment{Path: run.Path, Offset: lo * record.Size, Length: (hi - lo) * record.Size, Reader: run.Reader})
		}
	}
	return segs
}

// writePiece merges this worker's records of partition p into dst.
func (w *Worker) writePiece(ctx context.Context, p int, dst io.Writer, memory int64) error {
	segs := w.ownSegments(p)
	if len(segs) == 0 {
		return nil
	}
	return extsort.Merge(ctx, extsort.Config{Memory: memory, TempDir: w.workDir, Workers: 1}, segs, dst, nil)
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

// flush sends the buffered bytes. gRPC marshals the message inside Send,
// so the buffer may be reused as soon as Send returns.
func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := c.send(&dsortpb.ShuffleDataChunk{Sender: c.sender, SenderEpoch: c.epoch, Partition: c.partition,
		Offset: c.off, Data: c.buf})
	c.off += int64(len(c.buf))
	c.buf = c.buf[:0]
	return err
}

// piecePath is where the committed piece of partition p from sender s lives.
func (w *Worker) piecePath(p, s int) string {
	return filepath.Join(w.recvDir(), "p"+strconv.Itoa(p)+".s"+strconv.Itoa(s))
}

// shuffle pulls, from every other worker, its piece of each of this
// worker's partitions. Pieces are staged per (sender, sender epoch,
// partition) and committed by rename only once the stream ended with its
// last chunk and the byte count matched: a sender that crashes mid-stream
// leaves nothing behind, and its restarted process's data replaces it.
//
// Pieces are taken partition by partition, so the first partitions are
// complete early; each partition whose pieces are all in is merged at once
// (earlyMerges) while the others arrive, and its output goes to disk while
// the shuffle still runs. On error the early merges are stopped and waited
// for before shuffle returns.
func (w *Worker) shuffle(ctx context.Context) error {
	w.mu.Lock()
	self, nw, ppw := w.index, w.numWorkers, w.ppw
	w.mu.Unlock()
	// This worker's own pieces are not copied: the merge reads them
	// straight from its runs. For each partition, take the senders in turn
	// starting after ourselves, so the workers do not all pull from one.
	w.done.Add(int64(ppw))
	em := newEarlyMerges(ctx, min(w.cores, ppw))
	w.mu.Lock()
	w.early = em
	w.mu.Unlock()
	mem := w.memory().merge
	left := make([]atomic.Int32, ppw) // pieces still to come, per own partition
	for i := range left {
		left[i].Store(int32(nw - 1))
	}
	var fetched atomic.Int64
	err := par.Do(ctx, (nw-1)*ppw, w.cfg.FetchParallel, func(ctx context.Context, i int) error {
		p, s := self*ppw+i/(nw-1), (self+1+i%(nw-1))%nw
		if err := w.fetchPiece(ctx, s, p); err != nil {
			return err
		}
		w.done.Add(1)
		if fetched.Add(1) == 1 {
			w.fault(ctx, "shuffle-piece")
		}
		if left[p-self*ppw].Add(-1) == 0 {
			em.start(p, func(ctx context.Context) error {
				return w.mergePartition(ctx, p, nw, mem, func(n int64) { em.bytes.Add(n); w.metrics.written(n) })
			})
		}
		return nil
	})
	if err != nil {
		em.stop()
	}
	return err
}

// earlyMerges runs the merges of partitions completed during the shuffle,
// at most limit at once; mergePhase waits for them (wait) and merges only
// the partitions they did not.
type earlyMerges struct {
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	wg     sync.WaitGroup
	bytes  atomic.Int64 // output bytes written, for Merging's progress

	mu   sync.Mutex
	done map[int]bool // partitions merged
	err  error        // the first failure
}

func newEarlyMerges(ctx context.Context, limit int) *earlyMerges {
	ctx, cancel := context.WithCancel(ctx)
	return &earlyMerges{ctx: ctx, cancel: cancel, sem: make(chan struct{}, max(limit, 1)), done: map[int]bool{}}
}

// start merges partition p in the background.
func (e *earlyMerges) start(p int, merge func(context.Context) error) {
	e.wg.Go(func() {
		select {
		case e.sem <- struct{}{}:
			defer func() { <-e.sem }()
		case <-e.ctx.Done():
			return
		}
		err := merge(e.ctx)
		e.mu.Lock()
		defer e.mu.Unlock()
		if err == nil {
			e.done[p] = true
		} else if e.err == nil {
			e.err = err
		}
	})
}

// wait waits for the merges started and returns the partitions merged and
// the first error.
func (e *earlyMerges) wait() (map[int]bool, error) {
	e.wg.Wait()
	e.cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done, e.err
}

// stop cancels the merges and waits for them.
func (e *earlyMerges) stop() {
	e.cancel()
	e.wg.Wait()
}

// fetchPiece pulls partition p's piece from sender s, retrying (and asking
// the master for s's current address) until it succeeds or ctx ends. A
// sender that never comes back makes the master abort the job, which ends
// ctx.
func (w *Worker) fetchPiece(ctx context.Context, s, p int) error {
	tries := 0
	err := fetchRetry.Retry(ctx, func(ctx context.Context) error {
		if tries++; tries > 1 {
			w.refreshPeers(ctx)
		}
		addr := w.peerAddr(s)
		if addr == "" {
			return errNoAddress
		}
		err := w.tryFetch(ctx, addr, s, p)
		var pe *pieceError
		switch {
		case err == nil, ctx.Err() != nil:
			return err
		case errors.As(err, &pe):
			return backoff.Permanent(err) // a local failure (disk), not the sender's
		case refused(err):
			return backoff.Permanent(fmt.Errorf("dsort: worker %d at %s refused to send partition %d: %s", s, addr, p, statusMessage(err)))
		}
		w.cfg.Logger.Debug("fetch failed; will retry", "sender", s, "partition", p, "err", err)
		return err
	})
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// errNoAddress: the master has not told this worker a sender's address yet.
var errNoAddress = errors.New("dsort: sender's address not known yet")

// pieceError is a receiver-side failure while storing a piece.
type pieceError struct{ err error }

func (e *pieceError) Error() string { return "dsort: store shuffle piece: " + e.err.Error() }
func (e *pieceError) Unwrap() error { return e.err }

func (w *Worker) peerAddr(s int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.peers {
		if p.index == s {
			return p.addr
		}
	}
	return ""
}

func (w *Worker) refreshPeers(ctx context.Context) {
	w.mu.Lock()
	master, req := w.master, &dsortpb.PeersRequest{JobId: w.jobID, Index: int32(w.index)}
	w.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rep, err := master.GetPeers(cctx, req)
	if err != nil {
		return
	}
	w.mu.Lock()
	w.peers = peersFromPB(rep.GetPeers())
	w.mu.Unlock()
}

func (w *Worker) client(addr string) (dsortpb.WorkerClient, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cc := w.conns[addr]
	if cc == nil {
		var err error
		if cc, err = dialMetered(addr, w.cfg.Token, w.metrics); err != nil {
			return nil, err
		}
		w.conns[addr] = cc
	}
	return dsortpb.NewWorkerClient(cc), nil
}

func (w *Worker) tryFetch(ctx context.Context, addr string, s, p int) (err error) {
	c, err := w.client(addr)
	if err != nil {
		return err
	}
	w.mu.Lock()
	req := &dsortpb.ShuffleRequest{JobId: w.jobID, Receiver: int32(w.index), ReceiverEpoch: w.epoch, Partition: int32(p)}
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.ShuffleData(ctx, req, recvChunks)
	if err != nil {
		return err
	}
	rc := &pieceReceiver{dir: w.recvDir(), addr: addr, sender: s, partition: p}
	// One message for the whole stream: chunkCodec decodes each chunk into
	// it, reusing its data buffer (rc.chunk keeps nothing of it).
	msg := &dsortpb.ShuffleDataChunk{}
	recv := func() (*dsortpb.ShuffleDataChunk, error) {
		if err := stream.RecvMsg(msg); err != nil {
			return nil, err
		}
		return msg, nil
	}
	if err := rc.receive(recv); err != nil {
		if rc.f != nil {
			w.cfg.Logger.Info("discarded an incomplete shuffle piece", "sender", s, "sender_epoch", rc.epoch,
				"partition", p, "bytes", rc.off, "err", statusMessage(err))
		}
		rc.discard()
		return err
	}
	if err := rc.commit(w.piecePath(p, s)); err != nil {
		return err
	}
	w.metrics.shuffled(rc.off)
	return nil
}

// pieceReceiver stores one incoming piece in a staging file named after
// (partition, sender, sender epoch), checking every chunk.
type pieceReceiver struct {
	dir       string
	addr      string // the sender's, for messages
	sender    int
	partition int
	f         *os.File // the staging file, once the first chunk came
	epoch     int64    // the sender's epoch, from the first chunk
	off       int64    // bytes received
	last      bool     // the last chunk came
}

// receive reads chunks until the stream ends.
func (rc *pieceReceiver) receive(recv func() (*dsortpb.ShuffleDataChunk, error)) error {
	for {
		ch, err := recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := rc.chunk(ch); err != nil {
			return err
		}
	}
	if !rc.last {
		return fmt.Errorf("dsort: stream from sender %d ended without its last chunk", rc.sender)
	}
	return nil
}

func (rc *pieceReceiver) chunk(ch *dsortpb.ShuffleDataChunk) error {
	s, p := rc.sender, rc.partition
	if rc.last {
		return fmt.Errorf("dsort: sender %d sent data after its last chunk", s)
	}
	if rc.f == nil {
		rc.epoch = ch.GetSenderEpoch()
		name := fmt.Sprintf("p%d.s%d.e%d.part", p, s, rc.epoch)
		f, err := os.Create(filepath.Join(rc.dir, name))
		if err != nil {
			return &pieceError{err}
		}
		rc.f = f
	}
	if int(ch.GetSender()) != s || int(ch.GetPartition()) != p || ch.GetSenderEpoch() != rc.epoch || ch.GetOffset() != rc.off {
		return fmt.Errorf("dsort: unexpected chunk from %s: sender %d epoch %d partition %d offset %d, want sender %d epoch %d partition %d offset %d",
			rc.addr, ch.GetSender(), ch.GetSenderEpoch(), ch.GetPartition(), ch.GetOffset(), s, rc.epoch, p, rc.off)
	}
	if len(ch.GetData())%record.Size != 0 {
		return fmt.Errorf("dsort: chunk of %d bytes from sender %d is not whole records", len(ch.GetData()), s)
	}
	if _, err := rc.f.Write(ch.GetData()); err != nil {
		return &pieceError{err}
	}
	rc.off += int64(len(ch.GetData()))
	if ch.GetIsLastChunk() {
		if ch.GetTotalBytes() != rc.off {
			return fmt.Errorf("dsort: sender %d announced %d bytes but sent %d", s, ch.GetTotalBytes(), rc.off)
		}
		rc.last = true
	}
	return nil
}

// discard removes the staging file, if any.
func (rc *pieceReceiver) discard() {
	if rc.f != nil {
		rc.f.Close()
		os.Remove(rc.f.Name())
		rc.f = nil
	}
}

// commit closes the complete piece and renames it to path.
func (rc *pieceReceiver) commit(path string) error {
	name := rc.f.Name()
	err := rc.f.Close()
	rc.f = nil
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		os.Remove(name)
		return &pieceError{err}
	}
	return nil
}
