package taskq

// waitingParallel is -parallel for this package unless the command line
// sets it (TestMain): its parallel tests mostly wait on real time — cron
// ticks, sleeping tasks in worker processes, a child go test, Redis
// outages and loads, unique and debounce windows — each on a Redis server
// or queues of its own. The default, GOMAXPROCS (2 on CI), ran them two at
// a time. Not parallel, still run alone: the tests that measure throughput
// or push many tasks (TestRateLimitedTenantBesideAFreeOne, TestCrashKill9,
// TestInspectorListOnAMillionTasks: beside it the waiting tests' bounds
// were missed, a cancelled handler stopping 1.05 s after its cancel), and
// TestRedisLostAfter, whose lower bound counts from after Redis's
// shutdown returned (beside the others it measured 2.82 s against 3 s),
// and TestCancelAcrossWorkerProcesses, whose 1,000 sleeping handlers and
// 500 cancels, beside the waiting tests on a CI's two cores, missed its
// 1 s bound by 10 ms, and TestSentinelFailover, which drains tens of
// thousands of tasks and bounds how long the failover takes.
const waitingParallel = 8
