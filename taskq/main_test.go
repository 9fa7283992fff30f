package taskq

import (
	"flag"
	"strconv"
)

// waitingParallel is -parallel for this package unless the command line
// sets it (TestMain): its parallel tests mostly wait on real time — cron
// ticks, sleeping tasks in worker processes, a child go test, Redis
// outages and loads, unique and debounce windows — each on a Redis server
// or queues of its own. The default, GOMAXPROCS (2 on CI), ran them two at
// a time; 12 runs them all at once, and TestInspectorListOnAMillionTasks's
// CPU work (a million enqueues) beside them. The tests that measure
// throughput or push many tasks through workers
// (TestRateLimitedTenantBesideAFreeOne, TestCrashKill9) are not parallel
// and still run alone.
const waitingParallel = 12

// raiseParallel sets -parallel to waitingParallel unless the command line
// set it; TestMain calls it before the tests run.
func raiseParallel() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(waitingParallel))
	}
}
