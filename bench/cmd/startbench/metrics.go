package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// serverSide reads the server's /metrics and tells, for the operations of
// a start, their mean duration from claim to end and that of their
// provider call: where the time of a start goes on the server. (Over the
// server's life: a row's starts, its pool's members and its bulk.)
func (s *server) serverSide(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.base+"/metrics", nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	sums := map[string]float64{} // "op|PROVISIONING|sum" …
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		metricLine(sc.Text(), sums)
	}
	var parts []string
	for _, t := range []string{"PROVISIONING", "STARTING"} {
		op, okOp := mean(sums, "op|"+t)
		call, okCall := mean(sums, "call|"+t)
		if okOp && okCall {
			parts = append(parts, fmt.Sprintf("%s %s ms (provider call %s ms)", t, msStr(op), msStr(call)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "server side, means (ws serve's /metrics: operation claim → end): " + strings.Join(parts, ", ")
}

// metricLine adds a line of the operations' (result ok) or provider
// calls' duration _sum or _count to sums.
func metricLine(line string, sums map[string]float64) {
	var kind string
	switch {
	case strings.HasPrefix(line, "gantry_ws_operation_duration_seconds_"):
		if !strings.Contains(line, `result="ok"`) {
			return
		}
		kind = "op"
	case strings.HasPrefix(line, "gantry_ws_provider_call_duration_seconds_"):
		kind = "call"
	default:
		return
	}
	name, rest, ok := strings.Cut(line, "{")
	if !ok {
		return
	}
	labels, val, ok := strings.Cut(rest, "} ")
	if !ok {
		return
	}
	_, typ, ok := strings.Cut(labels, `type="`)
	if !ok {
		return
	}
	typ, _, _ = strings.Cut(typ, `"`)
	v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
	if err != nil {
		return
	}
	switch {
	case strings.HasSuffix(name, "_sum"):
		sums[kind+"|"+typ+"|sum"] += v
	case strings.HasSuffix(name, "_count"):
		sums[kind+"|"+typ+"|count"] += v
	}
}

func mean(sums map[string]float64, key string) (time.Duration, bool) {
	n := sums[key+"|count"]
	if n == 0 {
		return 0, false
	}
	return time.Duration(sums[key+"|sum"] / n * float64(time.Second)), true
}
