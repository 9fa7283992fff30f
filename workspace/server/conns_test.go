package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/provider/fake"
)

// connServer runs a server over the fake provider with cfg's connection
// fields; it returns the API's address and the admin token.
func connServer(tb testing.TB, cfg ServerConfig) (addr, token string) {
	tb.Helper()
	fk := fake.New(0)
	cfg.Data = filepath.Join(tb.TempDir(), "data")
	cfg.Listen, cfg.Container, cfg.Storage = "127.0.0.1:0", fk, fk
	ready := make(chan string, 1)
	cfg.Ready = func(a string) { ready <- a }
	ctx, cancel := context.WithCancel(context.WithoutCancel(tb.Context()))
	srv, err := NewServer(ctx, cfg)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	select {
	case addr = <-ready:
	case err := <-done:
		tb.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(cfg.Data, AdminTokenFile))
	if err != nil {
		tb.Fatal(err)
	}
	return addr, strings.TrimSpace(string(b))
}

// raiseNoFile makes sure the process may hold need file descriptors,
// raising the soft limit up to the hard one; it skips if it cannot.
func raiseNoFile(tb testing.TB, need uint64) {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Skipf("getrlimit: %v", err)
	}
	if lim.Cur >= need {
		return
	}
	if lim.Max < need {
		tb.Skipf("this test holds %d file descriptors; the hard limit (ulimit -Hn) is %d", need, lim.Max)
	}
	old := lim.Cur
	lim.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Skipf("setrlimit to %d: %v", need, err)
	}
	tb.Logf("raised the soft file descriptor limit from %d to %d", old, need)
}

// dialFrom dials addr from the loopback address local (127.0.0.x): the
// per-address limit tells them apart.
func dialFrom(local, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// eachConn runs f on n connections to addr at once (dialled 64 at a time)
// and returns how many f reported closed by the server.
func eachConn(t *testing.T, addr string, n int, f func(c net.Conn) (closed bool, err error)) int {
	t.Helper()
	var closedN atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	errs := make(chan error, n)
	for range n {
		sem <- struct{}{}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		<-sem
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer c.Close()
			closed, err := f(c)
			if err != nil {
				errs <- err
			}
			if closed {
				closedN.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return int(closedN.Load())
}

// untilClosed reads c until the server closes it (true) or until within
// passes (false).
func untilClosed(c net.Conn, r io.Reader, within time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestIdleKeepAliveConnectionsAreClosed: 2,000 unauthenticated clients
// that make one request (401, kept alive) and then hold their connection
// are each closed by the idle timeout (without it they were held until
// the file descriptors ran out).
func TestIdleKeepAliveConnectionsAreClosed(t *testing.T) {
	const n = 2000
	raiseNoFile(t, 2*n+512)
	addr, _ := connServer(t, ServerConfig{IdleTimeout: 300 * time.Millisecond, MaxConns: -1, MaxConnsPerAddr: -1})
	t0 := time.Now()
	closed := eachConn(t, addr, n, func(c net.Conn) (bool, error) {
		if _, err := io.WriteString(c, "GET /v1/whoami HTTP/1.1\r\nHost: gantry\r\n\r\n"); err != nil {
			return false, err
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return false, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 || resp.Close { // 401, or 429 once the address is throttled
			return false, errors.New("GET /v1/whoami: " + resp.Status + " (or not kept alive)")
		}
		return untilClosed(c, br, 15*time.Second), nil
	})
	if closed != n {
		t.Fatalf("%d of %d idle keep-alive connections closed by the server, want all", closed, n)
	}
	t.Logf("%d idle connections closed within %v (idle timeout 300ms)", n, time.Since(t0).Round(time.Millisecond))
}

// TestSlowBodyLoginsAreCut: 2,000 unauthenticated logins whose body
// trickles in (a byte every 100 ms of a declared 4 KiB) are each cut by
// the read timeout.
func TestSlowBodyLoginsAreCut(t *testing.T) {
	const n = 2000
	raiseNoFile(t, 2*n+512)
	addr, token := connServer(t, ServerConfig{ReadTimeout: 500 * time.Millisecond, MaxConns: -1, MaxConnsPerAddr: -1})
	t0 := time.Now()
	closed := eachConn(t, addr, n, func(c net.Conn) (bool, error) {
		head := "POST /v1/session HTTP/1.1\r\nHost: gantry\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{"
		if _, err := io.WriteString(c, head); err != nil {
			return false, err
		}
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); {
			if _, err := io.WriteString(c, " "); err != nil {
				return true, nil // the server closed it
			}
			// real time: the client's pace, a byte per 100 ms
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); !isTimeout(err) {
				return untilClosed(c, c, 5*time.Second), nil // an answer, then the close, or the close
			}
		}
		return false, nil
	})
	if closed != n {
		t.Fatalf("%d of %d slow-body logins cut by the server, want all", closed, n)
	}
	t.Logf("%d slow-body logins cut within %v (read timeout 500ms)", n, time.Since(t0).Round(time.Millisecond))
	// A login at an ordinary pace still works.
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/session", strings.NewReader(`{"token":"`+token+`"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a login after the flood: %s", resp.Status)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestConnectionLimitsRefuse: a connection past the per-address limit,
// and past the global one, gets a 503 that names the limit; another
// address is still served; a closed connection frees its place.
func TestConnectionLimitsRefuse(t *testing.T) {
	addr, _ := connServer(t, ServerConfig{MaxConns: 6, MaxConnsPerAddr: 3})
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	hold := func(local string) {
		c, err := dialFrom(local, addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if code, body := get(t, c); code != http.StatusUnauthorized {
			t.Fatalf("connection %d from %s: %d %q, want 401 (served)", len(held), local, code, body)
		}
	}
	refused := func(local, want string) {
		t.Helper()
		c, err := dialFrom(local, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if code, body := get(t, c); code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
			t.Fatalf("past the limit from %s: %d %q, want 503 saying %q", local, code, body, want)
		}
		if !untilClosed(c, c, 5*time.Second) {
			t.Fatal("a refused connection stays open")
		}
	}
	for range 3 {
		hold("127.0.0.2")
	}
	refused("127.0.0.2", "too many connections from 127.0.0.2 (limit 3 per address)")
	for range 3 {
		hold("127.0.0.3")
	}
	refused("127.0.0.4", "too many connections (limit 6)")
	held[0].Close()
	held = held[1:]
	// A freed place is taken, once the server has seen the close.
	testutil.WaitFor(t, 5*time.Second, "a place freed", func() (bool, string) {
		c, err := dialFrom("127.0.0.4", addr)
		if err != nil {
			t.Fatal(err)
		}
		code, body := get(t, c)
		if code != http.StatusUnauthorized {
			c.Close()
			return false, fmt.Sprint(code, " ", body)
		}
		held = append(held, c)
		return true, ""
	})
}

// get sends GET /v1/whoami without a token on c and reads the answer.
func get(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET /v1/whoami HTTP/1.1\r\nHost: gantry\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// flood fills the server's connection limits from 127.0.0.2–5 (holders
// that keep a keep-alive connection each) and has 32 workers from
// 127.0.0.6 open a connection, send a bad-token request and close, over
// and over, while good sends an authenticated request through a
// connection opened before. It returns how many flood connections got
// the 503 and how many got anything else.
func flood(tb testing.TB, addr string, good func()) (refused, other int64) {
	ctx, cancel := context.WithCancel(tb.Context())
	defer cancel()
	var wg sync.WaitGroup
	var held []net.Conn
	defer func() {
		cancel()
		wg.Wait()
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range 4 * 16 {
		c, err := dialFrom(fmt.Sprintf("127.0.0.%d", 2+i%4), addr)
		if err != nil {
			tb.Fatal(err)
		}
		held = append(held, c)
		io.WriteString(c, "GET /v1/whoami HTTP/1.1\r\nHost: gantry\r\n\r\n")
	}
	var nRefused, nOther atomic.Int64
	for range 32 {
		wg.Go(func() {
			buf := make([]byte, 512)
			for ctx.Err() == nil {
				c, err := dialFrom("127.0.0.6", addr)
				if err != nil {
					continue
				}
				io.WriteString(c, "GET /v1/whoami HTTP/1.1\r\nHost: gantry\r\nAuthorization: Bearer gws_nope\r\n\r\n")
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, _ := io.ReadAtLeast(c, buf, 12)
				if n >= 12 && string(buf[9:12]) == "503" {
					nRefused.Add(1)
				} else {
					nOther.Add(1)
				}
				c.Close()
			}
		})
	}
	good()
	return nRefused.Load(), nOther.Load()
}

// goodClient is an authenticated client over one keep-alive connection
// from 127.0.0.1, made before the flood; it returns each request's time.
func goodClient(tb testing.TB, addr, token string) func() time.Duration {
	tr := &http.Transport{MaxConnsPerHost: 1}
	tb.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	do := func() time.Duration {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/workspaces", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if resp.StatusCode != http.StatusOK {
			tb.Fatalf("the authenticated client: %s", resp.Status)
		}
		return d
	}
	do()
	return do
}

// floodLimits are the limits of the flood test and benchmark: the holders
// fill the global limit (4 addresses × 16).
var floodLimits = ServerConfig{MaxConns: 64, MaxConnsPerAddr: 16}

// TestConnectionFloodIsRefused: past the limits, a flood of connections
// is refused with 503 while an authenticated client, connected before,
// is served every time. (Its latency is BenchmarkAuthenticatedUnderFlood's.)
func TestConnectionFloodIsRefused(t *testing.T) {
	raiseNoFile(t, 2048)
	addr, token := connServer(t, floodLimits)
	do := goodClient(t, addr, token)
	var lat []time.Duration
	refused, other := flood(t, addr, func() {
		for range 200 {
			lat = append(lat, do())
		}
	})
	if refused == 0 || other != 0 {
		t.Fatalf("flood past the limit: %d refused (503), %d otherwise answered; want all refused", refused, other)
	}
	slices.Sort(lat)
	t.Logf("%d flood connections refused; authenticated client p50 %v p99 %v", refused, lat[len(lat)/2], lat[len(lat)*99/100])
}

// BenchmarkAuthenticatedUnderFlood: an authenticated client's request
// time while a connection flood past the limits is refused, beside the
// same client with no flood; reports p50 and p99 (ms) and the flood's
// refusals per second. Run with -benchtime=2000x.
func BenchmarkAuthenticatedUnderFlood(b *testing.B) {
	raiseNoFile(b, 2048)
	for _, withFlood := range []bool{false, true} {
		b.Run(fmt.Sprintf("flood=%v", withFlood), func(b *testing.B) {
			addr, token := connServer(b, floodLimits)
			do := goodClient(b, addr, token)
			lat := make([]time.Duration, 0, b.N)
			var elapsed time.Duration
			run := func() {
				b.ResetTimer()
				t0 := time.Now()
				for range b.N {
					lat = append(lat, do())
				}
				elapsed = time.Since(t0)
				b.StopTimer()
			}
			if !withFlood {
				run()
			} else if refused, other := flood(b, addr, run); other != 0 {
				b.Errorf("%d flood connections were answered other than 503", other)
			} else {
				b.ReportMetric(float64(refused)/elapsed.Seconds(), "refused/s")
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
