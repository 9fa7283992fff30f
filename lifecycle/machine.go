package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/fsutil"
)

// Sentinel errors. Test with errors.Is; the typed errors below carry details.
var (
	// ErrInvalidTransition: the transition table does not allow the move.
	ErrInvalidTransition = errors.New("lifecycle: invalid state transition")
	// ErrUnexpectedState: Require found the machine in another state.
	ErrUnexpectedState = errors.New("lifecycle: unexpected state")
	// ErrConfig: a Config failed validation.
	ErrConfig = errors.New("lifecycle: invalid config")
)

// State is what a Machine moves between: a small comparable enum whose
// String names the state (used in logs, errors and the persisted file).
type State interface {
	comparable
	String() string
}

// TransitionError reports a transition the table does not allow.
type TransitionError struct {
	From, To string
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("lifecycle: invalid state transition %s -> %s", e.From, e.To)
}

// Is makes errors.Is(err, ErrInvalidTransition) true.
func (e *TransitionError) Is(target error) bool { return target == ErrInvalidTransition }

// StateError reports that the machine is not in the state a caller required.
type StateError struct {
	Want []string
	Got  string
}

func (e *StateError) Error() string {
	return fmt.Sprintf("lifecycle: expected state %s but was %s", strings.Join(e.Want, " or "), e.Got)
}

// Is makes errors.Is(err, ErrUnexpectedState) true.
func (e *StateError) Is(target error) bool { return target == ErrUnexpectedState }

// Config describes a Machine. The zero value of every field but Transitions
// is a documented default.
type Config[S State] struct {
	// Initial is the state a new machine starts in (default: S's zero value).
	Initial S
	// Transitions lists, for each state, the states it may move to. A state
	// missing from the map is terminal. Required (non-empty).
	Transitions map[S][]S
	// Phases are the states whose time is measured (enter → leave) and
	// reported by Phases. Default: none.
	Phases []S
	// PersistPath, when set, receives a JSON Snapshot after every
	// transition, written atomically. Default "": nothing is written.
	PersistPath string
	// OnTransition, when set, is called after every successful transition,
	// outside the machine's lock, in transition order per goroutine.
	OnTransition func(Transition[S])
	// Logger receives one line per transition, at TransitionLevel.
	// Default: discard.
	Logger *slog.Logger
	// TransitionLevel is the level of that line. Zero = Info; an owner
	// that reports transitions itself (OnTransition) may set Debug so a
	// terminal does not show each twice.
	TransitionLevel slog.Level
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

func (c *Config[S]) validate() error {
	if len(c.Transitions) == 0 {
		return fmt.Errorf("%w: Transitions is empty", ErrConfig)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Transition is one entry of a Machine's history.
type Transition[S State] struct {
	From, To S
	At       time.Time
	Reason   string
}

// PhaseDuration is the time spent in one phase state. Done is false while
// the machine is still in it (then End is zero).
type PhaseDuration[S State] struct {
	Phase      S
	Start, End time.Time
	Done       bool
}

// Duration is End-Start for a finished phase, or the time since Start
// (by the machine's clock at the call to Phases) for an open one.
func (p PhaseDuration[S]) Duration() time.Duration { return p.End.Sub(p.Start) }

// Machine is a validated state machine. All methods are safe for concurrent
// use.
type Machine[S State] struct {
	cfg     Config[S]
	allowed map[S]map[S]bool // immutable after New
	phase   map[S]bool       // immutable after New

	mu sync.Mutex // protects the fields below
	// cur is the current state. Invariant: cur == history[len-1].To when
	// history is non-empty, else cfg.Initial.
	cur     S
	history []Transition[S]
	// phases are in start order. Invariant: at most one is open (!Done),
	// and it is the last one, and its Phase == cur.
	phases []PhaseDuration[S]
	// persistErr is the last error writing PersistPath (nil when the last
	// write succeeded).
	persistErr error
}

// New validates cfg and returns a machine in cfg.Initial. When Initial is a
// phase its measurement starts now.
func New[S State](cfg Config[S]) (*Machine[S], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Machine[S]{cfg: cfg, cur: cfg.Initial,
		allowed: make(map[S]map[S]bool), phase: make(map[S]bool)}
	for from, tos := range cfg.Transitions {
		set := make(map[S]bool, len(tos))
		for _, to := range tos {
			set[to] = true
		}
		m.allowed[from] = set
	}
	for _, p := range cfg.Phases {
		m.phase[p] = true
	}
	if m.phase[m.cur] {
		m.phases = append(m.phases, PhaseDuration[S]{Phase: m.cur, Start: cfg.Now()})
	}
	if cfg.PersistPath != "" {
		m.persistErr = m.persistLocked()
	}
	return m, nil
}

// CanTransition reports whether the table allows from -> to.
func (m *Machine[S]) CanTransition(from, to S) bool { return m.allowed[from][to] }

// State returns the current state.
func (m *Machine[S]) State() S {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

// Is reports whether the current state is one of states.
func (m *Machine[S]) Is(states ...S) bool {
	return slices.Contains(states, m.State())
}

// Require returns a *StateError unless the current state is one of states.
func (m *Machine[S]) Require(states ...S) error {
	cur := m.State()
	if slices.Contains(states, cur) {
		return nil
	}
	want := make([]string, len(states))
	for i, s := range states {
		want[i] = s.String()
	}
	return &StateError{Want: want, Got: cur.String()}
}

// Transition moves to `to` if the table allows it from the current state,
// records it in the history with reason, closes/opens phase measurements
// and persists the new state. A disallowed move returns a *TransitionError
// and changes nothing. A failure to persist is logged and returned by
// PersistErr, not here: the in-memory machine stays the source of truth.
func (m *Machine[S]) Transition(to S, reason string) error {
	m.mu.Lock()
	from := m.cur
	if !m.allowed[from][to] {
		m.mu.Unlock()
		return &TransitionError{From: from.String(), To: to.String()}
	}
	now := m.cfg.Now()
	if n := len(m.phases); n > 0 && !m.phases[n-1].Done {
		m.phases[n-1].End, m.phases[n-1].Done = now, true
	}
	if m.phase[to] {
		m.phases = append(m.phases, PhaseDuration[S]{Phase: to, Start: now})
	}
	m.cur = to
	t := Transition[S]{From: from, To: to, At: now, Reason: reason}
	m.history = append(m.history, t)
	if m.cfg.PersistPath != "" {
		m.persistErr = m.persistLocked()
		if m.persistErr != nil {
			m.cfg.Logger.Warn("lifecycle: cannot persist state", "path", m.cfg.PersistPath, "err", m.persistErr)
		}
	}
	m.mu.Unlock()
	m.cfg.Logger.Log(context.Background(), m.cfg.TransitionLevel, "state transition", "from", from.String(), "to", to.String(), "reason", reason)
	if m.cfg.OnTransition != nil {
		m.cfg.OnTransition(t)
	}
	return nil
}

// History returns a copy of the transitions so far, oldest first.
func (m *Machine[S]) History() []Transition[S] {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.history)
}

// Phases returns the phase measurements so far in start order. An open
// phase has End set to the current time and Done false.
func (m *Machine[S]) Phases() []PhaseDuration[S] {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Clone(m.phases)
	if n := len(out); n > 0 && !out[n-1].Done {
		out[n-1].End = m.cfg.Now()
	}
	return out
}

// PersistErr returns the error of the last write of PersistPath, if any.
func (m *Machine[S]) PersistErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.persistErr
}

// WriteHistory prints the history as the seed's printHistory does:
// "[+1.2s] From -> To: reason", times relative to the first transition.
func (m *Machine[S]) WriteHistory(w io.Writer) {
	h := m.History()
	for _, t := range h {
		fmt.Fprintf(w, "[+%.1fs] %s -> %s: %s\n", t.At.Sub(h[0].At).Seconds(), t.From, t.To, t.Reason)
	}
}

// WritePhases prints one line per phase: "Sorting: 1.23s" or
// "Sorting: in progress (1.23s)".
func (m *Machine[S]) WritePhases(w io.Writer) {
	for _, p := range m.Phases() {
		if p.Done {
			fmt.Fprintf(w, "%s: %.2fs\n", p.Phase, p.Duration().Seconds())
		} else {
			fmt.Fprintf(w, "%s: in progress (%.2fs)\n", p.Phase, p.Duration().Seconds())
		}
	}
}

// Snapshot is what a Machine persists: state names, not values, so that a
// reader needs no knowledge of S.
type Snapshot struct {
	State   string               `json:"state"`
	Updated time.Time            `json:"updated"`
	History []SnapshotTransition `json:"history"`
}

// SnapshotTransition is one persisted history entry.
type SnapshotTransition struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

func (m *Machine[S]) persistLocked() error {
	s := Snapshot{State: m.cur.String(), Updated: m.cfg.Now(), History: make([]SnapshotTransition, len(m.history))}
	for i, t := range m.history {
		s.History[i] = SnapshotTransition{From: t.From.String(), To: t.To.String(), At: t.At, Reason: t.Reason}
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(m.cfg.PersistPath, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("lifecycle: write %s: %w", m.cfg.PersistPath, err)
	}
	return nil
}

// LoadSnapshot reads a file written by a Machine with PersistPath. A missing
// file gives an error for which errors.Is(err, fs.ErrNotExist) holds.
func LoadSnapshot(path string) (Snapshot, error) {
	var s Snapshot
	data, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("lifecycle: load snapshot: %w", err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("lifecycle: load snapshot %s: %w", path, err)
	}
	return s, nil
}
