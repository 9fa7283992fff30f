//go:build !linux && !darwin

package extsort

// totalRAM is unknown on this platform: DefaultMemory falls back to 1 GiB.
func totalRAM() int64 { return 0 }
