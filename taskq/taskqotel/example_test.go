package taskqotel_test

import (
	"context"
	"log/slog"

	"github.com/gantryhq/gantry/taskq"
	"github.com/gantryhq/gantry/taskq/taskqotel"
)

// Trace a client and a worker: the worker's spans continue the traces of
// the requests that enqueued the tasks, whatever process they ran in. The
// tracer provider is the global one unless Config names another.
func Example() {
	ctx := context.Background()
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: "127.0.0.1:6379"})
	if err != nil {
		return
	}
	defer c.Close()
	c.Use(taskqotel.EnqueueMiddleware(taskqotel.Config{}))
	c.Enqueue(ctx, taskq.NewTask("export", nil, taskq.Queue("reports")), taskq.Header("request-id", "r-1"))

	w, err := taskq.NewWorker(taskq.WorkerConfig{Redis: "127.0.0.1:6379", Queues: []taskq.QueueSpec{{Name: "reports"}}})
	if err != nil {
		return
	}
	w.Use(taskqotel.Middleware(taskqotel.Config{}))
	w.Use(func(next taskq.HandlerFunc) taskq.HandlerFunc { // your own, inside the span
		return func(ctx context.Context, t *taskq.Task) error {
			slog.InfoContext(ctx, "task", "id", t.ID(), "request", t.Headers["request-id"])
			return next(ctx, t)
		}
	})
	w.Handle("export", func(ctx context.Context, t *taskq.Task) error {
		return t.Progress(ctx, 40, "page 4 of 10")
	})
	go w.Run(ctx)
}
