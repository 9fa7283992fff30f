package api_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// python3 is what the proxy tests run in their workspaces (the standard
// library's http.server and a WebSocket echo written on sockets).
func python3(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3 is needed to serve HTTP inside the test workspaces (scripts/services.sh python3 installs it): %v", err)
	}
}

func request(t *testing.T, s *wstest.Serve, token, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", s.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// A workspace serving `python3 -m http.server` on its PORT is reachable at
// /w/{id}/ with its owner's token, not without one nor with another
// owner's; an archived workspace opened there wakes (503, Retry-After, an
// audited workspace.wake) and comes back with its files; a WebSocket echo
// server in a workspace echoes through the proxy.
func TestProxyIntoWorkspaces(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	python3(t)
	data := t.TempDir()
	s := wstest.StartServe(t, "", data)
	alice := strings.TrimSpace(s.CLI("token", "create", "--owner", "alice"))
	bob := strings.TrimSpace(s.CLI("token", "create", "--owner", "bob"))
	asAlice := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(s.Bin, append([]string{"ws", "--server", s.URL, "--token", alice}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("alice %v: %v\n%s\nserver log:\n%s", args, err, out, wstest.Tail(s.Log.String(), 3000))
		}
		return strings.TrimSpace(string(out))
	}
	id := asAlice("create", "web", "--desired", "RUNNING", "--cmd", `exec python3 -m http.server --bind 127.0.0.1 "$PORT"`)
	asAlice("wait", id, "RUNNING", "--timeout", "30s")
	if err := os.WriteFile(filepath.Join(data, "volumes", id, "notes.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	var body string
	wstest.WaitFor(t, 20*time.Second, "the workspace's server to answer through the proxy", func() (bool, string) {
		var resp *http.Response
		resp, body = request(t, s, alice, "/w/"+id+"/")
		return resp.StatusCode == 200 && strings.Contains(body, "notes.txt"), resp.Status + " " + body
	})
	if resp, body := request(t, s, alice, "/w/"+id+"/notes.txt"); resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("GET a file through the proxy: %s %q", resp.Status, body)
	}
	if resp, _ := request(t, s, alice, "/w/"+id); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/w/"+id+"/" {
		t.Fatalf("/w/{id} without a slash: %s %s", resp.Status, resp.Header.Get("Location"))
	}
	if resp, _ := request(t, s, "", "/w/"+id+"/"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %s", resp.Status)
	}
	if resp, _ := request(t, s, bob, "/w/"+id+"/notes.txt"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob: %s", resp.Status)
	}

	// Archived, then opened: it wakes and serves its files again.
	asAlice("archive", id)
	asAlice("wait", id, "PENDING", "--timeout", "30s")
	resp, page := request(t, s, alice, "/w/"+id+"/notes.txt", "Accept", "text/html")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(page, `http-equiv="refresh"`) {
		t.Fatalf("opening an archived workspace: %s Retry-After %q\n%s", resp.Status, resp.Header.Get("Retry-After"), page)
	}
	wstest.WaitFor(t, 60*time.Second, "the woken workspace to serve its file", func() (bool, string) {
		resp, body := request(t, s, alice, "/w/"+id+"/notes.txt")
		return resp.StatusCode == 200 && body == "hello", resp.Status
	})
	if audit := s.CLI("audit", "--workspace", id); !strings.Contains(audit, "workspace.wake") || !strings.Contains(audit, "alice") {
		t.Fatalf("the wake is not in the audit log:\n%s", audit)
	}

	// WebSocket through the proxy.
	script, err := os.ReadFile(filepath.Join("testdata", "wsecho.py"))
	if err != nil {
		t.Fatal(err)
	}
	wsID := asAlice("create", "sock", "--cmd", "exec python3 wsecho.py")
	asAlice("wait", wsID, "STANDBY", "--timeout", "30s") // its volume exists
	if err := os.WriteFile(filepath.Join(data, "volumes", wsID, "wsecho.py"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	asAlice("up", wsID)
	asAlice("wait", wsID, "RUNNING", "--timeout", "30s")
	wstest.WaitFor(t, 20*time.Second, "a WebSocket echo through the proxy", func() (bool, string) {
		got, err := wsEcho(s.URL, "/w/"+wsID+"/", alice, "ping")
		return err == nil && got == "echo: ping", got + " " + errString(err)
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// wsEcho opens a WebSocket at base+path with token, sends one text frame
// and reads one back (a client on raw sockets: the handshake and RFC 6455
// framing, masked as a client must).
func wsEcho(base, path, token, msg string) (string, error) {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	key := make([]byte, 16)
	rand.Read(key)
	req := "GET " + path + " HTTP/1.1\r\nHost: " + strings.TrimPrefix(base, "http://") + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + base64.StdEncoding.EncodeToString(key) + "\r\nAuthorization: Bearer " + token + "\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return "", err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return resp.Status, nil
	}
	mask := []byte{1, 2, 3, 4}
	frame := append([]byte{0x81, 0x80 | byte(len(msg))}, mask...)
	for i := range len(msg) {
		frame = append(frame, msg[i]^mask[i%4])
	}
	if _, err := conn.Write(frame); err != nil {
		return "", err
	}
	head := make([]byte, 2)
	if _, err := io.ReadFull(br, head); err != nil {
		return "", err
	}
	payload := make([]byte, head[1]&0x7F)
	if _, err := io.ReadFull(br, payload); err != nil {
		return "", err
	}
	return string(payload), nil
}

// endpointFake serves one workspace's PORT from an httptest server.
type endpointFake struct {
	provider.Container
	addr string
}

func (e endpointFake) Endpoint(_ context.Context, _ string) (string, error) { return e.addr, nil }

// Proxied traffic is activity for the TTL manager, written at most once per
// ActivityEvery; the workspace's program never sees the caller's token or
// session cookie, and learns the prefix it is served under.
func TestProxyActivityAndCredentials(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	var seen []http.Header
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Clone())
		io.WriteString(w, "path="+r.URL.Path)
	}))
	defer upstream.Close()
	clk := clock.NewFake(time.Now())
	env := wstest.NewAPIEnv(t, st, api.APIConfig{Clock: clk, Container: endpointFake{addr: strings.TrimPrefix(upstream.URL, "http://")}, ActivityEvery: 30 * time.Second})
	ctx := t.Context()
	w, err := st.Create(ctx, workspace.NewWorkspace{Name: "web", Desired: workspace.Running}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": "RUNNING"})
	get := func() string {
		req, _ := http.NewRequest("GET", env.Srv.URL+"/w/"+w.ID+"/a/b?q=1", nil)
		req.Header.Set("Authorization", "Bearer "+env.Admin)
		req.AddCookie(&http.Cookie{Name: "gantry_session", Value: "gwsess_secret"})
		req.AddCookie(&http.Cookie{Name: "app", Value: "kept"})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("proxied GET: %s %s", resp.Status, b)
		}
		return string(b)
	}
	v0, _, _ := st.DesiredVersion(ctx, w.ID)
	for range 5 {
		if body := get(); body != "path=/a/b" {
			t.Fatalf("upstream saw %q, want the path without the /w/{id} prefix", body)
		}
	}
	v1, _, _ := st.DesiredVersion(ctx, w.ID)
	clk.Advance(31 * time.Second)
	get()
	v2, _, _ := st.DesiredVersion(ctx, w.ID)
	if v1 != v0+1 || v2 != v1+1 {
		t.Fatalf("desired_version %d → %d (5 requests) → %d (after 31 s): want one touch per 30 s", v0, v1, v2)
	}
	h := seen[0]
	if h.Get("Authorization") != "" || strings.Contains(h.Get("Cookie"), "gantry_session") || !strings.Contains(h.Get("Cookie"), "app=kept") {
		t.Fatalf("the workspace saw credentials: Authorization %q, Cookie %q", h.Get("Authorization"), h.Get("Cookie"))
	}
	if h.Get("X-Forwarded-Prefix") != "/w/"+w.ID || h.Get("X-Forwarded-Host") == "" {
		t.Fatalf("forwarding headers: %v", h)
	}
	// The page's session cookie does not open the proxy (same origin as the API).
	login, err := http.Post(env.Srv.URL+"/v1/session", "application/json", strings.NewReader(`{"token":"`+env.Admin+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	login.Body.Close()
	req, _ := http.NewRequest("GET", env.Srv.URL+"/w/"+w.ID+"/", nil)
	for _, c := range login.Cookies() {
		req.AddCookie(c)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || len(login.Cookies()) == 0 {
		t.Fatalf("the proxy with a page session: %s, want 403", resp.Status)
	}
}

// Proxied traffic keeps a workspace from the idle TTL; without it, the
// workspace is stopped (fake clock).
func TestProxyTrafficIsActivityForTheTTL(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer upstream.Close()
	clk := clock.NewFake(wstest.T0)
	env := wstest.NewAPIEnv(t, st, api.APIConfig{Clock: clk, Container: endpointFake{addr: strings.TrimPrefix(upstream.URL, "http://")}})
	busy := wstest.SeedConverged(t, st, "busy", workspace.Running)
	quiet := wstest.SeedConverged(t, st, "quiet", workspace.Running)
	ttl, err := singletons.NewTTLManager(singletons.TTLConfig{IdleTimeout: 30 * time.Minute, Clock: clk}, st)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // 40 minutes, a request to busy every 10
		clk.Advance(10 * time.Minute)
		req, _ := http.NewRequest("GET", env.Srv.URL+"/w/"+busy+"/", nil)
		req.Header.Set("Authorization", "Bearer "+env.Admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("proxied GET: %s", resp.Status)
		}
		if _, err := ttl.Pass(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]workspace.Status{busy: workspace.Running, quiet: workspace.Standby} {
		if w, _ := st.Get(t.Context(), id); w.DesiredState != want {
			t.Errorf("%s after 40 idle-TTL minutes: desired %s, want %s", w.Name, w.DesiredState, want)
		}
	}
}

// `ws logs` prints the workspace command's output (--tail N lines), and
// with -f keeps following it across a restart.
func TestLogsThroughCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	data := t.TempDir()
	s := wstest.StartServe(t, "", data)
	id := strings.TrimSpace(s.CLI("create", "talk", "--desired", "RUNNING", "--cmd",
		`echo "start $(date +%s%N)"; i=0; while true; do echo "line $i"; i=$((i+1)); sleep 0.05; done`))
	s.CLI("wait", id, "RUNNING", "--timeout", "30s")
	wstest.WaitFor(t, 10*time.Second, "some output", func() (bool, string) {
		out := s.CLI("logs", id)
		return strings.Count(out, "line ") >= 5, out
	})
	if out := s.CLI("logs", id, "--tail", "2"); strings.Count(out, "\n") != 2 || !strings.HasPrefix(out, "line ") {
		t.Fatalf("--tail 2 printed %q", out)
	}
	follow := exec.Command(s.Bin, "ws", "--server", s.URL, "logs", id, "-f", "--tail", "1")
	follow.Env = append(os.Environ(), "GANTRY_TOKEN="+s.Token())
	var out testutil.Buffer
	follow.Stdout = &out
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { follow.Process.Kill(); follow.Wait() }()
	wstest.WaitFor(t, 10*time.Second, "followed lines", func() (bool, string) { return strings.Count(out.String(), "line ") >= 5, out.String() })
	s.CLI("down", id)
	s.CLI("wait", id, "STANDBY", "--timeout", "30s")
	s.CLI("up", id)
	s.CLI("wait", id, "RUNNING", "--timeout", "30s")
	wstest.WaitFor(t, 10*time.Second, "the restarted command's output in the same follow", func() (bool, string) {
		return strings.Count(out.String(), "start ") >= 1 && strings.Contains(out.String()[strings.LastIndex(out.String(), "start "):], "line 3"), out.String()
	})
	if resp, _ := request(t, s, "", "/v1/workspaces/"+id+"/logs"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("logs without a token: %s", resp.Status)
	}
}

// On the process provider, a command that exits with status 3 shows
// Exited, "exit 3" and its output within 5 s, is restarted with backoff and
// ends in ERROR after the retries.
func TestCrashedCommandThroughCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	// A minute between monitor passes: the end of a command is observed
	// because the provider says so, not because a pass came by.
	s := wstest.StartServe(t, "", t.TempDir(), "--max-retries", "2", "--monitor-interval", "1m")
	for _, tc := range []struct{ name, cmd string }{
		{"at-once", "echo starting up; exit 3"},
		{"after-running", "echo starting up; sleep 0.7; exit 3"}, // observed RUNNING first
	} {
		t.Run(tc.name, func(t *testing.T) { checkCrash(t, s, tc.name, tc.cmd) })
	}
}

func checkCrash(t *testing.T, s *wstest.Serve, name, command string) {
	t0 := time.Now()
	id := strings.TrimSpace(s.CLI("create", name, "--desired", "RUNNING", "--cmd", command))
	wstest.WaitFor(t, 5*time.Second, "Exited in error_info", func() (bool, string) {
		w := s.Get(id)
		e := w.ErrorInfo
		return e != nil && e.Reason == workspace.ReasonExited && e.ExitStatus == "exit 3" && strings.Contains(e.Output, "starting up"), wstest.Describe(w)
	})
	t.Logf("exit visible %v after create", time.Since(t0).Round(time.Millisecond))
	out, err := s.CLIErr("wait", id, "RUNNING", "--timeout", "20s")
	if err == nil || !strings.Contains(out, "ERROR") {
		t.Fatalf("wait on a crash loop: %v\n%s", err, out)
	}
	w := s.Get(id)
	if w.ObservedStatus != workspace.Error || w.ErrorInfo == nil || w.ErrorInfo.Reason != workspace.ReasonRetryExceeded || w.ErrorInfo.ExitStatus != "exit 3" || w.ErrorCount != 3 {
		t.Fatalf("after the retries: %s", wstest.Describe(w))
	}
}

// `ws exec` runs a command in the workspace: its files and environment,
// output streamed before it ends, stdin with -i, and gantry's exit status
// is the command's (7; 137 for SIGKILL); another owner gets 404, a
// workspace that is not running 409.
func TestExecThroughCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	data := t.TempDir()
	s := wstest.StartServe(t, "", data)
	id := strings.TrimSpace(s.CLI("create", "shell", "--desired", "RUNNING"))
	s.CLI("wait", id, "RUNNING", "--timeout", "30s")
	os.WriteFile(filepath.Join(data, "volumes", id, "notes.txt"), []byte("in the volume\n"), 0o644)
	run := func(stdin string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(s.Bin, append([]string{"ws", "--server", s.URL, "exec"}, args...)...)
		cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+s.Token())
		cmd.Stdin = strings.NewReader(stdin)
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	if o, e, code := run("", id, "--", "sh", "-c", "cat notes.txt; echo $GANTRY_WORKSPACE_ID; echo oops >&2; exit 7"); o != "in the volume\n"+id+"\n" || !strings.Contains(e, "oops") || code != 7 {
		t.Fatalf("exec: stdout %q stderr %q exit %d", o, e, code)
	}
	if _, _, code := run("", id, "--", "sh", "-c", "kill -9 $$"); code != 137 {
		t.Fatalf("a command killed by SIGKILL: exit %d, want 137", code)
	}
	if o, _, code := run("hello\nworld\n", id, "-i", "--", "cat"); o != "hello\nworld\n" || code != 0 {
		t.Fatalf("exec -i cat: %q exit %d", o, code)
	}
	// -t: a terminal (of the default size, since ours is a pipe), output
	// (the echo of what we type may come before or after the output)
	// with the terminal's line endings; -it: a shell reading what we type.
	if o, _, code := run("", id, "-t", "--", "sh", "-c", "test -t 0 && test -t 1 && echo on a tty; stty size; exit 4"); o != "on a tty\r\n24 80\r\n" || code != 4 {
		t.Fatalf("exec -t: %q exit %d", o, code)
	}
	if o, _, code := run("echo $((6*7)) >&2\nexit 5\n", id, "-it", "--", "sh"); !strings.Contains(o, "42\r\n") || code != 5 {
		t.Fatalf("exec -it sh: %q exit %d; want 42 on the terminal and exit 5", o, code)
	}
	if o, _, code := run("typed\n", id, "-it", "--", "cat"); strings.Count(o, "typed\r\n") != 2 || code != 0 {
		t.Fatalf("exec -it cat: %q exit %d; want the echo and cat's copy, and cat ended by the terminal's EOF", o, code)
	}
	// Streaming: the first line arrives while the command still runs.
	cmd := exec.Command(s.Bin, "ws", "--server", s.URL, "exec", id, "--", "sh", "-c", "echo first; sleep 3; echo second")
	cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+s.Token())
	pipe, _ := cmd.StdoutPipe()
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(pipe).ReadString('\n')
	if err != nil || line != "first\n" || time.Since(t0) > 2*time.Second {
		t.Fatalf("first line %q (%v) after %v: want it before the command ends", line, err, time.Since(t0))
	}
	io.Copy(io.Discard, pipe)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	// A resize reaches the command's terminal (SIGWINCH, the new size).
	resize := make(chan provider.WinSize, 1)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	var status int
	go func() {
		var err error
		status, err = (&client.Client{Base: s.URL, Token: s.Token()}).Exec(t.Context(), id,
			[]string{"sh", "-c", `trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.05; done`},
			client.ExecIO{Stdout: pw, Stderr: io.Discard, TTY: &provider.TTY{Size: provider.WinSize{Rows: 10, Cols: 20}, Resize: resize}})
		pw.CloseWithError(err)
		done <- err
	}()
	br := bufio.NewReader(pr)
	if line, err := br.ReadString('\n'); err != nil || line != "ready\r\n" {
		t.Fatalf("tty exec: %q %v", line, err)
	}
	resize <- provider.WinSize{Rows: 50, Cols: 132}
	if line, err := br.ReadString('\n'); err != nil || line != "50 132\r\n" {
		t.Fatalf("after a resize to 50x132 the command saw %q (%v)", line, err)
	}
	io.Copy(io.Discard, br)
	if err := <-done; err != nil || status != 0 {
		t.Fatalf("tty exec ended: %d %v", status, err)
	}
	bob := strings.TrimSpace(s.CLI("token", "create", "--owner", "bob"))
	c := &client.Client{Base: s.URL, Token: bob}
	var ae *client.APIError
	if _, err := c.Exec(t.Context(), id, []string{"true"}, client.ExecIO{Stdout: io.Discard, Stderr: io.Discard}); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("bob's exec: %v, want 404", err)
	}
	s.CLI("down", id)
	s.CLI("wait", id, "STANDBY", "--timeout", "30s")
	if _, _, code := run("", id, "--", "true"); code == 0 {
		t.Fatal("exec in a stopped workspace succeeded")
	}
	if audit := s.CLI("audit", "--workspace", id); strings.Count(audit, "workspace.exec") < 4 {
		t.Fatalf("exec is not audited:\n%s", audit)
	}
}
