package schedbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Options sizes a Run. The zero value is the default: Scale 1 (about ten
// seconds of work on 2 cores), 3 runs per figure, no idle measurement.
type Options struct {
	Scale float64       // multiplies every workload's op count; 0 means 1
	Runs  int           // runs per figure, the median is reported; 0 means 3
	Idle  time.Duration // idle-CPU window; 0 skips the measurement
}

// Row is one line of the comparison table. Values are medians in Unit; a
// zero value means "not measured".
type Row struct {
	Name     string
	Unit     string
	Sched1   float64 // scheduler, 1 worker
	Sched2   float64 // scheduler, 2 workers
	Baseline float64 // goroutines + channels
	Goal     string
	Judged   bool // false for informational rows, which have no goal
	Met      bool
	HigherIs string // "better" or "worse": how to read the numbers
}

// ErrBadOptions reports invalid Options.
var ErrBadOptions = errors.New("schedbench: invalid options")

func (o Options) withDefaults() (Options, error) {
	if o.Scale < 0 || o.Runs < 0 || o.Idle < 0 {
		return o, fmt.Errorf("%w: scale, runs and idle must be >= 0 (got %v, %d, %v)", ErrBadOptions, o.Scale, o.Runs, o.Idle)
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	if o.Runs == 0 {
		o.Runs = 3
	}
	return o, nil
}

// fibN is the fork-join size: fib(25) (242,785 calls) at scale 1, and one
// less per halving of the scale, so --scale 0.1 stays quick.
func fibN(scale float64) int {
	n := 25
	for s := scale; s < 0.75 && n > 10; s *= 2 {
		n--
	}
	return n
}

// sample runs f runs times.
func sample(runs int, f func() (Sample, error)) ([]Sample, error) {
	out := make([]Sample, 0, runs)
	for i := 0; i < runs; i++ {
		s, err := f()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// median returns the median of metric over samples.
func median(samples []Sample, metric func(Sample) float64) float64 {
	vals := make([]float64, 0, len(samples))
	for _, s := range samples {
		vals = append(vals, metric(s))
	}
	slices.Sort(vals)
	return vals[len(vals)/2]
}

// spec is one workload of Run: how to measure it on the scheduler and on its
// baseline, which figure of the samples the row shows, and its goal.
type spec struct {
	row      Row
	sched    func(workers int) (Sample, error)
	baseline func() (Sample, error)
	metric   func(Sample) float64
	met      func(r Row) bool
	// cpu, if set, names an extra informational row with the median
	// CPU time per op of the same samples.
	cpu string
}

// specs is Run's table of workloads, sized by o.Scale.
func specs(o Options) []spec {
	n := func(base int) int { return max(1, int(float64(base)*o.Scale)) }
	perOp := Sample.PerOp
	perSec := func(s Sample) float64 { return s.PerSecond() / 1e6 }
	allocs := func(s Sample) float64 { return s.AllocsPerOp() / 2 } // 2 messages per round trip
	return []spec{
		{
			row:      Row{Name: "ping-pong round trip", Unit: "ns", Goal: "<= 0.5x channels", HigherIs: "worse"},
			sched:    func(w int) (Sample, error) { return PingPong(w, n(500_000)) },
			baseline: func() (Sample, error) { return ChanPingPong(n(500_000)) },
			metric:   perOp,
			met:      func(r Row) bool { return min(r.Sched1, r.Sched2) <= r.Baseline/2 },
			cpu:      "ping-pong, CPU per round trip",
		},
		{
			row:    Row{Name: "ping-pong allocs per message", Unit: "allocs", Goal: "0 in steady state", HigherIs: "worse"},
			sched:  func(w int) (Sample, error) { return PingPong(w, n(500_000)) },
			metric: allocs,
			met:    func(r Row) bool { return r.Sched1 < 0.01 && r.Sched2 < 0.01 },
		},
		{
			row:      Row{Name: "spawn -> done (trivial process)", Unit: "M/s", Goal: ">= 2 M/s on 2 workers", HigherIs: "better"},
			sched:    func(w int) (Sample, error) { return SpawnToDone(w, n(500_000)) },
			baseline: func() (Sample, error) { return GoSpawnToDone(n(500_000)) },
			metric:   perSec,
			met:      func(r Row) bool { return r.Sched2 >= 2 },
			cpu:      "spawn -> done, CPU per process",
		},
		{
			row:      Row{Name: fmt.Sprintf("fork-join fib(%d), spawns in Step", fibN(o.Scale)), Unit: "ms", Goal: "<= 1.2x goroutines+WaitGroup", HigherIs: "worse"},
			sched:    func(w int) (Sample, error) { return ForkJoin(w, fibN(o.Scale)) },
			baseline: func() (Sample, error) { return GoForkJoin(fibN(o.Scale)) },
			metric:   func(s Sample) float64 { return float64(s.Elapsed.Microseconds()) / 1000 },
			met:      func(r Row) bool { return min(r.Sched1, r.Sched2) <= 1.2*r.Baseline },
			cpu:      "fork-join, CPU per call",
		},
		{
			row:      Row{Name: "fan-out 1 -> 1000, per message", Unit: "ns", Goal: "faster than channels", HigherIs: "worse"},
			sched:    func(w int) (Sample, error) { return FanOut(w, 1000, n(200)) },
			baseline: func() (Sample, error) { return ChanFanOut(1000, n(200)) },
			metric:   perOp,
			met:      func(r Row) bool { return min(r.Sched1, r.Sched2) < r.Baseline },
		},
		{
			row:      Row{Name: "yield -> CompleteYield, inline handler", Unit: "ns", Goal: "faster than a channel request", HigherIs: "worse"},
			sched:    func(w int) (Sample, error) { return Yield(w, n(500_000), false) },
			baseline: func() (Sample, error) { return ChanRequest(n(500_000)) },
			metric:   perOp,
			met:      func(r Row) bool { return min(r.Sched1, r.Sched2) < r.Baseline },
		},
		{
			row:      Row{Name: "yield -> CompleteYield, handler goroutine", Unit: "ns", Goal: "(informational)", HigherIs: "worse"},
			sched:    func(w int) (Sample, error) { return Yield(w, n(200_000), true) },
			baseline: func() (Sample, error) { return ChanRequest(n(200_000)) },
			metric:   perOp,
		},
	}
}

// Run measures every workload against its baseline and returns the table.
// progress, if set, is told the name of each row before it runs. Run stops
// between rows once ctx ends and returns the rows done with ctx's error.
func Run(ctx context.Context, o Options, progress func(row string)) ([]Row, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, sp := range specs(o) {
		if err := ctx.Err(); err != nil {
			return rows, err
		}
		if progress != nil {
			progress(sp.row.Name)
		}
		r, cr, err := measureSpec(sp, o.Runs)
		if err != nil {
			return rows, err
		}
		rows = append(rows, r)
		if sp.cpu != "" {
			rows = append(rows, cr)
		}
	}
	if o.Idle > 0 && ctx.Err() == nil {
		if progress != nil {
			progress("idle CPU")
		}
		pct, err := IdleCPU(ctx, 2, o.Idle)
		if err != nil {
			return rows, err
		}
		rows = append(rows, Row{Name: fmt.Sprintf("idle CPU over %v, 2 workers", o.Idle), Unit: "%",
			Sched2: pct, Goal: "< 1%", Judged: true, Met: pct < 1, HigherIs: "worse"})
	}
	return rows, nil
}

// measureSpec samples sp runs times on 1 and 2 workers and on its baseline, and
// returns its row and the row of CPU time per op of the same samples.
func measureSpec(sp spec, runs int) (r, cr Row, err error) {
	r = sp.row
	cr = Row{Name: sp.cpu, Unit: "ns", Goal: "(informational: CPU time)", HigherIs: "worse"}
	cpuPerOp := Sample.CPUPerOp
	for _, w := range []int{1, 2} {
		ss, err := sample(runs, func() (Sample, error) { return sp.sched(w) })
		if err != nil {
			return r, cr, fmt.Errorf("%s, %d workers: %w", r.Name, w, err)
		}
		if w == 1 {
			r.Sched1, cr.Sched1 = median(ss, sp.metric), median(ss, cpuPerOp)
		} else {
			r.Sched2, cr.Sched2 = median(ss, sp.metric), median(ss, cpuPerOp)
		}
	}
	if sp.baseline != nil {
		ss, err := sample(runs, sp.baseline)
		if err != nil {
			return r, cr, fmt.Errorf("%s, baseline: %w", r.Name, err)
		}
		r.Baseline, cr.Baseline = median(ss, sp.metric), median(ss, cpuPerOp)
	}
	if sp.met != nil {
		r.Judged, r.Met = true, sp.met(r)
	}
	return r, cr, nil
}
