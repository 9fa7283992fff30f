//go:build !unix

package fsutil

import (
	"errors"
	"os"
)

// tryLock is unsupported off unix: owned directories and lock files need flock semantics.
func tryLock(*os.File) (bool, error) {
	return false, errors.New("fsutil: locks need a unix system")
}
