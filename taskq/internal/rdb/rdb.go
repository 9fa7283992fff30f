// Package rdb is the only part of taskq that knows Redis: key names, the
// embedded Lua scripts (one file per operation under lua/, each headed by its
// KEYS, ARGV and guarantees) and the calls that run them.
//
// Every key of a queue carries the hash tag {queue}, and every script gets
// all the keys it touches in KEYS, so a queue lives on one Redis Cluster slot
// and works behind proxies that check keys. On a single node, one dequeue
// call covers all queues a worker serves; on a cluster the queues sit on
// different slots and are tried one call per queue, in the same order.
//
// The files: rdb.go (this one) keys, Open and the worker's calls but the
// two hot ones, in dequeue.go (Dequeue and Ack); addr.go
// the address forms Open reads (host:port, cluster seeds, redis:// URLs,
// redis-sentinel://); replicas.go enqueues that wait for replicas (WAIT);
// inspect.go listing, looking up, cancelling and deleting single tasks;
// cron.go the cron entries; loading.go waiting out a Redis that answers
// LOADING; stored.go the layout of a task's stored value (its member's
// head, then its message).
package rdb

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

//go:embed lua/*.lua
var luaFS embed.FS

// NKeys is the number of keys of one queue passed to every script.
const NKeys = 21

// QueuesKey is the set of known queue names (outside any queue's slot; it is
// only touched by plain commands, never inside a script).
const QueuesKey = "tq:queues"

// WorkersKey is the hash of worker records (id -> JSON).
const WorkersKey = "tq:workers"

// QueueKeys returns the keys of queue q in the order the scripts expect.
func QueueKeys(q string) []string {
	p := "tq:{" + q + "}:"
	return []string{
		p + "pending", p + "tenants", p + "state", p + "tasks", p + "active", p + "lease",
		p + "scheduled", p + "retry", p + "dead", p + "completed", p + "results", p + "wake", p + "cancelled",
		p + "uniq", p + "uniqexp", p + "limits", p + "throttled", p + "groups",
		p + "workflows", p + "tree", p + "extras",
	}
}

// Key indexes into QueueKeys.
const (
	KPending = iota
	KTenants
	KState
	KTasks
	KActive
	KLease
	KScheduled
	KRetry
	KDead
	KCompleted
	KResults
	KWake
	KCancelled
	KUniq
	KUniqExp
	KLimits
	KThrottled
	KGroups
	KWorkflows
	KTree
	KExtras
)

func script(name string) *rueidis.Lua {
	lib, err := luaFS.ReadFile("lua/lib.lua")
	if err != nil {
		panic(err)
	}
	op, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	src := string(lib) + "\n" + string(op)
	l := rueidis.NewLuaScript(src)
	sources[l] = src
	return l
}

// sources holds each script's source, for the calls that send it
// themselves (replicated).
var sources = map[*rueidis.Lua]string{}

var (
	enqueueScript  = script("enqueue")
	uniqueScript   = script("unique")
	dequeueScript  = script("dequeue")
	ackScript      = script("ack")
	failScript     = script("fail")
	requeueScript  = script("requeue")
	extendScript   = script("extend")
	maintainScript = script("maintain")
	dlqScript      = script("dlq")
	pauseScript    = script("pause")
	cancelScript   = script("cancel")
	taskopScript   = script("taskop")
	limitScript    = script("limit")
	progressScript = script("progress")
	workflowScript = script("workflow")
	groupScript    = script("group")
	trackScript    = script("track")
)

// RDB wraps a Redis client (single node, cluster or Sentinel).
type RDB struct {
	c       rueidis.Client
	cluster bool
	// replicas and replicaWait: enqueues wait until this many replicas
	// have them, up to replicaWait (WaitReplicas; 0: they do not wait).
	replicas    int
	replicaWait time.Duration
}

// ErrUnreachable wraps a failure of Open's first connection (refused,
// timed out, no route, a failed handshake): an outage, as opposed to an
// address that does not parse.
var ErrUnreachable = errors.New("redis unreachable")

// Open connects to addr: "host:port", "redis://host:port/db", several
// comma-separated "host:port" seeds of a cluster, or
// "redis-sentinel://host:port,host:port/MASTER" (the sentinels watching
// master set MASTER; the client follows the master they name across a
// failover). A Redis that answers LOADING (it is reading its dataset after
// a start) is waited for, by Open and by every call, up to LoadingWait.
func Open(addr string) (*RDB, error) {
	opt, err := parseAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("rdb: redis address %q: %w", addr, err)
	}
	opt.DisableCache = true
	opt.Dialer.Timeout = 2 * time.Second
	opt.ConnWriteTimeout = 5 * time.Second
	if opt.Sentinel.MasterSet != "" {
		opt.Sentinel.Dialer.Timeout = 2 * time.Second
		opt.Sentinel.TopologyRefreshInterval = SentinelRefresh
	}
	c, err := newClientLoading(addr, opt, LoadingWait)
	var le *loadingError
	if errors.As(err, &le) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("rdb: connect %s: %w: %w", addr, ErrUnreachable, err)
	}
	return &RDB{c: &loadingClient{Client: c, wait: LoadingWait}, cluster: c.Mode() == rueidis.ClientModeCluster}, nil
}

// OnLoading sets a function called each time Redis answers LOADING (any
// goroutine); call it before the RDB is shared.
func (r *RDB) OnLoading(f func()) { r.c.(*loadingClient).onLoading = f }

// Close closes the connections.
func (r *RDB) Close() { r.c.Close() }

// Cluster reports whether the server is a Redis Cluster.
func (r *RDB) Cluster() bool { return r.cluster }

// Client exposes the raw client to tests of this module.
func (r *RDB) Client() rueidis.Client { return r.c }

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// msOrZero is ms(t), or "0" for the zero time (the scripts' "none").
func msOrZero(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return ms(t)
}

// Ping checks that Redis answers.
func (r *RDB) Ping(ctx context.Context) error {
	return r.c.Do(ctx, r.c.B().Ping().Build()).Error()
}

// EnqMsg is one task to add.
type EnqMsg struct {
	ID, Msg, Tenant string
	Weight          float64 // 0 = leave the tenant's weight as is (default 1)
	Priority        int     // 0..255, higher first
	Due             time.Time
}

// Enqueue adds tasks to queue q in one script call; it does not register q
// (RegisterQueues does).
func (r *RDB) Enqueue(ctx context.Context, q string, now time.Time, msgs []EnqMsg) (int, error) {
	args := make([]string, 0, 1+6*len(msgs))
	args = append(args, ms(now))
	for _, m := range msgs {
		due := msOrZero(m.Due)
		args = append(args, m.ID, m.Msg, m.Tenant, strconv.FormatFloat(m.Weight, 'g', -1, 64),
			fmt.Sprintf("%02x", 255-m.Priority), due)
	}
	n, err := r.replicated(ctx, enqueueScript, QueueKeys(q), args).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("rdb: enqueue into %q: %w", q, err)
	}
	return int(n), nil
}

// WfNode is one node of a workflow for EnqueueWorkflow: its task and the
// DAG's edges around it.
type WfNode struct {
	EnqMsg
	Parents  int      // how many parents must succeed before it runs
	Children []string // the ids of the nodes that wait for it
	// KeepGoing: a parent that dies counts as done for it (it runs once
	// its other parents end) instead of cancelling it.
	KeepGoing bool
}

// EnqueueWorkflow adds the nodes of one workflow to q in one call: those
// without parents pending, the others waiting until their parents
// succeed (workflow.lua). It returns false, adding nothing, if an id
// exists.
func (r *RDB) EnqueueWorkflow(ctx context.Context, q string, now time.Time, id, record string, nodes []WfNode) (bool, error) {
	args := make([]string, 0, 3+9*len(nodes))
	args = append(args, ms(now), id, record)
	for _, n := range nodes {
		due := msOrZero(n.Due)
		args = append(args, n.ID, n.Msg, n.Tenant, strconv.FormatFloat(n.Weight, 'g', -1, 64),
			fmt.Sprintf("%02x", 255-n.Priority), strconv.Itoa(n.Parents), strings.Join(n.Children, " "), due, boolArg(n.KeepGoing))
	}
	added, err := r.replicated(ctx, workflowScript, QueueKeys(q), args).AsInt64()
	if err != nil {
		return false, fmt.Errorf("rdb: enqueue a workflow into %q: %w", q, err)
	}
	return added == int64(len(nodes)), nil
}

// GroupPolicy is when a group is handed over as one batch: at MaxSize
// members, Grace after its last addition or MaxDelay after its first,
// whichever comes first (the first member's policy holds for the group).
type GroupPolicy struct {
	MaxSize         int
	Grace, MaxDelay time.Duration
}

// EnqueueGroup adds m to group key of q (group.lua): 0 if its id exists,
// 1 if it joined the group, 2 if it filled it (now a pending batch).
func (r *RDB) EnqueueGroup(ctx context.Context, q string, now time.Time, m EnqMsg, key string, p GroupPolicy) (int, error) {
	n, err := r.replicated(ctx, groupScript, QueueKeys(q), []string{ms(now), m.ID, m.Msg, m.Tenant,
		strconv.FormatFloat(m.Weight, 'g', -1, 64), fmt.Sprintf("%02x", 255-m.Priority), key,
		strconv.Itoa(p.MaxSize), strconv.FormatInt(p.Grace.Milliseconds(), 10), strconv.FormatInt(p.MaxDelay.Milliseconds(), 10)}).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("rdb: enqueue into group %q of %q: %w", key, q, err)
	}
	return int(n), nil
}

// Messages reads the stored messages of ids in q (a missing one: absent).
func (r *RDB) Messages(ctx context.Context, q string, ids []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(ids) == 0 {
		return out, nil
	}
	vals, err := r.c.Do(ctx, r.c.B().Hmget().Key(QueueKeys(q)[KTasks]).Field(ids...).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("rdb: messages in %q: %w", q, err)
	}
	for i, v := range vals {
		if s, err := v.ToString(); err == nil {
			_, msg := splitStored(s)
			out[ids[i]] = []byte(msg)
		}
	}
	return out, nil
}

// WorkflowRecord reads workflow id's record in q ("" if none).
func (r *RDB) WorkflowRecord(ctx context.Context, q, id string) (string, error) {
	s, err := r.c.Do(ctx, r.c.B().Hget().Key(QueueKeys(q)[KTasks]).Field("wf:"+id).Build()).ToString()
	if IsNil(err) {
		return "", nil
	}
	return s, err
}

// Workflows lists the ids of q's workflows, newest first, at most limit.
func (r *RDB) Workflows(ctx context.Context, q string, limit int) ([]string, error) {
	return r.c.Do(ctx, r.c.B().Zrange().Key(QueueKeys(q)[KWorkflows]).Min("+inf").Max("-inf").Byscore().Rev().Limit(0, int64(limit)).Build()).AsStrSlice()
}

// Results reads the results of ids in q (a missing one: absent).
func (r *RDB) Results(ctx context.Context, q string, ids []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(ids) == 0 {
		return out, nil
	}
	vals, err := r.c.Do(ctx, r.c.B().Hmget().Key(QueueKeys(q)[KResults]).Field(ids...).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("rdb: results in %q: %w", q, err)
	}
	for i, v := range vals {
		if s, err := v.ToString(); err == nil {
			out[ids[i]] = []byte(s) // a handler's bytes as they were set: no stored head to cut
		}
	}
	return out, nil
}

// Unique modes of EnqueueUnique.
const (
	ModeUnique   = "unique"
	ModeDebounce = "debounce"
)

// EnqueueUnique adds m to q holding unique key until holdUntil (mode
// ModeUnique: refused while another task holds key) or debouncing (mode
// ModeDebounce: replaces the holder while it is still scheduled). It
// returns whether m was added, the id of the task holding key, and the id
// of the task m replaced ("" if none).
func (r *RDB) EnqueueUnique(ctx context.Context, q string, now time.Time, mode, key string, holdUntil time.Time, m EnqMsg) (added bool, holder, replaced string, err error) {
	due := msOrZero(m.Due)
	res, err := r.replicated(ctx, uniqueScript, QueueKeys(q), []string{ms(now), mode, key, ms(holdUntil),
		m.ID, m.Msg, m.Tenant, strconv.FormatFloat(m.Weight, 'g', -1, 64), fmt.Sprintf("%02x", 255-m.Priority), due}).ToArray()
	if err != nil {
		return false, "", "", fmt.Errorf("rdb: enqueue into %q: %w", q, err)
	}
	if len(res) != 3 {
		return false, "", "", fmt.Errorf("rdb: enqueue into %q: unique script returned %d values", q, len(res))
	}
	n, _ := res[0].AsInt64()
	holder, _ = res[1].ToString()
	replaced, _ = res[2].ToString()
	return n == 1, holder, replaced, nil
}

// RegisterQueues adds names to the set of known queues.
func (r *RDB) RegisterQueues(ctx context.Context, qs ...string) error {
	return r.c.Do(ctx, r.c.B().Sadd().Key(QueuesKey).Member(qs...).Build()).Error()
}

// Queues lists the known queues.
func (r *RDB) Queues(ctx context.Context) ([]string, error) {
	return r.c.Do(ctx, r.c.B().Smembers().Key(QueuesKey).Build()).AsStrSlice()
}

// Fail outcomes.
const (
	FailLost    = 0
	FailRetried = 1
	FailDead    = 2
	FailSnoozed = 3 // Snooze
)

// Fail records a failed attempt: retried at retryAt, or dead with reason
// when retryAt is zero.
func (r *RDB) Fail(ctx context.Context, q, id string, now time.Time, errMsg string, retryAt time.Time, reason string) (int, error) {
	at := msOrZero(retryAt)
	n, err := failScript.Exec(ctx, r.c, QueueKeys(q), []string{ms(now), id, errMsg, at, reason, "0"}).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("rdb: fail %s in %q: %w", id, q, err)
	}
	return int(n), nil
}

// Snooze gives a held task back to run again at until, in scheduled: no
// failure recorded, no attempt counted (its snoozes are). It returns 3, or
// 0 if the worker no longer held the task.
func (r *RDB) Snooze(ctx context.Context, q, id string, now, until time.Time) (int, error) {
	n, err := failScript.Exec(ctx, r.c, QueueKeys(q), []string{ms(now), id, "", ms(until), "", "1"}).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("rdb: snooze %s in %q: %w", id, q, err)
	}
	return int(n), nil
}

// Requeue gives held tasks back without counting a failure.
func (r *RDB) Requeue(ctx context.Context, q string, ids []string) (int, error) {
	n, err := requeueScript.Exec(ctx, r.c, QueueKeys(q), ids).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("rdb: requeue in %q: %w", q, err)
	}
	return int(n), nil
}

// Lease names a task a worker holds and the lease ends it may have set:
// Held, by its dequeue or last answered extend, and Maybe, by extends
// since whose answer was lost (each may or may not have applied).
type Lease struct {
	ID    string
	Held  int64 // Unix ms
	Maybe []int64
}

// Extend pushes the leases out to until and returns the ids whose lease
// was lost: gone, or held by a later dequeue (extend.lua).
func (r *RDB) Extend(ctx context.Context, q string, until time.Time, leases []Lease) ([]string, error) {
	args := make([]string, 1, 1+2*len(leases))
	args[0] = ms(until)
	for _, l := range leases {
		ends := strconv.AppendInt(nil, l.Held, 10)
		for _, m := range l.Maybe {
			ends = strconv.AppendInt(append(ends, ','), m, 10)
		}
		args = append(args, l.ID, string(ends))
	}
	lost, err := extendScript.Exec(ctx, r.c, QueueKeys(q), args).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("rdb: extend leases in %q: %w", q, err)
	}
	return lost, nil
}

// MaintainResult counts what one maintain call did.
type MaintainResult struct{ Reaped, Promoted, Trimmed int64 }

// Maintain reaps expired leases, promotes due tasks and trims retention.
func (r *RDB) Maintain(ctx context.Context, q string, now time.Time, limit int, deadBefore time.Time, deadMax int) (MaintainResult, error) {
	v, err := maintainScript.Exec(ctx, r.c, QueueKeys(q),
		[]string{ms(now), strconv.Itoa(limit), ms(deadBefore), strconv.Itoa(deadMax)}).AsIntSlice()
	if err != nil || len(v) != 3 {
		return MaintainResult{}, fmt.Errorf("rdb: maintain %q: %w", q, err)
	}
	return MaintainResult{v[0], v[1], v[2]}, nil
}

// ScanPos is where the scan of TrackExtras goes on from: its cursor and
// the server it began on (the zero value: the start).
type ScanPos struct{ Cursor, Server string }

// Done reports whether the scan is over (the queue tracked).
func (p ScanPos) Done() bool { return p.Cursor == "0" }

// TrackExtras goes on with the scan that makes q's set of tasks with
// extra fields complete if an earlier release wrote q (lua/track.lua, a
// step of about 1,000 fields a call), from pos, for at most steps calls
// (0: to the end); the scan begins again if the server is another (a
// restart, a failover). It returns where to go on from, Done once q is
// tracked (a tracked queue costs one call). Until then acks and dequeues
// of q treat every task as having extra fields.
func (r *RDB) TrackExtras(ctx context.Context, q string, pos ScanPos, steps int) (ScanPos, error) {
	keys := QueueKeys(q)
	if pos.Cursor == "" {
		pos.Cursor = "0"
	}
	for i := 0; steps == 0 || i < steps; i++ {
		v, err := trackScript.Exec(ctx, r.c, keys, []string{pos.Cursor, pos.Server}).AsStrSlice()
		if err == nil && len(v) != 2 {
			err = fmt.Errorf("%d values", len(v))
		}
		if err != nil {
			return pos, fmt.Errorf("rdb: track extras of %q: %w", q, err)
		}
		pos = ScanPos{Cursor: v[0], Server: v[1]}
		if pos.Done() {
			break
		}
	}
	return pos, nil
}

// DLQ requeues ("requeue") or deletes ("delete") dead tasks; no ids = all.
func (r *RDB) DLQ(ctx context.Context, q, op string, ids []string) (int, error) {
	n, err := dlqScript.Exec(ctx, r.c, QueueKeys(q), append([]string{op}, ids...)).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("rdb: dlq %s in %q: %w", op, q, err)
	}
	return int(n), nil
}

// WaitWake blocks up to timeout on the wake-up lists of queues and reports
// whether a token arrived. On a cluster only the first queue's list is
// watched (a blocking pop cannot span slots); the others are seen on the
// next timeout.
func (r *RDB) WaitWake(ctx context.Context, queues []string, timeout time.Duration) (bool, error) {
	if len(queues) == 0 {
		return false, nil
	}
	if r.cluster {
		queues = queues[:1]
	}
	keys := make([]string, len(queues))
	for i, q := range queues {
		keys[i] = QueueKeys(q)[KWake]
	}
	res := r.c.Do(ctx, r.c.B().Blpop().Key(keys...).Timeout(timeout.Seconds()).Build())
	if rueidis.IsRedisNil(res.Error()) {
		return false, nil
	}
	if err := res.Error(); err != nil {
		return false, err
	}
	return true, nil
}

// QueueStats is the raw state of one queue.
type QueueStats struct {
	Pending, Active, Scheduled, Retry, Dead, Retained, Cancelled int64
	Counters                                                     map[string]int64 // processed, failed, completed, dup, ...
	Tenants                                                      map[string]TenantStats
	PausedUntil                                                  time.Time // zero: not paused; Forever: until resumed
}

// TenantStats is one tenant's share of a queue.
type TenantStats struct {
	Pending, Active, Completed int64
	Weight                     float64
	PausedUntil                time.Time
}

// Forever is the end of a pause without a duration.
var Forever = time.UnixMilli(1 << 52)

// Stats reads queue q's sizes and counters in one pipelined round trip (plus
// one for per-tenant pending counts).
func (r *RDB) Stats(ctx context.Context, q string) (QueueStats, error) {
	k := QueueKeys(q)
	b := r.c.B()
	res := r.c.DoMulti(ctx,
		b.Zcard().Key(k[KPending]).Build(), b.Hlen().Key(k[KActive]).Build(),
		b.Zcard().Key(k[KScheduled]).Build(), b.Zcard().Key(k[KRetry]).Build(),
		b.Zcard().Key(k[KDead]).Build(), b.Zcard().Key(k[KCompleted]).Build(),
		b.Zcard().Key(k[KCancelled]).Build(), b.Hgetall().Key(k[KState]).Build())
	var st QueueStats
	for i, p := range []*int64{&st.Pending, &st.Active, &st.Scheduled, &st.Retry, &st.Dead, &st.Retained, &st.Cancelled} {
		v, err := res[i].AsInt64()
		if err != nil {
			return st, fmt.Errorf("rdb: stats of %q: %w", q, err)
		}
		*p = v
	}
	h, err := res[7].AsStrMap()
	if err != nil {
		return st, fmt.Errorf("rdb: stats of %q: %w", q, err)
	}
	st.parseState(h)
	if len(st.Tenants) > 0 {
		names := make([]string, 0, len(st.Tenants))
		cmds := make(rueidis.Commands, 0, len(st.Tenants))
		for t := range st.Tenants {
			names = append(names, t)
			cmds = append(cmds, b.Zlexcount().Key(k[KPending]).Min("["+t+"\x00").Max("("+t+"\x01").Build())
		}
		for i, rr := range r.c.DoMulti(ctx, cmds...) {
			n, err := rr.AsInt64()
			if err != nil {
				return st, fmt.Errorf("rdb: stats of %q: %w", q, err)
			}
			ts := st.Tenants[names[i]]
			ts.Pending = n
			st.Tenants[names[i]] = ts
		}
	}
	return st, nil
}

// parseState fills st's counters, pause and tenants from the state hash h.
func (st *QueueStats) parseState(h map[string]string) {
	st.Counters = map[string]int64{}
	st.Tenants = map[string]TenantStats{}
	for f, v := range h {
		name, field, ok := strings.Cut(f, ":")
		if f == "pause" {
			st.PausedUntil = pausedUntil(v)
			continue
		}
		if !ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			st.Counters[f] = n
			continue
		}
		if strings.HasSuffix(field, "/") {
			continue // an inner node of the tenant tree (lib.lua), no tenant
		}
		ts := st.Tenants[field]
		switch name {
		case "w":
			ts.Weight, _ = strconv.ParseFloat(v, 64)
		case "a":
			ts.Active, _ = strconv.ParseInt(v, 10, 64)
		case "c":
			ts.Completed, _ = strconv.ParseInt(v, 10, 64)
		case "p":
			ts.PausedUntil = pausedUntil(v)
		default:
			continue
		}
		st.Tenants[field] = ts
	}
}

// Sizes returns the pending count of each queue (for steal decisions).
func (r *RDB) Sizes(ctx context.Context, queues []string) (map[string]int64, error) {
	cmds := make(rueidis.Commands, len(queues))
	for i, q := range queues {
		cmds[i] = r.c.B().Zcard().Key(QueueKeys(q)[KPending]).Build()
	}
	out := make(map[string]int64, len(queues))
	for i, res := range r.c.DoMulti(ctx, cmds...) {
		n, err := res.AsInt64()
		if err != nil {
			return nil, err
		}
		out[queues[i]] = n
	}
	return out, nil
}

// DeadTask is one entry of the dead-letter set.
type DeadTask struct {
	ID, Reason, LastError string
	Tenant                string // from the task's member
	Msg                   []byte
	DiedAt                time.Time
}

// TenantOf is the tenant part of a pending/task member (tenant \0 … \0 id).
func TenantOf(member string) string {
	t, _, _ := strings.Cut(member, "\x00")
	return t
}

// DeadList returns up to limit dead tasks of q, oldest first.
func (r *RDB) DeadList(ctx context.Context, q string, limit int) ([]DeadTask, error) {
	k := QueueKeys(q)
	ids, err := r.c.Do(ctx, r.c.B().Zrange().Key(k[KDead]).Min("0").Max(strconv.Itoa(limit-1)).Withscores().Build()).AsZScores()
	if err != nil {
		return nil, fmt.Errorf("rdb: dlq list %q: %w", q, err)
	}
	out := make([]DeadTask, 0, len(ids))
	for _, z := range ids {
		v, err := r.c.Do(ctx, r.c.B().Hmget().Key(k[KTasks]).Field(z.Member, z.Member+"|d", z.Member+"|e", z.Member+"|m").Build()).ToArray()
		if err != nil || len(v) != 4 {
			return nil, fmt.Errorf("rdb: dlq list %q: %w", q, err)
		}
		stored, _ := v[0].ToString()
		reason, _ := v[1].ToString()
		last, _ := v[2].ToString()
		legacy, _ := v[3].ToString()
		_, msg := splitStored(stored)
		member := storedMember(z.Member, stored, legacy)
		out = append(out, DeadTask{ID: z.Member, Reason: reason, LastError: last, Tenant: TenantOf(member), Msg: []byte(msg), DiedAt: time.UnixMilli(int64(z.Score))})
	}
	return out, nil
}

// Result returns the stored result of task id in q (nil if none).
func (r *RDB) Result(ctx context.Context, q, id string) ([]byte, error) {
	v, err := r.c.Do(ctx, r.c.B().Hget().Key(QueueKeys(q)[KResults]).Field(id).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	return v, err
}

// SetWorker writes a worker's record (JSON) into the workers hash.
func (r *RDB) SetWorker(ctx context.Context, id, record string) error {
	return r.c.Do(ctx, r.c.B().Hset().Key(WorkersKey).FieldValue().FieldValue(id, record).Build()).Error()
}

// Workers returns all worker records.
func (r *RDB) Workers(ctx context.Context) (map[string]string, error) {
	return r.c.Do(ctx, r.c.B().Hgetall().Key(WorkersKey).Build()).AsStrMap()
}

// DeleteWorker removes a worker's record.
func (r *RDB) DeleteWorker(ctx context.Context, id string) error {
	return r.c.Do(ctx, r.c.B().Hdel().Key(WorkersKey).Field(id).Build()).Error()
}

// UsedMemory returns Redis's used_memory and maxmemory (0 = unlimited),
// summed over the nodes of a cluster.
func (r *RDB) UsedMemory(ctx context.Context) (used, max int64, err error) {
	for _, n := range r.c.Nodes() {
		s, err := n.Do(ctx, n.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			return 0, 0, err
		}
		for _, line := range strings.Split(s, "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				used += x
			} else if v, ok := strings.CutPrefix(line, "maxmemory:"); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				max += x
			}
		}
	}
	return used, max, nil
}

// ErrClosed is returned by rueidis after Close.
var ErrClosed = rueidis.ErrClosing

// IsNil reports whether err is a Redis nil reply.
func IsNil(err error) bool { return rueidis.IsRedisNil(err) }

// IsRedisError reports whether err is an error reply from Redis (as opposed
// to a network error).
func IsRedisError(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re)
}

// Purge deletes all keys of queue q, in one DEL (no script ever sees some
// of them gone: state's xt without the extras set it vouches for), and
// removes q from the known queues.
func (r *RDB) Purge(ctx context.Context, q string) error {
	b := r.c.B()
	cmds := rueidis.Commands{b.Del().Key(QueueKeys(q)...).Build(), b.Srem().Key(QueuesKey).Member(q).Build()}
	for _, res := range r.c.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			return fmt.Errorf("rdb: purge %q: %w", q, err)
		}
	}
	return nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
