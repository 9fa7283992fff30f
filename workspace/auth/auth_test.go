package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
)

func TestNewSecretRoundTrips(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s, id, hash, err := NewSecret(TokenPrefix)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(s, TokenPrefix) || len(s) != len(TokenPrefix)+idLen+1+keyLen {
			t.Fatalf("secret %q has the wrong shape", s)
		}
		got, err := ParseSecret(TokenPrefix, s)
		if err != nil || got != id {
			t.Fatalf("ParseSecret(%q) = %q, %v; want %q", s, got, err, id)
		}
		if !MatchSecret(s, hash) || MatchSecret(s+"x", hash) {
			t.Fatal("MatchSecret does not tell the secret from another")
		}
		if strings.Contains(hash, s[len(TokenPrefix):]) {
			t.Fatal("hash contains the secret")
		}
		if seen[id] {
			t.Fatalf("id %s issued twice", id)
		}
		seen[id] = true
	}
}

func TestParseSecretRejects(t *testing.T) {
	good, _, _, err := NewSecret(TokenPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"", "gws_", good[:len(good)-1], good + "A", strings.Replace(good, "gws_", "gwx_", 1),
		strings.ToUpper(good), good[:len(TokenPrefix)+idLen] + "-" + good[len(TokenPrefix)+idLen+1:],
		good[:len(good)-1] + "!",
	} {
		if _, err := ParseSecret(TokenPrefix, s); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseSecret(%q) = %v, want ErrMalformed", s, err)
		}
	}
	if _, err := ParseSecret(SessionPrefix, good); err == nil {
		t.Error("a token parses as a session")
	}
}

func FuzzParseSecret(f *testing.F) {
	good, _, _, _ := NewSecret(TokenPrefix)
	f.Add(good)
	f.Add("gws_aaaaaaaaaaaaaaaa_" + strings.Repeat("A", 43))
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseSecret(TokenPrefix, s)
		if err != nil {
			return
		}
		if len(id) != idLen || !strings.HasPrefix(s, TokenPrefix+id+"_") {
			t.Fatalf("ParseSecret(%q) accepted with id %q", s, id)
		}
	})
}

func TestValidOwner(t *testing.T) {
	for _, ok := range []string{"a", "alice", "bob-2", "x.y_z", "0day", strings.Repeat("a", MaxOwnerLen)} {
		if err := ValidOwner(ok); err != nil {
			t.Errorf("ValidOwner(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Alice", "-a", ".a", "a b", "a/b", "../x", "é", strings.Repeat("a", MaxOwnerLen+1)} {
		if err := ValidOwner(bad); !errors.Is(err, ErrBadOwner) {
			t.Errorf("ValidOwner(%q) = %v, want ErrBadOwner", bad, err)
		}
	}
}

// memStore is a Store for the tests.
type memStore struct {
	mu       sync.Mutex
	tokens   map[string]Token
	sessions map[string]Session
	used     map[string]int
	fail     error
}

func newMemStore() *memStore {
	return &memStore{tokens: map[string]Token{}, sessions: map[string]Session{}, used: map[string]int{}}
}

func (m *memStore) Token(_ context.Context, id string) (Token, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tokens[id]
	return t, ok, m.fail
}

func (m *memStore) Session(_ context.Context, id string) (Session, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	return s, ok, m.fail
}

func (m *memStore) TokenUsed(_ context.Context, id string, _ time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.used[id]++
	return nil
}

func (m *memStore) issue(t *testing.T, owner string, admin bool, now time.Time) (string, *Token) {
	t.Helper()
	s, id, hash, err := NewSecret(TokenPrefix)
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tokens[id] = Token{ID: id, Owner: owner, Admin: admin, Hash: hash, CreatedAt: now}
	tok := m.tokens[id]
	return s, &tok
}

func (m *memStore) put(tok Token) { m.mu.Lock(); m.tokens[tok.ID] = tok; m.mu.Unlock() }

func request(header, cookie string) *http.Request {
	r := httptest.NewRequest("GET", "/api/workspaces", nil)
	r.RemoteAddr = "192.0.2.7:5555"
	if header != "" {
		r.Header.Set("Authorization", header)
	}
	if cookie != "" {
		r.AddCookie(&http.Cookie{Name: SessionCookie, Value: cookie})
	}
	return r
}

func TestAuthenticateMatrix(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := newMemStore()
	a := NewAuthenticator(st, clk, nil)
	alice, _ := st.issue(t, "alice", false, clk.Now())
	root, _ := st.issue(t, "admin", true, clk.Now())
	expired, tok := st.issue(t, "carol", false, clk.Now())
	tok.ExpiresAt = clk.Now().Add(-time.Second)
	st.put(*tok)
	revoked, tok := st.issue(t, "dave", false, clk.Now())
	tok.RevokedAt = clk.Now()
	st.put(*tok)
	unknown, _, _, _ := NewSecret(TokenPrefix)
	forged := forgeKey(t, TokenPrefix, alice)

	for _, tc := range []struct {
		name, header string
		want         error
		owner        string
		admin        bool
	}{
		{"alice", "Bearer " + alice, nil, "alice", false},
		{"lower-case scheme", "bearer " + alice, nil, "alice", false},
		{"admin", "Bearer " + root, nil, "admin", true},
		{"none", "", ErrNoToken, "", false},
		{"basic", "Basic " + alice, ErrMalformed, "", false},
		{"malformed", "Bearer nope", ErrMalformed, "", false},
		{"unknown", "Bearer " + unknown, ErrUnknownToken, "", false},
		{"forged key", "Bearer " + forged, ErrUnknownToken, "", false},
		{"expired", "Bearer " + expired, ErrExpired, "", false},
		{"revoked", "Bearer " + revoked, ErrRevoked, "", false},
	} {
		p, err := a.Authenticate(request(tc.header, ""))
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
			continue
		}
		if err == nil && (p.Owner != tc.owner || p.Admin != tc.admin) {
			t.Errorf("%s: principal %+v", tc.name, p)
		}
		if err != nil && (strings.Contains(err.Error(), alice) || strings.Contains(err.Error(), tc.header[min(len(tc.header), 7):]) && len(tc.header) > 20) {
			t.Errorf("%s: error %q carries the secret", tc.name, err)
		}
	}
}

// forgeKey returns secret with the same id and another well-formed key: the
// key's first character (a whole 6 bits) is changed, so the forgery always
// differs. (Overwriting the last characters with a fixed "AA" did not: some
// keys already end so.)
func forgeKey(t *testing.T, prefix, secret string) string {
	t.Helper()
	i := len(prefix) + idLen + 1
	c := byte('A')
	if secret[i] == c {
		c = 'B'
	}
	forged := secret[:i] + string(c) + secret[i+1:]
	id, err := ParseSecret(prefix, forged)
	if want, _ := ParseSecret(prefix, secret); err != nil || id != want || forged == secret {
		t.Fatalf("forgeKey: %v, id %q want %q, same as the secret: %v", err, id, want, forged == secret)
	}
	return forged
}

func TestSessions(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := newMemStore()
	a := NewAuthenticator(st, clk, nil)
	_, tok := st.issue(t, "alice", false, clk.Now())
	secret, id, hash, err := NewSecret(SessionPrefix)
	if err != nil {
		t.Fatal(err)
	}
	st.sessions[id] = Session{ID: id, TokenID: tok.ID, Hash: hash, CreatedAt: clk.Now(), ExpiresAt: clk.Now().Add(time.Hour)}

	if p, err := a.Authenticate(request("", secret)); err != nil || p.Owner != "alice" {
		t.Fatalf("session login = %+v, %v", p, err)
	}
	if _, err := a.Authenticate(request("", forgeKey(t, SessionPrefix, secret))); !errors.Is(err, ErrNoSession) {
		t.Fatalf("forged session = %v", err)
	}
	tok.RevokedAt = clk.Now()
	st.put(*tok)
	if _, err := a.Authenticate(request("", secret)); !errors.Is(err, ErrRevoked) {
		t.Fatalf("session of a revoked token = %v, want ErrRevoked", err)
	}
	tok.RevokedAt = time.Time{}
	st.put(*tok)
	clk.Advance(time.Hour)
	if _, err := a.Authenticate(request("", secret)); !errors.Is(err, ErrNoSession) {
		t.Fatalf("expired session = %v, want ErrNoSession", err)
	}
}

func TestLastUsedWrittenAtMostOncePerMinute(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := newMemStore()
	a := NewAuthenticator(st, clk, nil)
	s, tok := st.issue(t, "alice", false, clk.Now())
	for range 50 {
		if _, err := a.Authenticate(request("Bearer "+s, "")); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(touchEvery)
	if _, err := a.Authenticate(request("Bearer "+s, "")); err != nil {
		t.Fatal(err)
	}
	if got := st.used[tok.ID]; got != 2 {
		t.Fatalf("last-used written %d times, want 2", got)
	}
}

func TestStoreErrorsDoNotThrottle(t *testing.T) {
	st := newMemStore()
	st.fail = errors.New("database is down")
	l := NewLimiter(LimiterConfig{Burst: 1})
	a := NewAuthenticator(st, nil, l)
	s, _, _, _ := NewSecret(TokenPrefix)
	for range 3 {
		_, err := a.Authenticate(request("Bearer "+s, ""))
		var te *ThrottledError
		if errors.As(err, &te) || err == nil {
			t.Fatalf("store outage: err = %v, want the store error", err)
		}
	}
}

func TestLimiterThrottlesAndRecovers(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := NewLimiter(LimiterConfig{Burst: 3, Every: 10 * time.Second, Clock: clk})
	a := NewAuthenticator(newMemStore(), clk, l)
	bad := request("Bearer nope", "")
	for i := range 3 {
		if _, err := a.Authenticate(bad); !errors.Is(err, ErrMalformed) {
			t.Fatalf("attempt %d: %v, want ErrMalformed", i, err)
		}
	}
	_, err := a.Authenticate(bad)
	var te *ThrottledError
	if !errors.As(err, &te) || te.RetryAfter != 10*time.Second {
		t.Fatalf("4th attempt: %v, want ThrottledError of 10s", err)
	}
	other := request("Bearer nope", "")
	other.RemoteAddr = "192.0.2.8:1"
	if _, err := a.Authenticate(other); !errors.Is(err, ErrMalformed) {
		t.Fatalf("another address is throttled too: %v", err)
	}
	clk.Advance(10 * time.Second)
	if _, err := a.Authenticate(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("after the refill: %v, want one more attempt", err)
	}
	if w := l.Wait("192.0.2.7"); w != 10*time.Second {
		t.Fatalf("wait after spending the refill = %s", w)
	}
}

func TestLimiterBoundsItsMemory(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := NewLimiter(LimiterConfig{Burst: 2, MaxAddrs: 100, Clock: clk})
	for i := range 1000 {
		l.Fail(strings.Repeat("x", i%7) + string(rune('a'+i%26)) + time.Duration(i).String())
	}
	if n := len(l.buckets); n > 100 {
		t.Fatalf("limiter tracks %d addresses, bound 100", n)
	}
	var nilLimiter *Limiter
	nilLimiter.Fail("a")
	if nilLimiter.Wait("a") != 0 {
		t.Fatal("nil limiter throttles")
	}
}

func TestPrincipalMaySee(t *testing.T) {
	alice := Principal{Owner: "alice"}
	if !alice.MaySee("alice") || alice.MaySee("bob") {
		t.Fatal("owner check wrong")
	}
	if !(Principal{Owner: "root", Admin: true}).MaySee("bob") {
		t.Fatal("admin cannot see")
	}
}

// TestCheckThrottlesLikeAuthenticate: the login form's secret counts
// failures against the address as a header does, and a valid one accepted
// before still passes while the address is throttled.
func TestCheckThrottlesLikeAuthenticate(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := newMemStore()
	a := NewAuthenticator(st, clk, NewLimiter(LimiterConfig{Burst: 2, Every: 10 * time.Second, Clock: clk}))
	good, tok := st.issue(t, "alice", false, clk.Now())
	r := request("", "")
	if _, err := a.Check(r, good); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := a.Check(r, "nope"); !errors.Is(err, ErrMalformed) {
			t.Fatalf("attempt %d: %v, want ErrMalformed", i, err)
		}
	}
	var te *ThrottledError
	if _, err := a.Check(r, "nope"); !errors.As(err, &te) || te.RetryAfter != 10*time.Second {
		t.Fatalf("3rd attempt: %v, want ThrottledError of 10s", err)
	}
	if p, err := a.Check(r, " "+good+" "); err != nil || p.TokenID != tok.ID {
		t.Fatalf("valid secret while throttled: %+v, %v", p, err)
	}
}

func TestPresentedTokenID(t *testing.T) {
	s, id, _, err := NewSecret(TokenPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ header, want string }{
		{"Bearer " + s, id},
		{"bearer   " + s + " ", id},
		{"Basic " + s, ""},
		{"Bearer" + s, ""},
		{"Bearer nope", ""},
		{"", ""},
	} {
		if got := PresentedTokenID(request(c.header, "")); got != c.want {
			t.Errorf("PresentedTokenID(%q) = %q, want %q", c.header, got, c.want)
		}
	}
}
