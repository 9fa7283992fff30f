package extsort

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gantryhq/gantry/record"
)

// ErrBadInput is wrapped by every error about an input file that is not a
// whole number of records, or cannot be read.
var ErrBadInput = errors.New("extsort: bad input")

// The record layout, from package record: 100-byte records whose first 10
// bytes are the key, compared as unsigned bytes.
const (
	recSize = record.Size
	keySize = record.KeySize
)

// Input is one input file. Its size is a multiple of recSize.
type Input struct {
	Path string
	Size int64
	Root string // the input directory it was found under (resolved, absolute)
}

// ScanInputs lists the files under dirs (recursively), in the order the
// directories are given and in lexical walk order within each directory, and
// returns them with their total size. Empty files are kept (they hold no
// records); a symbolic link to a file counts as that file. Each of these is
// an error naming the path, never silently skipped: a file whose size is not
// a multiple of recSize, one that cannot be opened for reading, a dangling
// link, a link to a directory, anything but a regular file, and a directory
// given twice (its records would be sorted twice).
func ScanInputs(dirs []string) ([]Input, int64, error) { return scanInputs(dirs, recSize) }

// ScanFiles is ScanInputs for inputs of any size (lines, not records):
// the same checks but the size one.
func ScanFiles(dirs []string) ([]Input, int64, error) { return scanInputs(dirs, 1) }

// scanInputs lists the files under dirs; each one's size must be a
// multiple of unit.
func scanInputs(dirs []string, unit int64) ([]Input, int64, error) {
	var inputs []Input
	var total int64
	seen := map[string]string{}
	for _, dir := range dirs {
		real, err := resolveInputDir(dir, seen)
		if err != nil {
			return nil, 0, err
		}
		files, err := scanInputDir(dir, real, unit)
		if err != nil {
			return nil, 0, err
		}
		for _, f := range files {
			total += f.Size
		}
		inputs = append(inputs, files...)
	}
	return inputs, total, nil
}

// resolveInputDir checks that dir is a directory not given before (seen maps
// each resolved directory to the name it was given as) and returns its
// absolute path with symbolic links resolved.
func resolveInputDir(dir string, seen map[string]string) (string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("%w: input directory: %v", ErrBadInput, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%w: input %s is not a directory", ErrBadInput, dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("%w: input directory: %v", ErrBadInput, err)
	}
	if abs, err := filepath.Abs(real); err == nil {
		real = abs
	}
	if prev, ok := seen[real]; ok {
		return "", fmt.Errorf("%w: input directory %s is given twice (also as %s)", ErrBadInput, dir, prev)
	}
	seen[real] = dir
	return real, nil
}

// scanInputDir lists the input files under real, the resolved form of dir.
// It walks the resolved directory so that a symlinked -I works, but reports
// paths under the name the user gave.
func scanInputDir(dir, real string, unit int64) ([]Input, error) {
	var files []Input
	err := filepath.WalkDir(real, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		in, err := checkInputFile(path, filepath.Join(dir, strings.TrimPrefix(path, real)), d, unit)
		if err != nil {
			return err
		}
		in.Root = real
		files = append(files, in)
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrBadInput) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	return files, nil
}

// checkInputFile checks that the walked entry d at path (shown to the user
// as shown) is a readable regular file of whole records, following a
// symbolic link, and returns it as an Input without its Root. Its size must
// be a multiple of unit (recSize for records, 1 for lines).
func checkInputFile(path, shown string, d fs.DirEntry, unit int64) (Input, error) {
	info, err := os.Stat(path) // follows a symlink to its target
	switch {
	case err != nil && d.Type()&fs.ModeSymlink != 0:
		return Input{}, fmt.Errorf("%w: %s is a dangling symbolic link", ErrBadInput, shown)
	case err != nil:
		return Input{}, err
	case info.IsDir():
		return Input{}, fmt.Errorf("%w: %s is a symbolic link to a directory; give that directory with -I instead", ErrBadInput, shown)
	case !info.Mode().IsRegular():
		return Input{}, fmt.Errorf("%w: %s is not a regular file (%s)", ErrBadInput, shown, info.Mode().Type())
	}
	if info.Size()%unit != 0 {
		return Input{}, fmt.Errorf("%w: %s: size %d bytes is not a multiple of the %d-byte record (%d whole records and %d extra bytes)",
			ErrBadInput, shown, info.Size(), recSize, info.Size()/recSize, info.Size()%recSize)
	}
	f, err := os.Open(path)
	if err != nil {
		return Input{}, err
	}
	f.Close()
	return Input{Path: path, Size: info.Size()}, nil
}
