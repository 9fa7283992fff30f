package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq"
)

// TestImage: the image scripts/image.sh builds (make image) runs as an
// unprivileged user and, run as the README shows, serves `ws serve` on a
// port published on the host's loopback (an admin reads its token out of
// the container, creates a workspace and sees it RUNNING) and runs `queue
// worker` against a Redis on the host's loopback (--network host) until
// `docker stop`, which it survives with exit status 0 and every task done.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image and runs containers")
	}
	c := newCluster(t) // the image and a static gantry for the host
	if u := strings.TrimSpace(c.docker("image", "inspect", "-f", "{{.Config.User}}", c.image)); u != "65532:65532" {
		t.Fatalf("the image runs as %q; want the unprivileged 65532:65532", u)
	}
	if v := c.docker("run", "--rm", c.image, "version"); !strings.HasPrefix(v, "gantry ") {
		t.Fatalf("docker run IMAGE version printed %q", v)
	}
	t.Run("ws serve", func(t *testing.T) { imageServesWorkspaces(t, c) })
	t.Run("queue worker", func(t *testing.T) { imageRunsWorker(t, c) })
}

func imageServesWorkspaces(t *testing.T, c *cluster) {
	name := "gantry-e2e-ws-" + c.id
	t.Cleanup(func() {
		cleanupDocker(t, "rm", "-f", name)
		cleanupDocker(t, "volume", "rm", name)
	})
	// The container's network is its own: 0.0.0.0 in it is reachable only
	// through the port published on the host's loopback. The data lives in
	// a named volume on the home directory, which the unprivileged user owns.
	c.docker("run", "-d", "--name", name, "-p", "127.0.0.1::7480", "-v", name+":/home/gantry", c.image,
		"ws", "serve", "--listen", "0.0.0.0:7480", "--insecure-listen", "--provider", "fake")
	addr := strings.TrimSpace(strings.Split(c.docker("port", name, "7480/tcp"), "\n")[0])
	dir := t.TempDir()
	testutil.WaitFor(t, 30*time.Second, "the admin token in the container", func() (bool, string) {
		_, err := docker(t.Context(), "cp", name+":/home/gantry/gantry-ws-data/admin-token", dir)
		return err == nil, errString(err)
	})
	token, err := os.ReadFile(filepath.Join(dir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GANTRY_SERVER=http://"+addr, "GANTRY_TOKEN="+strings.TrimSpace(string(token)))
	run := func(args ...string) string {
		cmd := exec.CommandContext(t.Context(), c.bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("gantry %s: %v\n%s\n%s", strings.Join(args, " "), err, out, c.docker("logs", name))
		}
		return string(out)
	}
	testutil.WaitFor(t, 30*time.Second, "ws serve answering on "+addr, func() (bool, string) {
		cmd := exec.CommandContext(t.Context(), c.bin, "ws", "whoami")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return err == nil, string(out)
	})
	run("ws", "create", "hello", "--desired", "RUNNING")
	run("ws", "wait", "hello", "RUNNING", "--timeout", "30s")
	if out := run("ws", "get", "hello"); !strings.Contains(out, "observed_status: RUNNING") {
		t.Fatalf("ws get hello:\n%s", out)
	}
}

func imageRunsWorker(t *testing.T, c *cluster) {
	redis := testutil.StartRedis(t) // its own: no other test's worker takes these tasks
	cl, err := taskq.NewClient(taskq.ClientConfig{Redis: redis.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := make([]byte, 4)
	rand.Read(b)
	queue := "image-" + hex.EncodeToString(b)
	tasks := make([]*taskq.Task, 500)
	for i := range tasks {
		tasks[i] = taskq.NewTask("noop", nil, taskq.Queue(queue))
	}
	if _, err := cl.EnqueueBatch(t.Context(), tasks); err != nil {
		t.Fatal(err)
	}
	name := "gantry-e2e-worker-" + c.id
	t.Cleanup(func() { cleanupDocker(t, "rm", "-f", name) })
	c.docker("run", "-d", "--name", name, "--network", "host", c.image,
		"queue", "worker", "--redis", redis.Addr(), "--queues", queue, "--no-steal", "--no-cron")
	testutil.WaitFor(t, 60*time.Second, "500 tasks done by the worker in the container", func() (bool, string) {
		st, err := cl.Stats(t.Context())
		if err != nil {
			return false, err.Error()
		}
		q := st.Queues[queue]
		return q.ProcessedTotal == 500 && q.Pending == 0 && q.Active == 0, strings.TrimSpace(c.docker("logs", "--tail", "3", name))
	})
	c.docker("stop", "-t", "20", name)
	if code := strings.TrimSpace(c.docker("inspect", "-f", "{{.State.ExitCode}}", name)); code != "0" {
		t.Fatalf("the worker exited %s after docker stop; want 0\n%s", code, c.docker("logs", name))
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
