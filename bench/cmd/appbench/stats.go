package main

import (
	"fmt"
	"slices"
	"time"
)

// results are one run's figures by name, in the order they were added.
type results struct {
	keys []string
	v    map[string]float64
}

func (r *results) add(key string, v float64) {
	if _, ok := r.v[key]; !ok {
		r.keys = append(r.keys, key)
	}
	r.v[key] = v
}

// addLatencies adds name's p50, p99 and max in milliseconds, and prints them.
func (r *results) addLatencies(name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	s := slices.Clone(d)
	slices.Sort(s)
	p50, p99, max := quantile(s, 0.50), quantile(s, 0.99), s[len(s)-1]
	r.add(name+" p50 ms", ms(p50))
	r.add(name+" p99 ms", ms(p99))
	r.add(name+" max ms", ms(max))
	fmt.Printf("  %-34s p50 %8.3f ms  p99 %8.3f ms  max %8.3f ms  (%d samples)\n", name, ms(p50), ms(p99), ms(max), len(s))
}

// quantile is the q-quantile of sorted s (nearest rank).
func quantile(s []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// printMedians prints, for each figure of the first run, its median over
// the runs and each run's value.
func printMedians(all []*results) {
	if len(all) == 0 {
		return
	}
	for _, k := range all[0].keys {
		var vs []float64
		for _, r := range all {
			if v, ok := r.v[k]; ok {
				vs = append(vs, v)
			}
		}
		each := slices.Clone(vs)
		slices.Sort(vs)
		fmt.Printf("  %-40s median %10.3f   runs %v\n", k, median(vs), fmtAll(each))
	}
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func fmtAll(vs []float64) string {
	s := ""
	for i, v := range vs {
		if i > 0 {
			s += " / "
		}
		s += fmt.Sprintf("%.3f", v)
	}
	return s
}
