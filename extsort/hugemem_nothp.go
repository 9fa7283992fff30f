//go:build unix && !linux

package extsort

// adviseHugePages is a no-op where madvise has no MADV_HUGEPAGE.
func adviseHugePages([]byte) {}
