//go:build unix

package extsort

import "golang.org/x/sys/unix"

// bigAlloc returns a zeroed byte slice of n bytes for the sort's large
// buffers, mapped outside the Go heap and, on Linux, marked for transparent
// huge pages: the gather reads records at random offsets, and with 4 KiB
// pages nearly every read also misses the TLB. The caller must call free.
// Buffers below 1 MiB, and any if the mapping fails, come from the Go heap.
// Mapped buffers count against no Go heap goal and are returned to the
// system at once by free, instead of lingering as garbage.
func bigAlloc(n int) (b []byte, free func()) {
	if n < 1<<20 {
		return make([]byte, n), func() {}
	}
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, n), func() {}
	}
	adviseHugePages(m)
	return m, func() { unix.Munmap(m) }
}
