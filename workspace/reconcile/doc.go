// Package reconcile is the workspace Reconciler: seed 001's
// StateReconciler, one sched process per workspace. It reads only the
// database; each step asks workspace.Decide what to do with the row (the
// operation in flight complete, timed out, superseded, to retry, to take
// over, or the next one to plan) and applies the decision: a
// compare-and-set write (a claim writes a fresh op_id), the provider call,
// whose outcome Decide judges too, and the hints and wake-ups it asks for.
// Every write is a compare-and-set on the operation the step owns, so
// replicas and the monitor never undo each other.
//
// Goroutines: Run's loop, its tick (one at a time) and the wake-ups' timer
// poke workspaces; each workspace's steps run one at a time on the step
// workers (a step's finish on a goroutine of its own); the lease renewal
// runs beside each provider call. The methods say who may call them.
//
// Tour:
//
//	reconciler.go  Reconciler, ReconcilerStore, Run (tick + hints), a step:
//	               decide (workspace.Decide), then apply: claim, acquire,
//	               execute, complete, time out
//	config.go      Config: the seed's defaults and RECONCILER_* (ConfigFromEnv);
//	               its workspace.Policy
//	wsproc.go      the per-workspace sched process and the steps it yields
//	calls.go       provider calls and their outcomes as Decide takes them;
//	               recording a failed attempt (a call's, a command's end)
//	supersede.go   giving up a failing operation for a change of desired
//	               state (workspace.Superseded: Decide's ActAbandon)
//	urgent.go      a user's work first inside the reconciler: holds on the
//	               bulk, the step queue with its urgent share
//	wakeups.go     the one timer for retries, leases and deadlines
//	metrics.go     Metrics: operations and loop latency, recorded at the
//	               source (the singletons record through it too)
package reconcile
