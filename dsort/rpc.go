package dsort

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantryhq/gantry/dsort/dsortpb"
)

// Sentinel errors. Typed errors below wrap them with details.
var (
	// ErrConfig: a MasterConfig or WorkerConfig failed validation.
	ErrConfig = errors.New("dsort: invalid config")
	// ErrAborted: the job was aborted (a worker failed or did not come back,
	// or the master was interrupted).
	ErrAborted = errors.New("dsort: job aborted")
	// ErrMasterLost: a worker could not reach its master for too long.
	ErrMasterLost = errors.New("dsort: lost contact with the master")
)

// AbortError says why a job was aborted. errors.Is(err, ErrAborted) holds.
type AbortError struct {
	Reason string
}

func (e *AbortError) Error() string { return "dsort: job aborted: " + e.Reason }

// Is makes errors.Is(err, ErrAborted) true.
func (e *AbortError) Is(target error) bool { return target == ErrAborted }

// tokenKey is the metadata key carrying the shared secret.
const tokenKey = "gantry-token"

// jobRequest is implemented by every request message (generated getter).
type jobRequest interface{ GetJobId() string }

// guard checks the shared token and the job ID of every incoming call.
type guard struct {
	token string
	// jobID returns the job's ID, or "" while it is not known yet (a worker
	// before registration): then only calls allowed without one pass.
	jobID func() string
	// open lists the full method names that accept an empty job ID.
	open map[string]bool
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
		return nil, err
	}
	if err := g.checkJob(info.FullMethod, req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (g *guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := g.checkToken(ss.Context()); err != nil {
		return err
	}
	return h(srv, &guardedStream{ServerStream: ss, g: g, method: info.FullMethod})
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

// ioBufferSize is the transport's read and write buffer per connection
// (gRPC's default is 32 KiB): shuffle chunks are 1 MiB, and bigger buffers
// mean fewer syscalls. This is not a flow-control window, so BDP
// estimation stays on.
const ioBufferSize = 512 << 10

func (g *guard) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream),
		grpc.WriteBufferSize(ioBufferSize), grpc.ReadBufferSize(ioBufferSize)}
}

// dial returns a client connection that sends token on every call. Flow
// control windows are left to gRPC's BDP estimation: setting any static
// window size would switch it off.
func dial(addr, token string) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithWriteBufferSize(ioBufferSize), grpc.WithReadBufferSize(ioBufferSize)}
	if token != "" {
		withToken := func(ctx context.Context) context.Context {
			return metadata.AppendToOutgoingContext(ctx, tokenKey, token)
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

// rpcError turns an error at the RPC boundary into a gRPC status, keeping
// statuses that already are one.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
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

// stateToPB and stateFromPB convert at the RPC boundary; the enums share
// numbering.
func stateToPB(s State) dsortpb.WorkerState   { return dsortpb.WorkerState(s) }
func stateFromPB(s dsortpb.WorkerState) State { return State(s) }
func phaseOf(s State) dsortpb.Phase           { return dsortpb.Phase(phaseIndex(s)) }
func identity(host string, in []string, out string) string {
	return host + "\x00" + strings.Join(in, "\x00") + "\x00\x00" + out
}

// phaseIndex maps a state to the coarse phase of seed 000 §7: waiting
// states count as the phase they wait after.
func phaseIndex(s State) int {
	switch s {
	case Initializing:
		return 0
	case Sampling, WaitingForPartitionConfig:
		return 1
	case Sorting, WaitingForShuffleSignal:
		return 2
	case Shuffling, WaitingForMergeSignal:
		return 3
	case Merging:
		return 4
	case Completed:
		return 5
	}
	return 6
}
