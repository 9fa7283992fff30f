package reconcile

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/handoff"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// Config configures a Reconciler. Zero values are the seed's defaults.
type Config struct {
	Interval     time.Duration // RECONCILER_INTERVAL, 0 = 10 s
	MaxRetries   int           // RECONCILER_MAX_RETRIES, 0 = 3 (retries after the first attempt; <0 = none)
	RetryBackoff time.Duration // RECONCILER_RETRY_BACKOFF: first retry delay, 0 = 30 s; doubles per retry
	// RetryBackoffMax caps the exponential backoff; 0 = 32 × RetryBackoff.
	RetryBackoffMax time.Duration
	// CrashWindow: a workspace whose command ends within this long of its
	// previous end is in a crash loop, and each end counts as one more
	// failed attempt (backoff doubling, ERROR after MaxRetries); one that
	// ran longer starts counting again. 0 = 10 min (Kubernetes resets its
	// crash-loop backoff after 10 minutes of running too).
	CrashWindow time.Duration
	// Timeouts per operation (RECONCILER_{STARTING,STOPPING,ARCHIVING,
	// RESTORING}_TIMEOUT); missing = 300 s for start/stop, 1800 s for
	// archive/restore/provision/delete. A timeout given must be positive.
	Timeouts map[workspace.Operation]time.Duration
	// Lease is how long a claim survives its replica without renewal
	// before another replica takes the operation over; 0 = 15 s.
	Lease time.Duration
	// Concurrency bounds provider calls in flight; 0 = 256 (512 converged
	// 100,000 workspaces no faster, and a user's change waited behind its
	// runnable goroutines: p99 97–166 ms against 40–43 ms on Postgres).
	Concurrency int
	// Workers is the number of sched workers; 0 = GOMAXPROCS.
	Workers int
	// Owner names this replica in op_owner; "" = hostname-pid-random.
	Owner  string
	Logger *slog.Logger
	// Clock times claims, leases, retries, deadlines and ticks; nil = the
	// wall clock.
	Clock clock.Clock

	// Metrics records operations at their source; nil = none (NewMetrics).
	Metrics *Metrics
	// Handoff is the mailbox this process's monitor shares (package
	// handoff): a step takes the row a monitor's hint announces instead of
	// reading it, and leaves the rows it wrote; nil = none.
	Handoff *handoff.Mailbox
	// Gate is this process's count of a user's work in flight, shared with
	// the store and the API (package urgency): an urgent hint holds it
	// until a step has claimed, and bulk steps about to start wait for it
	// (bounded); nil = none.
	Gate *urgency.Gate
}

// ConfigFromEnv reads the seed's environment variables (seconds).
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	secs := func(name string) (time.Duration, error) {
		v := getenv(name)
		if v == "" {
			return 0, nil
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) { // !(f > 0): NaN too
			return 0, fmt.Errorf("%w: %s=%q, want a positive number of seconds", workspace.ErrBadInput, name, v)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	var err error
	if c.Interval, err = secs("RECONCILER_INTERVAL"); err != nil {
		return c, err
	}
	if c.RetryBackoff, err = secs("RECONCILER_RETRY_BACKOFF"); err != nil {
		return c, err
	}
	if v := getenv("RECONCILER_MAX_RETRIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return c, fmt.Errorf("%w: RECONCILER_MAX_RETRIES=%q, want an integer >= 0", workspace.ErrBadInput, v)
		}
		c.MaxRetries = n
		if n == 0 {
			c.MaxRetries = -1
		}
	}
	c.Timeouts = map[workspace.Operation]time.Duration{}
	for _, op := range []workspace.Operation{workspace.OpStarting, workspace.OpStopping, workspace.OpArchiving, workspace.OpRestoring} {
		d, err := secs("RECONCILER_" + string(op) + "_TIMEOUT")
		if err != nil {
			return c, err
		}
		if d > 0 {
			c.Timeouts[op] = d
		}
	}
	return c, nil
}

func (c *Config) validate() error {
	if c.Interval < 0 || c.RetryBackoff < 0 || c.RetryBackoffMax < 0 || c.CrashWindow < 0 || c.Lease < 0 || c.Concurrency < 0 || c.Workers < 0 {
		return fmt.Errorf("%w: negative reconciler setting", workspace.ErrBadInput)
	}
	if c.MaxRetries < 0 {
		c.MaxRetries = -1 // "no retries"; stays -1, so validating twice keeps it
	}
	setDefault(&c.Interval, 10*time.Second)
	setDefault(&c.MaxRetries, 3)
	setDefault(&c.RetryBackoff, 30*time.Second)
	setDefault(&c.RetryBackoffMax, 32*c.RetryBackoff)
	setDefault(&c.CrashWindow, 10*time.Minute)
	t := map[workspace.Operation]time.Duration{
		workspace.OpStarting: 300 * time.Second, workspace.OpStopping: 300 * time.Second,
		workspace.OpArchiving: 1800 * time.Second, workspace.OpRestoring: 1800 * time.Second,
		workspace.OpProvisioning: 1800 * time.Second, workspace.OpDeleting: 1800 * time.Second,
	}
	for op, d := range c.Timeouts {
		if d <= 0 { // no operation could run: Policy's 0 would mean the default
			return fmt.Errorf("%w: %s timeout %v, want a positive duration", workspace.ErrBadInput, op, d)
		}
		t[op] = d
	}
	c.Timeouts = t
	setDefault(&c.Lease, 15*time.Second)
	setDefault(&c.Concurrency, 256)
	if c.Owner == "" {
		h, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s-%d-%s", h, os.Getpid(), uuid.NewString()[:8])
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Clock = clock.Or(c.Clock)
	return nil
}

// setDefault sets *p to d if *p is the zero value.
func setDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// policy is the numbers a step judges by (workspace.Decide), from the
// validated c.
func (c *Config) policy() workspace.Policy {
	return workspace.Policy{Owner: c.Owner, Interval: c.Interval, MaxRetries: c.MaxRetries, RetryBackoff: c.RetryBackoff,
		RetryBackoffMax: c.RetryBackoffMax, CrashWindow: c.CrashWindow, Timeouts: c.Timeouts, Lease: c.Lease}
}
