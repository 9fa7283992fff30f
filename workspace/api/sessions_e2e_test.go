package api_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// Through `gantry ws serve` (the process provider, the default re-check
// interval): revoking a token ends its `ws exec`, its `ws logs -f`, its
// WebSocket through the proxy and its event stream, each within 5 s.
func TestRevokeEndsEveryStreamThroughCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	python3(t)
	data := t.TempDir()
	s := wstest.StartServe(t, "", data)
	carol := strings.TrimSpace(s.CLI("token", "create", "--owner", "carol"))
	cli := func(args ...string) *exec.Cmd {
		return exec.Command(s.Bin, append([]string{"ws", "--server", s.URL, "--token", carol}, args...)...)
	}
	out, err := cli("create", "sock", "--cmd", "echo serving; exec python3 wsecho.py").Output()
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(out))
	s.CLI("wait", id, "STANDBY", "--timeout", "30s") // its volume exists
	script, err := os.ReadFile(filepath.Join("testdata", "wsecho.py"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "volumes", id, "wsecho.py"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	s.CLI("up", id)
	s.CLI("wait", id, "RUNNING", "--timeout", "30s")

	ended := map[string]<-chan struct{}{}
	clis := map[string]*exec.Cmd{}
	outs := map[string]*testutil.Buffer{}
	for name, args := range map[string][]string{
		"ws exec":    {"exec", id, "--", "sh", "-c", "while :; do echo tick; sleep 0.2; done"},
		"ws logs -f": {"logs", id, "-f"},
	} {
		clis[name], outs[name] = cli(args...), &testutil.Buffer{}
		ended[name] = startCLIStream(t, clis[name], outs[name], map[string]string{"ws exec": "tick", "ws logs -f": "serving"}[name])
	}
	var conn net.Conn
	wstest.WaitFor(t, 20*time.Second, "a WebSocket through the proxy", func() (bool, string) {
		var status string
		conn, status = openWebSocket(t, s.URL, "/w/"+id+"/", carol)
		return conn != nil, status
	})
	ended["websocket"] = readsUntilClosed(conn)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", s.URL+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+carol)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /events: %v %v", resp, err)
	}
	ended["events"] = readsUntilClosed(resp.Body)

	tokenID, _ := auth.ParseSecret(auth.TokenPrefix, carol)
	s.CLI("token", "revoke", tokenID)
	t0 := time.Now()
	deadline := time.After(5 * time.Second)
	for name, c := range ended {
		select {
		case <-c:
			t.Logf("%s ended %v after the revoke", name, time.Since(t0).Round(10*time.Millisecond))
		case <-deadline:
			t.Fatalf("%s is still open 5 s after its token was revoked", name)
		}
	}
	// The CLI's streams say why they ended, and exit non-zero.
	for name, c := range clis {
		if code := c.ProcessState.ExitCode(); code == 0 || !strings.Contains(outs[name].String(), "credential ended") {
			t.Errorf("gantry %s after the revoke: exit %d, output ending %q; want non-zero and \"credential ended\"", name, code, tail(outs[name].String(), 200))
		}
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string { return s[max(0, len(s)-n):] }

// startCLIStream starts cmd and returns once its output shows first; the
// channel is closed when cmd exits.
func startCLIStream(t *testing.T, cmd *exec.Cmd, out *testutil.Buffer, first string) <-chan struct{} {
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	wstest.WaitFor(t, 10*time.Second, fmt.Sprintf("%q from %v", first, cmd.Args[4:]), func() (bool, string) {
		return strings.Contains(out.String(), first), out.String()
	})
	return done
}

// readsUntilClosed reads r in the background; the channel is closed when
// r ends.
func readsUntilClosed(r io.Reader) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); io.Copy(io.Discard, r) }()
	return done
}

// openWebSocket opens a WebSocket at base+path with token (nil and the
// status when it is not switched).
func openWebSocket(t *testing.T, base, path, token string) (net.Conn, string) {
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 16)
	rand.Read(key)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"+
		"Sec-WebSocket-Key: %s\r\nAuthorization: Bearer %s\r\n\r\n", path, base64.StdEncoding.EncodeToString(key), token)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || br.Buffered() > 0 {
		conn.Close()
		return nil, fmt.Sprint(resp, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, ""
}
