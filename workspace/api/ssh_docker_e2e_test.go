package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// The SSH tests on the Docker provider: `ws serve --provider docker` with
// an image built here from the host's own programs (no registry needed).

// sshImagePrograms are the host's programs the Docker test's image holds,
// with their shared libraries: what a developer's image has for ssh, scp
// and rsync to work in it (a shell, scp, rsync), and the commands the test
// runs. The sftp server is added apart (sshImageSFTPServer).
var sshImagePrograms = []string{"/bin/sh", "/usr/bin/scp", "/usr/bin/rsync", "/usr/bin/stty", "/usr/bin/sleep", "/usr/bin/id", "/usr/bin/cat", "/usr/bin/sha256sum"}

// sshImageSFTPServer is where the image holds the host's sftp-server:
// Fedora's path, not Debian's, so the subsystem's search for it is shown
// to work beyond the first path it tries.
const sshImageSFTPServer = "/usr/libexec/openssh/sftp-server"

// sshAppProgram is the workspace's app: an HTTP server on $PORT, on every
// address of the container (the server reaches it at the container's).
const sshAppProgram = `package main

import (
	"net/http"
	"os"
)

func main() {
	http.ListenAndServe(":"+os.Getenv("PORT"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("served-from-the-workspace\n"))
	}))
}
`

// dockerCLI runs the docker CLI: its stdout, or an error with its stderr.
func dockerCLI(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0") // the classic builder needs nothing from a registry
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// dockerCleanup runs the docker CLI in a cleanup (after the test's
// context ended): best effort, logged.
func dockerCleanup(t *testing.T, args ...string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
	defer cancel()
	out, err := dockerCLI(ctx, args...)
	if err != nil {
		t.Logf("cleanup: %v", err)
	}
	return out
}

// randHex is n random bytes in hex.
func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// buildSSHImage builds a FROM-scratch image from the host's programs
// (sshImagePrograms, the sftp server) and their shared libraries as ldd
// lists them, an /etc/passwd that names the users a workspace runs as, and
// the app (sshAppProgram) at /app. The image is removed when t ends.
func buildSSHImage(t *testing.T) string {
	ctx := t.Context()
	if _, err := dockerCLI(ctx, "version", "--format", "{{.Server.Version}}"); err != nil {
		t.Fatalf("the Docker SSH test needs a Docker engine: %v", err)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	sftp := ""
	for _, p := range []string{"/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server"} {
		if _, err := os.Stat(p); err == nil {
			sftp = p
			break
		}
	}
	if sftp == "" {
		t.Fatal("the host's sftp-server is needed for the image (scripts/services.sh openssh installs it)")
	}
	files := map[string]string{sshImageSFTPServer: sftp} // in the image: on the host
	for _, p := range append(sshImagePrograms, sftp) {
		if p != sftp {
			files[p] = p
		}
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", p, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				files[f[2]] = f[2]
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"): // the dynamic loader
				files[f[0]] = f[0]
			}
		}
	}
	for in, host := range files {
		b, err := os.ReadFile(host)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(root, in), b, 0o755)
	}
	// The users a workspace runs as: nobody when the server is root, else
	// the server's own uid (scp and sftp-server refuse a uid without one).
	passwd := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"
	if uid := os.Getuid(); uid != 0 && uid != 65534 {
		passwd += fmt.Sprintf("dev:x:%d:%d:dev:/home/coder:/bin/sh\n", uid, os.Getgid())
	}
	writeFile(t, filepath.Join(root, "etc", "passwd"), []byte(passwd), 0o644)
	writeFile(t, filepath.Join(root, "etc", "group"), []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644)
	writeFile(t, filepath.Join(dir, "app.go"), []byte(sshAppProgram), 0o644)
	build := exec.Command("go", "build", "-o", filepath.Join(root, "app"), "app.go")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the app: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\nCOPY root/ /\n"), 0o644)
	tag := "gantry-test-ssh:" + randHex(6)
	t.Cleanup(func() { dockerCleanup(t, "rmi", "-f", tag) })
	if _, err := dockerCLI(ctx, "build", "-q", "--label", "gantry.test=1", "-t", tag, dir); err != nil {
		t.Fatal(err)
	}
	return tag
}

func writeFile(t *testing.T, path string, b []byte, mode os.FileMode) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
}

// startDockerSSHWorkspace is startSSHWorkspace on `ws serve --provider
// docker` with the image of buildSSHImage, the workspace running its app:
// its owners are alice-… and bob-…, unique to this test (other runs may
// share the engine), so each has a network of its own (the provider's
// default: internal, private to the owner). The containers and networks
// are removed when t ends.
func startDockerSSHWorkspace(t *testing.T) *sshEnv {
	if testing.Short() {
		t.Skip("process-level test with Docker")
	}
	needOpenSSH(t, "rsync")
	t0 := time.Now()
	image := buildSSHImage(t)
	t.Logf("the image (the app compiled, docker build): %v", time.Since(t0).Round(time.Millisecond))
	e := &sshEnv{t: t, data: t.TempDir(), dir: t.TempDir()}
	suffix := randHex(4)
	alice, bob := "alice-"+suffix, "bob-"+suffix
	// Registered before the server starts, so run after it stopped (it
	// would start the container again).
	t.Cleanup(func() {
		for _, owner := range []string{alice, bob} {
			for _, kind := range []string{"container", "network"} {
				ls, rm := []string{kind, "ls", "-q", "--filter", "label=gantry.owner=" + owner}, []string{kind, "rm"}
				if kind == "container" {
					ls, rm = append(ls, "-a"), append(rm, "-f")
				}
				if ids := strings.Fields(dockerCleanup(t, ls...)); len(ids) > 0 {
					dockerCleanup(t, append(rm, ids...)...)
				}
			}
		}
	})
	t0 = time.Now()
	e.s = wstest.StartServe(t, "", e.data, "--provider", "docker", "--docker-image", image)
	t.Logf("the server (gantry built, started): %v", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	e.open(alice, bob, "--cmd", "exec /app", "--http")
	t.Logf("the workspace created and running, config-ssh: %v", time.Since(t0).Round(time.Millisecond))
	return e
}

// Through `gantry ws serve --provider docker` and OpenSSH with the config
// of `ws config-ssh`, into a workspace whose image has what a developer's
// has (sh, sftp-server, scp, rsync): see each part.
func TestSSHIntoADockerWorkspace(t *testing.T) {
	t0 := time.Now()
	e := startDockerSSHWorkspace(t)
	t.Logf("image built, server started, workspace running: %v", time.Since(t0).Round(time.Millisecond))
	part := func(name string, f func(e *sshEnv)) {
		t.Run(name, func(t *testing.T) {
			e := *e
			e.t = t
			t1 := time.Now()
			f(&e)
			t.Logf("%s: %v", name, time.Since(t1).Round(time.Millisecond))
		})
	}
	// A command runs in the workspace's container, as its user in its
	// volume: its output, its exit status, the session's LANG; a shell
	// reads its commands from stdin to its end, and a command its stdin.
	part("command", func(e *sshEnv) {
		got, code := e.run(e.alice, e.ssh("-o", "SetEnv=LANG=C.UTF-8", "gantry-box", `echo hi; id -u; pwd; echo "LANG=$LANG"; exit 3`)...)
		want := fmt.Sprintf("hi\n%d\n/home/coder\nLANG=C.UTF-8\n\n--- stderr:", dockerWorkspaceUID())
		if code != 3 || !strings.HasPrefix(got, want) {
			e.t.Fatalf("ssh gantry-box 'echo hi; id -u; pwd; echo LANG; exit 3': exit %d, output %q; want exit 3 and %q\nserver log:\n%s",
				code, got, want, wstest.Tail(e.s.Log.String(), 3000))
		}
		// No exit command: the shell ends at the end of its stdin.
		got, code = e.runStdin(e.alice, strings.NewReader("echo from-shell\n"), e.ssh("-T", "gantry-box")...)
		if code != 0 || !strings.HasPrefix(got, "from-shell\n\n--- stderr:") {
			e.t.Fatalf("ssh -T gantry-box (a shell, no terminal) with a command on stdin: exit %d, output %q; want exit 0 and from-shell", code, got)
		}
		got, code = e.runStdin(e.alice, strings.NewReader("piped through cat\n"), e.ssh("gantry-box", "cat; echo cat ended")...)
		if code != 0 || !strings.HasPrefix(got, "piped through cat\ncat ended\n\n--- stderr:") {
			e.t.Fatalf("ssh gantry-box 'cat; echo cat ended' with stdin: exit %d, output %q; want its stdin back, then cat's end", code, got)
		}
	})
	// On a terminal: its size from the start, and the client's resize.
	part("terminal", func(e *sshEnv) {
		for range 5 { // a race, on engines before API 1.42: its size, or 0 0 at the start
			got, code := e.run(e.alice, e.ssh("-tt", "gantry-box", "stty size; exit 5")...)
			if code != 5 || !strings.HasPrefix(got, "24 80\r\n") {
				e.t.Fatalf("ssh -tt gantry-box 'stty size; exit 5': exit %d, output %q; want exit 5 and 24 80", code, got)
			}
		}
		e.sshResize()
	})
	// 100 MB up and back, byte for byte, by each protocol: scp's default
	// (SFTP: the image's sftp-server), scp -O (the image's scp) and rsync.
	part("scp", func(e *sshEnv) { e.copyRoundTrip("scp (sftp)", "scp") })
	part("scp-O", func(e *sshEnv) { e.copyRoundTrip("scp -O", "scp", "-O") })
	part("rsync", func(e *sshEnv) { e.copyRoundTrip("rsync", "rsync") })
	part("sftp", func(e *sshEnv) {
		os.WriteFile(filepath.Join(e.dir, "batch"), []byte("pwd\nls -n\n"), 0o600)
		got, code := e.run(e.alice, append(append([]string{"sftp", "-b", filepath.Join(e.dir, "batch")}, e.opts...), "gantry-box")...)
		if code != 0 || !strings.Contains(got, "Remote working directory: /home/coder") {
			e.t.Fatalf("sftp -b (pwd, ls): exit %d, output %q; want the volume as its working directory", code, got)
		}
	})
	part("forward", func(e *sshEnv) { e.forwardToApp() })
	part("other-owner", func(e *sshEnv) {
		got, code := e.run(e.bob, e.ssh("gantry-box", "echo hi")...)
		if code != 255 || strings.HasPrefix(got, "hi") || !strings.Contains(got, "HTTP 404") {
			e.t.Fatalf("ssh gantry-box as bob: exit %d, output %q; want 255 and the server's 404", code, got)
		}
	})
	t.Logf("the Docker SSH test: %v", time.Since(t0).Round(time.Millisecond))
}

// dockerWorkspaceUID is the uid a Docker workspace of the test's image runs
// as: nobody when the server is root, else the server's own.
func dockerWorkspaceUID() int {
	if os.Getuid() == 0 {
		return 65534
	}
	return os.Getuid()
}

// ssh is ssh's command line with the test's config and args.
func (e *sshEnv) ssh(args ...string) []string {
	return append(append([]string{"ssh"}, e.opts...), args...)
}

// forwardToApp checks `ssh -L` to the workspace's app: a GET through the
// forwarded port reaches the app (in a Docker workspace, at the
// container's address); another port is refused.
func (e *sshEnv) forwardToApp() {
	t := e.t
	out, code := e.run(e.alice, e.ssh("gantry-box", `echo "$PORT"`)...)
	port, _, _ := strings.Cut(out, "\n")
	if code != 0 || port == "" {
		t.Fatalf("ssh gantry-box 'echo $PORT': exit %d, %q", code, out)
	}
	for _, tc := range []struct {
		target string
		ok     bool
	}{{"localhost:" + port, true}, {"127.0.0.1:22", false}} {
		local := freeLocalPort(t)
		args := e.ssh("-N", "-o", "ExitOnForwardFailure=yes", "-L", fmt.Sprintf("127.0.0.1:%d:%s", local, tc.target), "gantry-box")[1:]
		body, stderr, err := tryForward(t, args, e.alice, fmt.Sprintf("http://127.0.0.1:%d/", local), tc.ok)
		if tc.ok && body != "served-from-the-workspace\n" || !tc.ok && err == nil {
			t.Fatalf("GET through ssh -L %s: %q, %v; want ok %v\nssh: %s", tc.target, body, err, tc.ok, stderr)
		}
		t.Logf("ssh -L %s: GET: %q, %v", tc.target, body, err)
	}
}

// sshResize runs `ssh -t` on a terminal of 30x100 that then grows to
// 50x132: the command in the workspace sees the first size, then, after
// OpenSSH's window-change, the second; ssh exits with its status.
func (e *sshEnv) sshResize() {
	t := e.t
	cmd := exec.Command("ssh", append(append([]string{"-t"}, e.opts...), "gantry-box",
		`stty size; i=0; while [ "$(stty size)" = "30 100" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; stty size; exit 6`)...)
	cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+e.alice)
	term, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	var out testutil.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&out, term); close(copied) }()
	testutil.WaitFor(t, 20*time.Second, "the first size", func() (bool, string) {
		return strings.Contains(out.String(), "30 100"), out.String()
	})
	if err := pty.Setsize(term, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	<-copied
	if code := cmd.ProcessState.ExitCode(); code != 6 || !strings.HasPrefix(out.String(), "30 100\r\n50 132\r\n") {
		t.Fatalf("ssh -t gantry-box (stty size, until it changes): exit %d, output %q; want exit 6, 30 100 then 50 132", code, out.String())
	}
}
