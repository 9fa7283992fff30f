package api

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/provider"
)

// SSH into a workspace: GET /v1/workspaces/{id}/ssh with Connection:
// Upgrade and Upgrade: ssh is answered 101 and the connection becomes an
// SSH connection to an SSH server that runs in the API server itself (`ws
// ssh --stdio` carries it for OpenSSH's ProxyCommand; `ws config-ssh`
// writes the config). The request went through the front door like any
// other (its API token, not the page's session: 403; the owner's
// workspaces only: another owner's is 404; the audit row workspace.ssh,
// written when the connection ends), so the SSH server asks for no
// authentication of its own (NoClientAuth): the SSH user name is ignored. The connection runs in a stream's context
// (streams.go): it ends when its credential does, and is TTL activity
// while open.
//
// Each "session" channel runs one command through the provider's Execer,
// as `ws exec` does: "exec" runs its command line with sh -c, "shell" a
// login shell; "pty-req" and "window-change" give it a terminal and its
// sizes, "env" passes LANG, LC_*, TZ and COLORTERM (as OpenSSH's usual
// AcceptEnv; the workspace's own variables are not the client's to
// change); its exit status is sent back. So `scp -O` (the legacy protocol:
// the remote scp binary, run by "exec") works where the workspace has scp,
// and rsync where it has rsync. The "subsystem" request "sftp" runs the
// system's sftp-server (sftpServer) the same way, as the workspace's user:
// so `sftp` and modern `scp` work where the workspace has one.
// A "direct-tcpip" channel (ssh -L) to 127.0.0.1 or localhost at the
// workspace's PORT reaches it as the proxy does (ssh_forward.go).
// Refused: other channel types, and global requests (ssh -R).

// upgradeSSH is GET /v1/workspaces/{id}/ssh.
func (a *API) upgradeSSH(w http.ResponseWriter, r *http.Request) {
	if p, _ := auth.FromContext(r.Context()); p.SessionID != "" {
		// As the proxy: `ws ssh` sends an API token; the page's session
		// has no use for a way into every workspace's shell.
		a.fail(w, r, fmt.Errorf("%w: ssh takes an API token (Authorization: Bearer), not the page's session", errForbidden))
		return
	}
	ws, err := a.lookup(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ex, ok := a.cfg.Container.(provider.Execer)
	switch {
	case !ok:
		err = fmt.Errorf("%w: this server's provider cannot run commands in workspaces", workspace.ErrBadInput)
	case r.ProtoMajor != 1 || !strings.EqualFold(r.Header.Get("Upgrade"), "ssh") || !headerHasToken(r.Header, "Connection", "upgrade"):
		err = fmt.Errorf("%w: ssh needs HTTP/1.1 with Connection: Upgrade and Upgrade: ssh (use `gantry ws ssh --stdio`)", workspace.ErrBadInput)
	default:
		err = notRunning(ws) // exec.go
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	key, err := a.sshHostKey()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		a.fail(w, r, fmt.Errorf("ssh: %w", err))
		return
	}
	defer conn.Close()
	if rec, ok := w.(*recorder); ok {
		rec.status = http.StatusSwitchingProtocols // the audit row's status
	}
	conn.SetDeadline(time.Time{})
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ssh\r\n\r\n")
	if brw.Flush() != nil {
		return
	}
	r, stop := a.stream(r, ws.ID) // streams.go: ends with the credential, is activity while open
	defer stop()
	spec := provider.ExecSpec{ID: ws.ID, Name: ws.Name, Env: ws.Env}
	if a.cfg.Storage != nil {
		spec.VolumeDir = a.cfg.Storage.VolumePath(ws.ID)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true} // the HTTP request was authenticated: see above
	cfg.AddHostKey(key)
	s := &sshServer{ex: ex, spec: spec, log: func(msg string, args ...any) { a.log.Info(msg, append([]any{"id", ws.ID}, args...)...) }}
	s.ep, _ = a.cfg.Container.(provider.Endpointer)
	s.dial, _ = a.cfg.Container.(PortDialer)
	s.ports = ws.AppPorts()
	s.serve(r.Context(), &bufferedConn{Conn: conn, r: brw.Reader}, cfg)
}

// sshHostKey is the SSH server's host key: APIConfig.SSHHostKey (`ws
// serve` keeps one under its data directory: server.SSHHostKeyFile), else
// one generated at the first SSH connection and kept in memory for the
// API's life (a restarted server then has a new one, which the known_hosts
// `ws config-ssh` writes would refuse).
func (a *API) sshHostKey() (ssh.Signer, error) {
	a.hostKeyOnce.Do(func() {
		if a.cfg.SSHHostKey != nil {
			a.hostKey = a.cfg.SSHHostKey
			return
		}
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err == nil {
			a.hostKey, err = ssh.NewSignerFromKey(priv)
		}
		a.hostKeyErr = err
	})
	return a.hostKey, a.hostKeyErr
}

// headerHasToken reports whether h's name lists token (comma-separated,
// any case).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// bufferedConn is a hijacked connection whose first bytes may already sit
// in the server's reader.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// sshServer serves one SSH connection into one workspace.
type sshServer struct {
	ex   provider.Execer
	spec provider.ExecSpec // ID, VolumeDir, Env: each session's command fills the rest
	log  func(msg string, args ...any)
	ep   provider.Endpointer // nil: no port forwarding
	dial PortDialer          // nil: dial the Endpoint's address
	// ports are the workspace's apps' ports, which ssh -L reaches too.
	ports []int
}

// serve runs the SSH connection on conn until the client leaves or ctx
// ends (which closes it), then ends its sessions' commands.
func (s *sshServer) serve(ctx context.Context, conn net.Conn, cfg *ssh.ServerConfig) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { <-ctx.Done(); conn.Close() }()
	sconn, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		s.log("workspace: ssh handshake", "err", err)
		return
	}
	defer sconn.Close()
	go ssh.DiscardRequests(reqs) // tcpip-forward and the like: refused
	var wg sync.WaitGroup
	for nc := range chans {
		switch nc.ChannelType() {
		case "session":
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			wg.Go(func() { s.session(ctx, ch, creqs) })
		case "direct-tcpip": // ssh -L (ssh_forward.go)
			wg.Go(func() { s.directTCPIP(ctx, nc) })
		default:
			nc.Reject(ssh.UnknownChannelType, "only session and direct-tcpip channels here")
		}
	}
	cancel()
	wg.Wait()
}

// sshSession is one session channel's state until its command starts.
type sshSession struct {
	env     []string
	tty     *provider.TTY
	resize  chan provider.WinSize
	started bool
}

// session answers a session channel's requests and runs its one command.
func (s *sshServer) session(ctx context.Context, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	st := &sshSession{}
	done := make(chan struct{})
	for {
		select {
		case req, ok := <-reqs:
			if !ok {
				if st.started {
					<-done
				}
				return
			}
			argv := st.handle(req)
			if argv != nil {
				go func() { defer close(done); s.run(ctx, ch, st, argv) }()
			}
		case <-done:
			go ssh.DiscardRequests(reqs)
			return
		}
	}
}

// handle answers one request; a command to start is returned (once).
func (st *sshSession) handle(req *ssh.Request) []string {
	var argv []string
	ok := false
	switch req.Type {
	case "env":
		ok = st.setEnv(req.Payload)
	case "pty-req":
		ok = st.ptyReq(req.Payload)
	case "window-change":
		ok = st.windowChange(req.Payload)
	case "exec":
		var m struct{ Command string }
		if ssh.Unmarshal(req.Payload, &m) == nil && !st.started {
			argv, ok = []string{"/bin/sh", "-c", m.Command}, true
		}
	case "shell":
		if !st.started {
			argv, ok = []string{"/bin/sh", "-c", `exec "${SHELL:-/bin/sh}" -l`}, true
		}
	case "subsystem":
		var m struct{ Name string }
		if ssh.Unmarshal(req.Payload, &m) == nil && m.Name == "sftp" && !st.started {
			argv, ok = []string{"/bin/sh", "-c", sftpServer}, true
		}
	}
	if req.WantReply {
		req.Reply(ok, nil)
	}
	if argv != nil {
		st.started = true
	}
	return argv
}

// sftpServer runs the system's sftp server in the workspace, found at
// its path on the usual systems (Debian's package openssh-sftp-server,
// Fedora's openssh-server, Alpine's openssh-sftp-server, Arch's openssh).
const sftpServer = `for p in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server /usr/lib/ssh/sftp-server /usr/libexec/sftp-server /usr/lib/sftp-server; do
	[ -x "$p" ] && exec "$p"
done
echo "gantry: no sftp-server in this workspace (Debian: apt-get install openssh-sftp-server); scp -O still copies" >&2
exit 127`

// acceptedEnv reports the variables an "env" request may set.
func acceptedEnv(name string) bool {
	return name == "LANG" || name == "TZ" || name == "COLORTERM" || strings.HasPrefix(name, "LC_") && !strings.ContainsAny(name, "= ")
}

func (st *sshSession) setEnv(payload []byte) bool {
	var m struct{ Name, Value string }
	if ssh.Unmarshal(payload, &m) != nil || st.started || !acceptedEnv(m.Name) {
		return false
	}
	st.env = append(st.env, m.Name+"="+m.Value)
	return true
}

func (st *sshSession) ptyReq(payload []byte) bool {
	var m struct {
		Term                      string
		Cols, Rows, Width, Height uint32
		Modes                     string
	}
	if ssh.Unmarshal(payload, &m) != nil || st.started {
		return false
	}
	st.resize = make(chan provider.WinSize, 1)
	st.tty = &provider.TTY{Size: winSize(m.Cols, m.Rows), Resize: st.resize}
	return true
}

func (st *sshSession) windowChange(payload []byte) bool {
	var m struct{ Cols, Rows, Width, Height uint32 }
	if ssh.Unmarshal(payload, &m) != nil || st.resize == nil {
		return false
	}
	select { // the latest size is kept when the command is slow to take them
	case <-st.resize:
	default:
	}
	st.resize <- winSize(m.Cols, m.Rows)
	return true
}

// winSize is a terminal size from an SSH request (0: the default's).
func winSize(cols, rows uint32) provider.WinSize {
	ws := provider.DefaultWinSize
	if cols > 0 && cols <= 0xffff {
		ws.Cols = uint16(cols)
	}
	if rows > 0 && rows <= 0xffff {
		ws.Rows = uint16(rows)
	}
	return ws
}

// run runs argv through the Execer with the channel as its stdin, stdout
// and stderr, then sends its exit status (or, when it could not run, the
// reason on stderr and status 255).
func (s *sshServer) run(ctx context.Context, ch ssh.Channel, st *sshSession, argv []string) {
	spec := s.spec
	spec.Argv, spec.TTY = argv, st.tty
	spec.Env = append(append([]string(nil), spec.Env...), st.env...)
	// The command's stdin is a pipe (an *os.File: os/exec hands it to the
	// command as is) fed from the channel, so its end does not wait for
	// the client to close its side.
	stdin, feed, err := os.Pipe()
	if err != nil {
		s.exit(ch, 255, err)
		return
	}
	go func() {
		io.Copy(feed, ch)
		feed.Close()
	}()
	status, err := s.ex.Exec(ctx, spec, stdin, ch, ch.Stderr())
	stdin.Close()
	s.exit(ch, status, err)
}

func (s *sshServer) exit(ch ssh.Channel, status int, err error) {
	if err != nil {
		s.log("workspace: ssh command", "err", err)
		fmt.Fprintf(ch.Stderr(), "gantry: %v\r\n", err)
		status = 255
	}
	// The status goes before the end of output, as OpenSSH's server sends
	// them: OpenSSH's client closes the channel once both sides' output
	// ended, and a status arriving after that is lost (ssh exits 255).
	ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(status)}))
	ch.CloseWrite()
}
