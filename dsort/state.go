package dsort

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/gantryhq/gantry/lifecycle"
)

// State is a worker's state, exactly the seed's (000 §2):
//
//	Initializing ──register──▶ Sampling ──sample sent──▶ WaitingForPartitionConfig
//	  ──config──▶ Sorting ──sorted──▶ WaitingForShuffleSignal ──signal──▶ Shuffling
//	  ──shuffled──▶ WaitingForMergeSignal ──signal──▶ Merging ──merged──▶ Completed
//
//	any non-terminal state ──error──▶ Failed ──restart──▶ Initializing
//
// Completed is terminal. Failed is terminal except for the restart edge.
type State int

// The worker states, in the order of a successful run.
const (
	Initializing State = iota
	Sampling
	WaitingForPartitionConfig
	Sorting
	WaitingForShuffleSignal
	Shuffling
	WaitingForMergeSignal
	Merging
	Completed
	Failed
)

var stateNames = [...]string{
	"Initializing", "Sampling", "WaitingForPartitionConfig", "Sorting",
	"WaitingForShuffleSignal", "Shuffling", "WaitingForMergeSignal", "Merging",
	"Completed", "Failed",
}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// ParseState is the inverse of String.
func ParseState(name string) (State, error) {
	for i, n := range stateNames {
		if n == name {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("dsort: unknown worker state %q", name)
}

// IsTerminal reports whether s is Completed or Failed (seed §2.1).
func (s State) IsTerminal() bool { return s == Completed || s == Failed }

// transitions is the seed's canTransitionTo table.
var transitions = map[State][]State{
	Initializing:              {Sampling, Failed},
	Sampling:                  {WaitingForPartitionConfig, Failed},
	WaitingForPartitionConfig: {Sorting, Failed},
	Sorting:                   {WaitingForShuffleSignal, Failed},
	WaitingForShuffleSignal:   {Shuffling, Failed},
	Shuffling:                 {WaitingForMergeSignal, Failed},
	WaitingForMergeSignal:     {Merging, Failed},
	Merging:                   {Completed, Failed},
	Failed:                    {Initializing},
}

// phaseStates are the states whose durations are measured (seed §9).
var phaseStates = []State{Sampling, Sorting, Shuffling, Merging}

// StateFileName is the file, under the worker's temp dir, holding the
// persisted state machine (a lifecycle.Snapshot).
const StateFileName = "worker-state.json"

// StateMachine is the worker's state machine (seed §4).
type StateMachine = lifecycle.Machine[State]

// NewStateMachine returns a machine in Initializing. When dir is not empty
// the state is persisted to dir/StateFileName on every transition.
func NewStateMachine(dir string, logger *slog.Logger, onTransition func(lifecycle.Transition[State])) (*StateMachine, error) {
	return newStateMachine(dir, logger, onTransition, nil, slog.LevelInfo)
}

// newStateMachine is NewStateMachine on the clock now (nil: the wall
// clock), which dates the transitions and times the phases, logging each
// transition at level.
func newStateMachine(dir string, logger *slog.Logger, onTransition func(lifecycle.Transition[State]), now func() time.Time, level slog.Level) (*StateMachine, error) {
	path := ""
	if dir != "" {
		path = filepath.Join(dir, StateFileName)
	}
	return lifecycle.New(lifecycle.Config[State]{
		Initial:         Initializing,
		Transitions:     transitions,
		Phases:          phaseStates,
		PersistPath:     path,
		OnTransition:    onTransition,
		Logger:          logger,
		TransitionLevel: level,
		Now:             now,
	})
}

// Progress returns the seed's §7 progress percentage for a state, given the
// fraction (0..1) done within the current phase.
func Progress(s State, frac float64) float64 {
	frac = min(max(frac, 0), 1)
	switch s {
	case Initializing:
		return 0
	case Sampling:
		return 10
	case WaitingForPartitionConfig:
		return 15
	case Sorting:
		return 15 + 40*frac
	case WaitingForShuffleSignal:
		return 55
	case Shuffling:
		return 55 + 25*frac
	case WaitingForMergeSignal:
		return 80
	case Merging:
		return 80 + 20*frac
	case Completed:
		return 100
	}
	return 0
}

// Phase names the coarse phase of seed 000 §7 a state belongs to: waiting
// states count as the phase they wait after.
func (s State) Phase() string {
	return strings.TrimPrefix(phaseOf(s).String(), "PHASE_")
}
