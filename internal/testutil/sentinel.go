package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// StartSentinel starts a Redis Sentinel of the test's own (redis-server
// --sentinel) on a free loopback port, configured by conf (its "sentinel
// monitor …" and other lines; the port, bind address and directory are
// added). The config file lives in the server's Dir, writable: a sentinel
// rewrites it as it learns the replicas, the other sentinels and each
// failover. The test's cleanup stops it.
func StartSentinel(tb testing.TB, conf string) *RedisServer {
	tb.Helper()
	r := &RedisServer{tb: tb, Dir: tb.TempDir()}
	file := filepath.Join(r.Dir, "sentinel.conf")
	r.startOnFreePort(func(port int) []string {
		// Written afresh for each port tried: a sentinel that failed to start
		// may have rewritten it.
		if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
			tb.Fatal(err)
		}
		return []string{file, "--sentinel", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", r.Dir}
	})
	return r
}
