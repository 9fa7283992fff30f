// Package workspace is gantry's workspace lifecycle: seed 001's
// level-triggered StateReconciler over SQL, with its HealthMonitor, hints
// and HTTP API.
//
// A workspace has a desired_state (written by users through the API) and
// an observed_status (written only by the HealthMonitor, from what the
// providers report). The Reconciler reads only the database: it judges an
// operation in flight complete (observed == target) or timed out, or plans
// the next one (Plan), claims it with a compare-and-set that writes a fresh
// op_id, calls the provider, and hints the monitor to observe at once.
//
// Tour:
//
//	types.go      states, operations, ErrorInfo, Workspace, sentinels
//	plan.go       Plan: the seed's table + PROVISIONING (pure)
//	store.go      Store: SQL on SQLite (default) or Postgres, migrations/
//	reconciler.go Reconciler: one sched process per workspace
//	reasons.go    error_info reasons (Unreachable, ObserveFailed, …)
//	monitor.go    HealthMonitor: the sole writer of observed_status
//	store_monitor.go  the monitor's error_info writes (observe failures)
//	ttl.go        TTLManager: idle RUNNING → STANDBY, long STANDBY → PENDING
//	singletons.go RunSingletons: monitor + TTL once per cluster (leader/)
//	metrics.go    Metrics: operations and loop latency, recorded at the source
//	hints.go      Hints: in-process, Postgres LISTEN/NOTIFY, Redis pub/sub
//	api.go        HTTP JSON API and its Go client (routes in one table; the
//	              live/ page, SSE and probes are mounted on it)
//	server.go     Server: store + providers + reconciler + singletons + API
//
// Providers live in provider/ (Container, Storage, BlobStore seams).
package workspace
