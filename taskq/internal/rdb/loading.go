package rdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// A Redis that has just started answers LOADING to nearly every command
// until it has read its dataset (RDB or AOF) back into memory: a transient
// state of a server that is up, not an outage. Open and every call wait it
// out, up to LoadingWait, polling every 100 ms to 1 s.

// LoadingWait is the longest Open, or one call, waits for a Redis that
// answers LOADING.
const LoadingWait = 2 * time.Minute

// IsLoading reports whether err is Redis's LOADING reply (it is reading its
// dataset; the command was not run).
func IsLoading(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && re.IsLoading()
}

// loadingError is Open's error for a Redis still loading after LoadingWait.
// It counts as ErrUnreachable (callers that wait for Redis go on waiting)
// but says what is going on.
type loadingError struct {
	addr string
	wait time.Duration
	err  error
}

func (e *loadingError) Error() string {
	return fmt.Sprintf("rdb: connect %s: redis is still loading its dataset after %s: %v", e.addr, e.wait, e.err)
}
func (e *loadingError) Unwrap() error        { return e.err }
func (e *loadingError) Is(target error) bool { return target == ErrUnreachable }

// loadingClient is a rueidis client that sends a command again while Redis
// answers LOADING (such a command did not run, so resending a write is
// safe). Commands are pinned so that rueidis does not recycle them between
// attempts.
type loadingClient struct {
	rueidis.Client
	wait time.Duration
	// onLoading, if set, is called at each LOADING reply (any goroutine);
	// set before the client is shared.
	onLoading func()
}

func (c *loadingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	cmd = cmd.Pin()
	var since time.Time
	for attempt := 0; ; attempt++ {
		res := c.Client.Do(ctx, cmd)
		if !IsLoading(res.Error()) || !c.pause(ctx, attempt, &since) {
			return res
		}
	}
}

func (c *loadingClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for i := range multi {
		multi[i] = multi[i].Pin()
	}
	res := c.Client.DoMulti(ctx, multi...)
	var since time.Time
	for attempt := 0; ; attempt++ {
		var again []int // the commands Redis refused with LOADING
		for i, r := range res {
			if IsLoading(r.Error()) {
				again = append(again, i)
			}
		}
		if len(again) == 0 || !c.pause(ctx, attempt, &since) {
			return res
		}
		cmds := make([]rueidis.Completed, len(again))
		for j, i := range again {
			cmds[j] = multi[i]
		}
		for j, r := range c.Client.DoMulti(ctx, cmds...) {
			res[again[j]] = r
		}
	}
}

// pause waits before the next attempt of a call Redis refused with LOADING
// (since: when the first refusal came); false when the call should give up
// instead: ctx ended, or the server has been loading for c.wait.
func (c *loadingClient) pause(ctx context.Context, attempt int, since *time.Time) bool {
	if c.onLoading != nil {
		c.onLoading()
	}
	if since.IsZero() {
		*since = time.Now()
	}
	if time.Since(*since) >= c.wait {
		return false
	}
	t := time.NewTimer(loadingPoll(attempt))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// loadingPoll is the pause after the attempt-th LOADING reply in a row.
func loadingPoll(attempt int) time.Duration {
	return min(100*time.Millisecond<<min(attempt, 4), time.Second)
}

// newClientLoading is rueidis.NewClient, tried again while the server
// answers LOADING, up to wait.
func newClientLoading(addr string, opt rueidis.ClientOption, wait time.Duration) (rueidis.Client, error) {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		c, err := rueidis.NewClient(opt)
		if !IsLoading(err) {
			return c, err
		}
		if time.Since(start) >= wait {
			return nil, &loadingError{addr: addr, wait: wait, err: err}
		}
		time.Sleep(loadingPoll(attempt)) // no context here: bounded by wait
	}
}
