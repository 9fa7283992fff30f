package sleeps

import (
	"testing"
	"time"
)

func TestSleeps(t *testing.T) {
	time.Sleep(time.Millisecond) // real time: the fixture's accepted sleep
	// real time: a reason on the line above is accepted too
	time.Sleep(time.Millisecond)
	time.Sleep(time.Millisecond)
	time.Sleep(time.Millisecond) // poll: no longer accepted
	time.Sleep(time.Millisecond) // real time:
}
