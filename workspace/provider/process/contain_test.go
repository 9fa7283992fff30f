package process_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/process"
)

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the process provider contains workspaces only when the server runs as root")
	}
}

// layout makes a data directory as the server does (0700) with a volume,
// a secret beside it and another workspace's volume, and returns the
// volume's path.
func layout(t *testing.T, c *process.Container, dir string) string {
	data := filepath.Join(dir, "data")
	vol := filepath.Join(data, "volumes", "ws1")
	for _, d := range []string{data, vol, filepath.Join(data, "volumes", "other")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(data, 0o700)
	os.WriteFile(filepath.Join(data, "admin-token"), []byte("gws_secret\n"), 0o600)
	os.WriteFile(filepath.Join(data, "volumes", "other", "secret.txt"), []byte("other's\n"), 0o644)
	c.RunDir = filepath.Join(data, "run")
	return vol
}

// probe is a shell script a workspace runs: what it is and what it
// reaches, one "key: value" line each, into report.txt.
func probe(hostPort int) string {
	return `{
echo "uid: $(id -u)"; echo "gid: $(id -g)"; echo "groups: $(id -G)"; echo "umask: $(umask)"
echo "user: $(id -un) $(id -gn) $(getent passwd "$(id -u)" | cut -d: -f6,7)"
echo "env: $(env | cut -d= -f1 | sort | tr '\n' ' ')"
echo "parent: $(ls -a .. | tr '\n' ' ')"
cat ../../admin-token >/dev/null 2>&1 && echo "admin-token: read" || echo "admin-token: refused"
cat ../other/secret.txt >/dev/null 2>&1 && echo "other: read" || echo "other: refused"
test -e /proc/1 && echo "pid1: visible" || echo "pid1: hidden"
python3 -c "import socket; socket.create_connection(('127.0.0.1', ` + strconv.Itoa(hostPort) + `), timeout=2)" >/dev/null 2>&1 && echo "host port: reached" || echo "host port: unreachable"
} > report.tmp; mv report.tmp report.txt`
}

// readReport waits for the volume's report.txt and parses it.
func readReport(t *testing.T, vol string) map[string]string {
	var b []byte
	testutil.WaitFor(t, 10*time.Second, "report.txt", func() (bool, string) {
		var err error
		b, err = os.ReadFile(filepath.Join(vol, "report.txt"))
		return err == nil, fmt.Sprint(err)
	})
	r := map[string]string{}
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		k, v, _ := strings.Cut(sc.Text(), ": ")
		r[k] = v
	}
	return r
}

// TestContainedCommand: as root, a workspace's command runs as a uid of
// its own (no groups, umask 077), with the minimal environment (not the
// server's canary), sees nothing of the data directory but its volume
// (which is its own, 0700, a root-owned file in it included, a hard link
// to a file outside left alone), sees only its own processes, and reaches
// no host port; the server reaches its PORT through Dial, not through the
// host's 127.0.0.1.
func TestContainedCommand(t *testing.T) {
	requireRoot(t)
	t.Setenv("GANTRY_TEST_SERVER_CANARY", "server-secret")
	dir := t.TempDir()
	c := &process.Container{StopGrace: time.Second}
	vol := layout(t, c, dir)
	os.WriteFile(filepath.Join(vol, "from-root.txt"), []byte("x"), 0o644)
	outside := filepath.Join(dir, "outside.txt")
	os.WriteFile(outside, []byte("x"), 0o644)
	if err := os.Link(outside, filepath.Join(vol, "link.txt")); err != nil {
		t.Fatal(err)
	}
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	ctx := t.Context()
	cmd := probe(host.Addr().(*net.TCPAddr).Port) + `; exec python3 -m http.server --bind 127.0.0.1 "$PORT"`
	if err := c.Start(ctx, provider.Spec{ID: "ws1", Name: "one", VolumeDir: vol, Command: cmd, Env: []string{"MINE=1"}, HTTP: true}); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.WithoutCancel(ctx), "ws1")
	r := readReport(t, vol)
	uid, _ := strconv.Atoi(r["uid"])
	if first := int(process.DefaultUIDs.First); uid < first || uid >= first+int(process.DefaultUIDs.Count) || r["gid"] != r["uid"] || r["groups"] != r["uid"] {
		t.Fatalf("uid %s gid %s groups %s: want one uid of %v as gid, no other groups", r["uid"], r["gid"], r["groups"], process.DefaultUIDs)
	}
	want := map[string]string{"umask": "0077", "env": "GANTRY_WORKSPACE_ID GANTRY_WORKSPACE_NAME HOME MINE PATH PORT PWD ",
		"parent": ". .. ws1 ", "admin-token": "refused", "other": "refused", "pid1": "hidden", "host port": "unreachable"}
	want["user"] = fmt.Sprintf("gantry-%d gantry-%d %s:/bin/sh", uid, uid, vol)
	for k, v := range want {
		if r[k] != v {
			t.Errorf("%s: %q, want %q", k, r[k], v)
		}
	}
	for name, wantUID := range map[string]int{"": uid, "from-root.txt": uid, "link.txt": 0} {
		fi, err := os.Lstat(filepath.Join(vol, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := int(fi.Sys().(*syscall.Stat_t).Uid); got != wantUID || name == "" && fi.Mode().Perm() != 0o700 {
			t.Errorf("volume/%s: uid %d mode %v; want uid %d (the volume itself 0700)", name, got, fi.Mode().Perm(), wantUID)
		}
	}
	checkDial(t, c, "ws1")
}

// checkDial: Dial reaches the workspace's PORT (its HTTP server answers),
// and the host's 127.0.0.1:PORT (Endpoint) is not it.
func checkDial(t *testing.T, c *process.Container, id string) {
	conn, err := c.Dial(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / through Dial: %v %v", resp, err)
	}
	addr, err := c.Endpoint(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if hc, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		hc.Close()
		t.Fatalf("the workspace's port answers on the host's %s", addr)
	}
}

// TestContainedExecAndStop: `ws exec` runs as the command's uid, in its
// namespaces (it reaches the command's PORT), with the command's minimal
// environment (its name included); Stop ends every process of the workspace, what exec left in
// a session of its own included.
func TestContainedExecAndStop(t *testing.T) {
	requireRoot(t)
	t.Setenv("GANTRY_TEST_SERVER_CANARY", "server-secret")
	dir := t.TempDir()
	c := &process.Container{StopGrace: time.Second}
	vol := layout(t, c, dir)
	ctx := t.Context()
	if err := c.Start(ctx, provider.Spec{ID: "ws1", VolumeDir: vol, Command: `exec python3 -m http.server --bind 127.0.0.1 "$PORT"`, HTTP: true}); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.WithoutCancel(ctx), "ws1")
	var out, errb bytes.Buffer
	script := `id -u; env | cut -d= -f1 | sort | tr '\n' ' '; echo; python3 -c "import socket, os; socket.create_connection(('127.0.0.1', int(os.environ['PORT'])), timeout=2); print('own port: reached')"
setsid sleep 1234 </dev/null >/dev/null 2>&1 &`
	code, err := c.Exec(ctx, provider.ExecSpec{ID: "ws1", Name: "one", VolumeDir: vol, Argv: []string{"sh", "-c", script}, Env: []string{"MINE=1"}}, nil, &out, &errb)
	if err != nil || code != 0 {
		t.Fatalf("exec: %d %v\n%s%s", code, err, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	uid, _ := strconv.Atoi(lines[0])
	if len(lines) != 3 || uid < int(process.DefaultUIDs.First) || lines[1] != "GANTRY_WORKSPACE_ID GANTRY_WORKSPACE_NAME HOME MINE PATH PORT PWD " || lines[2] != "own port: reached" {
		t.Fatalf("exec printed %q", out.String())
	}
	if p := processesOf(uid); len(p) < 2 {
		t.Fatalf("processes of uid %d: %v, want the command and exec's sleep", uid, p)
	}
	if err := c.Stop(ctx, "ws1"); err != nil {
		t.Fatal(err)
	}
	if p := processesOf(uid); len(p) > 0 {
		t.Fatalf("after Stop, processes of uid %d remain: %v", uid, p)
	}
}

// TestNetworkHost: with NetworkHost the workspace shares the host's
// network (it reaches a host port), contained otherwise.
func TestNetworkHost(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	c := &process.Container{StopGrace: time.Second, Network: process.NetworkHost}
	vol := layout(t, c, dir)
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if err := c.Start(t.Context(), provider.Spec{ID: "ws1", VolumeDir: vol, Command: probe(host.Addr().(*net.TCPAddr).Port) + "; exec sleep 60"}); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.WithoutCancel(t.Context()), "ws1")
	if r := readReport(t, vol); r["host port"] != "reached" || r["admin-token"] != "refused" || r["uid"] == "0" {
		t.Fatalf("report: %v", r)
	}
}

// TestSharedUserStopEndsExecd: sharing the server's user, the command gets
// the minimal environment too, and Stop ends what exec left in a session
// of its own (by the GANTRY_WORKSPACE_ID in its environment).
func TestSharedUserStopEndsExecd(t *testing.T) {
	t.Setenv("GANTRY_TEST_SERVER_CANARY", "server-secret")
	dir := t.TempDir()
	c := &process.Container{StopGrace: time.Second, SharedUser: true}
	vol := layout(t, c, dir)
	ctx := t.Context()
	if err := c.Start(ctx, provider.Spec{ID: "shared1", VolumeDir: vol, Command: probe(1) + "; exec sleep 60"}); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.WithoutCancel(ctx), "shared1")
	if r := readReport(t, vol); r["env"] != "GANTRY_WORKSPACE_ID GANTRY_WORKSPACE_NAME HOME PATH PORT PWD " || r["uid"] != strconv.Itoa(os.Geteuid()) {
		t.Fatalf("report: %v", r)
	}
	var out bytes.Buffer
	if code, err := c.Exec(ctx, provider.ExecSpec{ID: "shared1", VolumeDir: vol, Argv: []string{"sh", "-c", "setsid sleep 1235 </dev/null >/dev/null 2>&1 & echo $!"}}, nil, &out, &out); err != nil || code != 0 {
		t.Fatalf("exec: %d %v %s", code, err, out.String())
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(out.String()))
	if err := c.Stop(ctx, "shared1"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !slices.Contains(strings.Fields(string(st)), "Z") {
		t.Fatalf("exec's sleep (pid %d) outlived Stop: %s", pid, st)
	}
}

// processesOf lists the live processes of uid (real, effective or saved).
func processesOf(uid int) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "status"))
		if err != nil || strings.Contains(string(b), "State:\tZ") {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) >= 4 && f[0] == "Uid:" && slices.Contains(f[1:4], strconv.Itoa(uid)) {
				out = append(out, filepath.Base(d))
			}
		}
	}
	return out
}
