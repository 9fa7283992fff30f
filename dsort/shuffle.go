package dsort

import (
	"bufio"
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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/extsort"
)

// chunkBytes is the payload of one ShuffleDataChunk: whole records, at most
// 1 MiB, so a message never nears gRPC's 4 MiB limit.
const chunkBytes = (1 << 20) / recSize * recSize

// workerRPC is the gRPC face of a Worker.
type workerRPC struct {
	dsortpb.UnimplementedWorkerServer
	w *Worker
}

func (r *workerRPC) SetPartitionBoundaries(ctx context.Context, pc *dsortpb.PartitionConfig) (*dsortpb.Ack, error) {
	w := r.w
	// Seed 000 §6.1: only a worker waiting for its config may take one.
	if err := w.sm.Require(WaitingForPartitionConfig); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "dsort: cannot set partition config: %v", err)
	}
	n, ppw := int(pc.GetNumPartitions()), int(pc.GetPartitionsPerWorker())
	w.mu.Lock()
	defer w.mu.Unlock()
	if pc.GetEpoch() != w.epoch {
		return nil, status.Errorf(codes.FailedPrecondition, "dsort: config for epoch %d, this worker is epoch %d", pc.GetEpoch(), w.epoch)
	}
	if ppw < 1 || n != ppw*w.numWorkers || len(pc.GetBoundaries()) != n-1 {
		return nil, status.Errorf(codes.InvalidArgument, "dsort: inconsistent partition config: %d partitions, %d per worker, %d boundaries",
			n, ppw, len(pc.GetBoundaries()))
	}
	bounds := make([]Boundary, n-1)
	for i, b := range pc.GetBoundaries() {
		if len(b.GetKey()) != keySize {
			return nil, status.Errorf(codes.InvalidArgument, "dsort: boundary %d has a %d-byte key", i, len(b.GetKey()))
		}
		copy(bounds[i].Key[:], b.GetKey())
		bounds[i].Worker, bounds[i].Count = int(b.GetWorker()), b.GetCount()
		if i > 0 && compareBoundaries(bounds[i-1], bounds[i]) > 0 {
			return nil, status.Errorf(codes.InvalidArgument, "dsort: boundaries %d and %d are out of order", i-1, i)
		}
	}
	if w.bounds != nil {
		return &dsortpb.Ack{}, nil // a retried delivery
	}
	w.bounds, w.ppw = bounds, ppw
	w.cfgCh <- pc
	return &dsortpb.Ack{}, nil
}

func (r *workerRPC) StartShuffle(ctx context.Context, b *dsortpb.Barrier) (*dsortpb.Ack, error) {
	w := r.w
	if w.sm.Is(Shuffling, WaitingForMergeSignal, Merging, Completed) {
		return &dsortpb.Ack{}, nil // a retried delivery
	}
	if err := w.sm.Require(WaitingForShuffleSignal); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "dsort: cannot start shuffle: %v", err)
	}
	select {
	case w.shuffleCh <- b.GetPeers():
	default:
	}
	return &dsortpb.Ack{}, nil
}

func (r *workerRPC) StartMerge(ctx context.Context, b *dsortpb.Barrier) (*dsortpb.Ack, error) {
	w := r.w
	if w.sm.Is(Merging, Completed) {
		return &dsortpb.Ack{}, nil
	}
	if err := w.sm.Require(WaitingForMergeSignal); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "dsort: cannot start merge: %v", err)
	}
	select {
	case w.mergeCh <- struct{}{}:
	default:
	}
	return &dsortpb.Ack{}, nil
}

func (r *workerRPC) GetStatus(ctx context.Context, req *dsortpb.StatusRequest) (*dsortpb.WorkerStatus, error) {
	w := r.w
	st := w.sm.State()
	w.mu.Lock()
	info := WorkerInfo{Index: w.index, Epoch: w.epoch, State: st, Progress: w.progress(st), Message: w.message(st), Alive: true}
	w.mu.Unlock()
	for _, p := range w.sm.Phases() {
		info.Phases = append(info.Phases, PhaseTime{State: p.Phase, Duration: p.Duration(), Done: p.Done})
	}
	return workerStatusPB(info), nil
}

// ShuffleData streams this worker's records of one partition: its runs'
// slices for that partition merged into one sorted stream.
func (r *workerRPC) ShuffleData(req *dsortpb.ShuffleRequest, stream dsortpb.Worker_ShuffleDataServer) error {
	w := r.w
	w.mu.Lock()
	ready, n, self, epoch, nw := w.sorted, w.ppw*w.numWorkers, w.index, w.epoch, w.numWorkers
	w.mu.Unlock()
	if !ready {
		return status.Error(codes.Unavailable, "dsort: this worker has not finished sorting")
	}
	p := int(req.GetPartition())
	if p < 0 || p >= n {
		return status.Errorf(codes.InvalidArgument, "dsort: no partition %d (the job has %d)", p, n)
	}
	if rcv := int(req.GetReceiver()); rcv < 0 || rcv >= nw || p/(n/nw) != rcv {
		return status.Errorf(codes.PermissionDenied, "dsort: worker %d does not own partition %d", rcv, p)
	}
	ctx := stream.Context()
	select {
	case w.serveSem <- struct{}{}:
		defer func() { <-w.serveSem }()
	case <-ctx.Done():
		return rpcError(ctx.Err())
	}
	cw := &chunkWriter{send: stream.Send, sender: int32(self), epoch: epoch, partition: int32(p),
		buf: make([]byte, 0, chunkBytes)}
	if err := w.writePiece(ctx, p, cw, w.budget()/4/int64(cap(w.serveSem))); err != nil {
		return rpcError(err)
	}
	if err := cw.flush(); err != nil {
		return err
	}
	w.fault(ctx, "serve-last-chunk")
	if ctx.Err() != nil {
		return rpcError(ctx.Err())
	}
	return stream.Send(&dsortpb.ShuffleDataChunk{Sender: int32(self), SenderEpoch: epoch, Partition: int32(p),
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
			segs = append(segs, extsort.Segment{Path: run.Path, Offset: lo * recSize, Length: (hi - lo) * recSize})
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
	return extsort.Merge(ctx, extsort.Config{Memory: max(memory, 4<<20), TempDir: w.workDir, Workers: 1}, segs, dst, nil)
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
		k := min(len(p), cap(c.buf)-len(c.buf))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
		if len(c.buf) == cap(c.buf) {
			if err := c.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
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
func (w *Worker) shuffle(ctx context.Context) error {
	w.mu.Lock()
	self, nw, ppw := w.index, w.numWorkers, w.ppw
	w.mu.Unlock()
	type task struct{ s, p int }
	tasks := make(chan task)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	var fetched atomic.Int64
	for range w.cfg.FetchParallel {
		wg.Go(func() {
			for t := range tasks {
				if err := w.fetchPiece(ctx, t.s, t.p); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					continue
				}
				w.done.Add(1)
				if fetched.Add(1) == 1 {
					w.fault(ctx, "shuffle-piece")
				}
			}
		})
	}
	// This worker's own pieces are not copied: the merge reads them
	// straight from its runs. Take the others sender by sender, starting
	// after ourselves, so the workers do not all pull from one sender.
	w.done.Add(int64(ppw))
feed:
	for i := 1; i < nw; i++ {
		s := (self + i) % nw
		for p := self * ppw; p < (self+1)*ppw; p++ {
			select {
			case tasks <- task{s, p}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(tasks)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// fetchPiece pulls partition p's piece from sender s, retrying (and asking
// the master for s's current address) until it succeeds or ctx ends. A
// sender that never comes back makes the master abort the job, which ends
// ctx.
func (w *Worker) fetchPiece(ctx context.Context, s, p int) error {
	backoff := 50 * time.Millisecond
	for {
		addr := w.peerAddr(s)
		var err error
		if addr != "" {
			if err = w.tryFetch(ctx, addr, s, p); err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var pe *pieceError
			if errors.As(err, &pe) {
				return err // a local failure (disk), not the sender's
			}
			if refused(err) {
				return fmt.Errorf("dsort: worker %d at %s refused to send partition %d: %s", s, addr, p, statusMessage(err))
			}
			w.cfg.Logger.Debug("fetch failed; will retry", "sender", s, "partition", p, "err", err)
		}
		if err := sleepCtx(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, time.Second)
		w.refreshPeers(ctx)
	}
}

// pieceError is a receiver-side failure while storing a piece.
type pieceError struct{ err error }

func (e *pieceError) Error() string { return "dsort: store shuffle piece: " + e.err.Error() }
func (e *pieceError) Unwrap() error { return e.err }

func (w *Worker) peerAddr(s int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.peers {
		if int(p.GetIndex()) == s {
			return p.GetAddress()
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
	w.peers = rep.GetPeers()
	w.mu.Unlock()
}

func (w *Worker) client(addr string) (dsortpb.WorkerClient, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cc := w.conns[addr]
	if cc == nil {
		var err error
		if cc, err = dial(addr, w.cfg.Token); err != nil {
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
	stream, err := c.ShuffleData(ctx, req)
	if err != nil {
		return err
	}
	var (
		f     *os.File
		off   int64
		epoch int64
		last  bool
	)
	defer func() {
		if f != nil {
			f.Close()
			if err != nil {
				os.Remove(f.Name())
				w.cfg.Logger.Info("discarded an incomplete shuffle piece", "sender", s, "sender_epoch", epoch,
					"partition", p, "bytes", off, "err", statusMessage(err))
			}
		}
	}()
	for {
		ch, rerr := stream.Recv()
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
		if last {
			return fmt.Errorf("dsort: sender %d sent data after its last chunk", s)
		}
		if f == nil {
			epoch = ch.GetSenderEpoch()
			name := fmt.Sprintf("p%d.s%d.e%d.part", p, s, epoch)
			if f, err = os.Create(filepath.Join(w.recvDir(), name)); err != nil {
				return &pieceError{err}
			}
		}
		if int(ch.GetSender()) != s || int(ch.GetPartition()) != p || ch.GetSenderEpoch() != epoch || ch.GetOffset() != off {
			return fmt.Errorf("dsort: unexpected chunk from %s: sender %d epoch %d partition %d offset %d, want sender %d epoch %d partition %d offset %d",
				addr, ch.GetSender(), ch.GetSenderEpoch(), ch.GetPartition(), ch.GetOffset(), s, epoch, p, off)
		}
		if len(ch.GetData())%recSize != 0 {
			return fmt.Errorf("dsort: chunk of %d bytes from sender %d is not whole records", len(ch.GetData()), s)
		}
		if _, err := f.Write(ch.GetData()); err != nil {
			return &pieceError{err}
		}
		off += int64(len(ch.GetData()))
		if ch.GetIsLastChunk() {
			if ch.GetTotalBytes() != off {
				return fmt.Errorf("dsort: sender %d announced %d bytes but sent %d", s, ch.GetTotalBytes(), off)
			}
			last = true
		}
	}
	if !last {
		return fmt.Errorf("dsort: stream from sender %d ended without its last chunk", s)
	}
	if err := f.Close(); err != nil {
		return &pieceError{err}
	}
	name := f.Name()
	f = nil
	if err := os.Rename(name, w.piecePath(p, s)); err != nil {
		os.Remove(name)
		return &pieceError{err}
	}
	return nil
}

// merge merges, for each of this worker's partitions in parallel, the
// pieces from all senders (in sender order, so that equal keys keep the
// global order the boundaries assume; this worker's own piece is its runs'
// slices, in run order) into partition.<n>.
func (w *Worker) merge(ctx context.Context) error {
	w.mu.Lock()
	self, nw, ppw := w.index, w.numWorkers, w.ppw
	w.mu.Unlock()
	par := min(w.cores, ppw)
	mem := w.budget() / 2 / int64(par)
	parts := make(chan int)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	var merged atomic.Int64
	for range par {
		wg.Go(func() {
			for p := range parts {
				if err := w.mergePartition(ctx, p, nw, mem); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					continue
				}
				if merged.Add(1) == 1 {
					w.fault(ctx, "merge-partition")
				}
			}
		})
	}
feed:
	for p := self * ppw; p < (self+1)*ppw; p++ {
		select {
		case parts <- p:
		case <-ctx.Done():
			break feed
		}
	}
	close(parts)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

func (w *Worker) mergePartition(ctx context.Context, p, nw int, mem int64) error {
	var segs []extsort.Segment
	for s := range nw {
		if s == w.index {
			segs = append(segs, w.ownSegments(p)...)
			continue
		}
		path := w.piecePath(p, s)
		info, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("dsort: merge partition %d: %w", p, err)
		}
		if info.Size() > 0 {
			segs = append(segs, extsort.Segment{Path: path, Length: info.Size()})
		}
	}
	final := filepath.Join(w.cfg.Output, "partition."+strconv.Itoa(p))
	f, err := os.Create(filepath.Join(w.cfg.Output, ".partition."+strconv.Itoa(p)+".tmp"))
	if err != nil {
		return fmt.Errorf("dsort: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if len(segs) > 0 {
		err = extsort.Merge(ctx, extsort.Config{Memory: max(mem, 4<<20), TempDir: w.workDir, Workers: 1}, segs, bw,
			func(n int64) { w.done.Add(n) })
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), final)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("dsort: merge partition %d: %w", p, err)
	}
	return nil
}

// retryable reports whether an RPC error may go away by itself.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// refused reports whether a peer rejected a call for a reason that retrying
// will not change (another job, a wrong token, a bad request).
func refused(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented, codes.FailedPrecondition:
		return true
	}
	return false
}

// statusMessage is an RPC error's message without the gRPC decoration.
func statusMessage(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}
