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
func ScanInputs(dirs []string) ([]Input, int64, error) {
	var inputs []Input
	var total int64
	seen := map[string]string{}
	for _, dir := range dirs {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: input directory: %v", ErrBadInput, err)
		}
		if !st.IsDir() {
			return nil, 0, fmt.Errorf("%w: input %s is not a directory", ErrBadInput, dir)
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: input directory: %v", ErrBadInput, err)
		}
		if abs, err := filepath.Abs(real); err == nil {
			real = abs
		}
		if prev, ok := seen[real]; ok {
			return nil, 0, fmt.Errorf("%w: input directory %s is given twice (also as %s)", ErrBadInput, dir, prev)
		}
		seen[real] = dir
		var files []Input
		// Walk the resolved directory so that a symlinked -I works, but
		// report paths under the name the user gave.
		err = filepath.WalkDir(real, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			shown := filepath.Join(dir, strings.TrimPrefix(path, real))
			info, err := os.Stat(path) // follows a symlink to its target
			switch {
			case err != nil && d.Type()&fs.ModeSymlink != 0:
				return fmt.Errorf("%w: %s is a dangling symbolic link", ErrBadInput, shown)
			case err != nil:
				return err
			case info.IsDir():
				return fmt.Errorf("%w: %s is a symbolic link to a directory; give that directory with -I instead", ErrBadInput, shown)
			case !info.Mode().IsRegular():
				return fmt.Errorf("%w: %s is not a regular file (%s)", ErrBadInput, shown, info.Mode().Type())
			}
			if info.Size()%recSize != 0 {
				return fmt.Errorf("%w: %s: size %d bytes is not a multiple of the %d-byte record (%d whole records and %d extra bytes)",
					ErrBadInput, shown, info.Size(), recSize, info.Size()/recSize, info.Size()%recSize)
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			f.Close()
			files = append(files, Input{Path: path, Size: info.Size(), Root: real})
			return nil
		})
		if err != nil {
			if errors.Is(err, ErrBadInput) {
				return nil, 0, err
			}
			return nil, 0, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
		for _, f := range files {
			total += f.Size
		}
		inputs = append(inputs, files...)
	}
	return inputs, total, nil
}
