// Package reconcile is the workspace Reconciler: seed 001's
// StateReconciler, one sched process per workspace. It reads only the
// database; each step judges the operation in flight (complete, timed
// out, superseded, to retry, to take over) or plans the next one
// (workspace.Plan), claims it with a compare-and-set that writes a fresh
// op_id, calls the provider, and hints the monitor to observe at once.
// Every write is a compare-and-set on the operation the step owns, so
// replicas and the monitor never undo each other.
//
// Tour:
//
//	reconciler.go  Reconciler, ReconcilerStore, Run (tick + hints), a step:
//	               judge the operation in flight, claim, execute, complete
//	config.go      Config: the seed's defaults and RECONCILER_* (ConfigFromEnv)
//	wsproc.go      the per-workspace sched process and the steps it yields
//	calls.go       provider calls and their failures: retry, RetryExceeded,
//	               timeouts, a command's exit
//	supersede.go   giving up a failing operation for a change of desired
//	               state (workspace.Superseded)
//	urgent.go      a user's work first inside the reconciler: holds on the
//	               bulk, the step queue with its urgent share
//	wakeups.go     the one timer for retries, leases and deadlines
//	metrics.go     Metrics: operations and loop latency, recorded at the
//	               source (the singletons record through it too)
package reconcile
