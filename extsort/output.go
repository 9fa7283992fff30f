package extsort

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/internal/fsutil"

	"github.com/gantryhq/gantry/record"
)

// partitionName is the name of output file n.
func partitionName(n int) string { return record.PartitionPrefix + strconv.Itoa(n) }

// isPartition reports whether name is an output file name, partition.<n>.
func isPartition(name string) bool {
	_, ok := record.PartitionNumber(name)
	return ok
}

// partOutput is the sorted output seen as one byte sequence cut into files
// of exactly size bytes (the last one shorter): byte g of the output is byte
// g%size of file g/size. Many goroutines may WriteAt disjoint ranges at once.
type partOutput struct {
	dir   string
	first int
	size  int64
	files []*os.File
}

// newPartOutput creates the files for total bytes of output in dir.
func newPartOutput(dir string, first int, size, total int64) (*partOutput, error) {
	o := &partOutput{dir: dir, first: first, size: size}
	for i := int64(0); i*size < total; i++ {
		f, err := os.OpenFile(filepath.Join(dir, partitionName(first+int(i))), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("extsort: output: %w", err)
		}
		o.files = append(o.files, f)
	}
	return o, nil
}

func (o *partOutput) WriteAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		i := off / o.size
		if i >= int64(len(o.files)) {
			return done, fmt.Errorf("extsort: output: write at %d past the end", off)
		}
		in := off % o.size
		k := int(min(int64(len(p)-done), o.size-in))
		if _, err := o.files[i].WriteAt(p[done:done+k], in); err != nil {
			return done, fmt.Errorf("extsort: output: %w", err)
		}
		done += k
		off += int64(k)
	}
	return done, nil
}

func (o *partOutput) Close() error {
	var first error
	for _, f := range o.files {
		if err := f.Close(); err != nil && first == nil {
			first = fmt.Errorf("extsort: output: %w", err)
		}
	}
	o.files = nil
	return first
}

// offsetWriter turns sequential writes into WriteAt calls from off on.
type offsetWriter struct {
	w   *partOutput
	off int64
}

func (w *offsetWriter) Write(p []byte) (int, error) {
	n, err := w.w.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}

// prepareOutputDir makes sure dir exists and holds nothing but output of an
// earlier sort (partition.<n> files, which the new output replaces) and
// staging directories. Staging directories of dead sorts (SIGKILLed, or the
// machine went down) are removed; those of a live sort are left alone.
func prepareOutputDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("extsort: output directory: %w", err)
	}
	if _, err := fsutil.SweepStale(dir, stagingPrefix); err != nil {
		return fmt.Errorf("extsort: output directory: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("extsort: output directory: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case isPartition(name) && e.Type().IsRegular():
		case strings.HasPrefix(name, stagingPrefix) && e.IsDir(): // a live sort's
		default:
			return fmt.Errorf("%w: output directory %s holds %q, which is not a partition file; use an empty directory", ErrConfig, dir, name)
		}
	}
	return nil
}

// Staged is an output directory a sort of this process is writing: the
// new partitions go into Path, a staging directory inside it, and replace
// the directory's old partitions at Commit. Close (always) removes what
// was not committed. extsort's Sort and linesort's use it alike.
type Staged struct {
	dir   string
	stage *fsutil.OwnedDir
}

// StageOutput checks that the inputs (as ScanInputs or ScanFiles found
// them), outDir and tempDir are separate (CheckSeparate), prepares outDir
// (created if needed; it may hold partition files of an earlier sort,
// nothing else), sweeps the temp dirs of dead sorts (spill dirs under
// tempDir, whose prefix is spill) and makes the staging directory.
func StageOutput(inputs []Input, outDir, tempDir, spill string, logger *slog.Logger) (*Staged, error) {
	if err := checkSeparate(inputs, outDir, tempDir); err != nil {
		return nil, err
	}
	if err := prepareOutputDir(outDir); err != nil {
		return nil, err
	}
	if swept, err := fsutil.SweepStale(tempDir, spill); err != nil {
		return nil, fmt.Errorf("extsort: temp directory: %w", err)
	} else if len(swept) > 0 && logger != nil {
		logger.Info("removed the temp dirs of dead sorts", "dirs", swept)
	}
	stage, err := fsutil.CreateOwnedDir(outDir, stagingPrefix)
	if err != nil {
		return nil, fmt.Errorf("extsort: output directory: %w", err)
	}
	return &Staged{dir: outDir, stage: stage}, nil
}

// Path is the staging directory the new partition files go into.
func (s *Staged) Path() string { return s.stage.Path }

// Commit replaces the output directory's partition files by the staged
// ones and returns how many there are.
func (s *Staged) Commit() (int, error) { return commitOutput(s.dir, s.stage.Path) }

// Close removes the staging directory and what is left in it.
func (s *Staged) Close() error { return s.stage.Close() }

// Prefixes of the directories a sort owns: the staging directory in the
// output directory (the new partitions, renamed into place at commit) and
// the spill directory in the temp directory (sorted runs).
const (
	stagingPrefix = ".gantry-staging-"
	spillPrefix   = "gantry-sort-"
)

// commitOutput replaces the partition files in dir by those in staging.
// The new files are renamed into place first (each rename is atomic and
// replaces the old file of the same name); only then are old partitions
// beyond the new set removed, so a failure never leaves fewer files than
// either sort wrote.
func commitOutput(dir, staging string) (int, error) {
	files, err := os.ReadDir(staging)
	if err != nil {
		return 0, fmt.Errorf("extsort: output directory: %w", err)
	}
	fresh := map[string]bool{}
	for _, e := range files {
		if !isPartition(e.Name()) { // the owner lock stays with the staging dir
			continue
		}
		if err := os.Rename(filepath.Join(staging, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return 0, fmt.Errorf("extsort: output directory: %w", err)
		}
		fresh[e.Name()] = true
	}
	if err := syncDir(dir); err != nil {
		return 0, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("extsort: output directory: %w", err)
	}
	for _, e := range ents {
		if isPartition(e.Name()) && !fresh[e.Name()] {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return 0, fmt.Errorf("extsort: output directory: %w", err)
			}
		}
	}
	return len(fresh), nil
}

// syncDir makes the renames into dir durable before old files go.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("extsort: output directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("extsort: output directory: %w", err)
	}
	return nil
}

// CheckSeparate returns an error wrapping ErrConfig, naming both
// directories, if the output or temp directory lies in an input directory
// (the next sort would read its files as input, a crash would leave spilled
// runs among them, and sorting a directory "in place" would replace its
// files), if an input directory lies in the output directory (the commit
// would replace input files), or if the temp directory lies in the output
// directory (it would hold more than partitions). Paths are compared after
// resolving symbolic links, so aliases of one directory are caught. It
// touches nothing, so callers run it before anything else: `sort local`
// does, and a dsort worker should.
func CheckSeparate(inputs []string, output, tmp string) error {
	inside := func(path, dir string) bool {
		return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
	}
	resolve := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			p = a
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		return p
	}
	out, tmpR := resolve(output), resolve(tmp)
	if tmp != "" && inside(tmpR, out) {
		return fmt.Errorf("%w: the temp directory %s is inside the output directory %s", ErrConfig, tmp, output)
	}
	seen := map[string]bool{}
	for _, input := range inputs {
		in := resolve(input)
		if seen[in] {
			continue
		}
		seen[in] = true
		switch {
		case out == in:
			return fmt.Errorf("%w: the output directory %s is the input directory %s; sorting in place would replace the input", ErrConfig, output, input)
		case inside(out, in):
			return fmt.Errorf("%w: the output directory %s is inside the input directory %s", ErrConfig, output, input)
		case inside(in, out):
			return fmt.Errorf("%w: the input directory %s is inside the output directory %s", ErrConfig, input, output)
		case tmp != "" && inside(tmpR, in):
			return fmt.Errorf("%w: the temp directory %s is inside the input directory %s", ErrConfig, tmp, input)
		}
	}
	return nil
}

// checkSeparate is CheckSeparate on the directories the inputs were found
// under.
func checkSeparate(inputs []Input, outDir, tempDir string) error {
	var roots []string
	for _, in := range inputs {
		if in.Root != "" {
			roots = append(roots, in.Root)
		}
	}
	return CheckSeparate(roots, outDir, tempDir)
}
