package dsort

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// The master counts the job's workers per machine in each worker's config.
func TestPartitionConfigCountsWorkersOnTheMachine(t *testing.T) {
	m, err := NewMaster(MasterConfig{Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	m.ppw = 1
	m.bounds = make([]Boundary, 3)
	for i, machine := range []string{"a", "a", "b", "a"} {
		m.members = append(m.members, &member{index: i, machine: machine, epoch: 1})
	}
	for i, want := range []int32{3, 3, 1, 3} {
		m.mu.Lock()
		pc := partitionConfigToPB(m.cfg.JobID, 1, m.partitionConfigLocked(m.members[i]))
		m.mu.Unlock()
		if got := pc.GetWorkersOnMachine(); got != want {
			t.Errorf("worker %d: workers_on_machine = %d, want %d", i, got, want)
		}
	}
}

// A master refuses what it cannot run (more workers than it tracks, a
// heartbeat too short to tick on), and a register timeout names the
// missing workers as a range, whatever their number.
func TestMasterConfigBounds(t *testing.T) {
	for _, cfg := range []MasterConfig{
		{Workers: 0}, {Workers: MaxWorkers + 1}, {Workers: 2, HeartbeatInterval: time.Nanosecond},
	} {
		if _, err := NewMaster(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%d workers, heartbeat %s: %v, want ErrConfig", cfg.Workers, cfg.HeartbeatInterval, err)
		}
	}
	m, err := NewMaster(MasterConfig{Workers: MaxWorkers, RegisterTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m.members = append(m.members, &member{index: 0, addr: "127.0.0.1:1"})
	m.mu.Lock()
	msg := m.failureLocked(m.start.Add(2 * time.Second))
	m.mu.Unlock()
	if want := fmt.Sprintf("missing: workers 1 to %d (%d)", MaxWorkers-1, MaxWorkers-1); !strings.Contains(msg, want) || len(msg) > 300 {
		t.Errorf("register timeout: %q; want a short message with %q", msg, want)
	}
}

// ceilDiv is ⌈total/(n·size)⌉ without forming n·size.
func TestCeilDiv(t *testing.T) {
	for _, c := range []struct{ total, n, size, want int64 }{
		{0, 3, 10, 0}, {1, 3, 10, 1}, {30, 3, 10, 1}, {31, 3, 10, 2}, {61, 3, 10, 3},
		{1 << 40, 4, math.MaxInt64, 1}, {math.MaxInt64, 2, 1, math.MaxInt64/2 + 1},
	} {
		if got := ceilDiv(c.total, c.n, c.size); got != c.want {
			t.Errorf("ceilDiv(%d, %d, %d) = %d, want %d", c.total, c.n, c.size, got, c.want)
		}
	}
}
