package taskq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // cron entries name time zones; a machine may lack the database

	"github.com/robfig/cron/v3"

	"github.com/gantryhq/gantry/internal/clock"
)

// Periodic tasks: a CronEntry, stored in Redis by the client (CronAdd),
// is enqueued by every running Scheduler at each tick of its spec — and
// lands once, because each tick's task holds the unique key
// "cron:<name>:<tick>" for two periods: the schedulers that come second
// get ErrDuplicate. Entries are re-read every PollInterval, so an entry
// added, changed or removed takes effect within a tick on every worker.

// Missed-tick policies: what a scheduler does about ticks that passed while
// no scheduler ran (it knows the last tick enqueued).
const (
	MissedSkip = "skip" // wait for the next tick (default)
	MissedOnce = "once" // enqueue the latest missed tick at once, then go on
)

// CronEntry is one periodic task.
type CronEntry struct {
	Name string `json:"name"`
	// Spec is a cron expression with optional seconds ("*/5 * * * * *",
	// "0 9 * * MON-FRI"), a descriptor (@hourly, @daily, …) or "@every D"
	// (ticks at multiples of D since the Unix epoch, so every scheduler
	// computes the same ticks).
	Spec string `json:"spec"`
	// TZ is the time zone of a cron expression (IANA name); default UTC.
	TZ      string `json:"tz,omitempty"`
	Queue   string `json:"queue"`
	Type    string `json:"type"`
	Tenant  string `json:"tenant,omitempty"`
	Payload []byte `json:"payload,omitempty"`
	Missed  string `json:"missed,omitempty"` // MissedSkip (default) or MissedOnce
}

// CronInfo is an entry with its last enqueued tick and its next one.
type CronInfo struct {
	CronEntry
	Last time.Time `json:"last,omitzero"`
	Next time.Time `json:"next"`
}

// schedule is a parsed spec: Next(t) is the first tick after t.
type schedule interface{ Next(time.Time) time.Time }

// every ticks at multiples of d since the Unix epoch.
type every time.Duration

func (e every) Next(t time.Time) time.Time {
	d := int64(e)
	n := t.UnixNano()
	return time.Unix(0, (n/d+1)*d).In(t.Location())
}

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parse checks e and returns its schedule.
func (e *CronEntry) parse() (schedule, error) {
	if err := checkName("cron name", e.Name); err != nil {
		return nil, err
	}
	for _, c := range []struct{ f, v string }{{"queue", e.Queue}, {"type", e.Type}} {
		if err := checkName(c.f, c.v); err != nil {
			return nil, err
		}
	}
	if e.Tenant != "" {
		if err := checkTenant("tenant", e.Tenant); err != nil {
			return nil, err
		}
	}
	if e.Missed != "" && e.Missed != MissedSkip && e.Missed != MissedOnce {
		return nil, fmt.Errorf("%w: missed-tick policy %q, want %q or %q", ErrInvalidTask, e.Missed, MissedSkip, MissedOnce)
	}
	return parseSpec(e.Spec, e.TZ)
}

// parseSpec is the schedule of spec ("@every D" or a cron line, evaluated
// in time zone tz, "" = UTC).
func parseSpec(spec, tz string) (schedule, error) {
	if d, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		p, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || p < time.Second {
			return nil, fmt.Errorf("%w: spec %q: want @every with a duration of at least 1s", ErrInvalidTask, spec)
		}
		return every(p), nil
	}
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("%w: time zone %q: %v", ErrInvalidTask, tz, err)
		}
		loc = l
	}
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: spec %q: %v", ErrInvalidTask, spec, err)
	}
	// The parser finds no tick within five years for a date that does not
	// exist ("0 0 31 2 *"): it answers the zero time, never a tick.
	if s.Next(time.Now().In(loc)).IsZero() {
		return nil, fmt.Errorf("%w: spec %q never fires (no such date within five years)", ErrInvalidTask, spec)
	}
	return inZone{s, loc}, nil
}

// inZone evaluates a cron schedule in a time zone.
type inZone struct {
	s   cron.Schedule
	loc *time.Location
}

func (z inZone) Next(t time.Time) time.Time { return z.s.Next(t.In(z.loc)) }

// CronAdd stores e (replacing an entry of the same name); every running
// Scheduler picks it up within its PollInterval. It reports whether the
// name was new.
func (c *Client) CronAdd(ctx context.Context, e CronEntry) (bool, error) {
	if _, err := e.parse(); err != nil {
		return false, err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return false, err
	}
	return c.r.CronPut(ctx, e.Name, string(b))
}

// CronRemove deletes the entry name; it reports whether it existed.
func (c *Client) CronRemove(ctx context.Context, name string) (bool, error) {
	return c.r.CronDel(ctx, name)
}

// CronList returns the entries by name with their last and next ticks.
func (c *Client) CronList(ctx context.Context) ([]CronInfo, error) {
	entries, err := loadCron(ctx, c.r.CronAll)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]CronInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, CronInfo{CronEntry: e.CronEntry, Last: e.last, Next: e.sched.Next(now)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// loaded is an entry as a scheduler holds it.
type loaded struct {
	CronEntry
	raw   string
	sched schedule
	last  time.Time
}

// loadCron reads every entry; one that does not parse (written by hand, or
// by a later release) is skipped with its error joined to err only when
// nothing else could be read.
func loadCron(ctx context.Context, all func(context.Context) (map[string]string, map[string]int64, error)) (map[string]*loaded, error) {
	raw, last, err := all(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*loaded, len(raw))
	for name, r := range raw {
		l := &loaded{raw: r}
		if err := json.Unmarshal([]byte(r), &l.CronEntry); err != nil {
			continue
		}
		if l.sched, err = l.parse(); err != nil || l.Name != name {
			continue
		}
		if ms, ok := last[name]; ok {
			l.last = time.UnixMilli(ms)
		}
		out[name] = l
	}
	return out, nil
}

// SchedulerConfig configures a Scheduler.
type SchedulerConfig struct {
	Redis string // required, as ClientConfig.Redis
	// PollInterval is how often entries are re-read (default 1s).
	PollInterval time.Duration
	Clock        clock.Clock
	Logger       *slog.Logger
}

// Scheduler enqueues the periodic tasks of the entries in Redis. Run as
// many as you like (gantry queue worker runs one unless --no-cron): each
// tick is enqueued once.
type Scheduler struct {
	cfg SchedulerConfig
	c   *Client
	clk clock.Clock
	log *slog.Logger
	// next is each entry's next tick, keyed by name; raw detects changes.
	next map[string]time.Time
	raw  map[string]string
}

// NewScheduler connects to Redis.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	c, err := NewClient(ClientConfig{Redis: cfg.Redis})
	if err != nil {
		return nil, err
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{cfg: cfg, c: c, clk: clock.Or(cfg.Clock), log: log, next: map[string]time.Time{}, raw: map[string]string{}}, nil
}

// Run enqueues ticks until ctx ends, then closes the connection.
func (s *Scheduler) Run(ctx context.Context) error {
	defer s.c.Close()
	for {
		wait := s.cfg.PollInterval
		if next, err := s.pass(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("taskq: cron", "err", err)
		} else if d := next.Sub(s.clk.Now()); !next.IsZero() && d < wait {
			wait = max(d, 0)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.clk.After(wait):
		}
	}
}

// pass re-reads the entries, enqueues the ticks that are due and returns
// the earliest next tick.
func (s *Scheduler) pass(ctx context.Context) (time.Time, error) {
	entries, err := loadCron(ctx, s.c.r.CronAll)
	if err != nil {
		return time.Time{}, err
	}
	now := s.clk.Now()
	for name := range s.next {
		if entries[name] == nil {
			delete(s.next, name)
			delete(s.raw, name)
		}
	}
	var earliest time.Time
	for name, e := range entries {
		if s.raw[name] != e.raw { // new or changed: (re)start its schedule
			s.raw[name] = e.raw
			s.next[name] = s.first(e, now)
		}
		if s.next[name].IsZero() {
			continue // a schedule with no tick left (stored before parse refused it)
		}
		if next := s.next[name]; !next.After(now) {
			s.fire(ctx, e, next, now)
			s.next[name] = e.sched.Next(now)
		}
		if n := s.next[name]; !n.IsZero() && (earliest.IsZero() || n.Before(earliest)) {
			earliest = n
		}
	}
	return earliest, nil
}

// first is the first tick a scheduler acts on for e: the next one, or,
// with MissedOnce, the latest tick missed since the last one enqueued.
func (s *Scheduler) first(e *loaded, now time.Time) time.Time {
	if e.Missed == MissedOnce && !e.last.IsZero() {
		if t := e.sched.Next(e.last); !t.After(now) {
			for n := e.sched.Next(t); !n.IsZero() && !n.After(now); n = e.sched.Next(n) {
				t = n // the latest of the missed ticks
			}
			return t
		}
	}
	return e.sched.Next(now)
}

// fire enqueues e's tick (once across schedulers) and records it.
func (s *Scheduler) fire(ctx context.Context, e *loaded, tick, now time.Time) {
	period := e.sched.Next(e.sched.Next(tick)).Sub(e.sched.Next(tick))
	ms := tick.UnixMilli()
	opts := []Option{Queue(e.Queue), Unique("cron:"+e.Name+":"+strconv.FormatInt(ms, 10), max(2*period, time.Minute))}
	if e.Tenant != "" {
		opts = append(opts, Tenant(e.Tenant))
	}
	info, err := s.c.Enqueue(ctx, NewTask(e.Type, e.Payload), opts...)
	switch {
	case errors.Is(err, ErrDuplicate):
		return // another scheduler enqueued this tick
	case err != nil:
		s.log.Warn("taskq: cron: enqueue", "entry", e.Name, "tick", tick, "err", err)
		return
	}
	if err := s.c.r.CronTicked(ctx, e.Name, ms); err != nil {
		s.log.Warn("taskq: cron", "entry", e.Name, "err", err)
	}
	s.log.Info("taskq: cron: enqueued", "entry", e.Name, "tick", tick, "id", info.ID, "late", now.Sub(tick).Round(time.Millisecond))
}
