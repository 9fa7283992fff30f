// Package taskq is a fair, crash-safe task queue on Redis (seed 004, the
// FairQueue worker).
//
// A Client enqueues tasks into queues; a Worker serves queues with handlers
// registered by task type:
//
//	c, _ := taskq.NewClient(taskq.ClientConfig{Redis: "127.0.0.1:6379"})
//	c.Enqueue(ctx, taskq.NewTask("email", payload), taskq.Queue("mail"), taskq.Tenant("acme"))
//
//	w, _ := taskq.NewWorker(taskq.WorkerConfig{Redis: "127.0.0.1:6379", Queues: []taskq.QueueSpec{{Name: "mail"}}})
//	w.Handle("email", func(ctx context.Context, t *taskq.Task) error { … })
//	w.Run(ctx) // until ctx ends, then drains
//
// Tour:
//   - task.go: Task, enqueue options, the stored message and its validation;
//     message.go: the message's formats (compact, and earlier releases' JSON).
//   - client.go, stats.go: enqueue (single and batch), dead letters, results, stats.
//   - worker.go: WorkerConfig, lifecycle (State), Run and the graceful
//     shutdown; the Worker wires one background component per file, each
//     with a params struct, start(ctx) and stop():
//   - fetcher.go: one dequeue script call per batch across all eligible
//     queues (assigned first, strict or weighted by weight × backlog share ×
//     the adaptive factor, then steal targets), blocking on wake-up lists
//     when idle; prefetch.go: the extra slots it puts in circulation while
//     tasks are short (a deeper buffer, bigger batches);
//   - stealer.go: the steal targets (other queues by backlog);
//   - leasekeeper.go: heartbeats that extend running tasks' leases and
//     cancel a task whose lease was lost;
//   - maintainer.go: reaping expired leases, promoting due tasks, retention,
//     the worker record and gauges;
//   - adaptive.go: the adaptive controller (seed §7.3);
//   - component.go: what they share: the start/stop loop (stop safe twice
//     and before start), the clock-paced sleep, Redis outage backoff, the
//     in-flight set.
//   - process.go: running a handler with its timeout, grace and panic
//     recovery; ack batching, retries with backoff, dead letters.
//   - workflow.go: Workflow (a DAG of tasks in one queue: Chain, Chord),
//     Client.EnqueueWorkflow, a node's Parents and ParentResults.
//   - group.go: aggregation (Group, GroupPolicy): tasks handed to one
//     handler call as a batch (Task.Batch) by size, grace or max delay.
//   - retry.go: a task type's own retry policy (Handle's WithRetry), and
//     the handler's RetryAfter (a delay of its own) and Snooze (put off,
//     no attempt counted).
//   - canceller.go: cancels the handler of a task cancelled elsewhere.
//   - redislost.go: RedisLostError, Run's end after Redis is lost too long.
//   - memory.go: the memory in use, for the health check.
//   - inspector.go: Inspector: list, look up, delete, run and cancel tasks;
//     limits.go: its rate and concurrency limits (Limit, ParseRate).
//   - tree.go: tenant paths (org/team/user, hierarchical fair share): their
//     check, and the tree's inner nodes in the stats (NodeStats).
//   - cron.go: cron entries (Client.CronAdd) and the scheduler that enqueues
//     them.
//   - middleware.go: Middleware around handlers (Worker.Use) and enqueues
//     (Client.Use), Header, Progress.
//   - health.go: OK/Warning/Critical; metrics.go: Prometheus metrics.
//   - tasks/: the built-in task types (noop, sleep, fail, sort).
//   - internal/rdb: the only code that knows Redis; lua/ holds one script
//     per operation.
//
// Fairness: inside a queue, tenants (the fairness key) are served in
// weighted start-time fair order: each tenant with pending work has a
// virtual start tag, the smallest is served, and serving advances the
// tenant's tag by 1/weight. A tenant that becomes active starts at the
// queue's current virtual time, so 100 tasks queued behind 100,000 of
// another tenant are served at once, interleaved. Inside a tenant, higher
// priority first, then FIFO. Each step is O(log n) in Redis sorted sets.
//
// A tenant with a '/' is a path ("acme/web/bob", up to MaxTenantDepth
// segments): the same fair queuing runs at every level of the tree of its
// prefixes (hierarchical start-time fair queuing, still one Redis call a
// dequeue). A node's weight, relative to its siblings, is its limit's
// weight (Inspector.SetLimit on "acme/web"); a flat tenant is a child of
// the root as before.
//
// Time: everything a worker waits for or times out on (leases,
// heartbeats, maintenance, backoff, adaptive windows, grace and shutdown
// timeouts) reads WorkerConfig.Clock, so tests advance a fake clock.
//
// Redis: a call that fails backs off and retries; a Redis that answers
// LOADING (reading its data after a start) is waited for, not counted as
// down; one unreachable for WorkerConfig.RedisLostAfter (1 min by default)
// makes Run return a *RedisLostError.
//
// Sentinel: given "redis-sentinel://host:port,host:port/MASTER", clients,
// workers and inspectors ask the sentinels for the master of set MASTER,
// follow their +switch-master events and ask again every 2 s besides (a
// missed event, or a master demoted in place that answers READONLY). A
// failover is an outage of a few seconds to a worker: its calls back off
// and retry (READONLY too), its running tasks finish and their acks are
// retried on the new master. Replication is asynchronous: what the old
// master had not yet sent to the promoted replica is lost with it — a
// dequeue or an ack (the task runs again, at least once, after its lease)
// or an enqueue, unless the Client waits for replicas
// (ClientConfig.WaitReplicas, `gantry queue enqueue --wait-replicas`):
// then an enqueue that returned nil is on a replica, and survives the
// master's crash. Keep two replicas or more, or such enqueues fail while
// the one left after a failover is the master. A failover while the old
// master still serves (asked of Sentinel, a partition) can still lose
// what it acknowledged until the clients moved, and run tasks twice.
//
// Delivery is at least once: a task taken by a worker holds a lease that
// heartbeats extend; if the worker dies, any worker's maintenance puts the
// task back after the lease expires and its next start is counted as a
// duplicate. The lease's end is its holder's fencing token: a worker
// whose lease expired and was given to a later dequeue finds out at its
// next heartbeat (extend.lua compares the end it set) and stops the run,
// even when the later dequeue was its own.
package taskq
