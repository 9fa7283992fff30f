package api_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// dialSSH opens an SSH connection into workspace id through the API with
// credential c: the client, or nil and the HTTP status of the refusal.
func dialSSH(t *testing.T, e *wstest.APIEnv, id string, c credential) (*ssh.Client, int) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.Srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /v1/workspaces/%s/ssh HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: ssh\r\n%s\r\n\r\n", id, c.header)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		conn.Close()
		return nil, resp.StatusCode
	}
	// The server speaks first: its version line may be in br already.
	sc, chans, reqs, err := ssh.NewClientConn(readerConn{conn, br}, "w", &ssh.ClientConfig{User: "any", HostKeyCallback: ssh.InsecureIgnoreHostKey()}) // test only
	if err != nil {
		t.Fatal(err)
	}
	cl := ssh.NewClient(sc, chans, reqs)
	t.Cleanup(func() { cl.Close() })
	return cl, resp.StatusCode
}

// An SSH connection is a stream like exec: it ends when its API token is
// revoked or expires, and the page's session gets none (403); another
// owner's token does not find the workspace (404).
func TestSSHEndsWithItsCredential(t *testing.T) {
	for _, how := range []string{"revoked", "expired", "logged-out"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t, 50*time.Millisecond, false)
			c := e.credentials(t)[how]()
			cl, status := dialSSH(t, e.APIEnv, e.id, c)
			if how == "logged-out" {
				if status != http.StatusForbidden {
					t.Fatalf("ssh with a page session: %d, want 403", status)
				}
				return
			}
			sess, err := cl.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			out, err := sess.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := sess.Start("sleep"); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(out).ReadString('\n'); line != "started\n" {
				t.Fatalf("the command's first output: %q %v", line, err)
			}
			c.end()
			ended := make(chan error, 1)
			go func() { ended <- cl.Wait() }()
			select {
			case <-ended:
			case <-time.After(5 * time.Second):
				t.Fatalf("the SSH connection is still open 5 s after its credential was %s", how)
			}
			select {
			case <-e.execDone:
			case <-time.After(5 * time.Second):
				t.Fatal("the command still runs 5 s after its SSH connection ended")
			}
		})
	}
	t.Run("other-owner", func(t *testing.T) {
		e := newStreamEnv(t, 50*time.Millisecond, false)
		other := e.workspace(t, "bobs", "bob")
		if _, status := dialSSH(t, e.APIEnv, other, e.credentials(t)["revoked"]()); status != http.StatusNotFound {
			t.Fatalf("ssh into bob's workspace with alice's token: %d, want 404", status)
		}
	})
}

// readerConn reads through r (which buffered the connection's first bytes).
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// specExec is a provider whose Exec reports what it was asked: its argv,
// environment and terminal size (and, on a terminal, the first resize),
// (waiting for the
// test's last), then its stdin, and exits with status 7.
type specExec struct{ provider.Container }

func (specExec) Exec(_ context.Context, spec provider.ExecSpec, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fmt.Fprintf(stdout, "argv=%q env=%q\n", spec.Argv, spec.Env)
	if spec.TTY != nil {
		rs := <-spec.TTY.Resize
		for rs.Cols != 132 { // the test's last resize
			rs = <-spec.TTY.Resize
		}
		fmt.Fprintf(stdout, "tty=%dx%d resized=%dx%d\n", spec.TTY.Size.Rows, spec.TTY.Size.Cols, rs.Rows, rs.Cols)
	}
	in, _ := io.ReadAll(stdin)
	fmt.Fprintf(stdout, "stdin=%q\n", in)
	io.WriteString(stderr, "to stderr\n")
	return 7, nil
}

// A session's requests map onto the provider's Exec: "exec" runs sh -c
// CMD; "env" passes LANG and LC_* but not the workspace's own variables;
// "pty-req" and "window-change" are its terminal's size and resizes;
// stdin reaches it, stdout and stderr come back apart; the exit status
// comes back; the sftp subsystem runs the system's sftp-server through
// Exec, another subsystem is refused, and so is port forwarding where the
// provider serves no ports.
func TestSSHSessionMapsOntoExec(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	env := wstest.NewAPIEnv(t, st, api.APIConfig{Container: specExec{}})
	alice := storetest.Token(t, st, "alice", false)
	w, err := st.Create(t.Context(), workspace.NewWorkspace{Name: "w", Owner: "alice", Desired: workspace.Running, Spec: workspace.Spec{Env: []string{"MINE=1"}}}, wstest.T0)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": "RUNNING", "observed_at": wstest.T0})
	cl, status := dialSSH(t, env, w.ID, credential{header: "Authorization: Bearer " + alice})
	if cl == nil {
		t.Fatalf("ssh: HTTP %d", status)
	}
	run := func(tty bool) (string, string, error) {
		sess, err := cl.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		for _, kv := range [][2]string{{"LANG", "C.UTF-8"}, {"PATH", "/evil"}, {"LC_ALL", "C"}, {"MINE", "2"}} {
			sess.Setenv(kv[0], kv[1]) // PATH and MINE are refused: an error here
		}
		var stdout, stderr bytes.Buffer
		sess.Stdin, sess.Stdout, sess.Stderr = strings.NewReader("typed"), &stdout, &stderr
		if tty {
			if err := sess.RequestPty("xterm", 30, 100, ssh.TerminalModes{}); err != nil {
				t.Fatal(err)
			}
			if err := sess.Start("echo hi"); err != nil {
				t.Fatal(err)
			}
			sess.WindowChange(40, 120)
			sess.WindowChange(50, 132) // the latest is kept for a slow command
			err = sess.Wait()
		} else {
			err = sess.Run("echo hi")
		}
		return stdout.String(), stderr.String(), err
	}
	out, errOut, err := run(false)
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 7 || errOut != "to stderr\n" ||
		out != `argv=["/bin/sh" "-c" "echo hi"] env=["MINE=1" "LANG=C.UTF-8" "LC_ALL=C"]`+"\nstdin=\"typed\"\n" {
		t.Fatalf("exec: %v, stdout %q, stderr %q", err, out, errOut)
	}
	out, _, err = run(true)
	if !errors.As(err, &ee) || ee.ExitStatus() != 7 || !strings.Contains(out, "tty=30x100 resized=50x132\n") {
		t.Fatalf("exec on a terminal: %v, stdout %q", err, out)
	}
	sess, err := cl.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.RequestSubsystem("other"); err == nil {
		t.Error("a subsystem other than sftp was accepted")
	}
	sess.Close()
	sess, err = cl.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	in, _ := sess.StdinPipe()
	outPipe, _ := sess.StdoutPipe()
	if err := sess.RequestSubsystem("sftp"); err != nil {
		t.Fatalf("the sftp subsystem: %v", err)
	}
	in.Close()
	sftpOut, _ := io.ReadAll(outPipe)
	if !strings.Contains(string(sftpOut), `argv=["/bin/sh" "-c" "for p in /usr/lib/openssh/sftp-server `) {
		t.Errorf("the sftp subsystem ran %q; want the sftp-server through Exec", sftpOut)
	}
	// This provider has no Endpoint: no port to forward to.
	if _, err := cl.Dial("tcp", "127.0.0.1:1"); err == nil {
		t.Error("port forwarding was accepted")
	}
}

// The exit status arrives before the end of the command's output, in
// OpenSSH's order: OpenSSH's client closes the channel once both sides'
// output ended, and a status sent after that was lost (a warm `ssh host
// true` exited 255 about once in 750). The client's connection handles
// the server's messages in order, so when a read sees the end of output
// the status must already wait among the channel's requests.
func TestSSHExitStatusBeforeEOF(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	env := wstest.NewAPIEnv(t, st, api.APIConfig{Container: specExec{}})
	alice := storetest.Token(t, st, "alice", false)
	w, err := st.Create(t.Context(), workspace.NewWorkspace{Name: "w", Owner: "alice", Desired: workspace.Running}, wstest.T0)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": "RUNNING", "observed_at": wstest.T0})
	cl, status := dialSSH(t, env, w.ID, credential{header: "Authorization: Bearer " + alice})
	if cl == nil {
		t.Fatalf("ssh: HTTP %d", status)
	}
	for round := range 50 {
		ch, reqs, err := cl.OpenChannel("session", nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := ch.SendRequest("exec", true, ssh.Marshal(struct{ Cmd string }{"true"})); !ok || err != nil {
			t.Fatalf("exec: %v, %v", ok, err)
		}
		ch.CloseWrite()
		io.ReadAll(ch)
		select {
		case r := <-reqs:
			if r.Type != "exit-status" {
				t.Fatalf("round %d: request %q before the exit status", round, r.Type)
			}
		default:
			t.Fatalf("round %d: the output ended before the exit status came", round)
		}
		ch.Close()
	}
}
