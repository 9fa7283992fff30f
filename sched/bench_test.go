package sched_test

import (
	"fmt"
	"testing"

	"github.com/gantryhq/gantry/sched/schedbench"
)

// report turns a schedbench sample into the benchmark's figures. b.N is the
// number of ops, so ns/op is already per round trip / spawn / message /
// yield; the extra metrics name the unit.
func report(b *testing.B, s schedbench.Sample, err error, unit string) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(s.PerOp(), "ns/"+unit)
	b.ReportMetric(s.PerSecond(), unit+"s/s")
	b.ReportMetric(s.AllocsPerOp(), "allocs/"+unit)
}

// BenchmarkPingPong: one op = one round trip between two processes, against
// two goroutines with unbuffered channels.
func BenchmarkPingPong(b *testing.B) {
	for _, w := range []int{1, 2} {
		b.Run(fmt.Sprintf("sched/workers=%d", w), func(b *testing.B) {
			s, err := schedbench.PingPong(w, b.N)
			report(b, s, err, "roundtrip")
			b.ReportMetric(s.AllocsPerOp()/2, "allocs/msg")
		})
	}
	b.Run("chan", func(b *testing.B) {
		s, err := schedbench.ChanPingPong(b.N)
		report(b, s, err, "roundtrip")
	})
}

// BenchmarkSpawnToDone: one op = one trivial process spawned and completed,
// against `go f()` + WaitGroup.
func BenchmarkSpawnToDone(b *testing.B) {
	for _, w := range []int{1, 2} {
		b.Run(fmt.Sprintf("sched/workers=%d", w), func(b *testing.B) {
			s, err := schedbench.SpawnToDone(w, b.N)
			report(b, s, err, "spawn")
		})
	}
	b.Run("goroutine", func(b *testing.B) {
		s, err := schedbench.GoSpawnToDone(b.N)
		report(b, s, err, "spawn")
	})
}

// BenchmarkFanOut1000: one op = one message from a hub to one of 1000
// processes and its answer, against 1000 goroutines with channels.
func BenchmarkFanOut1000(b *testing.B) {
	rounds := func(n int) int { return max(1, n/1000) }
	for _, w := range []int{1, 2} {
		b.Run(fmt.Sprintf("sched/workers=%d", w), func(b *testing.B) {
			s, err := schedbench.FanOut(w, 1000, rounds(b.N))
			report(b, s, err, "msg")
		})
	}
	b.Run("chan", func(b *testing.B) {
		s, err := schedbench.ChanFanOut(1000, rounds(b.N))
		report(b, s, err, "msg")
	})
}

// BenchmarkYield: one op = one yielded command completed and the process
// stepped again, against a request/reply over channels to a server goroutine.
func BenchmarkYield(b *testing.B) {
	for _, w := range []int{1, 2} {
		b.Run(fmt.Sprintf("sched-inline/workers=%d", w), func(b *testing.B) {
			s, err := schedbench.Yield(w, b.N, false)
			report(b, s, err, "yield")
		})
		b.Run(fmt.Sprintf("sched-goroutine/workers=%d", w), func(b *testing.B) {
			s, err := schedbench.Yield(w, b.N, true)
			report(b, s, err, "yield")
		})
	}
	b.Run("chan", func(b *testing.B) {
		s, err := schedbench.ChanRequest(b.N)
		report(b, s, err, "yield")
	})
}
