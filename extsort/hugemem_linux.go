//go:build linux

package extsort

import "golang.org/x/sys/unix"

// adviseHugePages asks for transparent huge pages on m; best effort: THP
// may be off.
func adviseHugePages(m []byte) { _ = unix.Madvise(m, unix.MADV_HUGEPAGE) }
