// Package testutil holds what gantry's tests share: the repository root, the one build of the
// gantry binary for process-level tests, and real services (Redis, Postgres) found through
// GANTRY_TEST_REDIS / GANTRY_TEST_POSTGRES or started on loopback by scripts/services.sh.
//
// A test that needs a service calls Redis(t) or Postgres(t): it gets an address that answers,
// or the test fails with the reason. It never skips: CI must not count a missing service as a
// pass. WaitFor is the shared wait on a condition (tests do not sleep for a guessed time);
// FreeAddr a loopback address for a server a test starts; RaiseParallel the -parallel a
// TestMain sets for a package whose tests mostly wait.
//
// Also here: buffer.go (Buffer, an output one goroutine writes while the test reads it),
// records.go (WriteRecords, test data written to a file; record/recordtest makes random
// records, above internal/ since it needs record), redis.go
// (RedisServer, a redis-server of one test's own to stop, kill or restart loading, and
// RedisCommand, one command spoken in RESP), sentinel.go (StartSentinel, a Redis
// Sentinel of one test's own) and s3.go (S3Endpoint, the test MinIO, started if down).
package testutil

import (
	"flag"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fsutil"
)

// Defaults used when the environment variables are unset.
const (
	DefaultRedis    = "127.0.0.1:6379"
	DefaultPostgres = "postgres://gantry:gantry@127.0.0.1:5432/gantry?sslmode=disable"
)

// RepoRoot returns the module's root directory (where go.mod is).
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("testutil: cannot locate the source tree")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var (
	binOnce sync.Once
	binDir  *fsutil.OwnedDir // kept reachable: a collected *os.File would close and unlock it
	binPath string
	binErr  error
)

// GantryBinary builds cmd/gantry once per test process and returns its path. The build lives
// in a temp dir owned by this process; dirs left by earlier test processes are swept first.
// With GANTRY_TEST_BINARY set (make test builds one for every package: each link takes
// ~13 CPU-seconds) it returns that path instead.
func GantryBinary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("GANTRY_TEST_BINARY"); p != "" {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			tb.Fatalf("testutil: GANTRY_TEST_BINARY=%s is not an executable file (%v): unset it to build one", p, err)
		}
		return p
	}
	binOnce.Do(func() {
		fsutil.SweepStale(os.TempDir(), "gantry-testbin-")
		binDir, binErr = fsutil.CreateOwnedDir(os.TempDir(), "gantry-testbin-")
		if binErr != nil {
			return
		}
		// The lock stays held (binDir is never closed, and stays reachable so no finalizer
		// closes its file) until this process exits; a later test process's sweep then
		// removes the dir.
		binPath = filepath.Join(binDir.Path, "gantry")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/gantry")
		cmd.Dir = RepoRoot(tb)
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = &buildError{err: err, out: string(out)}
		}
	})
	if binErr != nil {
		tb.Fatalf("testutil: build gantry: %v", binErr)
	}
	return binPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// Redis returns the address (host:port) of a Redis server for tests: GANTRY_TEST_REDIS, or
// DefaultRedis started by scripts/services.sh when nothing answers there.
func Redis(tb testing.TB) string {
	tb.Helper()
	addr := os.Getenv("GANTRY_TEST_REDIS")
	if addr == "" {
		addr = DefaultRedis
	}
	Ensure(tb, "redis", addr)
	return addr
}

// Postgres returns a connection URL for a Postgres database for tests: GANTRY_TEST_POSTGRES,
// or DefaultPostgres started by scripts/services.sh when nothing answers there.
func Postgres(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv("GANTRY_TEST_POSTGRES")
	if dsn == "" {
		dsn = DefaultPostgres
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		tb.Fatalf("testutil: GANTRY_TEST_POSTGRES=%q is not a postgres:// URL with a host", dsn)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5432")
	}
	Ensure(tb, "postgres", host)
	return dsn
}

var startMu sync.Mutex // serialises service starts within one test process

// Ensure makes sure something answers on addr (host:port), running `scripts/services.sh name`
// once if not; the test fails if the service still does not answer.
func Ensure(tb testing.TB, name, addr string) {
	tb.Helper()
	if reachable(addr) {
		return
	}
	startMu.Lock()
	defer startMu.Unlock()
	if reachable(addr) {
		return
	}
	cmd := exec.Command("bash", filepath.Join(RepoRoot(tb), "scripts", "services.sh"), name)
	out, err := cmd.CombinedOutput()
	if err != nil || !reachable(addr) {
		tb.Fatalf("testutil: %s is not reachable at %s and scripts/services.sh %s could not start it: %v\n%s",
			name, addr, name, err, out)
	}
}

// EnsureCommand makes sure command is on PATH, running scripts/services.sh
// name (which installs it, or waits for make test's background install of
// it) if it is not; it fails the test if it is still missing.
func EnsureCommand(tb testing.TB, name, command string) {
	tb.Helper()
	ensure(tb, name, command+" is not on PATH", func() error {
		_, err := exec.LookPath(command)
		return err
	})
}

// EnsureFile makes sure path exists, running scripts/services.sh name
// (which installs the package holding it) if it does not; it fails the
// test if it is still missing.
func EnsureFile(tb testing.TB, name, path string) {
	tb.Helper()
	ensure(tb, name, path+" is missing", func() error {
		_, err := os.Stat(path)
		return err
	})
}

// ensure runs scripts/services.sh name unless present reports nil, and
// fails the test, saying what is missing, if it still does not.
func ensure(tb testing.TB, name, missing string, present func() error) {
	tb.Helper()
	if present() == nil {
		return
	}
	startMu.Lock()
	defer startMu.Unlock()
	out, err := exec.Command("bash", filepath.Join(RepoRoot(tb), "scripts", "services.sh"), name).CombinedOutput()
	if perr := present(); perr != nil {
		tb.Fatalf("testutil: %s and scripts/services.sh %s could not install it: %v, %v\n%s", missing, name, err, perr, out)
	}
}

func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// WaitFor polls cond every few milliseconds until it reports true, and fails the test when d
// passes first, with what and the last state cond described. It is the one wait on a condition
// that tests share instead of sleeping for a guessed time.
//
//	testutil.WaitFor(t, 5*time.Second, "task done", func() (bool, string) {
//		st := get(); return st == "done", st
//	})
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	deadline := time.Now().Add(d)
	step := time.Millisecond
	last := ""
	for {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s (last: %s)", d, what, last)
		}
		time.Sleep(step) // poll: the step of a wait on cond
		step = min(2*step, 20*time.Millisecond)
	}
}

// RaiseParallel sets -test.parallel to n unless the command line set it; a TestMain calls it
// before m.Run. It is for packages whose parallel tests mostly wait — on real time, processes,
// timeouts, services — rather than compute: the default, GOMAXPROCS (2 on CI), runs them two at
// a time, and running n side by side cuts the package's wall time. A -parallel given on the
// command line wins.
func RaiseParallel(n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
}

// Chromium returns the path of Debian's chromium for browser tests,
// installing it with scripts/services.d/chromium.sh when missing; the test
// fails without it.
func Chromium(tb testing.TB) string {
	tb.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	out, err := exec.Command("bash", filepath.Join(RepoRoot(tb), "scripts/services.d/chromium.sh")).CombinedOutput()
	p, lerr := exec.LookPath("chromium")
	if lerr != nil {
		tb.Fatalf("chromium needed and scripts/services.d/chromium.sh could not install it: %v\n%s", err, out)
	}
	return p
}

// FreeAddr is a loopback address where nothing listened a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
