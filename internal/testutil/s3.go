package testutil

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// S3 credentials of the test MinIO (scripts/services.d/minio.sh).
const (
	S3AccessKey = "gantry"
	S3SecretKey = "gantry-secret"
)

// S3Endpoint returns the test S3 server's host:port: GANTRY_TEST_S3, default
// 127.0.0.1:9000, started with scripts/services.d/minio.sh when it does not
// answer. The test fails if it stays down.
func S3Endpoint(tb testing.TB) string {
	tb.Helper()
	ep := os.Getenv("GANTRY_TEST_S3")
	if ep == "" {
		ep = "127.0.0.1:9000"
	}
	live := func() bool {
		// No keep-alive: a pooled connection would outlive the tests (goleak).
		c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + ep + "/minio/health/live")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if live() {
		return ep
	}
	cmd := exec.Command("bash", filepath.Join(RepoRoot(tb), "scripts/services.d/minio.sh"))
	cmd.Env = append(os.Environ(), "GANTRY_MINIO_ADDR="+ep)
	if out, err := cmd.CombinedOutput(); err != nil || !live() {
		tb.Fatalf("S3 server at %s is down and scripts/services.d/minio.sh could not start it: %v\n%s", ep, err, out)
	}
	return ep
}
