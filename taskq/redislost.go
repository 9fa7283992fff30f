package taskq

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrRedisLost is wrapped by the error Run returns when Redis stayed
// unreachable for WorkerConfig.RedisLostAfter.
var ErrRedisLost = errors.New("taskq: redis lost")

// RedisLostError is Run's error when the worker gave up on Redis.
type RedisLostError struct {
	Addr string
	For  time.Duration // how long it had been unreachable
}

func (e *RedisLostError) Error() string {
	return fmt.Sprintf("taskq: redis at %s unreachable for %s (RedisLostAfter): worker stopped; its running tasks run again elsewhere once their leases lapse", e.Addr, e.For.Round(time.Second))
}

// Unwrap makes errors.Is(err, ErrRedisLost) and ErrRedisUnreachable hold.
func (e *RedisLostError) Unwrap() []error { return []error{ErrRedisLost, ErrRedisUnreachable} }

// watchRedis gives up on Redis (calls giveUp) once it has been unreachable
// for RedisLostAfter (never when that is negative); it returns when ctx
// ends.
func (w *Worker) watchRedis(ctx context.Context, giveUp func()) {
	after := w.cfg.RedisLostAfter
	if after <= 0 {
		return
	}
	tickLoop(ctx, w.clk, min(time.Second, max(after/4, time.Millisecond)), func() bool {
		d := w.health.downFor(w.clk.Now())
		if d < after {
			return true
		}
		w.lost.Store(&RedisLostError{Addr: w.cfg.Redis, For: d})
		w.log.Error("taskq: giving up on redis", "addr", w.cfg.Redis, "unreachable_for", d.Round(time.Millisecond), "redis_lost_after", after)
		giveUp()
		return false
	})
}

// lostErr is the *RedisLostError if the worker gave up on Redis, else nil.
func (w *Worker) lostErr() error {
	if e := w.lost.Load(); e != nil {
		return e
	}
	return nil
}
