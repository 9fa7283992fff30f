// Package sched is a work-stealing runtime for many lightweight,
// message-driven processes: each process is a state machine (Init, Step,
// Close) that the scheduler steps whenever it has something to do, on a
// fixed set of worker goroutines, instead of one goroutine per process.
//
// Tour:
//
//	s, err := sched.New(sched.Config{Handlers: map[sched.CommandType]sched.Handler{…}})
//	pid, err := s.Spawn(proc, "main", nil) // Init now (ctx: the process's own), first Step soon
//	err = s.Send(pid, msg)                  // EventMessage; nil = queued in a live inbox
//	err = s.Cancel(pid)                     // cancel its context + EventCancel
//	st := s.Stats()
//	err = s.Stop(ctx)                       // cancel all, wait, close the rest; keeps ctx's deadline
//
// Inside Step a process reads its events (nil on the first step; then yield
// completions, messages, cancellation), sends messages with out.Send, spawns
// children onto its worker's deque with out.Spawn, yields commands with
// out.Yield(tag, cmd) and sets out.Status: continue, wait for messages, wait
// for yields, or done. out.Self() is its PID and out.Context() its context.
// A yielded command goes to the Handler registered for its type, which
// answers later, from any goroutine, with CompleteYield(tag, data, err);
// only the first completion of a yield counts.
//
// Inside, each worker owns a Chase-Lev deque (internal/deque) and pops its
// newest process; new and externally woken processes go through a global
// FIFO; idle workers steal half of a random victim's deque, spin briefly and
// then park on a condition variable; a parked worker is woken whenever a
// process becomes Ready where its owner cannot start it at once (the Go
// runtime's wakep rule, at most one searching worker). Processes move between the states
// Ready, Running, Blocked, Idle and Complete by CAS on one word per process,
// which also holds its inbox (a stack of event nodes) and the generation of
// its reused record, so a message costs one CAS to queue and a stale PID or
// Completer misses. README.md has the
// vocabulary, the state diagram, and the memory-ordering arguments for the
// deque and for the park/wake protocol.
//
// The files:
//
//	scheduler.go   Scheduler: New, Spawn, Send, Cancel, Stop, Stats
//	config.go      Config (zero values are defaults), errors, PanicError
//	process.go     Process, PID, Event, Status, StepOutput: what a process sees
//	proc.go        proc: one record's state word, inbox and per-process context (Completer)
//	pidmap.go      the PID map: segments of reused records, generations in the PID
//	inbox.go       event nodes and their arena: the lock-free inbox of each process
//	globalq.go     the global FIFO for new and externally woken processes
//	worker.go      worker: find work (runnext, deque, global queue, steal), spin, park
//	run.go         one step of a process and the move to its next state
//	internal/deque the Chase-Lev deque; schedbench/ the benchmark workloads
package sched
