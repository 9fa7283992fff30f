//go:build unix && !linux

package extsort

// adviseHugePages is a no-op where madvise has no MADV_HUGEPAGE.
func adviseHugePages([]byte) {}

// populateRead does nothing here: the pages fault in as they are read.
func populateRead([]byte) error { return nil }
