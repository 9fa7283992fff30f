//go:build linux

package sysmem

import "syscall"

// Total is the machine's RAM in bytes, or 0 if it cannot be read.
func Total() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
