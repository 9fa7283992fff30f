package dsort

// Process-level tests of issue 9: where the master listens, and the paths
// and outputs a worker must never destroy.

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
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

// TestWorkerRefusesOverlappingDirs checks that `sort worker` refuses an
// output in place of, or inside, an input and a temp dir inside an input,
// exits non-zero with a message naming the directories, and leaves every
// file where it was (no master runs: it must not even try to register).
func TestWorkerRefusesOverlappingDirs(t *testing.T) {
	needBinary(t)
	root := t.TempDir()
	in := filepath.Join(root, "in")
	writeFile(t, filepath.Join(in, "partition.0"), "a previous output, now an input\n")
	writeFile(t, filepath.Join(in, "sub", "partition.1"), "another\n")
	before := treeSum(t, root)
	for _, tc := range []struct {
		name, out, tmp, want string
	}{
		{"in place", in, filepath.Join(root, "tmp"), "is the input directory"},
		{"output inside input", filepath.Join(in, "sub"), filepath.Join(root, "tmp"), "is inside the input directory"},
		{"tmp inside input", filepath.Join(root, "out"), filepath.Join(in, "tmp"), "temp directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProc(t, "worker", nil, "sort", "worker", "127.0.0.1:1", "-I", in, "-O", tc.out, "--tmp", tc.tmp)
			if code := p.wait(30 * time.Second); code == 0 {
				t.Fatal("worker accepted overlapping directories")
			}
			if got := p.tail(5); !strings.Contains(got, tc.want) || !strings.Contains(got, in) {
				t.Errorf("error should say %q and name %s:\n%s", tc.want, in, got)
			}
			if after := treeSum(t, root); !maps.Equal(before, after) {
				t.Errorf("files changed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// treeSum maps every file and directory under root to a digest of its
// content ("dir" for directories).
func treeSum(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%x", sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
