package taskq

import (
	"context"
	"errors"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

// A client with WaitReplicas returns from an enqueue only once a replica
// has the task: with the replica frozen (connected, not acknowledging) the
// enqueue fails with ErrNotReplicated after ReplicaTimeout (the WAIT
// counts this enqueue's write, not an earlier state), and succeeds again
// once the replica catches up; Enqueue, EnqueueBatch, unique and workflow
// enqueues all wait. Without a replica at all, it fails the same way.
func TestWaitReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts, freezes and thaws its own redis-servers")
	}
	master := testutil.StartRedis(t, "--repl-diskless-sync-delay", "0")
	lone := testutil.StartRedis(t)
	ctx := t.Context()
	c, err := NewClient(ClientConfig{Redis: lone.Addr(), WaitReplicas: 1, ReplicaTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.Enqueue(ctx, NewTask("noop", nil)); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("enqueue without a replica: %v, want ErrNotReplicated", err)
	}

	replica := testutil.StartRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	rr := openRDB(t, replica.Addr())
	waitFor(t, 10*time.Second, "the replica in sync", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		txt, err := rr.Client().Do(ctx, rr.Client().B().Info().Section("replication").Build()).ToString()
		return err == nil && parseInfo(txt)["master_link_status"] == "up"
	})
	// c2 waits long enough for a replica that is up on a loaded machine;
	// quick gives up after 300 ms.
	c2, err := NewClient(ClientConfig{Redis: master.Addr(), WaitReplicas: 1, ReplicaTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c2.Close)
	quick, err := NewClient(ClientConfig{Redis: master.Addr(), WaitReplicas: 1, ReplicaTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(quick.Close)
	enqueueAll := func() error {
		if _, err := c2.Enqueue(ctx, NewTask("noop", nil)); err != nil {
			return err
		}
		if _, err := c2.EnqueueBatch(ctx, []*Task{NewTask("noop", nil), NewTask("noop", nil)}); err != nil {
			return err
		}
		if _, err := c2.Enqueue(ctx, NewTask("noop", nil), Unique("k"+strconv.FormatInt(time.Now().UnixNano(), 10), time.Minute)); err != nil {
			return err
		}
		wf := NewWorkflow()
		wf.Add("a", NewTask("noop", nil))
		_, err := c2.EnqueueWorkflow(ctx, wf)
		return err
	}
	if err := enqueueAll(); err != nil {
		t.Fatalf("enqueues with the replica up: %v", err)
	}
	replica.Signal(syscall.SIGSTOP)
	t0 := time.Now()
	_, err = quick.Enqueue(ctx, NewTask("noop", nil))
	if !errors.Is(err, ErrNotReplicated) || time.Since(t0) < 300*time.Millisecond {
		t.Errorf("enqueue with the replica frozen: %v after %s, want ErrNotReplicated after 300ms", err, time.Since(t0))
	}
	replica.Signal(syscall.SIGCONT)
	if err := enqueueAll(); err != nil {
		t.Fatalf("enqueues with the replica thawed: %v", err)
	}
}
