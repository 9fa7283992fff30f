package dsort

// waitingParallel is -parallel for this package unless the command line
// sets it (TestMain): its parallel tests are mostly process-level jobs of a
// few thousand records that wait on real time — watchdogs, register,
// rejoin and master timeouts, processes killed, interrupted and restarted
// — each with directories of its own and the ports its processes pick.
// The default, GOMAXPROCS (2 on CI), ran them two at a time. Not parallel,
// still run alone: the tests that restart a master on its port
// (TestMasterRestartResumesJob, TestMasterRestartAfterSuccessLetsWorkerCommit:
// a process of a parallel test could take the port meanwhile), the memory
// measurement (TestWorkerPeakMemoryWithinBudget), and the 2 s watchdogs
// (TestMasterWatchdogEndsAHungShutdown, TestWatchdogExitsOneForAnAbortedJob:
// their exit must come no sooner than 2 s after the line this process
// reads, and a loaded test process read it 35 ms late).
const waitingParallel = 8
