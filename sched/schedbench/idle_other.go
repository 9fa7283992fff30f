//go:build !unix

package schedbench

import (
	"errors"
	"time"
)

// IdleCPU needs getrusage, which this platform lacks.
func IdleCPU(int, time.Duration) (float64, error) {
	return 0, errors.New("schedbench: idle CPU measurement needs a unix system")
}

func cpuTime() (time.Duration, error) {
	return 0, errors.New("schedbench: CPU time needs getrusage")
}
