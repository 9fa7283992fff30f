package api_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// dialSSH opens an SSH connection into workspace id through the API with
// credential c: the client, or nil and the HTTP status of the refusal.
func dialSSH(t *testing.T, e *streamEnv, id string, c credential) (*ssh.Client, int) {
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
			cl, status := dialSSH(t, e, e.id, c)
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
		if _, status := dialSSH(t, e, other, e.credentials(t)["revoked"]()); status != http.StatusNotFound {
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
