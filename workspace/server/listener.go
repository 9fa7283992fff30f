package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// The defaults of ServerConfig's connection fields.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxConns          = 4096
	DefaultMaxConnsPerAddr   = 256
)

// refuseWindow is how long a connection refused for the limits may live:
// long enough to send its request and read the 503, no longer.
const refuseWindow = 2 * time.Second

// maxRefusing bounds the refused connections answered at once; past it a
// refused connection is closed without an answer (a flood's cost stays
// bounded).
const maxRefusing = 128

// connDefaults fills in the connection fields' defaults: zero is the
// default, negative is none (0 in the result). The default MaxConns is
// lowered to half the process's file descriptor limit (a proxied
// connection holds two), less a reserve for the database and logs.
func (cfg *ServerConfig) connDefaults() {
	pick := func(v *time.Duration, def time.Duration) {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			*v = 0
		}
	}
	pick(&cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	pick(&cfg.ReadTimeout, DefaultReadTimeout)
	pick(&cfg.WriteTimeout, DefaultWriteTimeout)
	pick(&cfg.IdleTimeout, DefaultIdleTimeout)
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur/2 < DefaultMaxConns+64 {
			cfg.MaxConns = max(64, int(lim.Cur/2)-64)
		}
	}
	if cfg.MaxConnsPerAddr == 0 {
		cfg.MaxConnsPerAddr = DefaultMaxConnsPerAddr
	}
}

// httpServer is the API's http.Server under cfg: the timeouts bound every
// request but the streams (API.IsStream), which clear their deadlines;
// connections refused by the limit listener get a 503.
func httpServer(cfg ServerConfig, h streamHandler) *http.Server {
	return &http.Server{
		Handler:           refuseOrBound(h),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
				c = tc.NetConn()
			}
			if rc, ok := c.(*refusedConn); ok {
				return context.WithValue(ctx, refusedKey{}, rc.why)
			}
			return ctx
		},
	}
}

type refusedKey struct{}

// streamHandler is the API: a handler that knows its streams.
type streamHandler interface {
	http.Handler
	IsStream(r *http.Request) bool
}

// refuseOrBound answers a request on a refused connection 503 (and closes
// it); on any other it sets the deadlines: a stream clears the server's
// read and write deadlines, a request without a body clears the read
// deadline (nothing is left to read, and net/http would cancel a long
// handler's context when it passes), and a body's deadline is cleared once
// the body has arrived whole.
func refuseOrBound(h streamHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why, ok := r.Context().Value(refusedKey{}).(string); ok {
			if r.ProtoMajor == 1 {
				w.Header().Set("Connection", "close")
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, why+"\n")
			return
		}
		rc := http.NewResponseController(w)
		switch {
		case h.IsStream(r):
			rc.SetReadDeadline(time.Time{})
			rc.SetWriteDeadline(time.Time{})
		case r.Body == nil || r.Body == http.NoBody:
			rc.SetReadDeadline(time.Time{})
		default:
			r.Body = &bodyDeadline{ReadCloser: r.Body, rc: rc}
		}
		h.ServeHTTP(w, r)
	})
}

// bodyDeadline clears the connection's read deadline once the body has
// been read to its end.
type bodyDeadline struct {
	io.ReadCloser
	rc *http.ResponseController
}

func (b *bodyDeadline) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// limitListener admits at most max connections in all and perAddr from
// one remote IP address (loopback clients too); a limit of zero is none.
// A connection past a limit is accepted and refused: it gets a 503 that
// says which limit (refuseOrBound) and a hard deadline of refuseWindow,
// or, past maxRefusing such at once, is closed unanswered. (A 503 is
// clearer than a reset, and is HTTP over TLS too, which raw bytes written
// here would not be.)
type limitListener struct {
	net.Listener
	max, perAddr int

	// mu protects the fields below. Invariant: total and byAddr count the
	// admitted connections not yet closed; byAddr has no zero entry.
	mu       sync.Mutex
	total    int
	byAddr   map[string]int
	refusing int
}

func newLimitListener(ln net.Listener, maxConns, perAddr int) *limitListener {
	return &limitListener{Listener: ln, max: max(maxConns, 0), perAddr: max(perAddr, 0), byAddr: map[string]int{}}
}

// Accept returns the next connection, admitted or refused.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := hostOf(c.RemoteAddr())
		l.mu.Lock()
		why := l.overLocked(addr)
		switch {
		case why == "":
			l.total++
			l.byAddr[addr]++
			l.mu.Unlock()
			return &countedConn{Conn: c, l: l, addr: addr}, nil
		case l.refusing < maxRefusing:
			l.refusing++
			l.mu.Unlock()
			rc := &refusedConn{Conn: c, l: l, why: why, end: time.Now().Add(refuseWindow)}
			rc.SetDeadline(rc.end)
			return rc, nil
		}
		l.mu.Unlock()
		c.Close()
	}
}

// overLocked says which limit a new connection from addr is past ("" if
// none).
func (l *limitListener) overLocked(addr string) string {
	switch {
	case l.perAddr > 0 && l.byAddr[addr] >= l.perAddr:
		return fmt.Sprintf("too many connections from %s (limit %d per address); retry later", addr, l.perAddr)
	case l.max > 0 && l.total >= l.max:
		return fmt.Sprintf("too many connections (limit %d); retry later", l.max)
	}
	return ""
}

func hostOf(a net.Addr) string {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// countedConn is an admitted connection; closing it frees its place.
type countedConn struct {
	net.Conn
	l    *limitListener
	addr string
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.total--
		if c.l.byAddr[c.addr]--; c.l.byAddr[c.addr] <= 0 {
			delete(c.l.byAddr, c.addr)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// closeWrite half-closes c if it can: net/http sends its FIN at once when
// it closes a connection after an answer, instead of waiting.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *countedConn) CloseWrite() error { return closeWrite(c.Conn) }
func (c *refusedConn) CloseWrite() error { return closeWrite(c.Conn) }

// refusedConn is a connection past a limit: net/http's deadlines may
// shorten its end (at accept + refuseWindow), never extend it.
type refusedConn struct {
	net.Conn
	l    *limitListener
	why  string
	end  time.Time
	once sync.Once
}

// clamp is d, but no later than c's end (a zero d: the end).
func (c *refusedConn) clamp(d time.Time) time.Time {
	if d.IsZero() || d.After(c.end) {
		return c.end
	}
	return d
}

func (c *refusedConn) SetDeadline(d time.Time) error      { return c.Conn.SetDeadline(c.clamp(d)) }
func (c *refusedConn) SetReadDeadline(d time.Time) error  { return c.Conn.SetReadDeadline(c.clamp(d)) }
func (c *refusedConn) SetWriteDeadline(d time.Time) error { return c.Conn.SetWriteDeadline(c.clamp(d)) }

func (c *refusedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.refusing--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
