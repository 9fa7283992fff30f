package dsort

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/gantryhq/gantry/dsort/dsortpb"
)

// freezingProxy forwards TCP connections to upstream until freeze, after
// which it forwards nothing more but keeps every connection open: what a
// peer whose host vanished looks like (no reset, no reply).
type freezingProxy struct {
	ln     net.Listener
	frozen chan struct{}
	once   sync.Once

	mu    sync.Mutex
	conns []net.Conn // both ends of every connection, closed at the test's end
}

func newFreezingProxy(t *testing.T, upstream string) *freezingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{ln: ln, frozen: make(chan struct{})}
	t.Cleanup(p.cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go p.pipe(c, u)
			go p.pipe(u, c)
		}
	}()
	return p
}

func (p *freezingProxy) freeze() { p.once.Do(func() { close(p.frozen) }) }

// cut closes the listener and every connection: what a host whose process
// died looks like (each connection ends, a new one is refused).
func (p *freezingProxy) cut() {
	p.ln.Close()
	p.freeze()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// pipe copies src to dst until frozen; then it stops reading src.
func (p *freezingProxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.frozen:
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// stallingWorker serves ShuffleData with one chunk, then nothing until the
// call ends.
type stallingWorker struct {
	dsortpb.UnimplementedWorkerServer
}

func (stallingWorker) ShuffleData(req *dsortpb.ShuffleRequest, stream grpc.ServerStreamingServer[dsortpb.ShuffleDataChunk]) error {
	if err := stream.Send(&dsortpb.ShuffleDataChunk{Partition: req.GetPartition(), Data: make([]byte, 100)}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// A fetch from a peer that vanishes mid-stream (it sends no reset: its
// host is gone) fails once the connection's ping goes unanswered, within
// peerPingEvery + peerPingTimeout and some slack, so that the fetch is
// retried against the peer's restarted process instead of waiting for ever.
//
// It takes 15 s: gRPC pings no more often than every 10 s, whatever a
// client asks for, so the time cannot be shortened; -short skips it and
// `make test` runs it.
func TestFetchFromAVanishedPeerFails(t *testing.T) {
	if testing.Short() {
		t.Skip("15 s (gRPC's 10 s minimum between pings, plus the 5 s ping timeout): skipped by -short")
	}
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &guard{jobID: func() string { return "" }, open: map[string]bool{dsortpb.Worker_ShuffleData_FullMethodName: true}}
	srv := grpc.NewServer(g.serverOptions()...)
	dsortpb.RegisterWorkerServer(srv, stallingWorker{})
	go srv.Serve(ln)
	defer srv.Stop()
	proxy := newFreezingProxy(t, ln.Addr().String())

	cc, err := dialPeer(proxy.ln.Addr().String(), creds{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := dsortpb.NewWorkerClient(cc).ShuffleData(t.Context(), &dsortpb.ShuffleRequest{Partition: 3})
	if err != nil {
		t.Fatal(err)
	}
	if ch, err := stream.Recv(); err != nil || ch.GetPartition() != 3 {
		t.Fatalf("first chunk: %v, %v", ch, err)
	}
	proxy.freeze()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := stream.Recv()
		done <- err
	}()
	bound := peerPingEvery + peerPingTimeout + 10*time.Second
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a chunk came through a frozen connection")
		}
		t.Logf("the fetch failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(bound): // poll: the bound the fetch must fail within
		t.Fatalf("the fetch from a vanished peer still waits after %s", bound)
	}
}
