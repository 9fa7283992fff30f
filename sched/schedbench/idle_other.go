//go:build !unix

package schedbench

import (
	"context"
	"errors"
	"time"
)

// IdleCPU needs getrusage, which this platform lacks.
func IdleCPU(context.Context, int, time.Duration) (float64, error) {
	return 0, errors.New("schedbench: idle CPU measurement needs a unix system")
}

func cpuTime() (time.Duration, error) {
	return 0, errors.New("schedbench: CPU time needs getrusage")
}
