package dsort

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/lifecycle"
)

// This file is dsort's RPC boundary: dialing, the token and job-ID
// interceptors, the mapping between dsort's errors and gRPC status codes,
// and finding the address other hosts can reach.

// tokenKey is the metadata key carrying the shared secret.
const tokenKey = "gantry-token"

// ioBufferSize is the transport's read and write buffer per connection
// (gRPC's default is 32 KiB): shuffle chunks are 1 MiB, and bigger buffers
// mean fewer syscalls. This is not a flow-control window, so BDP
// estimation stays on.
const ioBufferSize = 512 << 10

// jobRequest is implemented by every request message (generated getter).
type jobRequest interface{ GetJobId() string }

// guard checks the shared token and the job ID of every incoming call.
type guard struct {
	token   string
	metrics *metrics // counts the calls answered with an error
	// jobID returns the job's ID, or "" while it is not known yet (a worker
	// before registration): then only calls allowed without one pass.
	jobID func() string
	// open lists the full method names that accept an empty job ID.
	open map[string]bool
	// logger, when set, hears every refused call with its reason, so that
	// a worker turned away is never silent on the master's side.
	logger *slog.Logger
	// tls, when set, is the server side of the job's mutual TLS.
	tls credentials.TransportCredentials
}

// refusedCall logs a call the server answered with an error.
func (g *guard) refusedCall(ctx context.Context, method string, err error) {
	if g.logger == nil || err == nil {
		return
	}
	from := "unknown"
	if p, ok := grpcpeer.FromContext(ctx); ok {
		from = p.Addr.String()
	}
	g.logger.Warn("refused call", "method", path.Base(method), "from", from, "code", status.Code(err), "reason", statusMessage(err))
}

func (g *guard) checkToken(ctx context.Context) error {
	if g.token == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(tokenKey)
	if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), []byte(g.token)) != 1 {
		return status.Error(codes.Unauthenticated, "dsort: missing or wrong token")
	}
	return nil
}

func (g *guard) checkJob(method string, req any) error {
	r, ok := req.(jobRequest)
	if !ok {
		return status.Errorf(codes.InvalidArgument, "dsort: %s: request carries no job ID", method)
	}
	got, want := r.GetJobId(), g.jobID()
	switch {
	case got == "" && g.open[method]:
		return nil
	case want == "":
		return status.Error(codes.Unavailable, "dsort: this worker has not joined a job yet")
	case got != want:
		return status.Errorf(codes.FailedPrecondition, "dsort: call for job %q, but this is job %q", got, want)
	}
	return nil
}

func (g *guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := g.checkToken(ctx); err != nil {
		g.refusedCall(ctx, info.FullMethod, err)
		return nil, err
	}
	if err := g.checkJob(info.FullMethod, req); err != nil {
		g.refusedCall(ctx, info.FullMethod, err)
		return nil, err
	}
	resp, err := h(ctx, req)
	if err != nil {
		g.metrics.rpcError("server", path.Base(info.FullMethod))
		g.refusedCall(ctx, info.FullMethod, err)
	}
	return resp, err
}

func (g *guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := g.checkToken(ss.Context()); err != nil {
		return err
	}
	err := h(srv, &guardedStream{ServerStream: ss, g: g, method: info.FullMethod})
	if err != nil {
		g.metrics.rpcError("server", path.Base(info.FullMethod))
	}
	return err
}

// guardedStream checks the job ID of each message the handler receives.
type guardedStream struct {
	grpc.ServerStream
	g      *guard
	method string
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.g.checkJob(s.method, m)
}

func (g *guard) serverOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream),
		grpc.WriteBufferSize(ioBufferSize), grpc.ReadBufferSize(readBufferSize(g.tls != nil)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: peerPingMin}),
		// Stop waits for the handlers too: a worker frees the memory its
		// ShuffleData handlers read only after stopping its server.
		grpc.WaitForHandlers(true)}
	if g.tls != nil {
		opts = append(opts, grpc.Creds(g.tls))
	}
	return opts
}

// statusOf turns an error a handler returns into a gRPC status: dsort's
// sentinels map to their codes, statuses pass through, anything else is
// Internal. It is the only place that chooses a code for dsort's errors.
func statusOf(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}

func codeOf(err error) codes.Code {
	for _, c := range []struct {
		target error
		code   codes.Code
	}{
		{ErrBadRequest, codes.InvalidArgument},
		{ErrUnknownWorker, codes.NotFound},
		{ErrStaleEpoch, codes.FailedPrecondition},
		{ErrWrongState, codes.FailedPrecondition},
		{ErrJobEnded, codes.FailedPrecondition},
		{ErrJobSucceeded, codes.AlreadyExists},
		{ErrJobFull, codes.ResourceExhausted},
		{ErrNotReady, codes.Unavailable},
		{ErrNotOwner, codes.PermissionDenied},
		{context.Canceled, codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
	} {
		if errors.Is(err, c.target) {
			return c.code
		}
	}
	return codes.Internal
}

// retryable reports whether an RPC error may go away by itself.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// succeeded reports whether the master answered that the job has already
// succeeded (ErrJobSucceeded on its side).
func succeeded(err error) bool { return status.Code(err) == codes.AlreadyExists }

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
		return plainDialError(s.Message())
	}
	return err.Error()
}

// plainDialError turns gRPC's message for a connection it could not make
// (`connection error: desc = "transport: Error while dialing: dial tcp
// ADDR: connect: connection refused"`) into the dial error it wraps; any
// other message is returned as it is.
func plainDialError(msg string) string {
	const mark = "transport: Error while dialing: "
	if _, dialErr, ok := strings.Cut(msg, mark); ok && strings.HasPrefix(msg, "connection error: desc = ") {
		return strings.TrimSuffix(dialErr, `"`)
	}
	return msg
}

// dial returns a client connection that sends token on every call. Flow
// control windows are left to gRPC's BDP estimation: setting any static
// window size would switch it off.
func dial(addr string, c creds) (*grpc.ClientConn, error) { return dialMetered(addr, c, nil) }

// Shuffle data flows into a worker over its connections to its peers,
// whose flow-control windows bound how much of it gRPC holds (in buffers
// of its own) before the fetcher reads it: with BDP estimation they grow
// to 16 MiB each, so they are static, shuffleStreamWindow per stream
// (two 1 MiB chunks: the sender keeps sending while the receiver stores
// one) and shuffleConnWindow per connection (a peer serves at most two
// of a worker's FetchParallel streams at once).
const (
	shuffleStreamWindow = 2 << 20
	shuffleConnWindow   = 2 * shuffleStreamWindow
)

// A connection to a peer pings it while streams are open, and gives up on
// it when a ping goes unanswered: a peer whose host vanished (a container
// killed, a machine powered off, a network cut) sends no reset, and a
// fetch only receiving from it would otherwise wait for its next chunk
// for ever, where the retry would find the peer's restarted process. gRPC
// pings no more often than every 10 s; servers accept pings that often
// (peerPingMin), where gRPC's default would refuse them for 5 minutes.
const (
	peerPingEvery   = 10 * time.Second
	peerPingTimeout = 5 * time.Second
	peerPingMin     = 5 * time.Second
)

// dialPeer is dialMetered for a connection to a peer, which carries
// shuffle data to this worker: with static flow-control windows and pings
// while a fetch runs.
func dialPeer(addr string, c creds, m *metrics) (*grpc.ClientConn, error) {
	return dialMetered(addr, c, m,
		grpc.WithStaticStreamWindowSize(shuffleStreamWindow), grpc.WithStaticConnWindowSize(shuffleConnWindow),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: peerPingEvery, Timeout: peerPingTimeout}))
}

// readBufferSize is the gRPC read buffer of a connection: ioBufferSize in
// plaintext, none over TLS, where crypto/tls holds the decrypted record and
// reads from the socket itself: a buffer would only copy each record once
// more and hold 512 KiB of heap per connection.
func readBufferSize(tls bool) int {
	if tls {
		return 0
	}
	return ioBufferSize
}

// dialMetered is dial that also counts failed calls in m; extra options
// are added.
func dialMetered(addr string, c creds, m *metrics, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(c.transport()),
		grpc.WithWriteBufferSize(ioBufferSize), grpc.WithReadBufferSize(readBufferSize(c.tls != nil))}, extra...)
	if m != nil {
		opts = append(opts, grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
			err := inv(ctx, method, req, reply, cc, o...)
			if err != nil {
				m.rpcError("client", path.Base(method))
			}
			return err
		}))
	}
	if c.token != "" {
		withToken := func(ctx context.Context) context.Context {
			return metadata.AppendToOutgoingContext(ctx, tokenKey, c.token)
		}
		opts = append(opts,
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
				return inv(withToken(ctx), method, req, reply, cc, o...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, st grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
				return st(withToken(ctx), desc, cc, method, o...)
			}))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dsort: dial %s: %w", addr, err)
	}
	return cc, nil
}

// JobStatus asks the master at addr for the job's status, sending token
// when it is set, over TLS when files name a certificate. Errors carry the
// master's message without gRPC's decoration.
func JobStatus(ctx context.Context, addr, token string, files TLSFiles) (JobInfo, error) {
	sec, err := loadTLS(files, nil)
	if err != nil {
		return JobInfo{}, err
	}
	cc, err := dial(addr, creds{token: token, tls: sec.client})
	if err != nil {
		return JobInfo{}, err
	}
	defer cc.Close()
	js, err := dsortpb.NewMasterClient(cc).GetJobStatus(ctx, &dsortpb.JobStatusRequest{})
	switch status.Code(err) {
	case codes.OK:
		return jobInfoFromPB(js), nil
	case codes.Unavailable, codes.DeadlineExceeded:
		if msg := statusMessage(err); handshakeRefused(msg) {
			return JobInfo{}, fmt.Errorf("dsort: the TLS handshake with the master at %s failed: %s", addr, msg)
		} else if !files.Enabled() && strings.Contains(msg, "error reading server preface") {
			return JobInfo{}, fmt.Errorf("dsort: the master at %s closed a plaintext connection: it serves TLS (give --tls-cert, --tls-key and --tls-ca; gantry sort certs makes client.crt for this)", addr)
		}
		// Nothing listens there (a master exits once its job has ended),
		// or nothing answers: gRPC's dial error says the same less
		// plainly.
		return JobInfo{}, fmt.Errorf("dsort: no master answers at %s: the job may have ended (or the master is not running)", addr)
	}
	return JobInfo{}, fmt.Errorf("dsort: job status from %s: %s", addr, statusMessage(err))
}

// hostOf returns the host part of a host:port address.
func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

// outboundIP returns the local IP used to reach addr (no packet is sent: a
// UDP "connection" only selects a route), or "" if there is no route.
func outboundIP(addr string) string {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return ""
	}
	defer c.Close()
	return hostOf(c.LocalAddr().String())
}

// reachableIP picks the address other hosts can use to reach this one: the
// source address of the default route, else the first non-loopback
// interface address, else 127.0.0.1.
func reachableIP() string {
	if ip := outboundIP("192.0.2.1:9"); ip != "" { // TEST-NET-1: never contacted
		return ip
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// serve starts srv on ln in its own goroutine and returns a function that
// stops it (gracefully, forcefully after 2s) and waits for that goroutine.
func serve(srv *grpc.Server, ln net.Listener) (stop func()) {
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	return func() {
		lifecycle.StopWithin(2*time.Second, srv.GracefulStop, srv.Stop)
		<-done
	}
}
