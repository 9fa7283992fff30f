package rdb

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// The inspector's side of Redis: list tasks by state a page at a time, read
// one, delete, run, cancel, pause and resume. Reads are plain commands;
// every change is one script (pause.lua, cancel.lua, taskop.lua).

// CancelChannel carries "queue \0 id" of every active task cancel.lua
// cancels; workers subscribe to it.
const CancelChannel = "tq:cancel"

// States a task can be listed in.
var States = []string{"pending", "scheduled", "active", "retry", "dead", "completed", "cancelled"}

// Raw is one task as stored: the message and the fields beside it.
type Raw struct {
	ID, Queue, State, Member     string
	Msg                          []byte
	Retried                      int
	Lost                         int // starts that ended without an outcome: a lost lease, a cancel (id|n)
	Snoozes                      int // times its handler snoozed it (Snooze: no attempt counted)
	LastError, DeadReason        string
	CancelledBy                  string
	CancelledAt, At, LeaseUntil  time.Time // At: due (scheduled, retry), died, retained until, cancelled
	Result                       []byte
	Progress                     string // JSON, as the handler reported it
	HasResult, MemberFromEnqueue bool
}

// Page is one page of a listing; Next is "" on the last page.
type Page struct {
	Tasks []Raw
	Next  string
}

// ErrBadCursor is a cursor that does not come from a previous page.
var ErrBadCursor = errors.New("rdb: bad cursor")

// List returns up to limit tasks of q in state, of tenant ("" = all), from
// cursor ("" = the start). Pending tasks come in dequeue order within a
// tenant (by member); scheduled and retry by due time; dead, completed and
// cancelled newest first; active in hash order. Each page costs O(log n +
// limit) except a tenant filter outside pending, which reads at most
// 20 × limit entries per page.
func (r *RDB) List(ctx context.Context, q, state, tenant string, limit int, cursor string) (Page, error) {
	if limit <= 0 {
		limit = 100
	}
	k := QueueKeys(q)
	var ids, members []string
	var scores []float64
	var next string
	var err error
	switch state {
	case "pending":
		members, next, err = r.listPending(ctx, k, tenant, limit, cursor)
	case "active":
		ids, members, next, err = r.listActive(ctx, k, tenant, limit, cursor)
	case "scheduled", "retry":
		key := k[KScheduled]
		if state == "retry" {
			key = k[KRetry]
		}
		members, scores, next, err = r.listZ(ctx, key, false, tenant, limit, cursor, func(m string) string { return TenantOf(m) })
	case "dead", "completed", "cancelled":
		key := map[string]string{"dead": k[KDead], "completed": k[KCompleted], "cancelled": k[KCancelled]}[state]
		var tenantOf func(string) string
		if tenant != "" {
			tenantOf = func(id string) string { return TenantOf(r.member(ctx, k, id)) }
		}
		ids, scores, next, err = r.listZ(ctx, key, true, tenant, limit, cursor, tenantOf)
	default:
		return Page{}, fmt.Errorf("rdb: state %q: want one of %s", state, strings.Join(States, ", "))
	}
	if err != nil {
		return Page{}, err
	}
	if ids == nil {
		for _, m := range members {
			ids = append(ids, idOf(m))
		}
	}
	raws, err := r.read(ctx, q, ids)
	if err != nil {
		return Page{}, err
	}
	for i := range raws {
		raws[i].State = state
		if members != nil {
			raws[i].Member = members[i]
		}
		if scores != nil {
			raws[i].At = time.UnixMilli(int64(scores[i]))
		}
	}
	return Page{Tasks: raws, Next: next}, nil
}

func idOf(member string) string { return member[strings.LastIndexByte(member, 0)+1:] }

func encodeCursor(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func decodeCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	return string(b), nil
}

// listPending pages through pending by member: ZRANGE BYLEX from just
// after the cursor member.
func (r *RDB) listPending(ctx context.Context, k []string, tenant string, limit int, cursor string) ([]string, string, error) {
	lo, hi := "-", "+"
	if tenant != "" {
		lo, hi = "["+tenant+"\x00", "("+tenant+"\x01"
	}
	if cursor != "" {
		m, err := decodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		// A pending member is "tenant\x00…": a cursor that does not decode
		// to one of the listed tenant's came from no page of this listing.
		if t, _, ok := strings.Cut(m, "\x00"); !ok || tenant != "" && t != tenant {
			return nil, "", fmt.Errorf("%w: %q", ErrBadCursor, cursor)
		}
		lo = "(" + m
	}
	ms, err := r.c.Do(ctx, r.c.B().Zrange().Key(k[KPending]).Min(lo).Max(hi).Bylex().Limit(0, int64(limit)).Build()).AsStrSlice()
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(ms) == limit {
		next = encodeCursor(ms[len(ms)-1])
	}
	return ms, next, nil
}

// listActive pages through the active hash with HSCAN.
func (r *RDB) listActive(ctx context.Context, k []string, tenant string, limit int, cursor string) (ids, members []string, next string, err error) {
	cur := uint64(0)
	if cursor != "" {
		if cur, err = strconv.ParseUint(cursor, 10, 64); err != nil {
			return nil, nil, "", fmt.Errorf("%w: %q", ErrBadCursor, cursor)
		}
	}
	for {
		e, err := r.c.Do(ctx, r.c.B().Hscan().Key(k[KActive]).Cursor(cur).Count(int64(limit)).Build()).AsScanEntry()
		if err != nil {
			return nil, nil, "", err
		}
		for i := 0; i+1 < len(e.Elements); i += 2 {
			if tenant == "" || TenantOf(e.Elements[i+1]) == tenant {
				ids, members = append(ids, e.Elements[i]), append(members, e.Elements[i+1])
			}
		}
		cur = e.Cursor
		if cur == 0 || len(ids) >= limit {
			break
		}
	}
	if cur != 0 {
		next = strconv.FormatUint(cur, 10)
	}
	return ids, members, next, nil
}

// listZ pages through a sorted set by rank (newest first if rev); with a
// tenant it keeps the entries whose tenantOf is tenant.
func (r *RDB) listZ(ctx context.Context, key string, rev bool, tenant string, limit int, cursor string, tenantOf func(string) string) (vals []string, scores []float64, next string, err error) {
	start := int64(0)
	if cursor != "" {
		if start, err = strconv.ParseInt(cursor, 10, 64); err != nil || start < 0 {
			return nil, nil, "", fmt.Errorf("%w: %q", ErrBadCursor, cursor)
		}
	}
	budget := int64(limit)
	if tenant != "" {
		budget = int64(20 * limit)
	}
	for read := int64(0); read < budget && len(vals) < limit; {
		n := min(int64(limit), budget-read)
		cmd := r.c.B().Zrange().Key(key).Min(strconv.FormatInt(start, 10)).Max(strconv.FormatInt(start+n-1, 10))
		var zs []rueidis.ZScore
		if rev {
			zs, err = r.c.Do(ctx, cmd.Rev().Withscores().Build()).AsZScores()
		} else {
			zs, err = r.c.Do(ctx, cmd.Withscores().Build()).AsZScores()
		}
		if err != nil {
			return nil, nil, "", err
		}
		for i, z := range zs {
			if len(vals) == limit {
				start += int64(i)
				return vals, scores, strconv.FormatInt(start, 10), nil
			}
			if tenant == "" || tenantOf(z.Member) == tenant {
				vals, scores = append(vals, z.Member), append(scores, z.Score)
			}
		}
		start += int64(len(zs))
		read += int64(len(zs))
		if int64(len(zs)) < n {
			return vals, scores, "", nil
		}
	}
	return vals, scores, strconv.FormatInt(start, 10), nil
}

// member is the member enqueue recorded for id: from its stored value's
// head, else its id|m ("" for a task enqueued by the release before).
func (r *RDB) member(ctx context.Context, k []string, id string) string {
	v, err := r.c.Do(ctx, r.c.B().Hmget().Key(k[KTasks]).Field(id, id+"|m").Build()).ToArray()
	if err != nil || len(v) != 2 {
		return ""
	}
	stored, _ := v[0].ToString()
	legacy, _ := v[1].ToString()
	return storedMember(id, stored, legacy)
}

// read fetches the stored fields of ids (one HMGET each, pipelined).
func (r *RDB) read(ctx context.Context, q string, ids []string) ([]Raw, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	k := QueueKeys(q)
	b := r.c.B()
	cmds := make([]rueidis.Completed, 0, 2*len(ids))
	for _, id := range ids {
		cmds = append(cmds,
			b.Hmget().Key(k[KTasks]).Field(id, id+"|r", id+"|n", id+"|e", id+"|d", id+"|m", id+"|c", id+"|p", id+"|s").Build(),
			b.Zscore().Key(k[KLease]).Member(id).Build())
	}
	res := r.c.DoMulti(ctx, cmds...)
	out := make([]Raw, len(ids))
	for i, id := range ids {
		v, err := res[2*i].ToArray()
		if err != nil || len(v) != 9 {
			return nil, fmt.Errorf("rdb: read %s/%s: %w", q, id, err)
		}
		s := make([]string, 9)
		for j := range v {
			s[j], _ = v[j].ToString()
		}
		_, msg := splitStored(s[0])
		m := storedMember(id, s[0], s[5])
		raw := Raw{ID: id, Queue: q, Msg: []byte(msg), LastError: s[3], DeadReason: s[4], Member: m, MemberFromEnqueue: m != "", Progress: s[7]}
		raw.Retried, _ = strconv.Atoi(s[1])
		lost, _ := strconv.Atoi(s[2])
		raw.Lost = max(lost, -lost)
		raw.Snoozes, _ = strconv.Atoi(s[8])
		if who, at, ok := strings.Cut(s[6], "\x00"); ok {
			raw.CancelledBy = who
			if n, err := strconv.ParseInt(at, 10, 64); err == nil {
				raw.CancelledAt = time.UnixMilli(n)
			}
		}
		if lease, err := res[2*i+1].AsFloat64(); err == nil {
			raw.LeaseUntil = time.UnixMilli(int64(lease))
		}
		out[i] = raw
	}
	return out, nil
}

// Get reads task id of q with its state ("" state and no error: no such
// task). A task enqueued by an earlier release has no recorded member; its
// waiting set is then found by a scan.
func (r *RDB) Get(ctx context.Context, q, id string) (Raw, error) {
	k := QueueKeys(q)
	raws, err := r.read(ctx, q, []string{id})
	if err != nil {
		return Raw{}, err
	}
	raw := raws[0]
	if len(raw.Msg) == 0 {
		return Raw{}, nil
	}
	if raw.Member == "" {
		raw.Member = r.scanMember(ctx, k, id)
	}
	b := r.c.B()
	res := r.c.DoMulti(ctx,
		b.Hexists().Key(k[KActive]).Field(id).Build(),
		b.Zscore().Key(k[KDead]).Member(id).Build(), b.Zscore().Key(k[KCompleted]).Member(id).Build(),
		b.Zscore().Key(k[KCancelled]).Member(id).Build(),
		b.Zscore().Key(k[KPending]).Member(raw.Member).Build(), b.Zscore().Key(k[KScheduled]).Member(raw.Member).Build(),
		b.Zscore().Key(k[KRetry]).Member(raw.Member).Build(), b.Hget().Key(k[KResults]).Field(id).Build())
	if active, _ := res[0].AsBool(); active {
		raw.State = "active"
	}
	for i, st := range []string{"dead", "completed", "cancelled", "pending", "scheduled", "retry"} {
		if score, err := res[1+i].AsFloat64(); err == nil && raw.State == "" {
			raw.State = st
			if st != "pending" {
				raw.At = time.UnixMilli(int64(score))
			}
		}
	}
	if res7, err := res[7].AsBytes(); err == nil {
		raw.Result, raw.HasResult = res7, true
	}
	if raw.State == "" {
		raw.State = "unknown"
	}
	return raw, nil
}

// scanMember finds id's member in pending, scheduled or retry by scanning
// them (tasks enqueued before members were recorded); "" if none.
func (r *RDB) scanMember(ctx context.Context, k []string, id string) string {
	for _, key := range []string{k[KPending], k[KScheduled], k[KRetry]} {
		cur := uint64(0)
		for {
			e, err := r.c.Do(ctx, r.c.B().Zscan().Key(key).Cursor(cur).Match("*\x00"+globEscape(id)).Count(1000).Build()).AsScanEntry()
			if err != nil {
				break
			}
			if len(e.Elements) > 0 {
				return e.Elements[0]
			}
			if cur = e.Cursor; cur == 0 {
				break
			}
		}
	}
	return ""
}

func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Cancel runs cancel.lua for id of q on behalf of who; it returns the
// task's state before.
func (r *RDB) Cancel(ctx context.Context, q, id, who string, now time.Time) (string, error) {
	k := QueueKeys(q)
	hint := ""
	if r.member(ctx, k, id) == "" {
		hint = r.scanMember(ctx, k, id)
	}
	return cancelScript.Exec(ctx, r.c, k, []string{ms(now), who, id, hint, CancelChannel, q}).ToString()
}

// TaskOp runs taskop.lua: op "delete" or "run" on id of q; it returns the
// task's state before and whether it acted.
func (r *RDB) TaskOp(ctx context.Context, q, op, id string) (string, bool, error) {
	k := QueueKeys(q)
	hint := ""
	if r.member(ctx, k, id) == "" {
		hint = r.scanMember(ctx, k, id)
	}
	v, err := taskopScript.Exec(ctx, r.c, k, []string{op, id, hint, ms(time.Now())}).ToArray()
	if err != nil || len(v) != 2 {
		return "", false, fmt.Errorf("rdb: %s %s/%s: %w", op, q, id, err)
	}
	state, _ := v[0].ToString()
	acted, _ := v[1].AsInt64()
	return state, acted == 1, nil
}

// Pause pauses queue q (tenant "") or one tenant of it until until
// (Forever: until resumed); Resume ends it.
func (r *RDB) Pause(ctx context.Context, q, tenant string, until time.Time) error {
	return pauseScript.Exec(ctx, r.c, QueueKeys(q), []string{"pause", tenant, ms(until)}).Error()
}

// Resume ends a pause of q or of one of its tenants.
func (r *RDB) Resume(ctx context.Context, q, tenant string) error {
	return pauseScript.Exec(ctx, r.c, QueueKeys(q), []string{"resume", tenant, "0"}).Error()
}

// SubscribeCancels calls fn with (queue, id) for every active task cancelled
// from now until ctx ends or the connection fails (then it returns the error;
// the caller resubscribes, and its heartbeat catches what it missed).
func (r *RDB) SubscribeCancels(ctx context.Context, fn func(queue, id string)) error {
	return r.c.Receive(ctx, r.c.B().Subscribe().Channel(CancelChannel).Build(), func(m rueidis.PubSubMessage) {
		q, id, ok := strings.Cut(m.Message, "\x00")
		if ok {
			fn(q, id)
		}
	})
}

func pausedUntil(v string) time.Time {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// Limit is a limit of a queue or of one tenant of it (zero fields: none).
type Limit struct {
	Rate      float64 // tasks started per second
	Burst     int     // the token bucket's size (≥1 when Rate is set)
	MaxActive int     // tasks running at once, across all workers
	Weight    float64 // a tenant's fair-share weight, overriding the enqueues'
}

// LimitState is a limit with its current use.
type LimitState struct {
	Limit
	Tokens         float64   // in the bucket when last used (Rate only)
	ThrottledUntil time.Time // zero: not throttled; Forever: until a running task ends
}

// SetLimit sets the limit of q, or of tenant t of it ("" = the queue).
func (r *RDB) SetLimit(ctx context.Context, q, t string, l Limit) error {
	v := fmt.Sprintf("%g %d %d %g", l.Rate, l.Burst, l.MaxActive, l.Weight)
	return limitScript.Exec(ctx, r.c, QueueKeys(q), []string{"set", t, v}).Error()
}

// ClearLimit removes the limit of q or of tenant t ("" = the queue's own;
// all = every limit of q); it reports whether there was one.
func (r *RDB) ClearLimit(ctx context.Context, q, t string, all bool) (bool, error) {
	op := "clear"
	if all {
		op = "clearall"
	}
	n, err := limitScript.Exec(ctx, r.c, QueueKeys(q), []string{op, t, ""}).AsInt64()
	return n == 1, err
}

// Limits returns q's limits: the queue's own under "" and each limited
// tenant's, with their tokens and throttling.
func (r *RDB) Limits(ctx context.Context, q string) (map[string]LimitState, error) {
	k := QueueKeys(q)
	b := r.c.B()
	res := r.c.DoMulti(ctx, b.Hgetall().Key(k[KLimits]).Build(), b.Zrange().Key(k[KThrottled]).Min("0").Max("-1").Withscores().Build())
	h, err := res[0].AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("rdb: limits of %q: %w", q, err)
	}
	th, err := res[1].AsZScores()
	if err != nil {
		return nil, fmt.Errorf("rdb: limits of %q: %w", q, err)
	}
	out := map[string]LimitState{}
	for f, v := range h {
		var t string
		switch {
		case f == "q":
		case strings.HasPrefix(f, "t:"):
			t = f[2:]
		default:
			continue
		}
		var l LimitState
		fmt.Sscanf(v, "%g %d %d %g", &l.Rate, &l.Burst, &l.MaxActive, &l.Weight)
		l.Tokens = float64(l.Burst)
		tokField := "tok:" + f
		if tv, ok := h[tokField]; ok {
			var at int64
			fmt.Sscanf(tv, "%g %d", &l.Tokens, &at)
			if l.Rate > 0 {
				l.Tokens = min(float64(l.Burst), l.Tokens+float64(time.Now().UnixMilli()-at)*l.Rate/1000)
			}
		}
		out[t] = l
	}
	for _, z := range th {
		t := z.Member
		if t == "\x00q" {
			t = ""
		}
		if _, own := out[t]; !own && strings.HasSuffix(t, "/") {
			t = t[:len(t)-1] // an inner node of the tenant tree, parked as node/
		}
		l, ok := out[t]
		if !ok {
			continue
		}
		if z.Score >= 1e15 {
			l.ThrottledUntil = Forever
		} else if until := time.UnixMilli(int64(z.Score)); until.After(time.Now()) {
			l.ThrottledUntil = until
		}
		out[t] = l
	}
	return out, nil
}

// Progress records the progress of running task id of q; false if it is
// not running.
func (r *RDB) Progress(ctx context.Context, q, id, value string) (bool, error) {
	n, err := progressScript.Exec(ctx, r.c, QueueKeys(q), []string{id, value}).AsInt64()
	return n == 1, err
}
