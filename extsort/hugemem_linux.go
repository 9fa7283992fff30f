//go:build linux

package extsort

import "golang.org/x/sys/unix"

// adviseHugePages asks for transparent huge pages on m; best effort: THP
// may be off.
func adviseHugePages(m []byte) { _ = unix.Madvise(m, unix.MADV_HUGEPAGE) }

// populateRead maps m's pages (of a file mapping, reading them into the
// page cache if needed) ahead of use: one call instead of a fault per
// page. Kernels before 5.14 do not know the advice; their pages fault in
// as they are read.
func populateRead(m []byte) error {
	if err := unix.Madvise(m, unix.MADV_POPULATE_READ); err != nil && err != unix.EINVAL {
		return err
	}
	return nil
}
