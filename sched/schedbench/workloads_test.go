package schedbench

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWorkloadsRun runs every workload small, so `go test` proves that the
// benchmark and `gantry sched bench` code paths finish and count their ops.
func TestWorkloadsRun(t *testing.T) {
	type run func() (Sample, error)
	for name, f := range map[string]run{
		"PingPong/1":    func() (Sample, error) { return PingPong(1, 1000) },
		"PingPong/2":    func() (Sample, error) { return PingPong(2, 1000) },
		"ChanPingPong":  func() (Sample, error) { return ChanPingPong(1000) },
		"SpawnToDone":   func() (Sample, error) { return SpawnToDone(2, 1000) },
		"GoSpawnToDone": func() (Sample, error) { return GoSpawnToDone(1000) },
		"FanOut":        func() (Sample, error) { return FanOut(2, 100, 3) },
		"ChanFanOut":    func() (Sample, error) { return ChanFanOut(100, 3) },
		"Yield/inline":  func() (Sample, error) { return Yield(1, 1000, false) },
		"Yield/async":   func() (Sample, error) { return Yield(2, 1000, true) },
		"ChanRequest":   func() (Sample, error) { return ChanRequest(1000) },
		"ForkJoin/1":    func() (Sample, error) { return ForkJoin(1, 12) },
		"ForkJoin/2":    func() (Sample, error) { return ForkJoin(2, 12) },
		"GoForkJoin":    func() (Sample, error) { return GoForkJoin(12) },
	} {
		t.Run(name, func(t *testing.T) {
			s, err := f()
			if err != nil {
				t.Fatal(err)
			}
			if s.Ops <= 0 || s.Elapsed <= 0 {
				t.Fatalf("empty sample %v", s)
			}
		})
	}
}
