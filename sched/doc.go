// Package sched is a work-stealing runtime for many lightweight,
// message-driven processes: each process is a state machine (Init, Step,
// Close) that the scheduler steps whenever it has something to do, on a
// fixed set of worker goroutines, instead of one goroutine per process.
//
// Tour:
//
//	s, err := sched.New(sched.Config{Handlers: map[sched.CommandType]sched.Handler{…}})
//	pid, err := s.Spawn(proc, "main", nil) // Init now, first Step soon
//	err = s.Send(pid, msg)                  // EventMessage; any goroutine
//	st := s.Stats()
//	err = s.Stop(ctx)                       // EventCancel to all, wait, close the rest
//
// Inside Step a process reads its events (yield completions, messages,
// cancellation), sends messages with out.Send, yields commands with
// out.Yield(tag, cmd) and sets out.Status: continue, wait for messages, wait
// for yields, or done. A yielded command goes to the Handler registered for
// its type, which answers later, from any goroutine, with
// CompleteYield(tag, data, err).
//
// Inside, each worker owns a Chase-Lev deque (internal/deque) and pops its
// newest process; new and externally woken processes go through a global
// FIFO; idle workers steal half of a random victim's deque, spin briefly and
// then park on a condition variable. Processes move between the states
// Ready, Running, Blocked, Idle and Complete by CAS. README.md has the
// vocabulary, the state diagram, and the memory-ordering arguments for the
// deque and for the park/wake protocol.
package sched
