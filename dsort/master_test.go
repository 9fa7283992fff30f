package dsort

import "testing"

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
