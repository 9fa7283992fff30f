package record

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// PartitionPrefix starts the name of every file in a sort's output
// directory: partition.0, partition.1, …
const PartitionPrefix = "partition."

// DoneMarker is the file a sort writes into its output directory when it
// commits, naming the job that wrote the partitions. ExpandPaths skips it.
const DoneMarker = ".gantry-sort-done"

// HiddenObject reports whether an object name in an S3 listing (relative
// to the prefix given) is not data, for the sort's S3 inputs and valsort's
// S3 prefixes alike: empty, a "directory" placeholder (trailing "/"), or a
// name with a part that starts with "." (the done marker, a sort's staged
// files).
func HiddenObject(name string) bool {
	if name == "" || strings.HasSuffix(name, "/") {
		return true
	}
	for part := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(part, ".") {
			return true
		}
	}
	return false
}

// PartitionNumber returns n for a file named partition.<n> (n decimal, no
// sign, no leading zeros unless n is 0).
func PartitionNumber(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, PartitionPrefix)
	if !ok || digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil
}

// ExpandPaths replaces each directory in args by its partition.<n> files in
// numeric order (partition.3 before partition.30, not after it as a string
// sort would put it). Anything else in such a directory — another file, a
// subdirectory, a partition name with a sign or leading zeros — is an error
// naming it, since a stray file in a sort's output is itself a fault. Other
// arguments are kept as given, in order; they must exist.
func ExpandPaths(args []string) ([]string, error) {
	return expandDirs(args, partitionFiles)
}

// partitionFiles returns dir's partition.<n> files (ents is its listing) in
// numeric order, skipping the done marker; anything else is an error.
func partitionFiles(dir string, ents []os.DirEntry) ([]string, error) {
	type part struct {
		n    uint64
		path string
	}
	parts := make([]part, 0, len(ents))
	for _, e := range ents {
		if e.Name() == DoneMarker {
			continue
		}
		p := filepath.Join(dir, e.Name())
		n, ok := PartitionNumber(e.Name())
		if !ok {
			return nil, fmt.Errorf("record: %s: not a partition.<n> file; a directory to validate may hold only partition.<n> files", p)
		}
		if e.IsDir() {
			return nil, fmt.Errorf("record: %s is a directory; a directory to validate may hold only partition.<n> files", p)
		}
		parts = append(parts, part{n, p})
	}
	slices.SortFunc(parts, func(x, y part) int { return cmp.Compare(x.n, y.n) })
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		out = append(out, p.path)
	}
	return out, nil
}

// ExpandInputPaths replaces each directory in args by every regular file in
// it, in name order: the form for unsorted input sets, whose files may have
// any names (checksums do not depend on order). A subdirectory is an error.
// Other arguments are kept as given, in order; they must exist.
func ExpandInputPaths(args []string) ([]string, error) {
	return expandDirs(args, func(dir string, ents []os.DirEntry) ([]string, error) {
		out := make([]string, 0, len(ents))
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if e.IsDir() {
				return nil, fmt.Errorf("record: %s is a directory; input directories are not searched recursively", p)
			}
			out = append(out, p)
		}
		return out, nil
	})
}

// expandDirs keeps each argument that is not a directory as given, in order,
// and replaces each directory by what files returns for its listing (sorted
// by name, as os.ReadDir gives it). Every argument must exist.
func expandDirs(args []string, files func(dir string, ents []os.DirEntry) ([]string, error)) ([]string, error) {
	var out []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, a)
			continue
		}
		ents, err := os.ReadDir(a)
		if err != nil {
			return nil, err
		}
		paths, err := files(a, ents)
		if err != nil {
			return nil, err
		}
		out = append(out, paths...)
	}
	return out, nil
}
