// Package workspace is gantry's workspace lifecycle: seed 001's
// level-triggered StateReconciler over SQL, with its HealthMonitor, hints
// and HTTP API.
//
// A workspace has a desired_state (written by users through the API) and
// an observed_status (written only by the HealthMonitor, from what the
// providers report). The Reconciler reads only the database: it judges an
// operation in flight complete (observed == target) or timed out, or plans
// the next one (Plan), claims it with a compare-and-set that writes a fresh
// op_id, calls the provider, and hints the monitor to observe at once. A
// user's change of desired state takes over from the retries of a failing
// operation it makes pointless; one whose call runs finishes first.
//
// Tour:
//
//	types.go      the vocabulary, re-exported from wstype (states, operations,
//	              ErrorInfo, Workspace, sentinels) and the hint bus from hints
//	plan.go       Plan: the seed's table + PROVISIONING; Superseded: when a
//	              change of desired state takes over from a failing operation
//	              (pure)
//	reconciler.go Reconciler: one sched process per workspace; ReconcilerStore;
//	              a step: claim, execute, complete
//	config.go     Config: the seed's defaults and RECONCILER_* (ConfigFromEnv)
//	wsproc.go     the per-workspace sched process and the step lanes it yields to
//	calls.go      provider calls and their failures: retry, RetryExceeded,
//	              timeouts, a command's exit
//	urgent.go     a user's work first: the urgent mark from request to reconciler
//	supersede.go  the reconciler giving up a failing operation (Superseded)
//	reasons.go    which error_info reason a failed provider call gets
//	monitor.go    HealthMonitor: the sole writer of observed_status; MonitorStore
//	ttl.go        TTLManager: idle RUNNING → STANDBY, long STANDBY → PENDING; TTLStore
//	singletons.go RunSingletons: monitor, TTL, retention and archive GC once per
//	              cluster (leader/); LeaderStore
//	wakeups.go    the reconciler's one timer for retries, leases and deadlines
//	metrics.go    Metrics: operations and loop latency, recorded at the source
//	api.go        HTTP JSON API (routes in one table; the live/ page, SSE and
//	              probes are mounted on it); APIStore, AccountStore
//	access.go     the front door: body cap, cross-site check, authentication,
//	              the audit row of every mutating request
//	accounts.go   whoami, tokens and audit (admin), page login and logout
//	client.go     the Go client (`gantry ws …`): bearer token, --ca-cert
//	proxy.go      /w/{id}/… into the workspace's PORT (wakes it, TTL activity), logs
//	exec.go       `ws exec`: a command in the workspace over a framed stream
//	              (pipes, or a terminal with resizes)
//	archives.go   snapshots over the API: list a workspace's archives, choose
//	              the one its next restore uses
//	archivegc.go  ArchiveGC: keep the newest N, drop deleted workspaces' after
//	              the retention (on the leader)
//	security.go   TLS/listen checks, the first admin token, audit retention
//	server.go     Server: store + providers + reconciler + singletons + API
//
// Accounts: every request but the probes, /metrics and the page's shell
// carries an API token (or a page session made from one); a principal sees
// only its owner's workspaces unless it is an admin, and another owner's
// workspace is 404, never 403. Quota checks and their writes hold the
// owner's row lock, so replicas agree.
//
// Each component takes the small store interface it declares (the
// controller-runtime style), so its tests run on store/memstore as well as
// on SQLite and Postgres.
//
// Subpackages: wstype (vocabulary), store (the only SQL; memstore, storetest),
// hints (in-process, Postgres LISTEN/NOTIFY, Redis pub/sub), leader (the
// Postgres advisory-lock election), live (page, SSE, metrics, probes), auth
// (tokens, principals, limits) and provider/ (Container, Storage, BlobStore
// seams: process, docker, fs, s3, archive, fake).
package workspace
