package dsort

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gantryhq/gantry/internal/clock"
)

func TestConfigValidation(t *testing.T) {
	for _, c := range []WorkerConfig{
		{Inputs: []string{"in"}, Output: "out"},
		{Master: "127.0.0.1:1", Output: "out"},
		{Master: "127.0.0.1:1", Inputs: []string{"in"}},
		{Master: "nohostport", Inputs: []string{"in"}, Output: "out"},
		{Master: "127.0.0.1:1", Inputs: []string{"in"}, Output: "out", Memory: 1 << 20},
	} {
		if _, err := NewWorker(c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewWorker(%+v) = %v, want ErrConfig", c, err)
		}
	}
	if _, err := NewMaster(MasterConfig{}); !errors.Is(err, ErrConfig) {
		t.Errorf("NewMaster with 0 workers: err = %v", err)
	}
}

// The phase times a worker reports (heartbeats, GetStatus) and its phase
// metric run on WorkerConfig.Clock, like its heartbeats.
func TestWorkerTimesPhasesOnItsClock(t *testing.T) {
	fake := clock.NewFake(time.Unix(1_000_000, 0))
	w, err := NewWorker(WorkerConfig{Master: "127.0.0.1:1", Inputs: []string{"in"}, Output: "out", Memory: 64 << 20,
		TempDir: t.TempDir(), Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(w.WorkDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.startStateMachine(); err != nil {
		t.Fatal(err)
	}
	if err := w.track.start(Sampling, "test", 0); err != nil {
		t.Fatal(err)
	}
	fake.Advance(3 * time.Second)
	if err := w.track.start(WaitingForPartitionConfig, "test", 0); err != nil {
		t.Fatal(err)
	}
	fake.Advance(time.Hour) // not in a measured phase
	want := []PhaseTime{{State: Sampling, Duration: 3 * time.Second, Done: true}}
	if d := cmp.Diff(want, w.info().Phases); d != "" {
		t.Fatalf("phase times (-want +got):\n%s", d)
	}
	if h := w.sm.History(); len(h) != 2 || !h[1].At.Equal(fake.Now().Add(-time.Hour)) {
		t.Fatalf("transitions dated %v, want the fake clock's", h)
	}
}
