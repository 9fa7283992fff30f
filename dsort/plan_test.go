package dsort

import "testing"

func TestNextPhase(t *testing.T) {
	all := func(s State) jobView { return jobView{registered: 3, workers: 3, allSampled: true, least: s} }
	for _, tc := range []struct {
		name string
		from JobPhase
		v    jobView
		want JobPhase
	}{
		{"waits for N registrations", JobRegistering, jobView{registered: 2, workers: 3, least: Sampling}, JobRegistering},
		{"N registered", JobRegistering, jobView{registered: 3, workers: 3, least: Sampling}, JobSampling},
		{"waits for every sample", JobSampling, jobView{registered: 3, workers: 3, least: WaitingForPartitionConfig}, JobSampling},
		{"every sample in", JobSampling, all(WaitingForPartitionConfig), JobSorting},
		{"shuffle barrier holds while one sorts", JobSorting, all(Sorting), JobSorting},
		{"shuffle barrier opens", JobSorting, all(WaitingForShuffleSignal), JobShuffling},
		{"merge barrier holds while one shuffles", JobShuffling, all(Shuffling), JobShuffling},
		{"merge barrier opens", JobShuffling, all(WaitingForMergeSignal), JobMerging},
		{"a merging worker holds success", JobMerging, all(Merging), JobMerging},
		{"every worker completed", JobMerging, all(Completed), JobSucceeded},
		{"ended stays ended", JobSucceeded, all(Completed), JobSucceeded},
		{"aborted stays aborted", JobAborted, all(Completed), JobAborted},
	} {
		if got := nextPhase(tc.from, tc.v); got != tc.want {
			t.Errorf("%s: nextPhase(%s) = %s, want %s", tc.name, tc.from, got, tc.want)
		}
	}
}

func TestSignalFor(t *testing.T) {
	for _, tc := range []struct {
		phase JobPhase
		state State
		want  signal
		ok    bool
	}{
		{JobSampling, WaitingForPartitionConfig, 0, false},
		{JobSorting, WaitingForPartitionConfig, sigConfig, true},
		{JobShuffling, WaitingForPartitionConfig, sigConfig, true}, // a restarted worker
		{JobSorting, WaitingForShuffleSignal, 0, false},
		{JobShuffling, WaitingForShuffleSignal, sigShuffle, true},
		{JobShuffling, WaitingForMergeSignal, 0, false},
		{JobMerging, WaitingForMergeSignal, sigMerge, true},
		{JobMerging, Sorting, 0, false},
	} {
		got, ok := signalFor(tc.phase, tc.state)
		if got != tc.want || ok != tc.ok {
			t.Errorf("signalFor(%s, %s) = %d, %v; want %d, %v", tc.phase, tc.state, got, ok, tc.want, tc.ok)
		}
	}
}

func TestJobPhaseNamesRoundTrip(t *testing.T) {
	for p := JobRegistering; p <= JobAborted; p++ {
		got, err := ParseJobPhase(p.String())
		if err != nil || got != p {
			t.Errorf("ParseJobPhase(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParseJobPhase("nonsense"); err == nil {
		t.Error("ParseJobPhase accepted nonsense")
	}
}
