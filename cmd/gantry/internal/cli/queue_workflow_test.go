package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq"
)

// The workflow commands end to end, as the README's example uses them: a
// chain of echo tasks and a chord enqueued, a third workflow cancelled
// before any worker runs (every node cancelled); then a worker: the chain's
// last node's result (`queue tasks get --json`) is its predecessors'
// results then its own text, `queue workflow get` shows the chord's nodes
// completed and its callback's result, and `queue workflow list` names all
// three.
func TestQueueWorkflowCommands(t *testing.T) {
	addr := os.Getenv("GANTRY_TEST_REDIS")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	q := fmt.Sprintf("cliwf-%d", os.Getpid())
	t.Cleanup(func() {
		if c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr}); err == nil {
			c.Purge(context.WithoutCancel(t.Context()), q)
			c.Close()
		}
	})
	must := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Execute(t.Context(), Env{Args: args, Stdout: &out, Stderr: &errb}); code != 0 {
			t.Fatalf("gantry %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
		return out.String()
	}
	enqueue := func(args ...string) taskq.WorkflowInfo {
		t.Helper()
		var info taskq.WorkflowInfo
		out := must(append([]string{"queue", "workflow"}, append(args, "--redis", addr, "--queue", q, "--type", "echo")...)...)
		if err := json.Unmarshal([]byte(out), &info); err != nil || info.ID == "" {
			t.Fatalf("workflow %s: %q, %v", args[0], out, err)
		}
		return info
	}
	chain := enqueue("chain", "--payload", `{"text":"a"}`, "--payload", `{"text":"b"}`, "--payload", `{"text":"c"}`)
	chord := enqueue("chord", "--payload", `{"text":"x"}`, "--payload", `{"text":"y"}`, "--callback-type", "echo", "--callback-payload", `{"text":"!"}`)
	gone := enqueue("chain", "--payload", `{"text":"p"}`, "--payload", `{"text":"q"}`)
	must("queue", "workflow", "cancel", gone.ID, "--redis", addr, "--queue", q)
	if out := must("queue", "workflow", "get", gone.ID, "--redis", addr, "--queue", q); strings.Count(out, "cancelled") != 2 {
		t.Fatalf("the cancelled workflow:\n%s\nwant both nodes cancelled", out)
	}

	ctx, stop := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		var o, e bytes.Buffer
		done <- Execute(ctx, Env{Args: []string{"queue", "worker", "--redis", addr, "--queues", q, "--no-steal"}, Stdout: &o, Stderr: &e})
	}()
	defer func() { stop(); <-done }()
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testutil.WaitFor(t, 60*time.Second, "both workflows to complete", func() (bool, string) {
		st, err := c.Stats(t.Context())
		if err != nil {
			return false, err.Error()
		}
		s := st.Queues[q]
		return s.Completed == 6, fmt.Sprintf("completed %d, pending %d, dead %d", s.Completed, s.Pending, s.Dead)
	})
	var last taskq.TaskDetail
	if err := json.Unmarshal([]byte(must("queue", "tasks", "get", chain.Tasks["3"], "--redis", addr, "--queue", q, "--json")), &last); err != nil {
		t.Fatal(err)
	}
	if last.State != taskq.StateCompleted || string(last.Result) != "abc" || last.Workflow != chain.ID {
		t.Fatalf("the chain's last node: %+v; want completed, result abc, in workflow %s", last, chain.ID)
	}
	out := must("queue", "workflow", "get", chord.ID, "--redis", addr, "--queue", q)
	if strings.Count(out, "completed") != 3 || !strings.Contains(out, "xy!") {
		t.Fatalf("the chord:\n%s\nwant 3 nodes completed and the callback's result xy!", out)
	}
	listed := strings.Fields(must("queue", "workflow", "list", "--redis", addr, "--queue", q))
	for _, id := range []string{chain.ID, chord.ID, gone.ID} {
		if !slices.Contains(listed, id) {
			t.Fatalf("workflow list %v lacks %s", listed, id)
		}
	}
}
