package rdb

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// Replication is asynchronous in Redis: a write the master acknowledged
// may not have reached any replica when the master dies, and a failover
// then loses it. WaitReplicas makes the calls that add tasks (enqueue,
// unique, group and workflow enqueues) send WAIT after their script on the
// same connection, and report ErrNotReplicated unless enough replicas
// acknowledged the write in time.

// ErrNotReplicated is returned by an enqueue that Redis applied but fewer
// replicas than WaitReplicas asked for acknowledged in time: the task may
// still be lost if the master fails now (or it may run: enqueue it again
// only if a duplicate is acceptable).
var ErrNotReplicated = errors.New("not acknowledged by enough replicas")

// WaitReplicas makes every enqueue wait until n replicas have it (Redis
// WAIT), up to timeout each; n = 0 turns it off. Not on a cluster. Call it
// before the RDB is shared.
func (r *RDB) WaitReplicas(n int, timeout time.Duration) error {
	if n > 0 && r.cluster {
		return errors.New("rdb: waiting for replicas is not supported on a Redis Cluster")
	}
	r.replicas, r.replicaWait = n, timeout
	return nil
}

// replicated runs s with keys and args and, when WaitReplicas asked for it,
// WAIT right after on the same connection (a pipeline of two commands on a
// dedicated connection: WAIT counts the writes of its own connection).
func (r *RDB) replicated(ctx context.Context, s *rueidis.Lua, keys, args []string) rueidis.RedisResult {
	if r.replicas <= 0 {
		return s.Exec(ctx, r.c, keys, args)
	}
	src := sources[s]
	sum := sha1.Sum([]byte(src))
	b := r.c.B()
	evalsha := b.Evalsha().Sha1(hex.EncodeToString(sum[:])).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	res := r.c.DoMulti(ctx, evalsha, r.waitCmd())
	if re, ok := rueidis.IsRedisErr(res[0].Error()); ok && re.IsNoScript() {
		eval := b.Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		res = r.c.DoMulti(ctx, eval, r.waitCmd())
	}
	if res[0].Error() != nil {
		return res[0]
	}
	acked, err := res[1].AsInt64()
	if err != nil {
		return rueidis.NewErrorResult(fmt.Errorf("WAIT: %w", err))
	}
	if int(acked) < r.replicas {
		return rueidis.NewErrorResult(fmt.Errorf("%w: %d of %d replicas within %s", ErrNotReplicated, acked, r.replicas, r.replicaWait))
	}
	return res[0]
}

func (r *RDB) waitCmd() rueidis.Completed {
	return r.c.B().Wait().Numreplicas(int64(r.replicas)).Timeout(max(r.replicaWait.Milliseconds(), 1)).Build()
}
