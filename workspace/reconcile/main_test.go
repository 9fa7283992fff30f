package reconcile

import (
	"os"
	"testing"

	"github.com/gantryhq/gantry/internal/testutil"
)

// waitingParallel is -parallel for this package unless the command line
// sets it: its parallel tests (each a reconciler and monitor over one
// store, a few workspaces) mostly wait on real time — retry backoffs, exit
// polls, timeouts, slow fake calls — not on the CPU. The default,
// GOMAXPROCS (2 on CI), ran them two at a time; the CPU-heavy tests
// (TestUserChangeClaimedAheadOfBulk, TestConvergesWithoutTicks,
// TestReplicasNeverDuplicate) are not parallel and still run alone.
const waitingParallel = 8

func TestMain(m *testing.M) {
	testutil.RaiseParallel(waitingParallel)
	os.Exit(m.Run())
}
