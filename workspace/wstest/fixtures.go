package wstest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// CreateMany inserts n workspaces wanting desired, named b0, b1, ….
func CreateMany(tb testing.TB, st *store.Store, n int, desired workspace.Status) []string {
	return CreateNamed(tb, st, "b", n, desired)
}

// CreateNamed inserts n workspaces wanting desired, named prefix0, ….
func CreateNamed(tb testing.TB, st *store.Store, prefix string, n int, desired workspace.Status) []string {
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			w, err := st.Create(tb.Context(), workspace.NewWorkspace{Name: fmt.Sprint(prefix, i), Desired: desired}, time.Now())
			if err != nil {
				tb.Error(err)
				return
			}
			ids[i] = w.ID
		}()
	}
	wg.Wait()
	return ids
}

// T0 is the fixed start of the fake-clock suites.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// SeedConverged makes a workspace that converged to status at T0.
func SeedConverged(t *testing.T, st *store.Store, name string, status workspace.Status) string {
	t.Helper()
	ctx := t.Context()
	w, err := st.Create(ctx, workspace.NewWorkspace{Name: name, Desired: status}, T0)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": status, "observed_at": T0})
	return w.ID
}

// MetricValue is the value of the counter or gauge name{labels…} in g (0
// when absent); labels are name, value pairs.
func MetricValue(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}
