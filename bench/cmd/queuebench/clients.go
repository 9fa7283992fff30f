package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// dequeueShaped is a 5-call script shaped like a dequeue (pop, hash write,
// lease add, counter, read), the cost that dominates a queue's Redis load.
const dequeueShaped = `
redis.call('LPUSH', KEYS[1], ARGV[1])
local v = redis.call('RPOP', KEYS[1])
redis.call('HSET', KEYS[2], v, ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[1], v)
redis.call('HINCRBY', KEYS[4], 'n', 1)
return redis.call('HGET', KEYS[2], v)`

// clientBench runs the script from P goroutines for a fixed time with each
// client and prints calls/s: this is how the Redis client was chosen.
func clientBench(addr string) {
	ctx := context.Background()
	keys := []string{"cb:{x}:l", "cb:{x}:h", "cb:{x}:z", "cb:{x}:s"}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	rs := rueidis.NewLuaScript(dequeueShaped)
	gc := goredis.NewClient(&goredis.Options{Addr: addr})
	defer gc.Close()
	gs := goredis.NewScript(dequeueShaped)
	for _, p := range []int{1, 8, 64} {
		r := measure(p, func() error { return rs.Exec(ctx, rc, keys, []string{"1"}).Error() })
		g := measure(p, func() error { return gs.Run(ctx, gc, keys, "1").Err() })
		fmt.Printf("CLIENT dequeue-shaped EVALSHA, parallelism %2d: rueidis %8.0f calls/s   go-redis %8.0f calls/s   ratio %.2fx\n", p, r, g, r/g)
	}
}

func measure(p int, call func() error) float64 {
	const d = 2 * time.Second
	var n atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for range p {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if err := call(); err != nil {
					log.Fatal(err)
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / d.Seconds()
}
