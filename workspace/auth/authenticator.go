package auth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
)

// SessionCookie is the page's session cookie.
const SessionCookie = "gantry_session"

// touchEvery bounds how often a token's last-used time is written.
const touchEvery = time.Minute

// Errors of Authenticate. All mean 401 except *ThrottledError (429).
var (
	ErrNoToken      = errors.New("auth: no token (send Authorization: Bearer <token>)")
	ErrUnknownToken = errors.New("auth: unknown token")
	ErrRevoked      = errors.New("auth: token revoked")
	ErrExpired      = errors.New("auth: token expired")
	ErrNoSession    = errors.New("auth: session unknown or expired; log in again")
)

// ThrottledError is returned while a remote address has failed too often.
type ThrottledError struct{ RetryAfter time.Duration }

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("auth: too many failed authentications; retry in %s", e.RetryAfter.Round(time.Second))
}

// Store is what the authenticator reads; the workspace store implements it.
// found is false (and err nil) for an id that has no row.
type Store interface {
	Token(ctx context.Context, id string) (t Token, found bool, err error)
	Session(ctx context.Context, id string) (s Session, found bool, err error)
	TokenUsed(ctx context.Context, id string, at time.Time) error
}

// Authenticator turns a request into a Principal.
type Authenticator struct {
	store   Store
	clock   clock.Clock
	limiter *Limiter

	// mu protects the fields below.
	mu sync.Mutex
	// touched: token id → last time its last-used was written.
	touched map[string]time.Time
	// verified holds the hashes of the credentials (tokens and sessions)
	// this authenticator has accepted; while an address is throttled only
	// these are looked up. Invariant: a hash enters only on a success and
	// leaves when its lookup fails; at most maxVerified entries.
	verified map[string]struct{}
}

// maxVerified bounds Authenticator.verified (then it starts afresh).
const maxVerified = 100_000

// NewAuthenticator returns an authenticator over st. A nil clock is the real
// clock; a nil limiter never throttles.
func NewAuthenticator(st Store, c clock.Clock, l *Limiter) *Authenticator {
	return &Authenticator{store: st, clock: clock.Or(c), limiter: l, touched: map[string]time.Time{}, verified: map[string]struct{}{}}
}

// Authenticate checks the request's bearer token, or failing that its
// session cookie. Failures count against the remote address. While it is
// throttled, a request is refused with *ThrottledError before any store
// read unless it carries a credential this authenticator has accepted
// before: that one is still looked up (revocation, expiry) and passes, so
// one client cannot lock the known users behind the same proxy address
// out, while a flood of guesses costs no database read. (A valid
// credential not seen since this process started waits for the refill,
// as a failure does.)
func (a *Authenticator) Authenticate(r *http.Request) (Principal, error) {
	ip := RemoteIP(r)
	secret := presented(r)
	if wait := a.limiter.Wait(ip); wait > 0 && !a.known(secret) {
		return Principal{}, &ThrottledError{RetryAfter: wait}
	}
	p, err := a.authenticate(r)
	return a.throttle(ip, secret, p, err)
}

// throttle passes a success or a store failure through as it is; any other
// failure counts against ip or, while ip is throttled, becomes
// *ThrottledError; the failed secret is no longer known.
func (a *Authenticator) throttle(ip, secret string, p Principal, err error) (Principal, error) {
	if err == nil || isStoreError(err) {
		return p, err
	}
	a.forget(secret)
	if wait := a.limiter.Wait(ip); wait > 0 {
		return Principal{}, &ThrottledError{RetryAfter: wait}
	}
	a.limiter.Fail(ip)
	return p, err
}

// presented is the credential r carries: the bearer secret, else the
// session cookie's value ("" if none).
func presented(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		secret, _ := bearerSecret(h)
		return secret
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		return c.Value
	}
	return ""
}

// known reports whether secret has been accepted before (and not failed
// since).
func (a *Authenticator) known(secret string) bool {
	if secret == "" {
		return false
	}
	h := HashSecret(secret)
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.verified[h]
	return ok
}

// accepted remembers the stored hash of a credential that passed.
func (a *Authenticator) accepted(hash string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.verified[hash]; ok {
		return
	}
	if len(a.verified) >= maxVerified {
		clear(a.verified)
	}
	a.verified[hash] = struct{}{}
}

// forget drops secret from the known credentials.
func (a *Authenticator) forget(secret string) {
	if secret == "" {
		return
	}
	h := HashSecret(secret)
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.verified, h)
}

type storeError struct{ err error }

func (e storeError) Error() string { return "auth: token store: " + e.err.Error() }
func (e storeError) Unwrap() error { return e.err }

func isStoreError(err error) bool { var s storeError; return errors.As(err, &s) }

func (a *Authenticator) authenticate(r *http.Request) (Principal, error) {
	ctx := r.Context()
	if h := r.Header.Get("Authorization"); h != "" {
		secret, ok := bearerSecret(h)
		if !ok {
			return Principal{}, ErrMalformed
		}
		return a.ByToken(ctx, secret)
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		return a.bySession(ctx, c.Value)
	}
	return Principal{}, ErrNoToken
}

// Check authenticates a token secret given other than in a header (the
// page's login form), throttled like Authenticate.
func (a *Authenticator) Check(r *http.Request, secret string) (Principal, error) {
	secret = strings.TrimSpace(secret)
	ip := RemoteIP(r)
	if wait := a.limiter.Wait(ip); wait > 0 && !a.known(secret) {
		return Principal{}, &ThrottledError{RetryAfter: wait}
	}
	p, err := a.ByToken(r.Context(), secret)
	return a.throttle(ip, secret, p, err)
}

// Throttled reports whether ip is throttled now, and counts one more
// failure against it if not: callers refusing a request for another reason
// (a cross-site check) use it to bound what such refusals cost.
func (a *Authenticator) Throttled(ip string) bool {
	if a.limiter.Wait(ip) > 0 {
		return true
	}
	a.limiter.Fail(ip)
	return false
}

// IsStoreError reports whether err is the token store failing (the
// request may be fine: 503, not 401).
func IsStoreError(err error) bool { return isStoreError(err) }

// ByToken authenticates an API token secret.
func (a *Authenticator) ByToken(ctx context.Context, secret string) (Principal, error) {
	id, err := ParseSecret(TokenPrefix, secret)
	if err != nil {
		return Principal{}, err
	}
	t, found, err := a.store.Token(ctx, id)
	if err != nil {
		return Principal{}, storeError{err}
	}
	if !found || !MatchSecret(secret, t.Hash) {
		return Principal{}, ErrUnknownToken
	}
	now := a.clock.Now()
	if err := t.Usable(now); err != nil {
		return Principal{}, err
	}
	a.touch(ctx, id, now)
	a.accepted(t.Hash)
	return t.Principal(), nil
}

func (a *Authenticator) bySession(ctx context.Context, secret string) (Principal, error) {
	id, err := ParseSecret(SessionPrefix, secret)
	if err != nil {
		return Principal{}, ErrNoSession
	}
	s, found, err := a.store.Session(ctx, id)
	if err != nil {
		return Principal{}, storeError{err}
	}
	now := a.clock.Now()
	if !found || !MatchSecret(secret, s.Hash) || !now.Before(s.ExpiresAt) {
		return Principal{}, ErrNoSession
	}
	t, found, err := a.store.Token(ctx, s.TokenID)
	if err != nil {
		return Principal{}, storeError{err}
	}
	if !found {
		return Principal{}, ErrNoSession
	}
	if err := t.Usable(now); err != nil {
		return Principal{}, err
	}
	a.touch(ctx, t.ID, now)
	a.accepted(s.Hash)
	p := t.Principal()
	p.SessionID = s.ID
	return p, nil
}

// touch records last use at most once per touchEvery per token; a failed
// write is not an authentication failure.
func (a *Authenticator) touch(ctx context.Context, id string, now time.Time) {
	a.mu.Lock()
	last, ok := a.touched[id]
	due := !ok || now.Sub(last) >= touchEvery
	if due {
		if len(a.touched) > 100_000 {
			clear(a.touched)
		}
		a.touched[id] = now
	}
	a.mu.Unlock()
	if due {
		_ = a.store.TokenUsed(ctx, id, now)
	}
}

// RemoteIP is the request's peer address without the port. Forwarded
// headers are not trusted: a proxy in front is one address.
func RemoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// PresentedTokenID is the public id of the bearer token r carries, if it
// is well formed, whether or not it authenticates: the audit row of a
// refused request names the token that tried.
func PresentedTokenID(r *http.Request) string {
	secret, ok := bearerSecret(r.Header.Get("Authorization"))
	if !ok {
		return ""
	}
	id, err := ParseSecret(TokenPrefix, secret)
	if err != nil {
		return ""
	}
	return id
}

// bearerSecret returns the secret of an Authorization header value
// "Bearer <secret>" (any case, surrounding spaces trimmed); ok is false for
// another scheme or a value with no space.
func bearerSecret(header string) (secret string, ok bool) {
	scheme, secret, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(secret), true
}
