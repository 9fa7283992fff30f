package api_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/urgency"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// steppedExec is a Container whose Exec reports it began, waits, writes
// its first output, and waits again before it ends: the test steps it.
type steppedExec struct {
	provider.ContainerFuncs
	began, wrote chan struct{}
	output, end  chan struct{}
}

func (s steppedExec) Exec(ctx context.Context, _ provider.ExecSpec, _ io.Reader, stdout, _ io.Writer) (int, error) {
	close(s.began)
	<-s.output
	if _, err := io.WriteString(stdout, "up\n"); err != nil {
		return 0, err
	}
	close(s.wrote)
	<-s.end
	return 0, nil
}

// TestExecHoldsTheBulkUntilItRuns: an exec is a user's work until its
// command shows it runs (its first output, or its end): while it has not,
// the process's bulk work waits for it (urgency.Gate); its output ends the
// hold though the command goes on.
func TestExecHoldsTheBulkUntilItRuns(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	gate := urgency.NewGate(0)
	ex := steppedExec{began: make(chan struct{}), wrote: make(chan struct{}), output: make(chan struct{}), end: make(chan struct{})}
	env := wstest.NewAPIEnv(t, st, api.APIConfig{Container: ex, Gate: gate})
	c := env.Client(env.Admin)
	w, err := c.Create(t.Context(), workspace.NewWorkspace{Name: "w", Desired: workspace.Running})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": "RUNNING"})
	done := make(chan error, 1)
	go func() {
		status, err := c.Exec(t.Context(), w.ID, []string{"serve"}, client.ExecIO{Stdout: io.Discard, Stderr: io.Discard})
		if err == nil && status != 0 {
			err = fmt.Errorf("status %d", status)
		}
		done <- err
	}()
	<-ex.began
	if n := gate.InFlight(); n != 1 {
		t.Fatalf("while the command has not shown it runs: %d holds; want the exec's", n)
	}
	close(ex.output)
	<-ex.wrote
	wstest.WaitFor(t, 5*time.Second, "the hold to end at the first output", func() (bool, string) {
		n := gate.InFlight()
		return n == 0, fmt.Sprint(n, " holds")
	})
	close(ex.end)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
