// Package lifecycle holds the two pieces every long-running gantry component
// shares: a validated state machine and the shutdown discipline of seed 003
// done the Go way.
//
// # State machines
//
// A [Machine] moves between the states of a caller-defined enum (any
// comparable type with a String method) along an explicit transition table.
// A transition that the table does not allow is an error ([ErrInvalidTransition],
// typed as [*TransitionError]), never a silent change. Every transition is
// kept in a history with its reason and timestamp; states listed as phases
// get their durations measured (enter → leave); and when a persist path is
// configured, the current state and history are written to that file
// atomically (write to a temporary file, fsync, rename) on every transition,
// so a restarted process can see where its predecessor stopped
// ([LoadSnapshot]).
//
//	m, err := lifecycle.New(lifecycle.Config[State]{
//		Initial:     Idle,
//		Transitions: map[State][]State{Idle: {Busy}, Busy: {Idle}},
//		Phases:      []State{Busy},
//	})
//	err = m.Transition(Busy, "work arrived")
//
// # Shutdown
//
// The seed's JVM needed a watchdog thread because gRPC threads kept the
// process alive. In Go, returning from main ends the process, so the
// discipline reduces to three rules, each with a helper here:
//
//   - components block in Run(ctx) and drain when ctx ends ([Group] runs
//     several and cancels the rest when one fails);
//   - a graceful stop gets a bounded time before the forced one
//     ([StopWithin], e.g. grpc.Server.GracefulStop then Stop);
//   - a hard deadline fires no matter what the code is doing ([Watchdog]).
//
// Libraries never install signal handlers; cmd/gantry does.
//
// The files: machine.go holds Machine and its errors, shutdown.go Group,
// StopWithin and Watchdog.
package lifecycle
