package sched

import (
	"context"
	"fmt"
)

// PID names one process. A PID is not handed out again until its slot in the
// scheduler's table has been reused 2^32 times, so in practice a stale PID
// can only miss (ErrNoProcess), never reach a newer process. The zero PID is
// never assigned.
type PID uint64

// String formats a PID as <slot.generation>, e.g. <17.3>.
func (p PID) String() string { return fmt.Sprintf("<%d.%d>", uint32(p), uint32(p>>32)) }

// Process is a message-driven state machine run by the scheduler. The
// scheduler never runs two methods of one Process at the same time, and every
// call happens-after the previous one, so a Process needs no locking of its
// own.
type Process interface {
	// Init prepares the process to run the entry point method with input.
	// It runs on the goroutine that calls Spawn (or StepOutput.Spawn); an
	// error aborts the spawn. ctx is the process's own context: Self(ctx)
	// is its PID, and it is cancelled by Cancel, by Stop and when the
	// process completes, so work started here can watch it.
	Init(ctx context.Context, method string, input []any) error
	// Step advances the state machine with the events that arrived since
	// the previous step and writes what it wants next into out: a Status,
	// messages to send, commands to yield, children to spawn.
	//
	// events is nil on the first step, and only then: events that arrive
	// before the first step (a Send right after Spawn) come in the second.
	// Later steps get a non-nil slice, empty after StatusContinue when
	// nothing arrived. events and its elements belong to the scheduler and
	// are reused after Step returns. Step must return promptly: a worker
	// cannot preempt it (Stop abandons a worker stuck in a step).
	// A returned error or a panic completes the process with that error.
	Step(events []Event, out *StepOutput) error
	// Close releases the process's resources. It is called exactly once,
	// after the last Step, whether the process finished, failed or was
	// force-closed by Stop.
	Close()
}

// EventType says what an Event carries.
type EventType uint8

const (
	// EventYieldComplete answers a command yielded with StepOutput.Yield:
	// Tag is the yield's tag, Data the result, Error a failure.
	EventYieldComplete EventType = iota + 1
	// EventMessage is a message from Scheduler.Send (From = 0) or from
	// another process's StepOutput.Send (From = its PID).
	EventMessage
	// EventCancel asks the process to finish; Stop and Cancel send it.
	EventCancel
)

func (t EventType) String() string {
	switch t {
	case EventYieldComplete:
		return "yield-complete"
	case EventMessage:
		return "message"
	case EventCancel:
		return "cancel"
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one input to Step.
type Event struct {
	Type  EventType
	Tag   uint64 // the yield's tag, for EventYieldComplete
	From  PID    // the sending process for EventMessage; 0 from outside
	Data  any    // the result or the message payload
	Error error  // the yield's failure, for EventYieldComplete
}

// Status is what a process asks for at the end of a step.
//
// Transitions (state of the process after the step):
//
//	StatusContinue      Running → Ready    run again soon (after others had a turn)
//	StatusWaitMessages  Running → Idle     run again when any event arrives
//	StatusWaitYields    Running → Blocked  run again when any event arrives
//	StatusDone          Running → Complete Close, report nil
//
// The zero Status is invalid: a step that sets none completes the process
// with ErrNoStatus, so a forgotten assignment fails loudly instead of looping.
type Status uint8

const (
	StatusContinue Status = iota + 1
	StatusWaitMessages
	StatusWaitYields
	StatusDone
)

func (s Status) String() string {
	switch s {
	case StatusContinue:
		return "continue"
	case StatusWaitMessages:
		return "wait-messages"
	case StatusWaitYields:
		return "wait-yields"
	case StatusDone:
		return "done"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// CommandType selects the handler for a yielded command.
type CommandType uint16

// Command is a request a process yields to the outside world (a timer, an
// I/O call, a provider call). The scheduler routes it to the Handler
// registered for its type.
type Command interface {
	CommandType() CommandType
}

// Yielded is one command yielded in a step, with the tag its completion will
// carry.
type Yielded struct {
	Tag     uint64
	Command Command
}

type outMsg struct {
	to   PID
	data any
}

// StepOutput is where Step writes its result. The scheduler owns it and
// reuses it between steps of the same process; Status is reset to zero and
// the sends and yields are cleared before every Step.
type StepOutput struct {
	Status Status
	sends  []outMsg
	yields []Yielded

	p *proc   // the process this output belongs to
	w *worker // the worker running the step; nil outside a step
}

// Self returns the PID of the process being stepped.
func (o *StepOutput) Self() PID { return o.p.pid }

// Context returns the process's context (see Process.Init): cancelled by
// Cancel, by Stop and when the process completes.
func (o *StepOutput) Context() context.Context { return o.p.ctx.Load() }

// Spawn starts a child process from inside Step: it runs p's Init now, on
// this worker, and queues the child on this worker's deque (where an idle
// worker can steal it) instead of the global queue. The child's PID is
// valid at once, so the parent can pass Self() to it in input and send to
// it. Errors are those of Scheduler.Spawn. Call it only during Step.
func (o *StepOutput) Spawn(p Process, method string, input []any) (PID, error) {
	return o.p.s.spawn(p, method, input, o.w)
}

// Send queues data for process to, delivered as an EventMessage with From set
// to the sender right after this step. Sends made here take the worker-local
// fast path (the woken receiver runs on this worker next, without a lock; an
// idle worker is woken only when this worker has more than it can start at
// once), unlike Scheduler.Send which any goroutine may call. A message to a
// PID that no longer exists is dropped and counted in Stats.Undeliverable.
func (o *StepOutput) Send(to PID, data any) {
	o.sends = append(o.sends, outMsg{to: to, data: data})
}

// Yield asks for cmd to be handled; its completion arrives later as an
// EventYieldComplete carrying tag. Tags are the process's business (a
// per-process counter is usual); the scheduler only carries them.
func (o *StepOutput) Yield(tag uint64, cmd Command) {
	o.yields = append(o.yields, Yielded{Tag: tag, Command: cmd})
}

// Yields returns the commands yielded so far in this step.
func (o *StepOutput) Yields() []Yielded { return o.yields }

// Completer answers yields. Any goroutine. A yield is completed exactly once:
// the first completion is delivered, later ones (and completions for tags
// never yielded) are dropped and counted in Stats.DroppedCompletions; a
// completion for a process that has finished is dropped.
type Completer interface {
	CompleteYield(tag uint64, data any, err error)
}

// Handler handles yielded commands of one type. Handle is called on the
// worker right after the step, while the process is still Running, so it
// must not block: it hands the work to another goroutine (or answers at once)
// and that goroutine calls c.CompleteYield(tag, …). An error returned by
// Handle, or a panic, completes the yield with that error, unless the yield
// was already completed (then the error is logged and dropped). ctx is the
// yielding process's context: cancelled by Cancel, Stop and completion, so
// handler goroutines should give up when it ends; Self(ctx) is its PID.
type Handler interface {
	Handle(ctx context.Context, cmd Command, tag uint64, c Completer) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, cmd Command, tag uint64, c Completer) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, cmd Command, tag uint64, c Completer) error {
	return f(ctx, cmd, tag, c)
}

// Receiver routes a message to a process. *Scheduler implements it; other
// packages depend on this interface, not on the scheduler.
type Receiver interface {
	Send(to PID, msg any) error
}

var (
	_ Receiver  = (*Scheduler)(nil)
	_ Completer = (*procCtx)(nil)
	_ Handler   = HandlerFunc(nil)
)
