package live

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// newClockStack is the API with the live server mounted, on a fake clock
// (the API's: token and session expiry), re-checking open streams every
// recheck, with a keep-alive too rare to end a stream in a test.
func newClockStack(t *testing.T, clk *clock.Fake, recheck time.Duration) (url string, st storeTokens) {
	st0 := storetest.Open(t, storetest.SQLiteDSN(t))
	hb := hints.NewLocal()
	srv, err := NewServer(Config{Store: st0, Hints: hb, ResyncInterval: time.Hour, KeepAlive: time.Hour, RecheckEvery: recheck})
	if err != nil {
		t.Fatal(err)
	}
	a := api.NewAPI(api.APIConfig{Store: st0, Accounts: st0.Accounts(), Hints: hb, Clock: clk,
		Limiter: auth.NewLimiter(auth.LimiterConfig{Burst: 10_000})})
	a.Handle("/", srv)
	hs := httptest.NewServer(a)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); srv.Run(ctx) }()
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close(); cancel(); <-done })
	waitFor(t, "hub synced", srv.Hub().Synced)
	return hs.URL, st0.Accounts()
}

type storeTokens interface {
	CreateToken(context.Context, auth.Token) error
}

// An open event stream ends within 5 s of its credential's end: a token
// revoked, a token expired, a page session logged out.
func TestEventStreamEndsWithItsCredential(t *testing.T) {
	for _, how := range []string{"revoked", "expired", "logged-out"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(wstest.T0)
			url, st := newClockStack(t, clk, 50*time.Millisecond)
			token := func(owner string, admin bool, expires time.Duration) (secret, id string) {
				tok, secret, err := auth.NewToken(owner, admin, clk.Now(), expires)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.CreateToken(t.Context(), tok); err != nil {
					t.Fatal(err)
				}
				return secret, tok.ID
			}
			admin, _ := token("admin", true, 0)
			call := func(header, method, path string, want int) *http.Response {
				req, _ := http.NewRequestWithContext(t.Context(), method, url+path, strings.NewReader(`{}`))
				k, v, _ := strings.Cut(header, ": ")
				req.Header.Set(k, v)
				resp, err := http.DefaultClient.Do(req)
				if err != nil || resp.StatusCode != want {
					t.Fatalf("%s %s: %v %v, want %d", method, path, resp, err, want)
				}
				return resp
			}
			secret, id := token("alice", false, time.Hour)
			header, end := "Authorization: Bearer "+secret, func() {}
			switch how {
			case "revoked":
				end = func() { call("Authorization: Bearer "+admin, "DELETE", "/v1/tokens/"+id, 200).Body.Close() }
			case "expired":
				end = func() { clk.Advance(2 * time.Hour) }
			case "logged-out":
				resp, err := http.Post(url+"/v1/session", "application/json", strings.NewReader(`{"token":"`+secret+`"}`))
				if err != nil || len(resp.Cookies()) == 0 {
					t.Fatalf("login: %v", err)
				}
				resp.Body.Close()
				header = "Cookie: " + resp.Cookies()[0].Name + "=" + resp.Cookies()[0].Value
				end = func() { call(header, "POST", "/v1/session/logout", 204).Body.Close() }
			}
			resp := call(header, "GET", "/events", 200)
			br := bufio.NewReader(resp.Body)
			if line, err := br.ReadString('\n'); resp.StatusCode != 200 || err != nil {
				t.Fatalf("GET /events: %s %q %v", resp.Status, line, err)
			}
			ended := make(chan struct{})
			go func() { defer close(ended); io.Copy(io.Discard, br); resp.Body.Close() }()
			end()
			select {
			case <-ended:
			case <-time.After(5 * time.Second):
				t.Fatalf("the event stream is still open 5 s after its credential was %s", how)
			}
		})
	}
}
