//go:build darwin

package sysmem

import "golang.org/x/sys/unix"

// Total is the machine's RAM in bytes, or 0 if it cannot be read.
func Total() int64 {
	n, err := unix.SysctlUint64("hw.memsize")
	if err != nil {
		return 0
	}
	return int64(n)
}
