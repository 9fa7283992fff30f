//go:build unix

package reconcile

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// usage is the process's CPU time at a start, for the CPU utilisation and
// peak RSS of what follows.
type usage struct{ cpu time.Duration }

// startUsage reads the CPU time and restarts the peak-RSS count (Linux:
// /proc/self/clear_refs; elsewhere the peak is the process's).
func startUsage() usage {
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	return usage{cpuTime()}
}

// report adds cores (CPU seconds per second of el) and peak-RSS-MB.
func (u usage) report(b *testing.B, el time.Duration) {
	b.ReportMetric((cpuTime()-u.cpu).Seconds()/el.Seconds(), "cores")
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		hwm := int64(ru.Maxrss) << 10 // KiB
		if s, err := os.ReadFile("/proc/self/status"); err == nil {
			for _, l := range strings.Split(string(s), "\n") {
				if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
					fmt.Sscan(v, &hwm)
					hwm <<= 10
				}
			}
		}
		b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MB")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
