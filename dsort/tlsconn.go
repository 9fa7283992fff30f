package dsort

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// tlsCreds is gRPC transport credentials over crypto/tls that hand the
// kernel a write's TLS records together. crypto/tls writes each record
// (16 KiB at most) with a syscall of its own, so a 512 KiB gRPC flush of
// shuffle data took 32 writes where plaintext takes one; here the records
// of one Write are gathered (batchConn) and written at its end. The serving
// side logs refused handshakes (at most one a second).
type tlsCreds struct {
	cfg     *tls.Config // NextProtos h2; the client's ServerName comes from the target
	refused *refusals   // nil: refusals are not logged (the dialing side)
}

// newTLSCreds makes credentials of cfg; the serving side gives the logger
// that hears refused handshakes, the dialing side nil.
func newTLSCreds(cfg *tls.Config, logger *slog.Logger) *tlsCreds {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	c := &tlsCreds{cfg: cfg}
	if logger != nil {
		c.refused = &refusals{logger: logger}
	}
	return c
}

func (c *tlsCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg := c.cfg
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = authority
		if host, _, err := net.SplitHostPort(authority); err == nil {
			cfg.ServerName = host
		}
	}
	b := newBatchConn(raw)
	conn := tls.Client(b, cfg)
	if err := b.handshakeDone(conn.HandshakeContext(ctx)); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return &tlsConn{Conn: conn, b: b}, tlsInfo(conn), nil
}

// ServerHandshake logs a refusal (refusals.note) and closes so that the
// client hears it (lingerClose); gRPC has set the raw connection's deadline
// for the handshake.
func (c *tlsCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	b := newBatchConn(raw)
	conn := tls.Server(b, c.cfg)
	if err := b.handshakeDone(conn.Handshake()); err != nil {
		c.refused.note(raw.RemoteAddr(), err)
		_, plaintext := errors.AsType[tls.RecordHeaderError](err)
		ne, isNet := errors.AsType[net.Error](err)
		if plaintext || errors.Is(err, io.EOF) || isNet && ne.Timeout() { // nothing to hear, or nobody listening
			conn.Close()
		} else {
			lingerClose(b)
		}
		return nil, nil, err
	}
	return &tlsConn{Conn: conn, b: b}, tlsInfo(conn), nil
}

// lingerTimeout bounds how long a refused connection is read after its
// alert was sent.
const lingerTimeout = 2 * time.Second

// lingerClose closes a connection whose handshake this side refused so that
// the peer reads the alert: with TLS 1.3 the client's handshake is over
// before the server checks its certificate, and the client writes at once;
// a close with that write unread resets the connection, and the client's
// next write fails with "connection reset by peer" before it reads the
// alert. So: send the alert, close the writing side, read what the client
// sends until it closes (or lingerTimeout), then close.
func lingerClose(b *batchConn) {
	b.flush()
	if hc, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite()
		b.Conn.SetReadDeadline(time.Now().Add(lingerTimeout))
		io.Copy(io.Discard, io.LimitReader(b.Conn, 1<<20))
	}
	b.Conn.Close()
}

func tlsInfo(conn *tls.Conn) credentials.TLSInfo {
	return credentials.TLSInfo{State: conn.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
}

func (c *tlsCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (c *tlsCreds) Clone() credentials.TransportCredentials {
	return &tlsCreds{cfg: c.cfg.Clone(), refused: c.refused}
}

// OverrideServerName is gRPC's deprecated hook; the target names the server.
func (c *tlsCreds) OverrideServerName(name string) error {
	c.cfg = c.cfg.Clone()
	c.cfg.ServerName = name
	return nil
}

// refusals logs refused handshakes on the serving side, at most one a
// second (an outsider cannot flood the log; each line counts those left
// out since the last); a connection closed before it said anything (a
// port probe) is not one.
type refusals struct {
	logger  *slog.Logger
	mu      sync.Mutex // protects last and skipped
	last    time.Time  // when the last refusal was logged
	skipped int        // refusals not logged since
}

func (r *refusals) note(from net.Addr, err error) {
	if r == nil || errors.Is(err, io.EOF) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.last) >= time.Second {
		r.logger.Warn("refused a TLS handshake", "from", from.String(), "err", err, "not_logged_since_last", r.skipped)
		r.last, r.skipped = now, 0
	} else {
		r.skipped++
	}
}

// batchMax is how much batchConn gathers before it writes: a gRPC flush
// (ioBufferSize) and its records' overhead.
const batchMax = ioBufferSize + 64<<10

// batchConn gathers what crypto/tls writes (its records) until flush: at
// the end of each tlsConn.Write, at close, and during the handshake before
// every read (a message goes out before its answer is awaited). After the
// handshake a read never flushes: it would wait for a writer blocked on a
// full socket while the peer waits for this side to read. What crypto/tls
// itself writes on the read path then (an alert, a key update's answer)
// goes out with the next write; gRPC writes often (window updates, pings).
// Safe for one reader and one writer at once, as net.Conn must be.
type batchConn struct {
	net.Conn
	mu sync.Mutex // protects buf, pooled and the writes to Conn
	// buf gathers the records; between writes the connection holds no
	// buffer (pooled: nil): the buffers (batchMax each) are shared by all
	// connections through batchBufs, so the heap holds one per connection
	// writing at the moment, not one per connection.
	buf    []byte
	pooled *[]byte // what buf came from
	// handshaking is read without mu: a read must never wait for mu, which
	// a writer blocked on a full socket holds.
	handshaking atomic.Bool
}

func newBatchConn(raw net.Conn) *batchConn {
	b := &batchConn{Conn: raw}
	b.handshaking.Store(true)
	return b
}

// handshakeDone flushes the handshake's last messages (the client's
// Finished, the server's session tickets) and ends the handshake's
// flushing reads; it returns the handshake's error.
func (b *batchConn) handshakeDone(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.handshaking.Store(false)
	if err != nil {
		return err
	}
	return b.flushLocked()
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf)+len(p) > batchMax {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(p) > batchMax {
		return b.Conn.Write(p)
	}
	if b.pooled == nil {
		b.pooled = batchBufs.Get().(*[]byte)
		b.buf = (*b.pooled)[:0]
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// batchBufs holds the batchConns' buffers while they are not writing.
var batchBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, batchMax)
	return &b
}}

func (b *batchConn) flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

func (b *batchConn) flushLocked() error {
	if b.pooled == nil {
		return nil
	}
	var err error
	if len(b.buf) > 0 {
		_, err = b.Conn.Write(b.buf)
	}
	*b.pooled = b.buf[:0]
	batchBufs.Put(b.pooled)
	b.buf, b.pooled = nil, nil
	return err
}

func (b *batchConn) Read(p []byte) (int, error) {
	if b.handshaking.Load() {
		if err := b.flush(); err != nil {
			return 0, err
		}
	}
	return b.Conn.Read(p)
}

// Close sends what is gathered (a close_notify alert) unless a write is
// under way, then closes: a Close meant to break a write blocked on a full
// socket (crypto/tls then closes without an alert) must not wait for it.
func (b *batchConn) Close() error {
	var ferr error
	if b.mu.TryLock() {
		ferr = b.flushLocked()
		b.mu.Unlock()
	}
	if err := b.Conn.Close(); err != nil {
		return err
	}
	return ferr
}

// tlsConn is a TLS connection whose every Write ends with the records it
// made written to the network at once.
type tlsConn struct {
	*tls.Conn
	b *batchConn
}

func (c *tlsConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if ferr := c.b.flush(); err == nil {
		err = ferr
	}
	return n, err
}

// Close sends a close_notify alert unless a write is under way (it may be
// blocked on a full socket: a Close is then meant to break it, and
// crypto/tls would wait up to 5 s to send the alert behind it).
func (c *tlsConn) Close() error {
	if !c.b.mu.TryLock() {
		c.b.Conn.Close() // breaks the write; crypto/tls then fails fast
		return c.Conn.Close()
	}
	c.b.mu.Unlock()
	return c.Conn.Close()
}
