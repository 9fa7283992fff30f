package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

// cluster is what the Docker tests share: a static gantry for the host, an
// image made from it, and a private network. Everything it creates is
// removed by t.Cleanup, on success, failure and panic alike.
type cluster struct {
	t       *testing.T
	id      string // random, in every name this test run creates
	bin     string // static gantry, runs on the host too
	image   string
	network string
	prefix  string // the network's first three octets, "10.213.7"
	// masterBind: `sort master` has --bind, whose default is loopback, so a
	// master in a container must be told its address.
	masterBind bool
}

// docker runs the docker CLI and returns its stdout; stderr is in the error.
func docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0") // the classic builder needs nothing from a registry
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// mustDocker is docker that fails the test on error.
func (c *cluster) docker(args ...string) string {
	c.t.Helper()
	// Not c.t.Context(): cleanups run docker too, after that is cancelled.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.t.Context()), 2*time.Minute)
	defer cancel()
	out, err := docker(ctx, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// cleanupDocker removes what a test made; best effort, logged.
func cleanupDocker(t *testing.T, args ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
	defer cancel()
	if _, err := docker(ctx, args...); err != nil && !strings.Contains(err.Error(), "No such") {
		t.Logf("cleanup: %v", err)
	}
}

// newCluster builds the static binary and the image and creates the
// network. It fails the test when Docker is not usable: the test needs it.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := docker(ctx, "version", "--format", "{{.Server.Version}}"); err != nil {
		t.Fatalf("the multi-host test needs a Docker engine: %v", err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	c := &cluster{t: t, id: hex.EncodeToString(b)}

	c.bin, c.image = buildImage(t, c.id)
	if help, err := exec.Command(c.bin, "sort", "master", "--help").CombinedOutput(); err == nil {
		c.masterBind = strings.Contains(string(help), "--bind")
	}

	// An internal network: containers reach each other and nothing else.
	// A fixed subnet lets a container keep its address when it is
	// reconnected or replaced; pick one no other network uses.
	c.network = "gantry-e2e-" + c.id
	var err error
	for try := 0; try < 20; try++ {
		rb := make([]byte, 1)
		rand.Read(rb)
		c.prefix = fmt.Sprintf("10.213.%d", rb[0])
		nctx, ncancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, err = docker(nctx, "network", "create", "--internal", "--subnet", c.prefix+".0/24", c.network)
		ncancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("no free subnet for the test network: %v", err)
	}
	t.Cleanup(func() { cleanupDocker(t, "network", "rm", c.network) })
	return c
}

// buildImage builds a static gantry and gantry's image from it with
// scripts/image.sh (what make image runs), tagged with id; it returns the
// binary (it runs on the host too) and the image, which the test's cleanup
// removes.
func buildImage(t *testing.T, id string) (bin, image string) {
	t.Helper()
	bin = filepath.Join(t.TempDir(), "gantry")
	build := exec.Command(goTool(), "build", "-trimpath", "-o", bin, "./cmd/gantry")
	build.Dir = repoRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	image = "gantry-e2e:" + id
	t.Cleanup(func() { cleanupDocker(t, "rmi", "-f", image) })
	img := exec.Command("bash", filepath.Join(repoRoot(t), "scripts", "image.sh"), "--tag", image, "--binary", bin)
	if out, err := img.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, out)
	}
	return bin, image
}

// container is one host of the test cluster.
type container struct {
	c    *cluster
	name string
	ip   string
	dir  string   // host dir mounted at /data (workers)
	args []string // gantry arguments
}

// run starts the container (again, after rm, for a restart) with env.
func (k *container) run(env ...string) {
	k.c.t.Helper()
	args := []string{"run", "-d", "--name", k.name, "--network", k.c.network, "--ip", k.ip,
		"--user", strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid())}
	if k.dir != "" {
		args = append(args, "-v", k.dir+":/data")
	}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(append(args, k.c.image), k.args...)
	k.c.docker(args...)
}

// logs returns the container's stdout and stderr so far.
func (k *container) logs() (stdout, stderr string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.c.t.Context()), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "logs", k.name)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	return out.String(), errb.String()
}

// waitLog waits until the container's stderr holds s.
func (k *container) waitLog(s string, timeout time.Duration) {
	k.c.t.Helper()
	testutil.WaitFor(k.c.t, timeout, fmt.Sprintf("%s to print %q", k.name, s), func() (bool, string) {
		_, e := k.logs()
		return strings.Contains(e, s), "stderr:\n" + tail(e, 30)
	})
}

// wait waits for the container to exit and returns its exit code.
func (k *container) wait(timeout time.Duration) int {
	k.c.t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.c.t.Context()), timeout)
	defer cancel()
	out, err := docker(ctx, "wait", k.name)
	if err != nil {
		_, e := k.logs()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			k.c.t.Fatalf("%s still running after %s; stderr:\n%s", k.name, timeout, tail(e, 30))
		}
		k.c.t.Fatal(err)
	}
	code, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		k.c.t.Fatalf("docker wait %s: %q", k.name, out)
	}
	return code
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// repoRoot is the directory holding go.mod, found from the test's dir.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// goTool is the go command that runs this test: the one `go test` put on
// PATH, else the toolchain's own (GOROOT is set by go test).
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}
