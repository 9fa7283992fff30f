package sysmem

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// available takes the machine's memory and reads the cgroup limits (v2 and
// v1, at the process's path or the root) from a fake file tree.
func TestAvailable(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name     string
		total    int64
		files    map[string]string
		want     int64
		wantFrom string
	}{
		{"machine only", 8 * gib, map[string]string{}, 8 * gib, "the machine's memory"},
		{"v2 limit at the process's path", 8 * gib, map[string]string{
			"proc/self/cgroup":                "0::/app/w1\n",
			"sys/fs/cgroup/app/w1/memory.max": "2147483648\n", "sys/fs/cgroup/memory.max": "max\n",
		}, 2 * gib, "the cgroup's memory limit"},
		{"v2 unlimited", 8 * gib, map[string]string{
			"proc/self/cgroup": "0::/app\n", "sys/fs/cgroup/app/memory.max": "max\n",
		}, 8 * gib, "the machine's memory"},
		{"v1 limit, combined controllers", 8 * gib, map[string]string{
			"proc/self/cgroup": "4:memory,hugetlb:/box\n2:cpu:/\n",
			"sys/fs/cgroup/memory/box/memory.limit_in_bytes": "1073741824\n",
		}, gib, "the cgroup's memory limit"},
		{"v1 no limit (a huge number)", 8 * gib, map[string]string{
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, 8 * gib, "the machine's memory"},
		{"a limit and no machine memory", 0, map[string]string{"sys/fs/cgroup/memory.max": "1073741824\n"}, gib, "the cgroup's memory limit"},
		{"nothing readable", 0, map[string]string{}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tt.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if n, from := available(root, tt.total); n != tt.want || from != tt.wantFrom {
				t.Errorf("available = %d (%s), want %d (%s)", n, from, tt.want, tt.wantFrom)
			}
		})
	}
}

// On Linux and macOS the machine's memory can be read, and what the
// process may use is at most that.
func TestThisMachine(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("Total is 0 on " + runtime.GOOS)
	}
	total := Total()
	if total <= 0 {
		t.Fatalf("Total = %d", total)
	}
	if n, from := Available(); n <= 0 || n > total || from == "" {
		t.Fatalf("Available = %d (%s), want 0 < n <= Total %d", n, from, total)
	}
}
