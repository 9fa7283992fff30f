package dsort

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/internal/backoff"
)

// fetcher pulls this worker's pieces from its peers during the shuffle:
// one piece (partition, sender) per fetch, retried until it is committed
// under dir.piecePath or the job ends. It keeps one connection per peer
// address until close.
type fetcher struct {
	asg     assignment // this worker: job, index, epoch, and the master for GetPeers
	format  recordFormat
	creds   creds
	dir     *workDir // where pieces are staged and committed (recv/)
	logger  *slog.Logger
	metrics *metrics

	mu    sync.Mutex // protects the fields below
	peers []peer     // the latest worker table (StartShuffle, then GetPeers)
	conns map[string]*grpc.ClientConn
}

func newFetcher(asg assignment, format recordFormat, peers []peer, c creds, dir *workDir, logger *slog.Logger, m *metrics) *fetcher {
	return &fetcher{asg: asg, format: format, creds: c, dir: dir, logger: logger, metrics: m,
		peers: peers, conns: map[string]*grpc.ClientConn{}}
}

// close closes the connections to the peers.
func (f *fetcher) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = map[string]*grpc.ClientConn{}
}

// fetch pulls partition p's piece from sender s, retrying (and asking
// the master for s's current address) until it succeeds or ctx ends. A
// sender that never comes back makes the master abort the job, which ends
// ctx.
func (f *fetcher) fetch(ctx context.Context, s, p int) error {
	tries := 0
	err := fetchRetry.Retry(ctx, func(ctx context.Context) error {
		if tries++; tries > 1 {
			f.refreshPeers(ctx)
		}
		addr := f.peerAddr(s)
		if addr == "" {
			return errNoAddress
		}
		err := f.tryFetch(ctx, addr, s, p)
		var pe *pieceError
		switch {
		case err == nil, ctx.Err() != nil:
			return err
		case errors.As(err, &pe):
			return backoff.Permanent(err) // a local failure (disk), not the sender's
		case refused(err):
			return backoff.Permanent(fmt.Errorf("dsort: worker %d at %s refused to send partition %d: %s", s, addr, p, statusMessage(err)))
		}
		f.logger.Debug("fetch failed; will retry", "sender", s, "partition", p, "err", err)
		return err
	})
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// chunkMessages holds the messages (with their 1 MiB data buffers) that
// the fetches decode chunks into, one per fetch running.
var chunkMessages = sync.Pool{New: func() any { return &dsortpb.ShuffleDataChunk{} }}

// errNoAddress: the master has not told this worker a sender's address yet.
var errNoAddress = errors.New("dsort: sender's address not known yet")

// pieceError is a receiver-side failure while storing a piece.
type pieceError struct{ err error }

func (e *pieceError) Error() string { return "dsort: store shuffle piece: " + e.err.Error() }
func (e *pieceError) Unwrap() error { return e.err }

func (f *fetcher) peerAddr(s int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.peers {
		if p.index == s {
			return p.addr
		}
	}
	return ""
}

func (f *fetcher) refreshPeers(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rep, err := f.asg.master.GetPeers(cctx, &dsortpb.PeersRequest{JobId: f.asg.jobID, Index: int32(f.asg.index)})
	if err != nil {
		return
	}
	f.mu.Lock()
	f.peers = peersFromPB(rep.GetPeers())
	f.mu.Unlock()
}

func (f *fetcher) client(addr string) (dsortpb.WorkerClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cc := f.conns[addr]
	if cc == nil {
		var err error
		if cc, err = dialPeer(addr, f.creds, f.metrics); err != nil {
			return nil, err
		}
		f.conns[addr] = cc
	}
	return dsortpb.NewWorkerClient(cc), nil
}

func (f *fetcher) tryFetch(ctx context.Context, addr string, s, p int) (err error) {
	c, err := f.client(addr)
	if err != nil {
		return err
	}
	req := &dsortpb.ShuffleRequest{JobId: f.asg.jobID, Receiver: int32(f.asg.index), ReceiverEpoch: f.asg.epoch, Partition: int32(p)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.ShuffleData(ctx, req, recvChunks)
	if err != nil {
		return err
	}
	rc := &pieceReceiver{format: f.format, dir: f.dir.recv(), addr: addr, sender: s, partition: p}
	// One message for the whole stream: chunkCodec decodes each chunk into
	// it, reusing its data buffer (rc.chunk keeps nothing of it); the next
	// stream reuses it in turn.
	msg := chunkMessages.Get().(*dsortpb.ShuffleDataChunk)
	defer chunkMessages.Put(msg)
	recv := func() (*dsortpb.ShuffleDataChunk, error) {
		if err := stream.RecvMsg(msg); err != nil {
			return nil, err
		}
		return msg, nil
	}
	if err := rc.receive(recv); err != nil {
		if rc.f != nil {
			f.logger.Info("discarded an incomplete shuffle piece", "sender", s, "sender_epoch", rc.epoch,
				"partition", p, "bytes", rc.off, "err", statusMessage(err))
		}
		rc.discard()
		return err
	}
	if err := rc.commit(f.dir.piecePath(p, s)); err != nil {
		return err
	}
	f.logger.Debug("piece received", "sender", s, "partition", p, "bytes", rc.off)
	f.metrics.shuffled(rc.off)
	return nil
}

// pieceReceiver stores one incoming piece in a staging file named after
// (partition, sender, sender epoch), checking every chunk.
type pieceReceiver struct {
	format    recordFormat
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
	if err := rc.format.checkChunk(ch.GetData()); err != nil {
		return fmt.Errorf("dsort: chunk from sender %d: %v", s, err)
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
