package cli

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// goMemLimitSet reports whether the user set GOMEMLIMIT (the runtime
// applied it at start).
func goMemLimitSet() bool { return os.Getenv("GOMEMLIMIT") != "" }

// availableMemory is the memory this process may use, read under root
// ("/" but in tests): its cgroup's limit (v2 memory.max, v1
// memory.limit_in_bytes; at the process's own cgroup path or the root of
// the hierarchy) when that is below the machine's memory (MemTotal in
// /proc/meminfo), else the machine's. from says which; 0 when neither can
// be read.
func availableMemory(root string) (n int64, from string) {
	if total := memTotal(root); total > 0 {
		n, from = total, "the machine's memory"
	}
	for _, f := range cgroupLimitFiles(root) {
		if l := readLimit(f); l > 0 && (n == 0 || l < n) {
			n, from = l, "the cgroup's memory limit"
		}
	}
	return n, from
}

// memTotal is MemTotal of root/proc/meminfo in bytes (0: unknown).
func memTotal(root string) int64 {
	f, err := os.Open(filepath.Join(root, "proc", "meminfo"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// cgroupLimitFiles lists the files that may hold this process's cgroup
// memory limit: at its own path (from root/proc/self/cgroup) and at the
// hierarchy's root, for cgroup v2 and v1.
func cgroupLimitFiles(root string) []string {
	base := filepath.Join(root, "sys", "fs", "cgroup")
	files := []string{filepath.Join(base, "memory.max"), filepath.Join(base, "memory", "memory.limit_in_bytes")}
	b, err := os.ReadFile(filepath.Join(root, "proc", "self", "cgroup"))
	if err != nil {
		return files
	}
	for _, line := range strings.Split(string(b), "\n") {
		// v2: "0::/path"; v1: "N:memory:/path" (controllers may be combined).
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] == "/" {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			files = append(files, filepath.Join(base, parts[2], "memory.max"))
		case strings.Contains(","+parts[1]+",", ",memory,"):
			files = append(files, filepath.Join(base, "memory", parts[2], "memory.limit_in_bytes"))
		}
	}
	return files
}

// readLimit reads a cgroup memory limit file (0: missing, "max" or not a
// number).
func readLimit(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
