//go:build darwin

package extsort

import "golang.org/x/sys/unix"

// totalRAM is the machine's RAM in bytes, or 0 if it cannot be read.
func totalRAM() int64 {
	n, err := unix.SysctlUint64("hw.memsize")
	if err != nil {
		return 0
	}
	return int64(n)
}
