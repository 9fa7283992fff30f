//go:build linux

package fsutil

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing f's bytes [off, off+n) to disk now,
// without waiting: SYNC_FILE_RANGE_WRITE only queues the pages. It is a hint (errors are
// ignored): the fsync that follows is what makes the data durable.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
