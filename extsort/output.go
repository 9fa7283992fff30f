package extsort

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

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
// earlier sort (partition.<n> files, which the new output replaces, and
// staging directories left by a killed sort, which are removed).
func prepareOutputDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
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
		case len(name) > len(stagingPrefix) && name[:len(stagingPrefix)] == stagingPrefix && e.IsDir():
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("extsort: output directory: %w", err)
			}
		default:
			return fmt.Errorf("%w: output directory %s holds %q, which is not a partition file; use an empty directory", ErrConfig, dir, name)
		}
	}
	return nil
}

const stagingPrefix = ".gantry-staging-"

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
		if err := os.Rename(filepath.Join(staging, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return 0, fmt.Errorf("extsort: output directory: %w", err)
		}
		fresh[e.Name()] = true
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
	return len(files), nil
}
