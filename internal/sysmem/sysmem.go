// Package sysmem tells how much memory this process may use: the machine's
// RAM (Total: extsort's default budget) and, within it, its cgroup's memory
// limit (Available: a queue worker's Go memory limit).
//
// The files: sysmem.go (this one) Available and the cgroup limit files;
// total_linux.go, total_darwin.go and total_other.go Total on each
// platform.
package sysmem

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Available is the memory this process may use: its cgroup's limit (v2
// memory.max, v1 memory.limit_in_bytes; at the process's own cgroup path or
// the root of the hierarchy) when that is below the machine's memory
// (Total), else the machine's. from says which; 0 when neither can be read.
func Available() (n int64, from string) { return available("/", Total()) }

// available is Available with the cgroup files read under root ("/" but in
// tests) and the machine's memory total.
func available(root string, total int64) (n int64, from string) {
	if total > 0 {
		n, from = total, "the machine's memory"
	}
	for _, f := range cgroupLimitFiles(root) {
		if l := readLimit(f); l > 0 && (n == 0 || l < n) {
			n, from = l, "the cgroup's memory limit"
		}
	}
	return n, from
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
