package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"
)

// durations are one figure's samples.
type durations []time.Duration

func (d durations) n() int { return len(d) }

// quantiles are p50, p90, p99 and max (nearest rank).
func (d durations) quantiles() [4]time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.5) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return [4]time.Duration{q(0.50), q(0.90), q(0.99), s[len(s)-1]}
}

// cell is "p50 / p90 / p99 / max" in milliseconds, or "n/a".
func (d durations) cell() string {
	if len(d) == 0 {
		return "n/a"
	}
	q := d.quantiles()
	return fmt.Sprintf("%s / %s / %s / %s", msStr(q[0]), msStr(q[1]), msStr(q[2]), msStr(q[3]))
}

// msStr is d in milliseconds, 3 significant digits at most below 100.
func msStr(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 10:
		return fmt.Sprintf("%.2f", ms)
	case ms < 100:
		return fmt.Sprintf("%.1f", ms)
	}
	return fmt.Sprintf("%.0f", ms)
}

func (r row) print() {
	fmt.Printf("  create → RUNNING  p50/p90/p99/max ms: %s  (%d starts)\n", r.running.cell(), r.running.n())
	fmt.Printf("  create → exec     p50/p90/p99/max ms: %s\n", r.exec.cell())
	if r.mode == "warm" {
		fmt.Printf("  cold misses (not served by the pool): %d of %d\n", r.misses, r.starts)
	}
	if r.failures > 0 {
		fmt.Printf("  failed starts (not in the figures): %d\n", r.failures)
	}
	if r.note != "" {
		fmt.Printf("  %s\n", r.note)
	}
	if r.load == "bulk" {
		fmt.Printf("  starts that ended while the load ran (the bulk's creates, or the convergence): %d of %d\n", r.duringBulk, r.starts)
	}
	if r.server != "" {
		fmt.Printf("  %s\n", r.server)
	}
	fmt.Printf("  load average at the end: %s\n", r.loadavg)
}

// printTable prints the rows as a markdown table.
func printTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| provider | mode | load | starts | create → RUNNING p50 / p90 / p99 / max (ms) | create → exec `true` p50 / p90 / p99 / max (ms) | notes |")
	fmt.Fprintln(w, "| --- | --- | --- | ---: | --- | --- | --- |")
	for _, r := range rows {
		note := r.note
		if r.mode == "warm" {
			note = join(note, fmt.Sprintf("%d cold misses", r.misses))
		}
		if r.failures > 0 {
			note = join(note, fmt.Sprintf("%d failed starts", r.failures))
		}
		if r.load == "bulk" {
			note = join(note, fmt.Sprintf("%d of the %d starts ended while the load ran", r.duringBulk, r.starts))
		}
		note = join(note, "load "+r.loadavg)
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s |\n", r.provider, r.mode, r.load, r.starts, r.running.cell(), r.exec.cell(), note)
	}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func numCPU() int { return runtime.NumCPU() }
