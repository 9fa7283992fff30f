// Package workspace is the vocabulary and the pure rules of gantry's
// workspace lifecycle (seed 001's level-triggered StateReconciler): what a
// workspace is, what its states and operations mean, and the decisions
// that need nothing but a row and the time. It imports no store, no
// provider implementation and no net/http; the packages that do the work
// sit around it:
//
//	reconcile/   the Reconciler: applies the rules through the store and the
//	             providers (one sched process per workspace)
//	singletons/  the leader's loops: HealthMonitor (sole writer of
//	             observed_status), TTL manager, archive GC, audit retention
//	api/         the HTTP API: routes, access and audit, accounts, archives,
//	             the proxy into a workspace, each workspace app on a host of
//	             its own ({name}--{owner}.{apps domain}), exec; its wire types
//	client/      the Go client of the API (`gantry ws …`)
//	server/      the one composition root (`gantry ws serve`)
//	store/       the only SQL (SQLite, Postgres; memstore, storetest)
//	urgency/     a user's work ahead of bulk work: the context mark, the
//	             urgent hint channels, reserved slots
//	handoff/     the mailbox through which the reconciler and the monitor of
//	             one process leave each other the row a hint announces
//	hints/ leader/ live/ auth/ provider/   hint buses, the Postgres
//	             election, the page and SSE, tokens and principals, the
//	             Container/Storage/BlobStore seams and their implementations
//	wstest/      what the packages' tests share
//
// A workspace has a desired_state (written by users through the API) and
// an observed_status (written only by the HealthMonitor, from what the
// providers report). The Reconciler reads only the database: it judges an
// operation in flight complete (observed == target) or timed out, or plans
// the next one (Plan), claims it with a compare-and-set that writes a fresh
// op_id, calls the provider, and hints the monitor to observe at once. A
// user's change of desired state takes over from the retries of a failing
// operation it makes pointless (Superseded); one whose call runs finishes
// first.
//
// Tour:
//
//	types.go     the vocabulary: states (Status), operations (Operation) and
//	             their targets, ErrorInfo and its reasons, the row
//	             (Workspace), NewWorkspace, the sentinel errors
//	spec.go      Spec: what a workspace runs (image, command, env, limits)
//	             and its validation; SpecUpdate
//	apps.go      App, Share: a workspace's apps (the default one, main, on
//	             $PORT, and others on their ports) and their share levels
//	plan.go      Plan: the seed's table + PROVISIONING; Superseded: when a
//	             change of desired state takes over from a failing operation
//	decide.go    Decide: a reconcile step's whole judgment (complete, time
//	             out, retry, a command's end, supersede, take over, plan),
//	             pure; Policy, Observation, Decision; cases in testdata/decide
//	complete.go  when an operation is over: Completed, CrashLooping,
//	             CrashGrace
//	reasons.go   FailureReason: which error_info reason a failed provider
//	             call gets
//	template.go  Template: a named, versioned spec with typed parameters
//	             (Param; {{.name}} in command and env), its validation and
//	             Instantiate; TemplateRef, what a workspace records of it
//	pool.go      warm pools: PoolOwner (an unclaimed member's own owner),
//	             PoolStatus, Template.PoolMember and Claims (which creates
//	             a member can serve)
//
// Accounts: every request but the probes, /metrics and the page's shell
// carries an API token (or a page session made from one); a principal sees
// only its owner's workspaces unless it is an admin, and another owner's
// workspace is 404, never 403. Quota checks and their writes hold the
// owner's row lock, so replicas agree.
package workspace
