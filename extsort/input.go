package extsort

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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
}

// ScanInputs lists the regular files under dirs (recursively), in the order
// the directories are given and in lexical walk order within each directory, and returns
// them with their total size. Empty files are kept (they hold no records).
// A file whose size is not a multiple of recSize, or that cannot be
// opened for reading, is an error naming the file.
func ScanInputs(dirs []string) ([]Input, int64, error) {
	var inputs []Input
	var total int64
	for _, dir := range dirs {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: input directory: %v", ErrBadInput, err)
		}
		if !st.IsDir() {
			return nil, 0, fmt.Errorf("%w: input %s is not a directory", ErrBadInput, dir)
		}
		var files []Input
		err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return nil // sockets, fifos, dangling links: not data
			}
			if info.Size()%recSize != 0 {
				return fmt.Errorf("%w: %s: size %d bytes is not a multiple of the %d-byte record (%d whole records and %d extra bytes)",
					ErrBadInput, path, info.Size(), recSize, info.Size()/recSize, info.Size()%recSize)
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			f.Close()
			files = append(files, Input{Path: path, Size: info.Size()})
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
