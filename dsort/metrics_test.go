package dsort

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/record/recordtest"
)

// scrape fetches url and returns every sample as "name{labels}" → value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape: %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetricsDuringAJob scrapes a master's and its workers' registry over
// HTTP while the job is merging (a fault hook holds the workers there), and
// again once it has succeeded. While they merge, it also checks their
// progress and status message.
func TestMetricsDuringAJob(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	root := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	var sum dataSum
	const workers, perWorker = 2, 4000
	reached := make(chan struct{}, workers)
	release := make(chan struct{})
	hook := func(ctx context.Context, point string) {
		if point != "merge-partition" {
			return
		}
		reached <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	var wcfgs []WorkerConfig
	var outs []string
	for w := range workers {
		dir := filepath.Join(root, fmt.Sprint("w", w))
		writeRecords(t, filepath.Join(dir, "in", "data"), perWorker, rng, recordtest.Options{}, &sum)
		outs = append(outs, filepath.Join(dir, "out"))
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{filepath.Join(dir, "in")}, Output: outs[w], Memory: 32 << 20,
			TempDir: filepath.Join(dir, "tmp"), FaultHook: hook, Metrics: reg})
	}
	c := startCluster(t, t.Context(), MasterConfig{Workers: workers, HeartbeatInterval: 100 * time.Millisecond, Metrics: reg}, wcfgs)
	for range workers {
		select {
		case <-reached:
		case <-time.After(2 * time.Minute):
			t.Fatal("the workers did not reach the merge")
		}
	}
	// Seed 000 §7.1 inside the merge (getMergeProgress): each worker is
	// past its first partition, and GetStatus says how far it is.
	for i, w := range c.workers {
		st := w.info()
		if st.State != Merging || st.Progress <= 80 || st.Progress > 100 || !regexp.MustCompile(`^Merging: [1-9]\d*%$`).MatchString(st.Message) {
			t.Errorf("worker %d while merging: %s, %.1f%%, %q; want Merging, in (80, 100]%%, \"Merging: n%%\" with n > 0",
				i, st.State, st.Progress, st.Message)
		}
	}
	input := float64(workers * perWorker * record.Size)
	during := scrape(t, srv.URL)
	for name, want := range map[string]float64{
		"gantry_dsort_bytes_read_total":                         input,
		"gantry_dsort_bytes_sorted_total":                       input,
		`gantry_dsort_phase_seconds_count{phase="Sorting"}`:     workers,
		`gantry_dsort_phase_seconds_count{phase="Shuffling"}`:   workers,
		`gantry_dsort_job_phase_seconds_count{phase="sorting"}`: 1,
	} {
		if got := during[name]; got != want {
			t.Errorf("during the merge: %s = %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"gantry_dsort_bytes_shuffled_total", "gantry_dsort_bytes_written_total"} {
		if got := during[name]; got <= 0 || got > input {
			t.Errorf("during the merge: %s = %v, want in (0, %v]", name, got, input)
		}
	}
	close(release)
	c.mustSucceed(t)
	checkOutput(t, outs, sum)
	after := scrape(t, srv.URL)
	if got := after["gantry_dsort_bytes_written_total"]; got != input {
		t.Errorf("after the job: bytes written = %v, want %v", got, input)
	}
	if got := after[`gantry_dsort_phase_seconds_count{phase="Merging"}`]; got != workers {
		t.Errorf("after the job: %v merging phases measured, want %d", got, workers)
	}
}

// A master's registry holds the master's series and a worker's the
// worker's (the RPC errors both have): neither exports the other's at 0.
func TestMasterAndWorkerExportOnlyTheirSeries(t *testing.T) {
	mreg, wreg := prometheus.NewRegistry(), prometheus.NewRegistry()
	cfg, _ := failingWorkerSum(t, t.TempDir(), "w0")
	cfg.Metrics = wreg
	c := startCluster(t, t.Context(), MasterConfig{Workers: 1, HeartbeatInterval: 100 * time.Millisecond, Metrics: mreg}, []WorkerConfig{cfg})
	c.mustSucceed(t)
	names := func(reg *prometheus.Registry) []string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mf := range mfs {
			out = append(out, mf.GetName())
		}
		return out
	}
	master := []string{"gantry_dsort_job_phase_seconds", "gantry_dsort_rejoins_total", "gantry_dsort_workers_lost_total"}
	worker := []string{"gantry_dsort_bytes_read_total", "gantry_dsort_bytes_shuffled_total", "gantry_dsort_bytes_sorted_total",
		"gantry_dsort_bytes_written_total", "gantry_dsort_heartbeats_missed_total", "gantry_dsort_phase_seconds"}
	if got := names(mreg); !slices.Equal(got, master) {
		t.Errorf("the master's registry holds %q, want %q", got, master)
	}
	if got := names(wreg); !slices.Equal(got, worker) {
		t.Errorf("the worker's registry holds %q, want %q", got, worker)
	}
}
