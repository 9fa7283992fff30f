package cli

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine a command started is
// still running when they end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"), // a failed dial's retry delay: ends by itself
	)
}
