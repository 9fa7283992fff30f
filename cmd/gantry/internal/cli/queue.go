package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/taskq"
	"github.com/gantryhq/gantry/taskq/taskqotel"
)

func newQueueCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Fair Redis task queue: run workers, enqueue tasks, inspect stats, dead letters and health",
	}
	cmd.AddCommand(newQueueWorkerCmd(env), newQueueEnqueueCmd(), newQueueStatsCmd(), newQueueDLQCmd(), newQueueHealthCmd(), newQueueTasksCmd(),
		newQueueCronCmd(), newQueueWorkflowCmd())
	cmd.AddCommand(newQueuePauseCmds()...)
	cmd.AddCommand(newQueueLimitCmd(), newQueueUICmd(env))
	return cmd
}

const redisFlagHelp = "Redis address: host:port, redis://host:port/db, comma-separated cluster nodes, or redis-sentinel://host:port,host:port/MASTER (Sentinel; follows a failover)"

// parseQueues parses "a,b:3" into queue specs (weight defaults to 1).
func parseQueues(s string) ([]taskq.QueueSpec, error) {
	var out []taskq.QueueSpec
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, w, hasW := strings.Cut(part, ":")
		spec := taskq.QueueSpec{Name: name, Weight: 1}
		if hasW {
			n, err := strconv.Atoi(w)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("--queues: %q: weight %q is not a positive integer", part, w)
			}
			spec.Weight = n
		}
		out = append(out, spec)
	}
	if len(out) == 0 {
		return nil, errors.New("--queues: no queue named (want e.g. a,b:3)")
	}
	return out, nil
}

func newQueueEnqueueCmd() *cobra.Command {
	var o queueEnqueueOptions
	cmd := &cobra.Command{
		Use:   "enqueue --redis URL --queue Q [--tenant T] [--weight W] [--priority P] --type TYPE [--payload JSON] [--count N] [--unique-key K --unique-for D | --debounce D]",
		Short: "Add tasks to a queue",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runQueueEnqueue(cmd, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.redis, "redis", "127.0.0.1:6379", redisFlagHelp)
	f.StringVar(&o.queue, "queue", taskq.DefaultQueue, "queue name")
	f.StringVar(&o.tenant, "tenant", taskq.DefaultTenant, "tenant (fairness key)")
	f.Float64Var(&o.weight, "weight", 0, "tenant weight in the queue (default: keep, 1 for a new tenant)")
	f.IntVar(&o.priority, "priority", 0, "priority inside the tenant, 0..255 (higher first)")
	f.StringVar(&o.typ, "type", "", "task type (required)")
	f.StringVar(&o.payload, "payload", "", "task payload (JSON)")
	f.IntVar(&o.count, "count", 1, "number of identical tasks")
	f.IntVar(&o.waitReplicas, "wait-replicas", 0, "return only once this many replicas have the tasks (Redis WAIT, 1s): a failover cannot lose them; fails if they do not")
	f.IntVar(&o.maxRetries, "max-retries", taskq.DefaultMaxRetries, "retries before the dead-letter set")
	f.DurationVar(&o.timeout, "timeout", 0, "timeout of one attempt (default: the worker's, 30m)")
	f.DurationVar(&o.in, "in", 0, "run after this delay")
	f.DurationVar(&o.retention, "retention", 0, "keep the completed task and its result this long")
	f.StringArrayVar(&o.headers, "header", nil, "a header K=V the handler sees (repeatable)")
	f.StringVar(&o.uniqueKey, "unique-key", "", "with --unique-for: refuse the task while another with this key holds it; with --debounce: the key to debounce on")
	f.DurationVar(&o.uniqueFor, "unique-for", 0, "how long the task holds --unique-key from its enqueue (pending, running or done); a duplicate exits 3 and prints the holder's id")
	f.DurationVar(&o.debounce, "debounce", 0, "run the task this long after the last enqueue with --unique-key, with the last payload (replacing the waiting one)")
	return cmd
}

// queueEnqueueOptions are `gantry queue enqueue`'s flags.
type queueEnqueueOptions struct {
	redis, queue, tenant, typ, payload string
	weight                             float64
	priority, count, maxRetries        int
	waitReplicas                       int
	timeout, in, retention             time.Duration
	uniqueKey                          string
	uniqueFor, debounce                time.Duration
	headers                            []string
}

// closingClient is a client that also flushes its spans on Close.
type closingClient struct {
	*taskq.Client
	flush func()
}

func (c closingClient) Close() { c.flush(); c.Client.Close() }

// tracedClient connects an enqueuing client, traced when OTLP is set up
// (queueTracing).
func tracedClient(ctx context.Context, cfg taskq.ClientConfig) (closingClient, error) {
	c, err := taskq.NewClient(cfg)
	if err != nil {
		return closingClient{}, err
	}
	tcfg, flush, traced, err := queueTracing(ctx, slog.Default(), "gantry-queue-enqueue")
	if err != nil {
		c.Close()
		return closingClient{}, err
	}
	if traced {
		c.Use(taskqotel.EnqueueMiddleware(tcfg))
	}
	return closingClient{c, flush}, nil
}

// options are the enqueue options the flags give.
func (o *queueEnqueueOptions) options() ([]taskq.Option, error) {
	opts := []taskq.Option{taskq.Queue(o.queue), taskq.Tenant(o.tenant), taskq.Weight(o.weight),
		taskq.Priority(o.priority), taskq.MaxRetries(o.maxRetries), taskq.Timeout(o.timeout),
		taskq.ProcessIn(o.in), taskq.Retention(o.retention)}
	for _, h := range o.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("enqueue: --header %q, want K=V", h)
		}
		opts = append(opts, taskq.Header(k, v))
	}
	uopt, err := o.uniqueOption()
	if err != nil {
		return nil, err
	}
	if uopt != nil {
		opts = append(opts, uopt)
	}
	return opts, nil
}

// runQueueEnqueue checks the flags and enqueues --count tasks (in batches
// of 5000), printing the id of a single task or the rate of many.
func runQueueEnqueue(cmd *cobra.Command, o *queueEnqueueOptions) error {
	if o.typ == "" {
		return errors.New("enqueue: --type is required (e.g. noop, sleep, fail, sort)")
	}
	if o.count < 1 {
		return fmt.Errorf("enqueue: --count %d, want >= 1", o.count)
	}
	var body []byte
	if o.payload != "" {
		if !json.Valid([]byte(o.payload)) {
			return fmt.Errorf("enqueue: --payload is not valid JSON: %s", o.payload)
		}
		body = []byte(o.payload)
	}
	opts, err := o.options()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	c, err := tracedClient(ctx, taskq.ClientConfig{Redis: o.redis, WaitReplicas: o.waitReplicas})
	if err != nil {
		return err
	}
	defer c.Close()
	start := time.Now()
	if o.count == 1 {
		info, err := c.Enqueue(ctx, taskq.NewTask(o.typ, body), opts...)
		var dup *taskq.DuplicateError
		if errors.As(err, &dup) {
			fmt.Fprintln(cmd.OutOrStdout(), dup.ID)
			return withCode(3, fmt.Errorf("enqueue: duplicate: %w", err))
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), info.ID)
		if info.Replaced != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "debounced: replaced task %s\n", info.Replaced)
		}
		return nil
	}
	const chunk = 5000
	for done := 0; done < o.count; {
		n := min(chunk, o.count-done)
		tasks := make([]*taskq.Task, n)
		for i := range tasks {
			tasks[i] = taskq.NewTask(o.typ, body)
		}
		if _, err := c.EnqueueBatch(ctx, tasks, opts...); err != nil {
			return fmt.Errorf("enqueue: after %d of %d tasks: %w", done, o.count, err)
		}
		done += n
	}
	el := time.Since(start)
	fmt.Fprintf(cmd.OutOrStdout(), "enqueued %d %s tasks into %s (tenant %s) in %s (%.0f tasks/s)\n",
		o.count, o.typ, o.queue, o.tenant, el.Round(time.Millisecond), float64(o.count)/el.Seconds())
	return nil
}

// uniqueOption is the Unique or Debounce option of the flags (nil: none).
func (o *queueEnqueueOptions) uniqueOption() (taskq.Option, error) {
	switch {
	case o.uniqueKey == "" && (o.uniqueFor != 0 || o.debounce != 0):
		return nil, errors.New("enqueue: --unique-for and --debounce need --unique-key")
	case o.uniqueKey == "":
		return nil, nil
	case o.count != 1:
		return nil, errors.New("enqueue: --unique-key takes one task (--count 1)")
	case o.uniqueFor < 0 || o.debounce < 0:
		return nil, fmt.Errorf("enqueue: --unique-for %s, --debounce %s: want a positive duration", o.uniqueFor, o.debounce)
	case o.uniqueFor > 0 && o.debounce > 0:
		return nil, errors.New("enqueue: --unique-for and --debounce exclude each other: a unique key refuses a duplicate, a debounced one replaces the waiting task")
	case o.uniqueFor == 0 && o.debounce == 0:
		return nil, errors.New("enqueue: --unique-key needs one of --unique-for D or --debounce D")
	case o.debounce > 0 && o.in > 0:
		return nil, errors.New("enqueue: --debounce sets the delay; drop --in")
	case o.debounce > 0:
		return taskq.Debounce(o.uniqueKey, o.debounce), nil
	}
	return taskq.Unique(o.uniqueKey, o.uniqueFor), nil
}

func newQueueStatsCmd() *cobra.Command {
	var o queueStatsOptions
	cmd := &cobra.Command{
		Use:   "stats --redis URL [--json] [--watch]",
		Short: "Print every queue's sizes, counters and tenants",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runQueueStats(cmd, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.redis, "redis", "127.0.0.1:6379", redisFlagHelp)
	f.BoolVar(&o.asJSON, "json", false, "print one JSON object (per refresh with --watch)")
	f.BoolVar(&o.watch, "watch", false, "refresh every second until Ctrl-C")
	return cmd
}

// queueStatsOptions are `gantry queue stats`'s flags.
type queueStatsOptions struct {
	redis         string
	asJSON, watch bool
}

// runQueueStats prints the stats once, or every second until the
// command's context ends with --watch.
func runQueueStats(cmd *cobra.Command, o *queueStatsOptions) error {
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: o.redis})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := cmd.Context()
	for {
		st, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		if err := writeStats(cmd.OutOrStdout(), st, o); err != nil {
			return err
		}
		if !o.watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// writeStats prints one refresh: a JSON object, or the table (under a
// time line with --watch).
func writeStats(w io.Writer, st *taskq.Stats, o *queueStatsOptions) error {
	if o.asJSON {
		return json.NewEncoder(w).Encode(st)
	}
	if o.watch {
		fmt.Fprintf(w, "--- %s\n", time.Now().Format(time.TimeOnly))
	}
	printStats(w, st)
	return nil
}

func printStats(w io.Writer, st *taskq.Stats) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "queue\tpending\tactive\tscheduled\tretry\tdead\tcompleted\tprocessed\tfailed\tduplicates\t")
	names := make([]string, 0, len(st.Queues))
	for q := range st.Queues {
		names = append(names, q)
	}
	sort.Strings(names)
	for _, q := range names {
		s := st.Queues[q]
		fmt.Fprintf(tw, "%s%s%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", q, pausedNote(s.PausedUntil), limitNote(s.Limit), s.Pending, s.Active, s.Scheduled, s.Retry, s.Dead,
			s.Completed, s.ProcessedTotal, s.FailedTotal, s.DuplicatesTotal)
		printTenants(tw, s)
	}
	tw.Flush()
	for _, wr := range st.Workers {
		fmt.Fprintf(w, "worker %s: %s, queues %s, active %d, processed %d, failed %d, steals %d, %s (its record, %s old)\n",
			wr.ID, wr.State, strings.Join(wr.Queues, ","), wr.Active, wr.Processed, wr.Failed, wr.Steals, workerRate(wr),
			time.Since(wr.Heartbeat).Round(time.Second))
	}
}

// printTenants prints a queue's tenants and the inner nodes of its tenant
// tree (path prefixes, "node acme/web"), each node before the tenants below
// it.
func printTenants(tw io.Writer, s taskq.QueueStats) {
	rows := map[string]string{}
	for t, ts := range s.Tenants {
		rows[t] = fmt.Sprintf("  tenant %s (w=%g)%s%s\t%d\t%d\t\t\t\t%d\t\t\t\t\n", t, ts.Weight, pausedNote(ts.PausedUntil), limitNote(ts.Limit), ts.Pending, ts.Active, ts.Completed)
	}
	for n, ns := range s.Tree {
		// "acme/" sorts before "acme/web/bob" and after a flat tenant "acme".
		rows[n+"/"] = fmt.Sprintf("  node %s (w=%g, %d tenants)%s\t%d\t%d\t\t\t\t%d\t\t\t\t\n", n, ns.Weight, ns.Tenants, limitNote(ns.Limit), ns.Pending, ns.Active, ns.Completed)
	}
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprint(tw, rows[k])
	}
}

// workerRate is a worker's rate over its last adaptive window (5 s by
// default), or says there is none yet.
func workerRate(wr taskq.WorkerRecord) string {
	if wr.WindowEnd.IsZero() {
		return "rate: no window closed yet"
	}
	return fmt.Sprintf("%.0f tasks/s over its last window", wr.RatePerSec)
}

// limitNote shows a queue's or tenant's limit in the stats table.
func limitNote(l *taskq.LimitInfo) string {
	if l == nil {
		return ""
	}
	lim := l.Limit
	lim.Weight = 0 // shown as w=
	d := describeLimit(lim)
	if d == "" {
		return ""
	}
	if !l.ThrottledUntil.IsZero() {
		d += ", throttled"
	}
	return " [" + d + "]"
}

// pausedNote marks a paused queue or tenant in the stats table.
func pausedNote(until time.Time) string {
	switch {
	case until.IsZero():
		return ""
	case until.Equal(taskq.Indefinitely):
		return " [paused]"
	}
	return " [paused until " + until.Format(time.TimeOnly) + "]"
}

func newQueueDLQCmd() *cobra.Command {
	var o queueDLQOptions
	cmd := &cobra.Command{Use: "dlq", Short: "List, requeue or delete dead-letter tasks of a queue"}
	for _, op := range []struct{ name, short string }{
		{"list", "List dead tasks with their reason and last error"},
		{"requeue", "Put dead tasks back (all, or those given with --id) with a fresh retry budget"},
		{"delete", "Delete dead tasks (all, or those given with --id)"},
	} {
		sub := &cobra.Command{Use: op.name + " --redis URL --queue Q", Short: op.short, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return runQueueDLQ(cmd, op.name, &o) }}
		f := sub.Flags()
		f.StringVar(&o.redis, "redis", "127.0.0.1:6379", redisFlagHelp)
		f.StringVar(&o.queue, "queue", "", "queue name (required)")
		if op.name == "list" {
			f.IntVar(&o.limit, "limit", 100, "list at most this many")
			f.BoolVar(&o.asJSON, "json", false, "print JSON")
		} else {
			f.StringSliceVar(&o.ids, "id", nil, "task ids (default: all dead tasks of the queue)")
		}
		cmd.AddCommand(sub)
	}
	return cmd
}

// queueDLQOptions are the flags of `gantry queue dlq list|requeue|delete`.
type queueDLQOptions struct {
	redis, queue string
	ids          []string
	limit        int
	asJSON       bool
}

// runQueueDLQ runs dead-letter operation op ("list", "requeue", "delete").
func runQueueDLQ(cmd *cobra.Command, op string, o *queueDLQOptions) error {
	if o.queue == "" {
		return errors.New("dlq: --queue is required")
	}
	slices.Sort(o.ids)
	o.ids = slices.Compact(o.ids) // an id given twice is one task
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: o.redis})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	switch op {
	case "list":
		return listDead(cmd, c, o)
	case "requeue":
		n, err := c.RequeueDead(ctx, o.queue, o.ids...)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "requeued %d task(s) in %s\n", n, o.queue)
		return deadMissing(o, n)
	case "delete":
		n, err := c.DeleteDead(ctx, o.queue, o.ids...)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "deleted %d task(s) from %s\n", n, o.queue)
		return deadMissing(o, n)
	}
	return nil
}

// deadMissing is the error of a requeue or delete of named dead tasks that
// found fewer than named (exit 1, as tasks get/cancel/delete do for an
// unknown id); without --id, any number is all there was.
func deadMissing(o *queueDLQOptions, n int) error {
	if len(o.ids) == 0 || n >= len(o.ids) {
		return nil
	}
	return fmt.Errorf("dlq: %d of the %d --id given are not dead tasks of %s", len(o.ids)-n, len(o.ids), o.queue)
}

// listDead prints the dead tasks of o.queue, one line each or as JSON.
func listDead(cmd *cobra.Command, c *taskq.Client, o *queueDLQOptions) error {
	dead, err := c.DeadLetters(cmd.Context(), o.queue, o.limit)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if o.asJSON {
		return json.NewEncoder(out).Encode(dead)
	}
	for _, d := range dead {
		fmt.Fprintf(out, "%s  %s  type=%s tenant=%s  reason=%q  last_error=%q\n",
			d.ID, d.DiedAt.Format(time.RFC3339), d.Type, d.Tenant, d.Reason, d.LastError)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%d dead task(s) listed in %s\n", len(dead), o.queue)
	return nil
}

func newQueueHealthCmd() *cobra.Command {
	var (
		redis  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "health --redis URL [--json]",
		Short: "Print OK, Warning or Critical with the reasons; exit 2 when Critical",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runQueueHealth(cmd, redis, asJSON) },
	}
	f := cmd.Flags()
	f.StringVar(&redis, "redis", "127.0.0.1:6379", redisFlagHelp)
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// runQueueHealth prints the verdict; Critical (Redis unreachable included)
// exits 2.
func runQueueHealth(cmd *cobra.Command, redis string, asJSON bool) error {
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: redis})
	if err != nil {
		h := taskq.Health{Status: taskq.Critical, Reasons: []string{"Critical: redis unreachable: " + err.Error()}}
		printHealth(cmd.OutOrStdout(), h, asJSON)
		return withCode(2, errors.New(""))
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
	defer cancel()
	h := c.Health(ctx, taskq.HealthConfig{})
	printHealth(cmd.OutOrStdout(), h, asJSON)
	if h.Status == taskq.Critical {
		return withCode(2, errors.New(""))
	}
	return nil
}

func printHealth(w io.Writer, h taskq.Health, asJSON bool) {
	if asJSON {
		json.NewEncoder(w).Encode(h)
		return
	}
	fmt.Fprintln(w, h.Status)
	for _, r := range h.Reasons {
		fmt.Fprintln(w, "  "+r)
	}
}
