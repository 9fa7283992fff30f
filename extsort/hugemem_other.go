//go:build !unix

package extsort

// bigAlloc returns a zeroed byte slice from the Go heap: this platform has
// no anonymous mmap.
func bigAlloc(n int) (b []byte, free func()) { return make([]byte, n), func() {} }
