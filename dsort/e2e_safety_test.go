package dsort

// Process-level tests of issue 9: where the master listens, and the paths
// and outputs a worker must never destroy.

import (
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMasterBind checks that `sort master` listens on loopback by default,
// on the --bind address when given (and prints that address), and refuses
// a --bind that is not an IP, naming the flag.
func TestMasterBind(t *testing.T) {
	needBinary(t)
	addrLine := regexp.MustCompile(`^\S+:\d+$`)
	for _, tc := range []struct {
		name string
		args []string
		host string
	}{
		{"default", nil, "127.0.0.1"},
		{"bind", []string{"--bind", "127.0.0.9"}, "127.0.0.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startProc(t, "master", nil, append([]string{"sort", "master", "2"}, tc.args...)...)
			addr := m.waitLine(true, addrLine, 30*time.Second).text
			host, _, err := net.SplitHostPort(addr)
			if err != nil || host != tc.host {
				t.Fatalf("master printed %q, want host %s", addr, tc.host)
			}
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatalf("master does not listen on the address it printed: %v", err)
			}
			c.Close()
		})
	}
	t.Run("invalid", func(t *testing.T) {
		m := startProc(t, "master", nil, "sort", "master", "2", "--bind", "not-an-ip")
		if code := m.wait(30 * time.Second); code == 0 {
			t.Fatal("master accepted --bind not-an-ip")
		}
		if got := m.tail(10); !strings.Contains(got, "--bind") {
			t.Fatalf("error does not name --bind:\n%s", got)
		}
	})
}
