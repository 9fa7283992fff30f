package api_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// sshCopyMB is the size of the file scp copies up and back.
const sshCopyMB = 100

// sshEnv is `ws serve` with alice's workspace "box" RUNNING and the ssh
// config `ws config-ssh` wrote for her.
type sshEnv struct {
	t                    *testing.T
	s                    *wstest.Serve
	data, id, alice, bob string
	dir                  string   // the config's directory
	opts                 []string // ssh's -F CONFIG and options
}

func startSSHWorkspace(t *testing.T, extra ...string) *sshEnv {
	return startSSHWorkspaceRunning(t, "exec sleep 3600", extra...)
}

// startSSHWorkspaceRunning is startSSHWorkspace with the workspace's
// command (run with --http when it names $PORT).
func startSSHWorkspaceRunning(t *testing.T, command string, extra ...string) *sshEnv {
	if testing.Short() {
		t.Skip("process-level test")
	}
	needOpenSSH(t)
	e := &sshEnv{t: t, data: t.TempDir(), dir: t.TempDir()}
	e.s = wstest.StartServe(t, "", e.data, extra...)
	create := []string{"--cmd", command}
	if strings.Contains(command, "$PORT") {
		create = append(create, "--http")
	}
	e.open("alice", "bob", create...)
	return e
}

// needOpenSSH fails the test unless OpenSSH's client programs (and the
// others named) are installed.
func needOpenSSH(t *testing.T, others ...string) {
	for _, bin := range append([]string{"ssh", "scp", "sftp"}, others...) {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is needed (scripts/services.sh openssh installs it): %v", bin, err)
		}
	}
}

// open makes tokens for the owners alice and bob, creates alice's
// workspace "box" with the flags of create, waits for it to run and
// writes the ssh config of `ws config-ssh`.
func (e *sshEnv) open(alice, bob string, create ...string) {
	t := e.t
	e.alice = strings.TrimSpace(e.s.CLI("token", "create", "--owner", alice))
	e.bob = strings.TrimSpace(e.s.CLI("token", "create", "--owner", bob))
	e.id = strings.TrimSpace(e.gantry(e.alice, append([]string{"create", "box", "--desired", "RUNNING"}, create...)...))
	e.s.CLI("wait", e.id, "RUNNING", "--timeout", "60s")
	config := filepath.Join(e.dir, "ssh_config")
	if out := e.gantry(e.alice, "config-ssh", "--file", config); !strings.Contains(out, "Include "+config) {
		t.Fatalf("config-ssh printed %q; want the Include line of %s", out, config)
	}
	e.opts = []string{"-F", config, "-o", "BatchMode=yes"}
}

// volume is the path of name in the workspace's volume on the host.
func (e *sshEnv) volume(name ...string) string {
	return filepath.Join(append([]string{e.data, "volumes", e.id}, name...)...)
}

func (e *sshEnv) gantry(token string, args ...string) string {
	cmd := exec.Command(e.s.Bin, append([]string{"ws", "--server", e.s.URL}, args...)...)
	cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("gantry %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// run runs argv with token: its stdout, then its stderr, and exit code.
func (e *sshEnv) run(token string, argv ...string) (string, int) {
	return e.runStdin(token, nil, argv...)
}

// runStdin is run with stdin (nil: none).
func (e *sshEnv) runStdin(token string, stdin io.Reader, argv ...string) (string, int) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+token)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.t.Fatal(err)
	}
	return stdout.String() + "\n--- stderr:\n" + stderr.String(), cmd.ProcessState.ExitCode()
}

// In the default containment (run as root: the workspace's own uid and
// namespaces), ssh runs a command in the workspace as its user, and `scp
// -O` copies a file up and back (the remote scp finds the uid's passwd
// entry in the workspace's mount namespace).
func TestSSHIntoAContainedWorkspace(t *testing.T) {
	e := startSSHWorkspace(t)
	got, code := e.run(e.alice, append(append([]string{"ssh"}, e.opts...), "gantry-box", "id -u; pwd; exit 3")...)
	want := fmt.Sprintf("\n%s\n\n--- stderr:", e.volume())
	if code != 3 || !strings.Contains(got, want) || os.Getuid() == 0 && strings.HasPrefix(got, "0\n") {
		t.Fatalf("ssh gantry-box 'id -u; pwd; exit 3': exit %d, output %q; want exit 3, the workspace's uid and volume", code, got)
	}
	t.Logf("ssh gantry-box 'id -u; pwd; exit 3': exit %d, %q", code, got)
	e.copyRoundTrip("scp -O", "scp", "-O")
}

// Modern scp (the SFTP protocol) and sftp run the system's sftp-server in
// the contained workspace, as its user: a file copies up and back byte for
// byte, and sftp's ls and pwd show the workspace's volume.
func TestSSHSFTPIntoAContainedWorkspace(t *testing.T) {
	e := startSSHWorkspace(t)
	e.copyRoundTrip("scp (sftp)", "scp")
	os.WriteFile(filepath.Join(e.dir, "batch"), []byte("pwd\nput "+filepath.Join(e.dir, "batch")+" via-sftp.txt\nls -n via-sftp.txt\n"), 0o600)
	got, code := e.run(e.alice, append(append([]string{"sftp", "-b", filepath.Join(e.dir, "batch")}, e.opts...), "gantry-box")...)
	vol := e.volume()
	fi, err := os.Stat(filepath.Join(vol, "via-sftp.txt"))
	if code != 0 || err != nil || !strings.Contains(got, "Remote working directory: "+vol) {
		t.Fatalf("sftp -b (pwd, put, ls): exit %d, %v, output %q; want the volume as its working directory and the file put there", code, err, got)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; os.Getuid() == 0 && uid == 0 {
		t.Fatalf("the file sftp put is root's; want the workspace's user's")
	}
	t.Logf("sftp -b: %q", got)
}

// rsync, its remote side run by "exec" in the contained workspace, copies
// a directory tree up into the volume and back: the tree that comes back
// is the same (names, contents, modes, a symbolic link).
func TestSSHRsyncIntoAContainedWorkspace(t *testing.T) {
	if _, err := exec.LookPath("rsync"); err != nil {
		t.Fatalf("rsync is needed (scripts/services.sh openssh installs it): %v", err)
	}
	e := startSSHWorkspace(t)
	src := filepath.Join(e.dir, "src")
	for i, name := range []string{"a.txt", "sub/b.bin", "sub/deeper/c.txt", "empty/.keep"} {
		p := filepath.Join(src, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		body := make([]byte, 1<<(10+3*i))
		rand.Read(body)
		if err := os.WriteFile(p, body, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(src, "a.txt"), 0o755)
	os.Symlink("sub/b.bin", filepath.Join(src, "link"))
	rsh := "ssh " + strings.Join(e.opts, " ")
	if got, code := e.run(e.alice, "rsync", "-a", "-e", rsh, src+"/", "gantry-box:tree/"); code != 0 {
		t.Fatalf("rsync up: exit %d: %s", code, got)
	}
	if got, code := e.run(e.alice, "diff", "-r", "--no-dereference", src, e.volume("tree")); code != 0 {
		t.Fatalf("the tree rsync copied up differs in the volume: %s", got)
	}
	back := filepath.Join(e.dir, "back")
	if got, code := e.run(e.alice, "rsync", "-a", "-e", rsh, "gantry-box:tree/", back+"/"); code != 0 {
		t.Fatalf("rsync back: exit %d: %s", code, got)
	}
	want, _ := e.run(e.alice, "sh", "-c", "cd "+src+" && find . -printf '%p %M %s %l\n' | sort && find . -type f | sort | xargs md5sum")
	got, _ := e.run(e.alice, "sh", "-c", "cd "+back+" && find . -printf '%p %M %s %l\n' | sort && find . -type f | sort | xargs md5sum")
	if got != want || !strings.Contains(got, "./link lrwxrwxrwx") {
		t.Fatalf("the tree rsync copied back differs:\n%s\nwant:\n%s", got, want)
	}
	t.Logf("rsync up and back: the same tree:\n%s", got)
}

// `ssh -L` forwards a local port to the contained workspace's PORT (on
// its own loopback, in its own network namespace): an HTTP GET through it
// reaches the workspace's server; so does one to the port of an app it
// declares (--app api=8081). Another host, or another port, is refused.
func TestSSHPortForwardIntoAContainedWorkspace(t *testing.T) {
	e := startSSHWorkspaceRunning(t, `echo served-from-the-workspace > index.html; mkdir -p two; echo served-from-app-api > two/index.html; `+
		`(cd two && exec python3 -m http.server --bind 127.0.0.1 8081) & exec python3 -m http.server --bind 127.0.0.1 "$PORT"`)
	e.gantry(e.alice, "update", "box", "--app", "api=8081")
	out, code := e.run(e.alice, append(append([]string{"ssh"}, e.opts...), "gantry-box", `echo "$PORT"`)...)
	port, _, _ := strings.Cut(out, "\n")
	if code != 0 || port == "" {
		t.Fatalf("ssh gantry-box 'echo $PORT': exit %d, %q", code, out)
	}
	local := freeLocalPort(t)
	for _, tc := range []struct {
		target string
		ok     bool
	}{
		{"localhost:" + port, true},
		{"127.0.0.1:" + port, true},
		{"127.0.0.1:8081", true},
		{"127.0.0.1:22", false},
		{"example.com:80", false},
	} {
		args := append(append([]string{"-N", "-o", "ExitOnForwardFailure=yes", "-L", fmt.Sprintf("127.0.0.1:%d:%s", local, tc.target)}, e.opts...), "gantry-box")
		body, stderr, err := tryForward(t, args, e.alice, fmt.Sprintf("http://127.0.0.1:%d/index.html", local), tc.ok)
		want := "served-from-the-workspace\n"
		if strings.HasSuffix(tc.target, ":8081") {
			want = "served-from-app-api\n"
		}
		if tc.ok && body != want || !tc.ok && err == nil {
			t.Fatalf("GET through ssh -L %s: %q, %v; want ok %v\nssh: %s", tc.target, body, err, tc.ok, stderr)
		}
		t.Logf("ssh -L %s: GET: %q, %v; ssh: %q", tc.target, body, err, stderr)
	}
}

// tryForward runs `ssh ARGS` (an -L forward) with token and GETs url through
// it until it answers (ok) or ssh reports the channel refused (!ok); it
// returns the last GET's body, what ssh printed and the GET's error.
func tryForward(t *testing.T, args []string, token, url string, ok bool) (body, sshErr string, err error) {
	t.Helper()
	fwd := exec.CommandContext(t.Context(), "ssh", args...)
	fwd.Env = append(os.Environ(), "GANTRY_TOKEN="+token)
	var stderr testutil.Buffer // read while ssh writes it
	fwd.Stderr = &stderr
	if err := fwd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { fwd.Process.Kill(); fwd.Wait() }()
	testutil.WaitFor(t, 20*time.Second, "the forwarded port", func() (bool, string) {
		body, err = httpGet(url)
		if ok {
			return err == nil, fmt.Sprint(err, "; ssh: ", stderr.String())
		}
		return strings.Contains(stderr.String(), "open failed"), fmt.Sprint(err, "; ssh: ", stderr.String())
	})
	return body, stderr.String(), err
}

// freeLocalPort is a host port nothing listens on (just now).
func freeLocalPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// httpGet is GET url's body, or an error unless 200.
func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %s", resp.Status)
	}
	return string(b), err
}

// copyRoundTrip copies a file of sshCopyMB random bytes up into the
// workspace's volume and back with argv (scp or rsync and its options),
// and fails unless both copies are byte for byte the same.
func (e *sshEnv) copyRoundTrip(what string, argv ...string) {
	t := e.t
	up := filepath.Join(e.dir, "up.bin")
	want := make([]byte, sshCopyMB<<20)
	rand.Read(want)
	if err := os.WriteFile(up, want, 0o600); err != nil {
		t.Fatal(err)
	}
	remote := "copied-" + strings.NewReplacer(" ", "", "(", "", ")", "").Replace(what) + ".bin"
	t0 := time.Now()
	if got, code := e.run(e.alice, e.copyCommand(argv, up, "gantry-box:"+remote)...); code != 0 {
		t.Fatalf("%s up: exit %d: %s", what, code, got)
	}
	inVolume, err := os.ReadFile(e.volume(remote))
	if err != nil || !bytes.Equal(inVolume, want) {
		t.Fatalf("the file %s copied up is not the same in the volume (%d bytes of %d, %v)", what, len(inVolume), len(want), err)
	}
	back := filepath.Join(e.dir, "back.bin")
	if got, code := e.run(e.alice, e.copyCommand(argv, "gantry-box:"+remote, back)...); code != 0 {
		t.Fatalf("%s back: exit %d: %s", what, code, got)
	}
	b, err := os.ReadFile(back)
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("the file %s copied back differs (%d bytes of %d, %v)", what, len(b), len(want), err)
	}
	t.Logf("%s of %d MB up and back: %v, sha256 %x both ways", what, sshCopyMB, time.Since(t0).Round(time.Millisecond), sha256.Sum256(b))
	os.Remove(up)
	os.Remove(back)
}

// copyCommand is argv copying src to dst over ssh with the test's config:
// scp takes ssh's options, rsync a command line (-e) that has them.
func (e *sshEnv) copyCommand(argv []string, src, dst string) []string {
	cmd := argv[:len(argv):len(argv)]
	if argv[0] == "rsync" {
		return append(cmd, "-e", "ssh "+strings.Join(e.opts, " "), src, dst)
	}
	return append(append(cmd, e.opts...), src, dst)
}

// Through `gantry ws serve` (the process provider) and OpenSSH: the config
// `ws config-ssh` writes makes `ssh gantry-NAME CMD` run CMD in the
// workspace (its output, its exit status), `scp -O` copies a file up and
// back byte for byte, and another owner's token gets no connection.
func TestSSHThroughOpenSSH(t *testing.T) {
	// --insecure-shared-user: as the server's own user (which is how a
	// server that is not root runs every workspace).
	// (TestSSHIntoAContainedWorkspace runs ssh in the default containment.)
	e := startSSHWorkspace(t, "--insecure-shared-user")
	s, id, alice, bob, sshOpts, run := e.s, e.id, e.alice, e.bob, e.opts, e.run

	got, code := run(alice, append(append([]string{"ssh"}, sshOpts...), "gantry-box", "echo hi; exit 3")...)
	if code != 3 || !strings.HasPrefix(got, "hi\n\n--- stderr:") {
		t.Fatalf("ssh gantry-box 'echo hi; exit 3': exit %d, output %q; want exit 3 and hi\nserver log:\n%s", code, got, wstest.Tail(s.Log.String(), 3000))
	}
	// A login shell reading its commands from stdin (no terminal: -T), and
	// a command on a terminal (-tt: ssh has none to size it by, so the
	// default 24x80).
	shell := exec.Command("ssh", append(append([]string{"-T"}, sshOpts...), "gantry-box")...)
	shell.Env = append(os.Environ(), "GANTRY_TOKEN="+alice)
	shell.Stdin = strings.NewReader("echo from-shell; exit 4\n")
	if b, err := shell.Output(); shell.ProcessState.ExitCode() != 4 || string(b) != "from-shell\n" {
		t.Fatalf("ssh gantry-box (a shell) with commands on stdin: %v, stdout %q; want exit 4 and from-shell", err, b)
	}
	got, code = run(alice, append(append([]string{"ssh", "-tt"}, sshOpts...), "gantry-box", "stty size; exit 5")...)
	if code != 5 || !strings.HasPrefix(got, "24 80\r\n") {
		t.Fatalf("ssh -tt gantry-box 'stty size; exit 5': exit %d, output %q; want exit 5 and 24 80", code, got)
	}

	e.copyRoundTrip("scp -O", "scp", "-O")

	got, code = run(bob, append(append([]string{"ssh"}, sshOpts...), "gantry-box", "echo hi")...)
	if code != 255 || strings.HasPrefix(got, "hi") || !strings.Contains(got, "HTTP 404") {
		t.Fatalf("ssh gantry-box as bob: exit %d, output %q; want 255 and the server's 404", code, got)
	}
	// Each connection is audited (written when it ends): alice's switched
	// (101), bob's refused (404).
	audit := s.CLI("audit", "--workspace", id)
	t.Logf("audit:\n%s", audit)
	if !strings.Contains(audit, "workspace.ssh") || !strings.Contains(audit, "101") || !strings.Contains(audit, "404") {
		t.Fatalf("ssh is not audited:\n%s", audit)
	}
}
