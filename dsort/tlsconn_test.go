package dsort

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Both ends of a TLS connection write 8 MiB at once, each reading the
// other's in its own goroutine, in writes of every size: no deadlock (a
// read never waits for a blocked write), and every byte arrives in order.
func TestTLSConnFullDuplex(t *testing.T) {
	cli, srv := tlsPair(t)
	if p := cli.(*tlsConn).ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("ALPN %q, want h2", p)
	}

	const size = 8 << 20
	data := func(seed uint64) []byte {
		b := make([]byte, size)
		r := rand.New(rand.NewPCG(seed, 1))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	send := func(c net.Conn, b []byte, errs chan<- error) {
		r := rand.New(rand.NewPCG(uint64(len(b)), 2))
		for len(b) > 0 {
			n := min(len(b), 1+r.IntN(1<<20))
			if _, err := c.Write(b[:n]); err != nil {
				errs <- err
				return
			}
			b = b[n:]
		}
		errs <- nil
	}
	recv := func(c net.Conn, sums chan<- [32]byte) {
		h := sha256.New()
		io.CopyN(h, c, size)
		var s [32]byte
		copy(s[:], h.Sum(nil))
		sums <- s
	}
	a, b := data(1), data(2)
	errs, sums := make(chan error, 2), make(chan [32]byte, 2)
	go send(cli, a, errs)
	go send(srv, b, errs)
	go recv(srv, sums)
	go recv(cli, sums)
	deadline := time.After(30 * time.Second)
	got := map[[32]byte]bool{}
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("deadlocked: both ends writing, neither's data arrived in 30 s")
		}
	}
	for range 2 {
		select {
		case s := <-sums:
			got[s] = true
		case <-deadline:
			t.Fatal("deadlocked: the data did not all arrive in 30 s")
		}
	}
	if !got[sha256.Sum256(a)] || !got[sha256.Sum256(b)] || bytes.Equal(a, b) {
		t.Fatal("the bytes that arrived are not the bytes sent")
	}
}

// A Close while a write is blocked on a full socket (the peer reads
// nothing) returns at once, without the 5 s crypto/tls would give its
// close_notify alert, and breaks the write.
func TestTLSConnCloseBreaksABlockedWrite(t *testing.T) {
	cli, _ := tlsPair(t) // the server side never reads
	wrote := make(chan error, 1)
	go func() {
		buf := make([]byte, 1<<20)
		for {
			if _, err := cli.Write(buf); err != nil {
				wrote <- err
				return
			}
		}
	}()
	// Wait until the write is stuck: nothing returns for a while.
	select {
	case err := <-wrote:
		t.Fatalf("a write to a peer that never reads failed early: %v", err)
	case <-time.After(500 * time.Millisecond): // real time: the socket buffers fill in well under that
	}
	closed := make(chan struct{})
	go func() { cli.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(3 * time.Second): // crypto/tls alone would wait 5 s to send its alert
		t.Fatal("Close waited for the blocked write")
	}
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked write did not end after Close")
	}
}

// tlsPair is both ends of a TLS connection over loopback with the job's
// credentials (a certificate for 127.0.0.1 from MakeCerts), closed when
// the test ends.
func tlsPair(t *testing.T) (cli, srv net.Conn) {
	t.Helper()
	dir := t.TempDir()
	if _, err := MakeCerts(dir, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	sec, err := loadTLS(certFiles(dir, "127.0.0.1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		defer close(accepted)
		raw, err := ln.Accept()
		if err != nil {
			t.Error(err)
			return
		}
		c, _, err := sec.server.ServerHandshake(raw)
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cli, _, err = sec.client.ClientHandshake(ctx, ln.Addr().String(), raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	srv, ok := <-accepted
	if !ok {
		t.Fatal("the server side's handshake failed")
	}
	t.Cleanup(func() { srv.Close() })
	return cli, srv
}

// A client the master refuses hears why: with TLS 1.3 the client's
// handshake is over before the master checks its certificate, and the
// client writes at once (gRPC's preface). A master that closed on the
// refusal with that write unread reset the connection, and the client's
// next write or read failed with "connection reset by peer" (or "broken
// pipe") instead of the master's alert: gRPC's client reported the failed
// write of its preface, and a rogue worker retried for its whole
// --register-timeout instead of exiting at once (seen in CI under load). The master now
// sends the alert, closes its side and reads the rest before it closes.
func TestARefusedClientHearsWhy(t *testing.T) {
	job, other := t.TempDir(), t.TempDir()
	if _, err := MakeCerts(job, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := MakeCerts(other, []string{"127.0.0.9"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	refused := make(chan struct{}, 1)
	logger := slog.New(&signalHandler{msg: "refused a TLS handshake", ch: refused})
	master, err := loadTLS(certFiles(job, "127.0.0.1"), logger)
	if err != nil {
		t.Fatal(err)
	}
	// The rogue trusts both CAs: its own check of the master passes.
	both := filepath.Join(t.TempDir(), "both.crt")
	a, _ := os.ReadFile(filepath.Join(job, "ca.crt"))
	b, _ := os.ReadFile(filepath.Join(other, "ca.crt"))
	if err := os.WriteFile(both, append(a, b...), 0o644); err != nil {
		t.Fatal(err)
	}
	rogueFiles := certFiles(other, "127.0.0.9")
	rogueFiles.CA = both
	rogue, err := loadTLS(rogueFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	refusals := master.server.(*tlsCreds).refused
	for i := range 20 {
		refusals.mu.Lock()
		refusals.last = time.Time{} // log each refusal: the test waits for it
		refusals.mu.Unlock()
		served := make(chan error, 1)
		go func() {
			raw, err := ln.Accept()
			if err != nil {
				served <- err
				return
			}
			_, _, err = master.server.ServerHandshake(raw)
			raw.Close() // as gRPC does after a failed handshake
			served <- err
		}()
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		cli, _, err := rogue.client.ClientHandshake(ctx, ln.Addr().String(), raw)
		cancel()
		if err != nil {
			t.Fatalf("connection %d: the rogue's handshake: %v (TLS 1.3: it ends before the master checks)", i, err)
		}
		preface := bytes.Repeat([]byte("p"), 4096)
		if _, err := cli.Write(preface); err != nil {
			t.Fatalf("connection %d: first write: %v", i, err)
		}
		<-refused
		_, werr := cli.Write(preface)
		_, rerr := cli.Read(make([]byte, 1))
		if werr != nil || rerr == nil || !handshakeRefused(rerr.Error()) {
			t.Fatalf("connection %d: after the refusal the rogue's write said %v and its read %v; want the master's alert", i, werr, rerr)
		}
		cli.Close()
		if err := <-served; err == nil {
			t.Fatalf("connection %d: the master accepted the rogue", i)
		}
	}
}

// signalHandler is a slog handler that sends on ch each record whose
// message is msg.
type signalHandler struct {
	msg string
	ch  chan struct{}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.ch <- struct{}{}
	}
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }
