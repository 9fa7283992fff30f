package workspace

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/backoff"
)

// decideNow is the "now" of every case in testdata/decide: the times a
// case gives are relative to it (-10s: ten seconds before).
var decideNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// TestDecideTable checks Decide against the cases in testdata/decide/*.txt
// (the format is in testdata/decide/README.md), and across them that every
// Action is decided somewhere and that each decision's unprinted fields
// hold: the lease a claim writes and its call's deadline, the error info's
// operation and time, the wake-up at a failure's retry time.
func TestDecideTable(t *testing.T) {
	files, err := filepath.Glob("testdata/decide/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/decide/*.txt: %v", err)
	}
	seen := map[Action]bool{}
	for _, file := range files {
		cases := 0
		for c := range readDecideCases(t, file) {
			got := Decide(c.row, c.obs, decideNow, c.policy)
			seen[got.Action] = true
			if g, w := decisionTokens(got), c.want; !sameDecision(g, w) {
				t.Errorf("%s: %s\n\tgot  %s\n\twant %s", c.where, c.line, strings.Join(g, " "), strings.Join(w, " "))
			}
			if msg := decisionInvariants(c, got); msg != "" {
				t.Errorf("%s: %s: %s", c.where, c.line, msg)
			}
			cases++
		}
		if cases < 8 {
			t.Errorf("%s: %d cases, want at least 8", file, cases)
		}
	}
	for a := ActSettled; a <= ActFail; a++ {
		if !seen[a] {
			t.Errorf("no case in testdata/decide decides %s", a)
		}
	}
}

// decideCase is one line of testdata/decide.
type decideCase struct {
	where, line string
	row         Workspace
	obs         Observation
	policy      Policy
	want        []string
}

// readDecideCases reads file's cases, with the policy its `policy` lines
// set for the lines that follow them.
func readDecideCases(t *testing.T, file string) func(yield func(decideCase) bool) {
	return func(yield func(decideCase) bool) {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		policy := Policy{Owner: "me"}
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			where := fmt.Sprintf("%s:%d", file, n)
			switch {
			case line == "" || strings.HasPrefix(line, "#"):
				continue
			case line == "policy" || strings.HasPrefix(line, "policy "):
				policy = parsePolicy(t, where, strings.Fields(line)[1:])
				continue
			}
			in, out, ok := strings.Cut(line, "->")
			if !ok {
				t.Fatalf("%s: %q: want `observed desired [input…] -> action [field…]`", where, line)
			}
			c := decideCase{where: where, line: line, policy: policy, want: normalizeDecision(strings.Fields(out))}
			c.row, c.obs = parseDecideInput(t, where, strings.Fields(in))
			if !yield(c) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// parsePolicy reads `policy key=value…` (Policy's fields; unset = zero,
// the default; the owner is always "me").
func parsePolicy(t *testing.T, where string, kvs []string) Policy {
	p := Policy{Owner: "me", Timeouts: map[Operation]time.Duration{}}
	durs := map[string]*time.Duration{"interval": &p.Interval, "backoff": &p.RetryBackoff, "backoff_max": &p.RetryBackoffMax,
		"crash_window": &p.CrashWindow, "lease": &p.Lease}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch {
		case k == "max_retries":
			p.MaxRetries, err = strconv.Atoi(v)
		case strings.HasPrefix(k, "timeout."):
			var d time.Duration
			d, err = time.ParseDuration(v)
			p.Timeouts[Operation(strings.TrimPrefix(k, "timeout."))] = d
		case durs[k] != nil:
			*durs[k], err = time.ParseDuration(v)
		default:
			err = fmt.Errorf("unknown policy key %q", k)
		}
		if err != nil {
			t.Fatalf("%s: policy %s: %v", where, kv, err)
		}
	}
	return p
}

// parseDecideInput reads a case's input: observed, desired, then the
// row's and the observation's fields (testdata/decide/README.md).
func parseDecideInput(t *testing.T, where string, f []string) (Workspace, Observation) {
	if len(f) < 2 {
		t.Fatalf("%s: want `observed desired …`", where)
	}
	w := Workspace{ID: "w1", OpID: "op1", ObservedStatus: Status(f[0]), DesiredState: Status(f[1]), Operation: OpNone}
	var obs Observation
	at := func(v string) *time.Time {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %q: want a duration relative to now", where, v)
		}
		x := decideNow.Add(d)
		return &x
	}
	for _, tok := range f[2:] {
		k, v, _ := strings.Cut(tok, "=")
		if (k == "terminal" || k == "exited") && w.ErrorInfo == nil {
			t.Fatalf("%s: %s before info=", where, tok)
		}
		if !rowField(&w, k, v, at) && !observationField(t, where, &obs, k, v, at) {
			t.Fatalf("%s: unknown input %q", where, tok)
		}
	}
	if w.ErrorInfo != nil {
		w.ErrorInfo.Operation, w.ErrorInfo.ErrorCount = w.Operation, w.ErrorCount
	}
	return w, obs
}

// rowField sets the row's field k to v, if k is one.
func rowField(w *Workspace, k, v string, at func(string) *time.Time) bool {
	switch k {
	case "op":
		w.Operation, w.OpOwner, w.OpStartedAt = Operation(v), "me", at("-1s")
	case "owner":
		w.OpOwner = strings.TrimPrefix(v, "-")
	case "started":
		w.OpStartedAt = at(v)
	case "lease":
		w.OpLeaseUntil = at(v)
	case "executed":
		w.OpExecuted = true
	case "archive":
		w.ArchiveKey = "archives/w1/some-op/home.tar.zst"
	case "count":
		w.ErrorCount, _ = strconv.Atoi(v)
	case "info":
		w.ErrorInfo = &ErrorInfo{Reason: v}
	case "terminal":
		w.ErrorInfo.IsTerminal = true
	case "exited":
		w.ErrorInfo.ExitedAt = *at(v)
	case "retry":
		w.NextRetryAt = at(v)
	case "seen":
		w.ObservedAt = at(v)
	case "restart":
		w.RestartPending = true
	default:
		return false
	}
	return true
}

// observationField sets the observation's field k to v, if k is one.
func observationField(t *testing.T, where string, obs *Observation, k, v string, at func(string) *time.Time) bool {
	switch k {
	case "committed":
		obs.ArchiveCommitted = true
	case "reports":
		obs.ExitReports = true
	case "exit":
		obs.ExitAsked = true
		if v != "none" {
			obs.Exit = testExit(*at(v))
		}
	case "call":
		obs.Call = parseCall(t, where, v, at)
	default:
		return false
	}
	return true
}

func testExit(at time.Time) *ExitReport {
	return &ExitReport{Status: "exit 1", Code: 1, At: at, Output: "bye", Message: "the command ended (exit 1)"}
}

// parseCall reads call=ok|fail|unreachable|deadline|reason:R|permanent:R|exit:T.
func parseCall(t *testing.T, where, v string, at func(string) *time.Time) *CallResult {
	kind, arg, _ := strings.Cut(v, ":")
	res := &CallResult{Failed: true, Err: "boom"}
	switch kind {
	case "ok":
		return &CallResult{}
	case "fail":
	case "unreachable":
		res.Reason = ReasonUnreachable
	case "deadline":
		res.DeadlineExceeded, res.Err = true, "context deadline exceeded"
	case "reason":
		res.Reason = arg
	case "permanent":
		res.Permanent, res.Reason = true, arg
	case "exit":
		res.Exit = testExit(*at(arg))
		res.Err = res.Exit.Message
	default:
		t.Fatalf("%s: call=%s: want ok, fail, unreachable, deadline, reason:R, permanent:R or exit:T", where, v)
	}
	return res
}

// decisionTokens prints d as the cases write it: the action, then its
// fields (times relative to decideNow).
func decisionTokens(d Decision) []string {
	out := []string{d.Action.String()}
	add := func(cond bool, tok string) {
		if cond {
			out = append(out, tok)
		}
	}
	add(d.Op != "", string(d.Op))
	if i := d.Info; i != nil {
		out = append(out, "reason="+i.Reason, fmt.Sprintf("count=%d", i.ErrorCount))
		add(i.IsTerminal, "terminal")
		add(i.Elapsed != 0, "elapsed="+shortDuration(time.Duration(i.Elapsed*float64(time.Second)), false))
		add(!i.ExitedAt.IsZero(), "exited="+relTime(i.ExitedAt))
	}
	if d.RetryAt != nil {
		out = append(out, "retry="+relTime(*d.RetryAt))
	}
	add(!d.Wake.IsZero() && d.Action != ActFail && d.Action != ActCrashed, "wake="+relTime(d.Wake))
	add(d.HintMonitor, "hint")
	add(d.Action == ActAskExit, "since="+relTime(d.ExitSince))
	if d.Exit != nil {
		out = append(out, "exit="+relTime(d.Exit.At))
	}
	add(d.ObservationEnds, "ends")
	return out
}

// normalizeDecision rewrites a case's expected times as decisionTokens
// prints them (+300s as +5m).
func normalizeDecision(toks []string) []string {
	out := make([]string, len(toks))
	for i, tok := range toks {
		out[i] = tok
		k, v, _ := strings.Cut(tok, "=")
		d, err := time.ParseDuration(v)
		switch {
		case err != nil || !timeFields[k]:
		case k == "elapsed":
			out[i] = k + "=" + shortDuration(d, false)
		default:
			out[i] = k + "=" + shortDuration(d, true)
		}
	}
	return out
}

// timeFields are the printed fields whose values are times or durations.
var timeFields = map[string]bool{"elapsed": true, "exited": true, "retry": true, "wake": true, "since": true, "exit": true}

// sameDecision: the same action, and the same fields in any order.
func sameDecision(got, want []string) bool {
	if len(got) == 0 || len(want) == 0 || got[0] != want[0] {
		return false
	}
	g, w := slices.Clone(got[1:]), slices.Clone(want[1:])
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}

func relTime(x time.Time) string {
	if x.IsZero() {
		return "zero"
	}
	return shortDuration(x.Sub(decideNow), true)
}

// shortDuration is d as time.Duration prints it without trailing zero
// units (5m, not 5m0s), signed if asked.
func shortDuration(d time.Duration, signed bool) string {
	s := d.String()
	for _, z := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, z) {
			s = strings.TrimSuffix(s, z[1:])
		}
	}
	if signed && d >= 0 {
		s = "+" + s
	}
	return s
}

// decisionInvariants checks what the cases do not print: a decision that
// ends in a call writes the policy's lease from now, and no other does; the
// error info is about the row's operation, found now; a failure's wake-up
// is its retry time; its last error is what the call or the end said.
func decisionInvariants(c decideCase, d Decision) string {
	if msg := leaseInvariant(c, d); msg != "" || d.Info == nil {
		return msg
	}
	switch {
	case d.Info.Operation != c.row.Operation || !d.Info.OccurredAt.Equal(decideNow) || d.Info.OccurredAt.Location() != time.UTC:
		return fmt.Sprintf("error info for %s at %v, want %s now (UTC)", d.Info.Operation, d.Info.OccurredAt, c.row.Operation)
	case (d.Action == ActFail || d.Action == ActCrashed) && (d.RetryAt == nil) != d.Info.IsTerminal:
		return "a failure retries unless terminal"
	case d.RetryAt != nil && !d.Wake.Equal(*d.RetryAt):
		return fmt.Sprintf("wake %v, want the retry time %v", d.Wake, d.RetryAt)
	case d.Action == ActFail && d.Info.LastError != c.obs.Call.Err,
		d.Action == ActCrashed && d.Info.LastError != c.obs.Exit.Message:
		return fmt.Sprintf("last error %q, not what the call or the end said", d.Info.LastError)
	}
	return ""
}

// leaseInvariant: a decision that ends in a call writes the policy's lease
// from now, and its call's deadline is the operation's timeout from its
// claim (now, for a claim); no other decision has either.
func leaseInvariant(c decideCase, d Decision) string {
	p := c.policy.withDefaults()
	claimed := decideNow
	switch d.Action {
	case ActAcquire, ActTakeover:
		claimed = startedAt(c.row)
		fallthrough
	case ActClaim, ActCompleteAndClaim:
		op := d.Op
		if op == "" {
			op = c.row.Operation
		}
		if want := decideNow.Add(p.Lease); !d.LeaseUntil.Equal(want) {
			return fmt.Sprintf("lease until %v, want %v", d.LeaseUntil, want)
		}
		if want := claimed.Add(p.timeout(op)); !d.Deadline.Equal(want) {
			return fmt.Sprintf("call deadline %v, want %v", d.Deadline, want)
		}
	default:
		if !d.LeaseUntil.IsZero() || !d.Deadline.IsZero() {
			return fmt.Sprintf("%s writes a lease or sets a deadline", d.Action)
		}
	}
	return ""
}

// TestDecideRetryDelayIsTheBackoffPolicy: Policy.retryDelay is
// internal/backoff's Delay without jitter (Config.retryPolicy), for the
// seed's defaults, a small cap and a cap below the first delay.
func TestDecideRetryDelayIsTheBackoffPolicy(t *testing.T) {
	for _, p := range []Policy{{}, {RetryBackoff: 7 * time.Second, RetryBackoffMax: time.Minute}, {RetryBackoff: time.Minute, RetryBackoffMax: time.Second},
		{RetryBackoff: time.Millisecond, RetryBackoffMax: 1 << 62}} {
		p = p.withDefaults()
		ref := backoff.Policy{Initial: p.RetryBackoff, Max: p.RetryBackoffMax, Multiplier: 2, Jitter: -1}
		for n := 0; n < 80; n++ {
			if got, want := p.retryDelay(n), ref.Delay(n); got != want {
				t.Fatalf("backoff %v, cap %v: retry %d waits %v, backoff.Policy %v", p.RetryBackoff, p.RetryBackoffMax, n, got, want)
			}
		}
	}
}

// TestDecideRetryTimeIsNeverEarly: a failure found mid-millisecond retries
// at the next whole millisecond after the policy's delay (the store keeps
// milliseconds: rounded down, the retry came up to 1 ms early).
func TestDecideRetryTimeIsNeverEarly(t *testing.T) {
	now := decideNow.Add(700 * time.Microsecond)
	row := Workspace{ID: "w1", OpID: "op1", ObservedStatus: Standby, DesiredState: Running, Operation: OpStarting, OpStartedAt: &decideNow}
	d := Decide(row, Observation{Call: &CallResult{Failed: true, Err: "boom"}}, now, Policy{RetryBackoff: 10 * time.Second})
	if want := decideNow.Add(10*time.Second + time.Millisecond); d.RetryAt == nil || !d.RetryAt.Equal(want) {
		t.Fatalf("retry at %v, want %v", d.RetryAt, want)
	}
}

// TestDecideAsksOnlyWhatItNeeds: over every row of a small domain, a step
// asks the container about an end only if it can tell and was not told
// already, and a call's outcome is always judged as one (executed,
// delete-row or fail), whatever the row shows.
func TestDecideAsksOnlyWhatItNeeds(t *testing.T) {
	ops := []Operation{OpNone, OpProvisioning, OpRestoring, OpStarting, OpStopping, OpArchiving, OpDeleting}
	statuses := []Status{Pending, Standby, Running, Error}
	asked := 0
	for _, op := range ops {
		for _, observed := range statuses {
			for _, desired := range []Status{Pending, Standby, Running, Deleted} {
				for bits := 0; bits < 16; bits++ {
					w := Workspace{ID: "w1", OpID: "op1", Operation: op, ObservedStatus: observed, DesiredState: desired, OpOwner: "me",
						OpStartedAt: &decideNow, OpExecuted: bits&1 != 0, ErrorCount: bits >> 2}
					if bits&2 != 0 {
						w.ErrorInfo = &ErrorInfo{Reason: ReasonExited, ErrorCount: w.ErrorCount}
					}
					p := Policy{Owner: "me"}
					if d := Decide(w, Observation{}, decideNow, p); d.Action == ActAskExit {
						t.Errorf("%s: asks though the container cannot tell", describe(w))
					}
					if d := Decide(w, Observation{ExitReports: true}, decideNow, p); d.Action == ActAskExit {
						asked++
						if d2 := Decide(w, Observation{ExitReports: true, ExitAsked: true}, decideNow, p); d2.Action == ActAskExit {
							t.Errorf("%s: asks again once told", describe(w))
						}
					}
					for _, res := range []CallResult{{}, {Failed: true, Err: "boom"}} {
						switch d := Decide(w, Observation{Call: &res}, decideNow, p); d.Action {
						case ActExecuted, ActDeleteRow, ActFail:
						default:
							t.Errorf("%s: a call's outcome decided %s", describe(w), d.Action)
						}
					}
				}
			}
		}
	}
	if asked == 0 {
		t.Error("no step asked about an end")
	}
}

func describe(w Workspace) string {
	return fmt.Sprintf("observed=%s desired=%s op=%s err=%d info=%+v", w.ObservedStatus, w.DesiredState, w.Operation, w.ErrorCount, w.ErrorInfo)
}
