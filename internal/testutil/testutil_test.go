package testutil

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRepoRoot(t *testing.T) {
	if _, err := os.Stat(filepath.Join(RepoRoot(t), "go.mod")); err != nil {
		t.Fatalf("RepoRoot has no go.mod: %v", err)
	}
}

func TestGantryBinaryBuildsOnce(t *testing.T) {
	a, b := GantryBinary(t), GantryBinary(t)
	if a != b {
		t.Fatalf("two builds: %s, %s", a, b)
	}
	out, err := exec.Command(a, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "gantry") {
		t.Fatalf("gantry version: %v %s", err, out)
	}
}

// TestServicesAnswer checks that the helpers hand out addresses where a server answers the
// service's own protocol, not merely an open port.
func TestServicesAnswer(t *testing.T) {
	c, err := net.Dial("tcp", Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("PING\r\n"))
	buf := make([]byte, 7)
	if n, _ := c.Read(buf); !strings.HasPrefix(string(buf[:n]), "+PONG") {
		t.Fatalf("redis answered %q to PING", buf[:n])
	}
	dsn := Postgres(t)
	if out, err := exec.Command("psql", dsn, "-qAtc", "select 42").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("postgres at %s: %v %s", dsn, err, out)
	}
}
