package extsort

import "unsafe"

// bigEntries is bigAlloc for entries. bigAlloc (hugemem_unix.go,
// hugemem_other.go) returns a zeroed byte slice for the sort's large
// buffers; the caller must call free.
func bigEntries(n int) ([]entry, func()) {
	if n == 0 {
		return nil, func() {}
	}
	b, free := bigAlloc(n * int(unsafe.Sizeof(entry{})))
	return unsafe.Slice((*entry)(unsafe.Pointer(unsafe.SliceData(b))), n), free
}
