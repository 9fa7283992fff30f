package rdb

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
)

// Periodic task entries live outside any queue (plain commands only):
//
//	tq:cron       HASH name -> entry (JSON, written by the client)
//	tq:cron:last  ZSET name -> the last tick enqueued (unix ms), raised only
//	              (ZADD GT), so a slow scheduler never moves it back
const (
	CronKey     = "tq:cron"
	CronLastKey = "tq:cron:last"
)

// CronPut stores entry under name; it reports whether name was new.
func (r *RDB) CronPut(ctx context.Context, name, entry string) (bool, error) {
	n, err := r.c.Do(ctx, r.c.B().Hset().Key(CronKey).FieldValue().FieldValue(name, entry).Build()).AsInt64()
	if err != nil {
		return false, fmt.Errorf("rdb: cron put %q: %w", name, err)
	}
	return n == 1, nil
}

// CronDel removes name and its last tick; it reports whether it existed.
func (r *RDB) CronDel(ctx context.Context, name string) (bool, error) {
	res := r.c.DoMulti(ctx, r.c.B().Hdel().Key(CronKey).Field(name).Build(), r.c.B().Zrem().Key(CronLastKey).Member(name).Build())
	n, err := res[0].AsInt64()
	if err != nil {
		return false, fmt.Errorf("rdb: cron remove %q: %w", name, err)
	}
	return n == 1, nil
}

// CronAll returns every entry by name and the last tick of each (unix ms).
func (r *RDB) CronAll(ctx context.Context) (entries map[string]string, last map[string]int64, err error) {
	res := r.c.DoMulti(ctx, r.c.B().Hgetall().Key(CronKey).Build(), r.c.B().Zrange().Key(CronLastKey).Min("0").Max("-1").Withscores().Build())
	if entries, err = res[0].AsStrMap(); err != nil && !rueidis.IsRedisNil(err) {
		return nil, nil, fmt.Errorf("rdb: cron entries: %w", err)
	}
	zs, err := res[1].AsZScores()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, nil, fmt.Errorf("rdb: cron last ticks: %w", err)
	}
	last = make(map[string]int64, len(zs))
	for _, z := range zs {
		last[z.Member] = int64(z.Score)
	}
	return entries, last, nil
}

// CronTicked records tick (unix ms) as name's last, unless a later one is.
func (r *RDB) CronTicked(ctx context.Context, name string, tick int64) error {
	err := r.c.Do(ctx, r.c.B().Zadd().Key(CronLastKey).Gt().ScoreMember().ScoreMember(float64(tick), name).Build()).Error()
	if err != nil {
		return fmt.Errorf("rdb: cron tick %q at %s: %w", name, strconv.FormatInt(tick, 10), err)
	}
	return nil
}
