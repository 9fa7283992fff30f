package main

import (
	"context"
	"fmt"
	"log"
	"sort"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
	goredis "github.com/redis/go-redis/v9"
)

// memoryBench enqueues n no-op tasks (pending, nothing running) with each
// of taskq and asynq on the same redis-server, FLUSHALL before each, runs
// times, and prints the used_memory delta per task of each, the ratio, and
// (taskq) how its keys share it (MEMORY USAGE of every key it wrote).
func memoryBench(addr string, n, runs int) {
	ctx := context.Background()
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rc.Close()
	var tq, aq []float64
	for i := range runs {
		t, _, keys := measureMemory(ctx, rc, n, func() { enqueueTaskq(ctx, addr, n) })
		a, akeys, _ := measureMemory(ctx, rc, n, func() { enqueueAsynq(addr, n) })
		tq, aq = append(tq, t), append(aq, a)
		fmt.Printf("memory run %d: taskq %6.1f bytes/task   asynq %6.1f bytes/task   ratio taskq/asynq %.2f   (asynq: %d keys)\n", i+1, t, a, t/a, akeys)
		for _, k := range keys {
			fmt.Printf("  taskq key %-28q MEMORY USAGE %6.1f bytes/task\n", k.name, float64(k.bytes)/float64(n))
		}
	}
	mt, ma := median(tq), median(aq)
	fmt.Printf("MEMORY median of %d runs, %d pending no-op tasks: taskq %.1f bytes/task, asynq %.1f bytes/task, ratio taskq/asynq %.2f\n", runs, n, mt, ma, mt/ma)
}

type keyUsage struct {
	name  string
	bytes int64
}

// measureMemory flushes the server, runs enqueue, and returns the
// used_memory delta per task, how many keys the enqueue wrote and, when at
// most 100, the MEMORY USAGE of the 4 largest.
func measureMemory(ctx context.Context, rc *goredis.Client, n int, enqueue func()) (float64, int, []keyUsage) {
	if err := rc.FlushAll(ctx).Err(); err != nil {
		log.Fatal(err)
	}
	before := usedMemory(ctx, rc)
	enqueue()
	after := usedMemory(ctx, rc)
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		log.Fatal(err)
	}
	var out []keyUsage
	for _, k := range keys {
		if len(keys) > 100 {
			break
		}
		b, err := rc.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			log.Fatal(err)
		}
		out = append(out, keyUsage{k, b})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].bytes > out[j].bytes })
	return float64(after-before) / float64(n), len(keys), out[:min(len(out), 4)]
}

func usedMemory(ctx context.Context, rc *goredis.Client) int64 {
	info, err := rc.Info(ctx, "memory").Result()
	if err != nil {
		log.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			b, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				log.Fatal(err)
			}
			return b
		}
	}
	log.Fatal("INFO memory has no used_memory")
	return 0
}

func enqueueTaskq(ctx context.Context, addr string, n int) {
	c := newClient(addr)
	defer c.Close()
	enqueueNoops(ctx, c, n)
}

func enqueueAsynq(addr string, n int) {
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
	defer c.Close()
	for range n {
		if _, err := c.Enqueue(asynq.NewTask("noop", nil)); err != nil {
			log.Fatal(err)
		}
	}
}
