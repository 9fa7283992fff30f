package taskqotel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq"
	"github.com/gantryhq/gantry/taskq/taskqotel"
)

// span is what the worker process reports of each span it ended.
type span struct {
	Name, Kind        string
	Trace, ID, Parent string
	Attrs             map[string]string
	Status            string
}

func record(spans tracetest.SpanStubs) []span {
	var out []span
	for _, s := range spans {
		sp := span{Name: s.Name, Kind: s.SpanKind.String(), Trace: s.SpanContext.TraceID().String(),
			ID: s.SpanContext.SpanID().String(), Parent: s.Parent.SpanID().String(), Attrs: map[string]string{},
			Status: s.Status.Code.String()}
		for _, a := range s.Attributes {
			sp.Attrs[string(a.Key)] = a.Value.String()
		}
		out = append(out, sp)
	}
	return out
}

// TestMain runs the worker half of TestTraceCrossesProcesses when started
// by it as a child process.
func TestMain(m *testing.M) {
	if os.Getenv("TASKQOTEL_REDIS") != "" {
		if err := workerProcessMain(); err != nil {
			fmt.Fprintln(os.Stderr, "worker process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// workerProcessMain serves TASKQOTEL_QUEUE with the tracing middleware until
// two tasks ran, then writes the spans its in-memory exporter holds to
// TASKQOTEL_SPANS.
func workerProcessMain() error {
	addr, out := os.Getenv("TASKQOTEL_REDIS"), os.Getenv("TASKQOTEL_SPANS")
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	w, err := taskq.NewWorker(taskq.WorkerConfig{Redis: addr, Queues: []taskq.QueueSpec{{Name: os.Getenv("TASKQOTEL_QUEUE")}}, DisableSteal: true})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	handled := 0
	// Outermost: count the tasks whose spans have ended.
	w.Use(func(next taskq.HandlerFunc) taskq.HandlerFunc {
		return func(ctx context.Context, task *taskq.Task) error {
			err := next(ctx, task)
			mu.Lock()
			if handled++; handled == 2 {
				cancel()
			}
			mu.Unlock()
			return err
		}
	})
	w.Use(taskqotel.Middleware(taskqotel.Config{TracerProvider: tp}))
	w.Handle("work", func(ctx context.Context, task *taskq.Task) error {
		if string(task.Payload) == "fail" {
			return fmt.Errorf("boom: %w", taskq.SkipRetry)
		}
		// The handler's own span is a child of the process span.
		_, s := tp.Tracer("handler").Start(ctx, "inside")
		s.End()
		return nil
	})
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if handled != 2 {
		return fmt.Errorf("%d tasks handled in 30 s, want 2", handled)
	}
	b, _ := json.Marshal(record(exp.GetSpans()))
	return os.WriteFile(out, b, 0o600)
}

// One trace links an enqueue in this process to the processing in another:
// the worker's "process" span is the child of the client's "send" span,
// which is the child of the caller's span; the handler's ctx carries it.
func TestTraceCrossesProcesses(t *testing.T) {
	addr := testutil.Redis(t)
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	c.Use(taskqotel.EnqueueMiddleware(taskqotel.Config{TracerProvider: tp}))
	q := fmt.Sprintf("traced-%d", os.Getpid())
	ctx, req := tp.Tracer("test").Start(t.Context(), "request")
	task := taskq.NewTask("work", []byte("ok"), taskq.Queue(q), taskq.Tenant("acme"))
	info, err := c.Enqueue(ctx, task, taskq.Header("request-id", "r-42"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueBatch(ctx, []*taskq.Task{taskq.NewTask("work", []byte("fail"), taskq.Queue(q))}); err != nil {
		t.Fatal(err)
	}
	if len(task.Headers) != 0 {
		t.Errorf("the caller's task was modified: %v", task.Headers)
	}
	req.End()

	spansFile := filepath.Join(t.TempDir(), "spans.json")
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), "TASKQOTEL_REDIS="+addr, "TASKQOTEL_SPANS="+spansFile, "TASKQOTEL_QUEUE="+q)
	outb, err := child.CombinedOutput()
	if err != nil {
		t.Fatalf("worker process: %v\n%s", err, outb)
	}
	var worker []span
	b, err := os.ReadFile(spansFile)
	if err != nil || json.Unmarshal(b, &worker) != nil {
		t.Fatalf("worker spans: %v\n%s", err, outb)
	}
	local := record(exp.GetSpans())
	byName := func(ss []span, name string) span {
		for _, s := range ss {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no span %q in %+v", name, ss)
		return span{}
	}
	request, send := byName(local, "request"), byName(local, "send "+q)
	inside := byName(worker, "inside")
	var process, failed span
	for _, s := range worker {
		switch {
		case s.Name == "process "+q && s.Status == "Error":
			failed = s
		case s.Name == "process "+q:
			process = s
		}
	}
	if failed.ID == "" || failed.Attrs["error.type"] == "" {
		t.Errorf("no failed process span with an error.type in %+v", worker)
	}
	if n := len(local); n != 3 {
		t.Errorf("%d spans in the enqueuing process, want request and two sends (one from the batch): %+v", n, local)
	}
	if send.Parent != request.ID || send.Trace != request.Trace || send.Kind != trace.SpanKindProducer.String() {
		t.Errorf("send span %+v is not the producer child of %+v", send, request)
	}
	if process.Trace != send.Trace || process.Parent != send.ID || process.Kind != trace.SpanKindConsumer.String() {
		t.Errorf("process span %+v (in the worker process) does not continue send %+v", process, send)
	}
	if inside.Parent != process.ID {
		t.Errorf("the handler's ctx does not carry the process span: %+v", inside)
	}
	for k, want := range map[string]string{"messaging.system": "taskq", "messaging.destination.name": q,
		"messaging.operation.type": "process", "messaging.message.id": info.ID, "taskq.tenant": "acme"} {
		if process.Attrs[k] != want {
			t.Errorf("process span %s = %q, want %q", k, process.Attrs[k], want)
		}
	}
	if send.Attrs["messaging.operation.type"] != "send" || send.Attrs["messaging.message.id"] != info.ID {
		t.Errorf("send span attributes %v", send.Attrs)
	}
}
