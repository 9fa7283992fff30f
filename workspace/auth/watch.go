package auth

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// DefaultRecheckEvery is how often an open stream checks its credential
// again when its server sets no interval: a revoked, expired or logged-out
// credential's streams end within this (plus one check) of its end, under
// the 5 s every stream kind promises, with room for a loaded machine.
const DefaultRecheckEvery = 2 * time.Second

// ErrCredentialEnded is the cause of a watched stream's end (see Watch).
var ErrCredentialEnded = errors.New("auth: the stream's credential ended (revoked, expired or logged out)")

// Watch is how every long stream (exec, a followed log, a proxied
// connection, SSE) ends with its credential: the returned context, derived
// from ctx, ends with cause ErrCredentialEnded once Recheck(ctx) fails,
// checked every `every` (zero: DefaultRecheckEvery) on real time. A store
// error is not an end (the credential was not shown to be gone; the next
// check decides). each, if set, runs before every check: a stream's own
// periodic work (activity). stop releases the watch and returns once each
// no longer runs; call it when the stream ends.
func Watch(ctx context.Context, every time.Duration, each func()) (watched context.Context, stop context.CancelFunc) {
	if every <= 0 {
		every = DefaultRecheckEvery
	}
	watched, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-watched.Done():
				return
			case <-t.C:
			}
			if each != nil {
				each()
			}
			if err := Recheck(ctx); err != nil && !IsStoreError(err) {
				cancel(errors.Join(ErrCredentialEnded, err))
				return
			}
		}
	}()
	return watched, func() { cancel(context.Canceled); <-done }
}

// Reauthenticate checks r's credential again, as Authenticate, but outside
// the failure limiter: an open stream's check neither counts as a failed
// guess when its credential has ended nor is refused because others at its
// address are throttled (what Watch's Recheck uses).
func (a *Authenticator) Reauthenticate(r *http.Request) (Principal, error) {
	return a.authenticate(r)
}
