//go:build !linux

package fsutil

import (
	"errors"
	"io"
	"os"
)

// directWriter does not exist here: WriteAtomicDirect writes through the page cache.
type directWriter struct{ io.Writer }

func newDirectWriter(*os.File) (*directWriter, error) {
	return nil, errors.New("fsutil: no direct I/O on this system")
}

func (*directWriter) finish(bool) error { return nil }
