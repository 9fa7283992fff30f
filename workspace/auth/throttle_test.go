package auth

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
)

// countingStore counts the token and session reads of the Store it wraps.
type countingStore struct {
	Store
	reads atomic.Int64
}

func (c *countingStore) Token(ctx context.Context, id string) (Token, bool, error) {
	c.reads.Add(1)
	return c.Store.Token(ctx, id)
}

func (c *countingStore) Session(ctx context.Context, id string) (Session, bool, error) {
	c.reads.Add(1)
	return c.Store.Session(ctx, id)
}

// TestThrottledAddressCostsNoStoreRead: once an address is throttled, a
// well-formed but unknown token (each one a database read today) is
// refused before the lookup; a credential this authenticator has verified
// before still passes (one read: revocation is still checked), and one it
// has not waits for the refill like a failure.
func TestThrottledAddressCostsNoStoreRead(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem := newMemStore()
	st := &countingStore{Store: mem}
	a := NewAuthenticator(st, clk, NewLimiter(LimiterConfig{Burst: 2, Every: 10 * time.Second, Clock: clk}))
	good, tok := mem.issue(t, "alice", false, clk.Now())
	unseen, _ := mem.issue(t, "bob", false, clk.Now())
	if _, err := a.Authenticate(request("Bearer "+good, "")); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		s, _, _, _ := NewSecret(TokenPrefix)
		if _, err := a.Authenticate(request("Bearer "+s, "")); !errors.Is(err, ErrUnknownToken) {
			t.Fatalf("attempt %d: %v, want ErrUnknownToken", i, err)
		}
	}
	before := st.reads.Load()
	for range 1000 {
		s, _, _, _ := NewSecret(TokenPrefix)
		var te *ThrottledError
		if _, err := a.Authenticate(request("Bearer "+s, "")); !errors.As(err, &te) {
			t.Fatalf("throttled address: %v, want ThrottledError", err)
		}
	}
	if n := st.reads.Load() - before; n != 0 {
		t.Fatalf("1000 requests of a throttled address read the token store %d times, want 0", n)
	}
	if p, err := a.Authenticate(request("Bearer "+good, "")); err != nil || p.TokenID != tok.ID {
		t.Fatalf("a verified token while throttled: %+v, %v", p, err)
	}
	var te *ThrottledError
	if _, err := a.Authenticate(request("Bearer "+unseen, "")); !errors.As(err, &te) {
		t.Fatalf("an unverified token while throttled: %v, want ThrottledError", err)
	}
	clk.Advance(10 * time.Second)
	if _, err := a.Authenticate(request("Bearer "+unseen, "")); err != nil {
		t.Fatalf("an unverified token after the refill: %v", err)
	}
	// A verified token revoked meanwhile is refused, and forgotten.
	revoked := *tok
	revoked.RevokedAt = clk.Now()
	mem.put(revoked)
	for range 3 {
		s, _, _, _ := NewSecret(TokenPrefix)
		a.Authenticate(request("Bearer "+s, ""))
	}
	before = st.reads.Load()
	for i := range 2 {
		if _, err := a.Authenticate(request("Bearer "+good, "")); err == nil {
			t.Fatalf("attempt %d: a revoked token passes", i)
		}
	}
	if n := st.reads.Load() - before; n != 1 {
		t.Fatalf("a revoked token while throttled read the store %d times, want 1 (then it is forgotten)", n)
	}
}
