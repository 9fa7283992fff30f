package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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

	"github.com/moby/moby/client"
	"go.uber.org/goleak"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	wsclient "github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// wsProgram is the workspace image's only binary: it writes a marker into its
// home (proving the mount), answers the HEALTHCHECK, and sleeps; built with
// testdata/attack.go, it runs the containment attack too.
const wsProgram = `package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	home := os.Getenv("HOME")
	if len(os.Args) > 1 { // commands for exec
		switch os.Args[1] {
		case "echo":
			wd, _ := os.Getwd()
			fmt.Println(strings.Join(os.Args[2:], " "), wd)
			fmt.Fprintln(os.Stderr, "to stderr")
			return
		case "exit":
			n, _ := strconv.Atoi(os.Args[2])
			os.Exit(n)
		case "killself":
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		case "cat":
			io.Copy(os.Stdout, os.Stdin)
			return
		case "dial": // exit 0 if a TCP connection to os.Args[2] opens within 2 s
			c, err := net.DialTimeout("tcp", os.Args[2], 2*time.Second)
			if err != nil {
				fmt.Println("unreachable:", err)
				os.Exit(1)
			}
			c.Close()
			fmt.Println("connected")
			return
		case "whoami": // the process's uid, gid, environment and capabilities
			fmt.Println("uid", os.Getuid(), "gid", os.Getgid())
			fmt.Println(strings.Join(os.Environ(), " "))
			status, _ := os.ReadFile("/proc/self/status")
			for _, l := range strings.Split(string(status), "\n") {
				if strings.HasPrefix(l, "CapEff:") || strings.HasPrefix(l, "NoNewPrivs:") {
					fmt.Println(strings.Join(strings.Fields(l), " "))
				}
			}
			return
		case "attack": // the containment attack: testdata/attack.go
			attack(os.Args[2:])
			return
		case "hold": // run until killed; os.Args[2] marks it in the host's process table
			for {
				time.Sleep(time.Hour)
			}
		case "tty": // the terminal's size, or exit 1 without one
			var ws [4]uint16
			for i := 0; i < 100 && ws[0] == 0; i++ { // engines before API 1.42 size it just after the start
				if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, 1, syscall.TIOCGWINSZ, uintptr(unsafe.Pointer(&ws))); e != 0 {
					fmt.Println("not a tty")
					os.Exit(1)
				}
				time.Sleep(10 * time.Millisecond)
			}
			fmt.Println("tty", ws[0], ws[1], os.Getenv("TERM"))
			fmt.Fprintln(os.Stderr, "stderr too")
			os.Exit(3)
		}
	}
	if len(os.Args) > 1 && os.Args[1] == "health" {
		if _, err := os.Stat(filepath.Join(home, ".ready")); err != nil {
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(filepath.Join(home, "started-by-"+os.Getenv("GANTRY_WORKSPACE_ID")), []byte(time.Now().String()), 0o644); err != nil {
		os.Exit(3)
	}
	fmt.Println("started", os.Getenv("GANTRY_WORKSPACE_ID"))
	if os.Getenv("WS_FAIL") != "" {
		fmt.Println("failing on purpose")
		os.Exit(7)
	}
	if n, _ := strconv.Atoi(os.Getenv("WS_ALLOC_MB")); n > 0 { // touch n MiB: past a memory limit, the kernel kills
		var keep [][]byte
		for i := 0; i < n; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				b[j] = byte(j)
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep))
	}
	if n, _ := strconv.Atoi(os.Getenv("WS_THREADS")); n > 0 { // n OS threads: past a pids limit, thread creation fails
		for i := 0; i < n; i++ {
			go func() { runtime.LockOSThread(); time.Sleep(time.Hour) }()
		}
		time.Sleep(2 * time.Second)
		fmt.Println("threads", n)
	}
	if port := os.Getenv("PORT"); port != "" {
		delay, _ := strconv.Atoi(os.Getenv("WS_HTTP_DELAY_MS")) // serve only this long after the start
		go func() {
			time.Sleep(time.Duration(delay) * time.Millisecond)
			http.ListenAndServe(":"+port, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "hello from %s at %s", os.Getenv("GANTRY_WORKSPACE_ID"), r.URL.Path)
			}))
		}()
	}
	if port := os.Getenv("WS_APP_PORT"); port != "" { // a second app, on a port of its own
		go http.ListenAndServe(":"+port, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "app on %s of %s at %s", port, os.Getenv("GANTRY_WORKSPACE_ID"), r.URL.Path)
		}))
	}
	time.Sleep(300 * time.Millisecond)
	os.WriteFile(filepath.Join(home, ".ready"), nil, 0o644)
	for {
		time.Sleep(time.Hour)
	}
}
`

// BuildTestImage builds a FROM-scratch image holding a static Go binary and
// returns its tag; the image is removed when the test ends.
func buildTestImage(t *testing.T, cli *client.Client) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gantry-ws-image")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(wsProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	attackSrc, err := os.ReadFile(filepath.Join("testdata", "attack.go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "attack.go"), attackSrc, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ws")
	cmd := exec.Command("go", "build", "-o", bin, "main.go", "attack.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build workspace binary: %v\n%s", err, out)
	}
	binData, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := "FROM scratch\nCOPY ws /ws\nHEALTHCHECK --interval=1s --timeout=2s --retries=30 CMD [\"/ws\", \"health\"]\nENTRYPOINT [\"/ws\"]\n"
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
		mode int64
	}{{"Dockerfile", []byte(dockerfile), 0o644}, {"ws", binData, 0o755}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	tw.Close()
	tag := "gantry-test-ws:" + randID(t)
	res, err := cli.ImageBuild(t.Context(), &buf, client.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true,
		Labels: map[string]string{"gantry.test": "1"}})
	if err != nil {
		t.Fatalf("image build: %v", err)
	}
	out, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !bytes.Contains(out, []byte("Successfully tagged")) {
		t.Fatalf("image build did not tag %s:\n%s", tag, out)
	}
	imageCleanup = func() {
		cli.ImageRemove(context.WithoutCancel(t.Context()), tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		cli.Close() // the first test closed cli already: end the connection the remove made again
	}
	return tag
}

func randID(t *testing.T) string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func newTestProvider(t *testing.T, cfg Config) (*Provider, *client.Client) {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if _, err := cli.Ping(t.Context(), client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		t.Fatalf("docker engine needed for this test: %v", err)
	}
	cfg.Client = cli
	if cfg.Image == "" {
		cfg.Image = sharedImage(t, cli)
	}
	if cfg.StartupTimeout == 0 {
		cfg.StartupTimeout = 60 * time.Second
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, cli
}

// testImage is built once per test process and removed by TestMain.
var (
	testImage    string
	imageCleanup = func() {}
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(cleanupAfter{m}) }

// cleanupAfter removes the shared test image once the tests ran, and ends
// the keep-alive connections the default client left in its pool (the S3
// health check, http.Get), before goleak looks for goroutines left behind.
type cleanupAfter struct{ m *testing.M }

func (c cleanupAfter) Run() int {
	code := c.m.Run()
	imageCleanup()
	http.DefaultClient.CloseIdleConnections()
	return code
}

func sharedImage(t *testing.T, cli *client.Client) string {
	if testImage == "" {
		testImage = buildTestImage(t, cli)
	}
	return testImage
}

// cleanupWorkspace removes exactly the containers and volume of id.
func cleanupWorkspace(t *testing.T, p *Provider, id string) {
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		p.Stop(ctx, id)
		p.DeleteVolume(ctx, id)
	})
}

func TestNegotiatesEngineAPI(t *testing.T) {
	p, cli := newTestProvider(t, Config{Image: "unused"})
	v, err := p.Ping(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sv, err := cli.ServerVersion(t.Context(), client.ServerVersionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v != sv.APIVersion && !strings.HasPrefix(client.MaxAPIVersion, v) {
		t.Fatalf("negotiated %s; engine speaks %s, client max %s", v, sv.APIVersion, client.MaxAPIVersion)
	}
	t.Logf("engine API %s, client max %s, negotiated %s", sv.APIVersion, client.MaxAPIVersion, v)
}

func TestStartStopObserve(t *testing.T) {
	p, cli := newTestProvider(t, Config{NetworkMode: "none"})
	id := "t" + randID(t)
	cleanupWorkspace(t, p, id)
	vol := t.TempDir()
	ctx := t.Context()

	if st, err := p.Observe(ctx, id); err != nil || st != provider.Missing {
		t.Fatalf("Observe before start = %v, %v; want missing", st, err)
	}
	spec := provider.Spec{ID: id, Name: "demo", VolumeDir: vol}
	if err := p.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// Start returns only once healthy: the program wrote .ready.
	if _, err := os.Stat(filepath.Join(vol, ".ready")); err != nil {
		t.Fatalf("Start returned before the container was healthy: %v", err)
	}
	if _, err := os.Stat(filepath.Join(vol, "started-by-"+id)); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	in, err := cli.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := in.Container
	if c.Config.Labels[LabelWorkspaceID] != id {
		t.Errorf("label %s = %q, want %q", LabelWorkspaceID, c.Config.Labels[LabelWorkspaceID], id)
	}
	if c.HostConfig.RestartPolicy.Name != "no" {
		t.Errorf("restart policy %q, want no", c.HostConfig.RestartPolicy.Name)
	}
	if len(c.HostConfig.PortBindings) != 0 {
		t.Errorf("published ports %v, want none", c.HostConfig.PortBindings)
	}

	// Idempotent: a second Start leaves the same container running.
	if err := p.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	in2, err := cli.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if err != nil || in2.Container.ID != c.ID {
		t.Fatalf("second Start replaced the container: %v %s != %s", err, in2.Container.ID, c.ID)
	}

	// A new Provider (gantry restarted) finds it by label.
	p2, err := New(Config{Client: cli, Image: p.cfg.Image})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p2.Observe(ctx, id); err != nil || st != provider.Running {
		t.Fatalf("Observe from a fresh provider = %v, %v; want running", st, err)
	}

	if err := p.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Observe(ctx, id); err != nil || st != provider.Missing {
		t.Fatalf("Observe after stop = %v, %v; want missing", st, err)
	}
	if _, err := os.Stat(filepath.Join(vol, "started-by-"+id)); err != nil {
		t.Fatalf("stop lost the volume's files: %v", err)
	}
	if err := p.Stop(ctx, id); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	// Start again after stop: a fresh container on the same files.
	if err := p.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if st, _ := p.Observe(ctx, id); st != provider.Running {
		t.Fatalf("Observe after restart = %v", st)
	}
}

func TestDockerVolumeKeptOnStop(t *testing.T) {
	p, _ := newTestProvider(t, Config{Volumes: DockerVolume, NetworkMode: "none"})
	id := "t" + randID(t)
	cleanupWorkspace(t, p, id)
	ctx := t.Context()
	if err := p.Start(ctx, provider.Spec{ID: id}); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	ok, err := p.VolumeExists(ctx, id)
	if err != nil || !ok {
		t.Fatalf("volume after stop: exists=%v err=%v; want kept", ok, err)
	}
	if err := p.DeleteVolume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if ok, _ := p.VolumeExists(ctx, id); ok {
		t.Fatal("volume still there after DeleteVolume")
	}
}

func TestStartReportsExit(t *testing.T) {
	p, _ := newTestProvider(t, Config{NetworkMode: "none"})
	id := "t" + randID(t)
	cleanupWorkspace(t, p, id)
	err := p.Start(t.Context(), provider.Spec{ID: id, VolumeDir: t.TempDir(), Env: []string{"WS_FAIL=1"}})
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "exit code 7") {
		t.Fatalf("Start of a crashing image = %v; want ErrExited with exit code 7", err)
	}
	var ee *provider.ExitError
	if !errors.As(err, &ee) || ee.Exit.Status != "exit 7" || ee.Exit.Code != 7 || !strings.Contains(ee.Exit.Output, "failing on purpose") {
		t.Fatalf("Start of a crashing image: %v; want an ExitError with exit 7 and its output", err)
	}
	if e, err := p.Exited(t.Context(), id, time.Now().Add(-time.Minute)); err != nil || e == nil || e.Code != 7 {
		t.Fatalf("Exited = %+v, %v", e, err)
	}
}

// A running container serves its PORT at the address Endpoint gives (on
// a private network the test creates), and Logs has its output.
func TestEndpointAndLogs(t *testing.T) {
	p, cli := newTestProvider(t, Config{})
	netName := "gantry-ws-test-" + randID(t)
	if _, err := cli.NetworkCreate(t.Context(), netName, client.NetworkCreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.NetworkRemove(context.WithoutCancel(t.Context()), netName, client.NetworkRemoveOptions{}) })
	p.cfg.NetworkMode = netName
	id := "t" + randID(t)
	cleanupWorkspace(t, p, id)
	ctx := t.Context()
	if _, err := p.Endpoint(ctx, id); !errors.Is(err, provider.ErrNotRunning) {
		t.Fatalf("Endpoint of a missing workspace = %v", err)
	}
	if err := p.Start(ctx, provider.Spec{ID: id, VolumeDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	addr, err := p.Endpoint(ctx, id)
	if err != nil || !strings.HasSuffix(addr, ":8080") {
		t.Fatalf("Endpoint = %q, %v", addr, err)
	}
	var body string
	// The program starts its server after the health check.
	testutil.WaitFor(t, 10*time.Second, "the program's server at "+addr, func() (bool, string) {
		resp, err := http.Get("http://" + addr + "/x")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return true, ""
	})
	if body != "hello from "+id+" at /x" {
		t.Fatalf("GET %s: %q", addr, body)
	}
	var out bytes.Buffer
	if err := p.Logs(ctx, id, 5, false, &out); err != nil || !strings.Contains(out.String(), "started "+id) {
		t.Fatalf("Logs = %q, %v", out.String(), err)
	}
	if e, err := p.Exited(ctx, id, time.Time{}); err != nil || e != nil {
		t.Fatalf("Exited of a running container = %+v, %v", e, err)
	}
	if testing.Short() {
		t.Log("-short: the Spec.HTTP start that waits 1.5 s is left to make test")
		return
	}
	// Spec.HTTP: Start returns once PORT accepts connections, here 1.5 s
	// after the command started (its health check passes after 0.3 s).
	slow := "t" + randID(t)
	cleanupWorkspace(t, p, slow)
	t0 := time.Now()
	if err := p.Start(ctx, provider.Spec{ID: slow, VolumeDir: t.TempDir(), HTTP: true, Env: []string{"WS_HTTP_DELAY_MS=1500"}}); err != nil {
		t.Fatal(err)
	}
	addr, _ = p.Endpoint(ctx, slow)
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil || time.Since(t0) < 1500*time.Millisecond {
		t.Fatalf("Start with HTTP returned after %v; a connection to %s then: %v", time.Since(t0), addr, err)
	}
	c.Close()
}

func TestEngineDown(t *testing.T) {
	p, err := New(Config{Host: "unix://" + filepath.Join(t.TempDir(), "no-docker.sock"), Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for name, call := range map[string]func() error{
		"start":   func() error { return p.Start(t.Context(), provider.Spec{ID: "w1", VolumeDir: t.TempDir()}) },
		"stop":    func() error { return p.Stop(t.Context(), "w1") },
		"observe": func() error { _, err := p.Observe(t.Context(), "w1"); return err },
	} {
		err := call()
		if !errors.Is(err, ErrEngineUnreachable) || !strings.Contains(err.Error(), "w1") {
			t.Errorf("%s with the engine down = %v; want ErrEngineUnreachable naming the workspace", name, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if _, err := New(Config{MountPath: "home"}); err == nil || !strings.Contains(err.Error(), "MountPath") {
		t.Fatalf("relative MountPath: %v", err)
	}
	p, err := New(Config{Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Start(t.Context(), provider.Spec{ID: "a"}); err == nil || !strings.Contains(err.Error(), "VolumeDir") {
		t.Fatalf("missing VolumeDir: %v", err)
	}
}

// The API's proxy reaches a Docker workspace's PORT on its network.
func TestProxyThroughTheAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: TestEndpointAndLogs covers the endpoint, the workspace package the proxy; make test runs it")
	}
	p, cli := newTestProvider(t, Config{})
	netName := "gantry-ws-test-" + randID(t)
	if _, err := cli.NetworkCreate(t.Context(), netName, client.NetworkCreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.NetworkRemove(context.WithoutCancel(t.Context()), netName, client.NetworkRemoveOptions{}) })
	p.cfg.NetworkMode = netName
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	ctx := t.Context()
	w, err := st.Create(ctx, workspace.NewWorkspace{Name: "web", Desired: workspace.Running}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cleanupWorkspace(t, p, w.ID)
	if err := p.Start(ctx, provider.Spec{ID: w.ID, VolumeDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": "RUNNING"})
	srv := httptest.NewServer(api.NewAPI(api.APIConfig{Store: st, Accounts: st.Accounts(), Container: p}))
	defer srv.Close()
	token := storetest.Token(t, st, "admin", true)
	var body string
	// The program's server starts after its health check.
	testutil.WaitFor(t, 10*time.Second, "the program's answer through the proxy", func() (bool, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/w/"+w.ID+"/a/b", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return body == "hello from "+w.ID+" at /a/b", fmt.Sprintf("%q", body)
	})
	if body != "hello from "+w.ID+" at /a/b" {
		t.Fatalf("through the proxy: %q", body)
	}
}

// Limits: the CPU, memory and pids limits are in the container's config;
// allocating past the memory limit gets the container killed, with
// OOMKilled in its exit status; too many threads fail under the pids limit.
func TestLimits(t *testing.T) {
	p, cli := newTestProvider(t, Config{NetworkMode: "none", CPUs: 0.5, Memory: 64 << 20, Pids: 64})
	ctx := t.Context()
	id := "t" + randID(t)
	cleanupWorkspace(t, p, id)
	if err := p.Start(ctx, provider.Spec{ID: id, VolumeDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	in, err := cli.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := in.Container.HostConfig
	if hc.NanoCPUs != 5e8 || hc.Memory != 64<<20 || hc.PidsLimit == nil || *hc.PidsLimit != 64 {
		t.Fatalf("limits in the container's config: cpus %d, memory %d, pids %v", hc.NanoCPUs, hc.Memory, hc.PidsLimit)
	}
	// A workspace's own limits replace the defaults it sets.
	own := "t" + randID(t)
	cleanupWorkspace(t, p, own)
	if err := p.Start(ctx, provider.Spec{ID: own, VolumeDir: t.TempDir(), Limits: provider.Limits{CPUs: 1.25, Pids: 100}}); err != nil {
		t.Fatal(err)
	}
	if in, err = cli.ContainerInspect(ctx, ContainerName(own), client.ContainerInspectOptions{}); err != nil {
		t.Fatal(err)
	}
	if hc := in.Container.HostConfig; hc.NanoCPUs != 1.25e9 || hc.Memory != 64<<20 || *hc.PidsLimit != 100 {
		t.Fatalf("a workspace's own limits: cpus %d, memory %d, pids %v; want 1.25e9, the default 64 MiB, 100", hc.NanoCPUs, hc.Memory, *hc.PidsLimit)
	}
	if testing.Short() {
		t.Log("-short: the limits' effects (OOM kill, pids) are left to make test")
		return
	}
	oom := "t" + randID(t)
	cleanupWorkspace(t, p, oom)
	err = p.Start(ctx, provider.Spec{ID: oom, VolumeDir: t.TempDir(), Env: []string{"WS_ALLOC_MB=256"}})
	var ee *provider.ExitError
	if !errors.As(err, &ee) || !strings.Contains(ee.Exit.Status, "OOMKilled") {
		t.Fatalf("allocating 256 MiB under a 64 MiB limit: %v; want an exit with OOMKilled", err)
	}
	bomb := "t" + randID(t)
	cleanupWorkspace(t, p, bomb)
	err = p.Start(ctx, provider.Spec{ID: bomb, VolumeDir: t.TempDir(), Env: []string{"WS_THREADS=500"}})
	if !errors.As(err, &ee) || ee.Exit.Code == 0 {
		t.Fatalf("500 threads under a 64 pids limit: %v; want the program to fail", err)
	}
	t.Logf("pids limit: %s; output: %.200s", ee.Exit.Status, ee.Exit.Output)
}

// Exec runs a command in the running container: its output on the right
// streams, the caller's environment and stdin passed, its exit status
// returned; a stopped workspace is refused.
func TestExec(t *testing.T) {
	p, _ := newTestProvider(t, Config{NetworkMode: "none"})
	ctx := t.Context()
	id := "t" + randID(t)
	cleanupWorkspace(t, p, id)
	spec := provider.ExecSpec{ID: id}
	if _, err := p.Exec(ctx, provider.ExecSpec{ID: id, Argv: []string{"/ws", "echo"}}, nil, io.Discard, io.Discard); !errors.Is(err, provider.ErrNotRunning) {
		t.Fatalf("exec before start: %v, want ErrNotRunning", err)
	}
	if err := p.Start(ctx, provider.Spec{ID: id, VolumeDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	spec.Argv = []string{"/ws", "echo", "hi", "there"}
	if code, err := p.Exec(ctx, spec, nil, &out, &errb); err != nil || code != 0 || out.String() != "hi there /home/coder\n" || errb.String() != "to stderr\n" {
		t.Fatalf("exec echo: %d %v stdout %q stderr %q", code, err, out.String(), errb.String())
	}
	// The caller's variables (an SSH session's LANG) reach the command.
	out.Reset()
	spec.Argv, spec.Env = []string{"/ws", "whoami"}, []string{"LANG=C.UTF-8"}
	if code, err := p.Exec(ctx, spec, nil, &out, io.Discard); err != nil || code != 0 || !strings.Contains(out.String(), " LANG=C.UTF-8") {
		t.Fatalf("exec with LANG: %d %v %q", code, err, out.String())
	}
	spec.Env = nil
	spec.Argv = []string{"/ws", "exit", "7"}
	if code, err := p.Exec(ctx, spec, nil, io.Discard, io.Discard); err != nil || code != 7 {
		t.Fatalf("exec exit 7: %d %v", code, err)
	}
	spec.Argv = []string{"/ws", "killself"}
	if code, err := p.Exec(ctx, spec, nil, io.Discard, io.Discard); err != nil || code != 137 {
		t.Fatalf("exec of a command killed by SIGKILL: %d %v, want 137", code, err)
	}
	out.Reset()
	spec.Argv = []string{"/ws", "cat"}
	if code, err := p.Exec(ctx, spec, strings.NewReader("piped\n"), &out, io.Discard); err != nil || code != 0 || out.String() != "piped\n" {
		t.Fatalf("exec cat with stdin: %d %v %q", code, err, out.String())
	}
	// On a terminal: its size, one merged stream, the status; stdin typed
	// into it and its end sent as the terminal's EOF.
	out.Reset()
	spec.Argv, spec.TTY = []string{"/ws", "tty"}, &provider.TTY{Size: provider.WinSize{Rows: 30, Cols: 100}}
	if code, err := p.Exec(ctx, spec, nil, &out, io.Discard); err != nil || code != 3 || out.String() != "tty 30 100 xterm-256color\r\nstderr too\r\n" {
		t.Fatalf("exec -t: %d %v %q", code, err, out.String())
	}
	spec.TTY.Size = provider.WinSize{}
	spec.Argv = []string{"/ws", "tty"}
	out.Reset()
	if code, err := p.Exec(ctx, spec, nil, &out, io.Discard); err != nil || code != 3 || !strings.HasPrefix(out.String(), "tty 24 80 ") {
		t.Fatalf("exec -t with no size: %d %v %q, want the default 24x80", code, err, out.String())
	}
	out.Reset()
	spec.Argv = []string{"/ws", "cat"}
	if code, err := p.Exec(ctx, spec, strings.NewReader("typed\n"), &out, io.Discard); err != nil || code != 0 || strings.Count(out.String(), "typed\r\n") != 2 {
		t.Fatalf("exec -it cat: %d %v %q; want the echo and cat's copy", code, err, out.String())
	}
	// The end of its context ends Exec (an SSH client gone), though the
	// command would run on.
	spec.TTY = nil
	execCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	inR, inW := io.Pipe()
	defer inW.Close()
	outR, outW := io.Pipe()
	ended := make(chan error, 1)
	go func() { _, err := p.Exec(execCtx, spec, inR, outW, io.Discard); outW.Close(); ended <- err }()
	go inW.Write([]byte("running\n"))
	if line, err := bufio.NewReader(outR).ReadString('\n'); line != "running\n" {
		t.Fatalf("exec cat: %q %v", line, err)
	}
	go io.Copy(io.Discard, outR)
	cancel()
	select {
	case err := <-ended:
		t.Logf("Exec after its context ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Exec still runs 10 s after its context ended")
	}
}

// TestNoImageIsRefused: without a default image, a workspace that names
// none is refused at create and update (HTTP 400 naming --docker-image),
// and a Start of one created before the check fails for good (NoImage)
// instead of being retried. No engine is needed: nothing reaches it.
func TestNoImageIsRefused(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.CheckSpec(provider.Spec{}); !errors.Is(err, ErrNoImage) {
		t.Fatalf("CheckSpec without an image: %v; want ErrNoImage", err)
	}
	if err := p.CheckSpec(provider.Spec{Image: "x"}); err != nil {
		t.Fatalf("CheckSpec with an image: %v", err)
	}
	var pe *provider.PermanentError
	if err := p.Start(t.Context(), provider.Spec{ID: "old", VolumeDir: t.TempDir()}); !errors.As(err, &pe) || pe.Reason != "NoImage" {
		t.Fatalf("Start without an image: %v; want a permanent NoImage failure", err)
	}

	st := storetest.Open(t, storetest.SQLiteDSN(t))
	srv := httptest.NewServer(api.NewAPI(api.APIConfig{Store: st, Accounts: st.Accounts(), Container: p}))
	defer srv.Close()
	c := &wsclient.Client{Base: srv.URL, Token: storetest.Token(t, st, "admin", true)}
	var ae *wsclient.APIError
	if _, err := c.Create(t.Context(), workspace.NewWorkspace{Name: "noimage"}); !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, "--docker-image") {
		t.Fatalf("create without an image: %v; want HTTP 400 naming --docker-image", err)
	}
	w, err := c.Create(t.Context(), workspace.NewWorkspace{Name: "withimage", Image: "x"})
	if err != nil {
		t.Fatalf("create with an image: %v", err)
	}
	empty := ""
	if _, err := c.Update(t.Context(), w.ID, workspace.SpecUpdate{Image: &empty}); !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("update to no image: %v; want HTTP 400", err)
	}
}
