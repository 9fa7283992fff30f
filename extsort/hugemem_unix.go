//go:build unix

package extsort

import "golang.org/x/sys/unix"

// bigAlloc returns a zeroed byte slice of n bytes for the sort's large
// buffers, mapped outside the Go heap and, on Linux, marked for transparent
// huge pages: the gather reads records at random offsets, and with 4 KiB
// pages nearly every read also misses the TLB. The caller must call free.
// If the mapping fails it falls back to the Go heap.
func bigAlloc(n int) (b []byte, free func()) {
	if n < 4<<20 {
		return make([]byte, n), func() {}
	}
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, n), func() {}
	}
	adviseHugePages(m)
	return m, func() { unix.Munmap(m) }
}
