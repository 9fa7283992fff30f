package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq"
)

// With OTEL_EXPORTER_OTLP_ENDPOINT set, `queue enqueue` and `queue worker`
// send their spans over OTLP/HTTP and the worker's "process" span continues
// the trace of the enqueue's "send" span.
func TestQueueCommandsExportTraces(t *testing.T) {
	var mu sync.Mutex
	spans := map[string]*tracepb.Span{} // by name
	services := map[string]bool{}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					services[a.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans[s.Name] = s
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(b)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)

	addr := testutil.Redis(t)
	q := fmt.Sprintf("clitrace-%d", os.Getpid())
	t.Cleanup(func() {
		if c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr}); err == nil {
			c.Purge(context.WithoutCancel(t.Context()), q)
			c.Close()
		}
	})
	var out bytes.Buffer
	if code := Execute(t.Context(), Env{Args: []string{"queue", "enqueue", "--redis", addr, "--queue", q, "--type", "noop"}, Stdout: &out, Stderr: &out}); code != 0 {
		t.Fatalf("enqueue: %d %s", code, out.String())
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int)
	go func() {
		var wout bytes.Buffer
		done <- Execute(ctx, Env{Args: []string{"queue", "worker", "--redis", addr, "--queues", q, "--no-steal", "--no-cron"}, Stdout: &wout, Stderr: &wout})
	}()
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testutil.WaitFor(t, 10*time.Second, "the task done", func() (bool, string) {
		st, err := c.Stats(t.Context())
		return err == nil && st.Queues[q].Completed == 1, fmt.Sprint(err)
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("worker exited %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	send, process := spans["send "+q], spans["process "+q]
	if send == nil || process == nil {
		t.Fatalf("the collector got %d spans, want send %s and process %s", len(spans), q, q)
	}
	if !bytes.Equal(process.TraceId, send.TraceId) || !bytes.Equal(process.ParentSpanId, send.SpanId) {
		t.Errorf("process span (trace %s, parent %s) does not continue send (trace %s, span %s)",
			hex.EncodeToString(process.TraceId), hex.EncodeToString(process.ParentSpanId), hex.EncodeToString(send.TraceId), hex.EncodeToString(send.SpanId))
	}
	if !services["gantry-queue-enqueue"] || !services["gantry-queue-worker"] {
		t.Errorf("services %v", services)
	}
}
