package auth

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/internal/testutil"
)

// A watched context ends, with cause ErrCredentialEnded, once the recheck
// fails; a store error does not end it; each runs before every check; stop
// returns once the watch no longer runs.
func TestWatchEndsWithTheCredential(t *testing.T) {
	var fail atomic.Pointer[error]
	down := error(storeError{errors.New("db down")})
	fail.Store(&down)
	var checks atomic.Int32
	ctx := WithRecheck(t.Context(), func() error { checks.Add(1); return *fail.Load() })
	var each atomic.Int32
	watched, stop := Watch(ctx, time.Millisecond, func() { each.Add(1) })
	defer stop()
	testutil.WaitFor(t, 5*time.Second, "three checks through store errors", func() (bool, string) { return checks.Load() >= 3, "" })
	if watched.Err() != nil {
		t.Fatalf("a store error ended the stream: %v", context.Cause(watched))
	}
	revoked := ErrRevoked
	fail.Store(&revoked)
	<-watched.Done()
	if cause := context.Cause(watched); !errors.Is(cause, ErrCredentialEnded) || !errors.Is(cause, ErrRevoked) {
		t.Fatalf("cause %v", cause)
	}
	stop()
	if e, c := each.Load(), checks.Load(); e != c {
		t.Fatalf("each ran %d times for %d checks", e, c)
	}
}

// An open stream's re-check is outside the failure limiter: a revoked
// token's re-checks do not throttle its address, and a valid token's
// re-check passes while its address is throttled.
func TestReauthenticateIsNotThrottled(t *testing.T) {
	m := newMemStore()
	now := time.Now()
	a := NewAuthenticator(m, clock.NewFake(now), NewLimiter(LimiterConfig{Burst: 2}))
	good, _ := m.issue(t, "alice", false, now)
	gone, tok := m.issue(t, "bob", false, now)
	tok.RevokedAt = now
	m.put(*tok)
	for range 5 {
		if _, err := a.Reauthenticate(request("Bearer "+gone, "")); !errors.Is(err, ErrRevoked) {
			t.Fatalf("re-check of a revoked token: %v", err)
		}
	}
	if a.limiter.Wait("192.0.2.7") > 0 {
		t.Fatal("re-checks of an ended credential throttled its address")
	}
	for range 5 {
		a.Authenticate(request("Bearer gws_nope", ""))
	}
	if a.limiter.Wait("192.0.2.7") == 0 {
		t.Fatal("the address is not throttled after 5 bad tokens")
	}
	if _, err := a.Reauthenticate(request("Bearer "+good, "")); err != nil {
		t.Fatalf("a valid token's re-check while its address is throttled: %v", err)
	}
}
