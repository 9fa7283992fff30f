package auth

import (
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
)

// LimiterConfig sets the failure budget per remote address. Zero values are
// the defaults.
type LimiterConfig struct {
	Burst    int           // failures allowed at once; default 10
	Every    time.Duration // one failure is forgiven per Every; default 6s
	MaxAddrs int           // addresses tracked; default 65536 (then the oldest state is dropped)
	Clock    clock.Clock   // default real
}

// Limiter is a token bucket per remote address, spent by failed
// authentications. A nil *Limiter never throttles.
type Limiter struct {
	cfg LimiterConfig

	// mu protects buckets.
	mu      sync.Mutex
	buckets map[string]bucket
}

// bucket: tokens left at time at (refilled lazily).
type bucket struct {
	tokens float64
	at     time.Time
}

// NewLimiter returns a limiter with cfg's defaults filled in.
func NewLimiter(cfg LimiterConfig) *Limiter {
	if cfg.Burst <= 0 {
		cfg.Burst = 10
	}
	if cfg.Every <= 0 {
		cfg.Every = 6 * time.Second
	}
	if cfg.MaxAddrs <= 0 {
		cfg.MaxAddrs = 65536
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return &Limiter{cfg: cfg, buckets: map[string]bucket{}}
}

// refillLocked returns addr's bucket brought up to now.
func (l *Limiter) refillLocked(addr string, now time.Time) bucket {
	b, ok := l.buckets[addr]
	if !ok {
		return bucket{tokens: float64(l.cfg.Burst), at: now}
	}
	b.tokens += float64(now.Sub(b.at)) / float64(l.cfg.Every)
	if b.tokens > float64(l.cfg.Burst) {
		b.tokens = float64(l.cfg.Burst)
	}
	b.at = now
	return b
}

// Wait returns how long addr must wait before its next attempt (0: go on).
func (l *Limiter) Wait(addr string) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refillLocked(addr, l.cfg.Clock.Now())
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(l.cfg.Every))
}

// Fail spends one token of addr's budget.
func (l *Limiter) Fail(addr string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Clock.Now()
	b := l.refillLocked(addr, now)
	b.tokens--
	if b.tokens < 0 {
		b.tokens = 0
	}
	if _, ok := l.buckets[addr]; !ok && len(l.buckets) >= l.cfg.MaxAddrs {
		l.dropFullLocked(now)
	}
	l.buckets[addr] = b
}

// dropFullLocked forgets addresses whose bucket has refilled; if none has,
// it forgets all (an attacker with that many addresses is not stopped by a
// per-address limit anyway).
func (l *Limiter) dropFullLocked(now time.Time) {
	for addr := range l.buckets {
		if l.refillLocked(addr, now).tokens >= float64(l.cfg.Burst) {
			delete(l.buckets, addr)
		}
	}
	if len(l.buckets) >= l.cfg.MaxAddrs {
		clear(l.buckets)
	}
}
