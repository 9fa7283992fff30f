package rdb

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"
)

// crc16 is CRC16-XMODEM, the checksum Redis Cluster maps keys to slots with.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is the Redis Cluster slot of key: the hash of the part between
// the first '{' and the next '}' when that part is not empty, else of the
// whole key.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16([]byte(key)) % 16384
}

func TestKeySlotMatchesTheClusterSpec(t *testing.T) {
	// The reference values of the Redis Cluster specification.
	if got := crc16([]byte("123456789")); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	slot := func(s string) uint16 { return crc16([]byte(s)) % 16384 }
	for key, want := range map[string]uint16{
		"foo": 12182, "{user1000}.following": slot("user1000"), "foo{}{bar}": slot("foo{}{bar}"),
		"foo{{bar}}zap": slot("{bar"), "foo{bar}{zap}": slot("bar"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestQueueKeysShareOneSlot: the package doc promises that every key of a
// queue sits on the slot of the queue's name, for every name taskq accepts
// (at most 256 bytes without NUL, \x01, '{' or '}': taskq's checkName).
// A brace in the name would break it, which is why checkName refuses it.
func TestQueueKeysShareOneSlot(t *testing.T) {
	names := []string{"default", "a", "emails:high", "q.1-x_y", "x y", "ünï©ödé", "tq", strings.Repeat("q", 256), "\xff\x02"}
	for _, q := range names {
		keys := QueueKeys(q)
		if len(keys) != NKeys {
			t.Fatalf("QueueKeys(%q) has %d keys, want NKeys = %d", q, len(keys), NKeys)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, "tq:{"+q+"}:") {
				t.Errorf("key %q of queue %q does not start with the hash tag tq:{%s}:", k, q, q)
			}
			if ks := keySlot(k); ks != keySlot(q) {
				t.Errorf("key %q is on slot %d, queue %q on slot %d", k, ks, q, keySlot(q))
			}
		}
	}
	// The names checkName refuses do split a queue over several slots.
	for _, q := range []string{"}a", ""} {
		keys := QueueKeys(q)
		if keySlot(keys[KPending]) == keySlot(keys[KTasks]) {
			t.Errorf("queue %q: pending and tasks on one slot; the refusal of braces and empty names would be pointless", q)
		}
	}
}

// recorder passes commands through and keeps the keys of every script call.
type recorder struct {
	rueidis.Client
	calls [][]string // the KEYS of each EVAL/EVALSHA
}

func (c *recorder) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if cs := cmd.Commands(); len(cs) > 2 && (cs[0] == "EVALSHA" || cs[0] == "EVAL") {
		n, _ := strconv.Atoi(cs[2])
		c.calls = append(c.calls, append([]string(nil), cs[3:3+n]...))
	}
	return c.Client.Do(ctx, cmd)
}

// TestScriptCallsStayInOneSlot runs every script through its RDB method as
// on a Redis Cluster and checks that each call is given exactly one queue's
// 21 keys, all on one slot (a cluster refuses a script whose keys span
// slots). The table must name every script under lua/.
func TestScriptCallsStayInOneSlot(t *testing.T) {
	base := openTest(t)
	qa, qb := newQueue(t, base, "a"), newQueue(t, base, "b")
	rec := &recorder{Client: base.c}
	r := &RDB{c: rec, cluster: true}
	ctx := t.Context()
	enqueue(t, base, qa, task("x", "t"), task("y", "t"))
	enqueue(t, base, qb, task("z", "t"))
	calls := []struct {
		script string
		run    func() error
	}{
		{"enqueue", func() error { _, err := r.Enqueue(ctx, qa, t0, []EnqMsg{task("e", "t")}); return err }},
		{"unique", func() error {
			_, _, _, err := r.EnqueueUnique(ctx, qa, t0, ModeUnique, "k", at(time.Hour), task("u", "t"))
			return err
		}},
		{"dequeue", func() error { _, err := r.Dequeue(ctx, []string{qa, qb}, 10, t0, at(time.Minute)); return err }},
		{"extend", func() error { _, err := r.Extend(ctx, qa, at(time.Hour), []Lease{{ID: "x"}}); return err }},
		{"progress", func() error { _, err := r.Progress(ctx, qa, "x", "{}"); return err }},
		{"ack", func() error { _, err := r.Ack(ctx, qa, t0, []AckItem{{ID: "x"}}); return err }},
		{"fail", func() error { _, err := r.Fail(ctx, qa, "y", t0, "boom", time.Time{}, "r"); return err }},
		{"requeue", func() error { _, err := r.Requeue(ctx, qb, []string{"z"}); return err }},
		{"dlq", func() error { _, err := r.DLQ(ctx, qa, "requeue", nil); return err }},
		{"maintain", func() error { _, err := r.Maintain(ctx, qa, t0, 10, t0, 10); return err }},
		{"track", func() error {
			raw(t, base, "HDEL", QueueKeys(qa)[KState], "xt") // as an earlier release left it: one scan step runs
			_, err := r.TrackExtras(ctx, qa, ScanPos{}, 0)
			return err
		}},
		{"pause", func() error { return r.Pause(ctx, qa, "t", Forever) }},
		{"cancel", func() error { _, err := r.Cancel(ctx, qa, "u", "me", t0); return err }},
		{"taskop", func() error { _, _, err := r.TaskOp(ctx, qa, "run", "u"); return err }},
		{"limit", func() error { return r.SetLimit(ctx, qa, "", Limit{MaxActive: 1}) }},
		{"group", func() error {
			_, err := r.EnqueueGroup(ctx, qa, t0, task("g1", "t"), "k", GroupPolicy{MaxSize: 2, Grace: time.Second, MaxDelay: time.Minute})
			return err
		}},
		{"workflow", func() error {
			_, err := r.EnqueueWorkflow(ctx, qa, t0, "wf1", "{}", []WfNode{{EnqMsg: task("w1", "t"), Children: []string{"w2"}}, {EnqMsg: task("w2", "t"), Parents: 1}})
			return err
		}},
	}
	seen := map[string]bool{"lib": true}
	for _, c := range calls {
		seen[c.script] = true
		rec.calls = nil
		if err := c.run(); err != nil {
			t.Fatalf("%s: %v", c.script, err)
		}
		if len(rec.calls) == 0 {
			t.Errorf("%s: no script call recorded", c.script)
		}
		for _, keys := range rec.calls {
			q := keys[0][strings.IndexByte(keys[0], '{')+1 : strings.IndexByte(keys[0], '}')]
			if d := cmp.Diff(QueueKeys(q), keys); d != "" {
				t.Errorf("%s: keys are not one queue's 21 (-want +got):\n%s", c.script, d)
			}
			for _, k := range keys {
				if keySlot(k) != keySlot(keys[0]) {
					t.Errorf("%s: key %s on slot %d, %s on %d", c.script, k, keySlot(k), keys[0], keySlot(keys[0]))
				}
			}
		}
	}
	files, err := luaFS.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := strings.TrimSuffix(f.Name(), ".lua"); !seen[name] {
			t.Errorf("script %s has no call in this test", f.Name())
		}
	}
}

var (
	callRE  = regexp.MustCompile(`(?:redis\.call|chunked)\(\s*'([A-Z]+)'\s*,\s*([^,)]+)`)
	keysRE  = regexp.MustCompile(`KEYS\[((?:[^\[\]]|\[[^\]]*\])+)\]`)
	indexRE = regexp.MustCompile(`^(?:(?:k|q \* NKEYS) \+ )?([0-9]+)$`)
)

// TestScriptsNameOnlyTheirKeys reads the scripts: every Redis command a
// script runs addresses a key given in KEYS (a script that built a key name
// itself would reach outside its slot, unseen by proxies), at an index
// within one queue's 21, and only dequeue (which takes several queues)
// offsets them. PUBLISH names a channel, not a key; INFO (track.lua: the
// server's run_id) none.
func TestScriptsNameOnlyTheirKeys(t *testing.T) {
	files, err := luaFS.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := luaFS.ReadFile("lua/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		src := stripComments(string(b))
		calls := callRE.FindAllStringSubmatch(src, -1)
		for _, c := range calls {
			if c[1] == "PUBLISH" || c[1] == "INFO" {
				continue
			}
			if !strings.HasPrefix(strings.TrimSpace(c[2]), "KEYS[") {
				t.Errorf("%s: %s on %q, not a KEYS entry", f.Name(), c[1], c[2])
			}
		}
		for _, m := range keysRE.FindAllStringSubmatch(src, -1) {
			if indexVars[f.Name()+" "+m[1]] {
				continue
			}
			im := indexRE.FindStringSubmatch(m[1])
			if im == nil {
				t.Errorf("%s: KEYS[%s]: want a constant 1..21, offset by k in lib/dequeue", f.Name(), m[1])
				continue
			}
			if n, _ := strconv.Atoi(im[1]); n < 1 || n > NKeys {
				t.Errorf("%s: KEYS[%s] outside one queue's %d keys", f.Name(), m[1], NKeys)
			}
			if m[1] != im[1] && f.Name() != "lib.lua" && f.Name() != "dequeue.lua" {
				t.Errorf("%s: KEYS[%s]: only dequeue takes several queues", f.Name(), m[1])
			}
		}
		if f.Name() != "dequeue.lua" && f.Name() != "lib.lua" && regexp.MustCompile(`\w\(k[,)]`).MatchString(src) {
			t.Errorf("%s: calls a library function with an offset k: only dequeue does", f.Name())
		}
	}
}

// indexVars are the KEYS indices held in variables, each bound to
// constants 1..21 next to its use: lib.lua's promote loops over scheduled
// and retry (k + 7, k + 8), taskop's where() over the sets a task can be in.
var indexVars = map[string]bool{"lib.lua src": true, "taskop.lua z[2]": true, "taskop.lua key": true}

// stripComments drops Lua line comments (the headers name keys in prose).
func stripComments(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
