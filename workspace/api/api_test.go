package api_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// Bad input gets a 4xx with a message and changes nothing.
func TestAPIBadInput(t *testing.T) {
	for _, b := range wstest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			st := wstest.OpenStore(t, b.DSN(t))
			env := wstest.NewAPIEnv(t, st, api.APIConfig{})
			srv := env.Srv
			w, err := st.Create(t.Context(), workspace.NewWorkspace{Name: "taken"}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			before, _ := st.List(t.Context())
			tests := []struct {
				method, path, body string
				code               int
				msg                string
			}{
				{"PUT", "/v1/workspaces/" + w.ID + "/desired", `{"desired_state":"FLYING"}`, 400, "desired_state"},
				{"PUT", "/v1/workspaces/" + w.ID + "/desired", `{"desired_state":`, 400, "request body"},
				{"PUT", "/v1/workspaces/" + w.ID + "/desired", `{"desired":"RUNNING"}`, 400, "unknown field"},
				{"PUT", "/v1/workspaces/nope/desired", `{"desired_state":"RUNNING"}`, 404, "not found"},
				{"GET", "/v1/workspaces/nope", ``, 404, "not found"},
				{"DELETE", "/v1/workspaces/nope", ``, 404, "not found"},
				{"POST", "/v1/workspaces/nope/recover", ``, 404, "not found"},
				{"POST", "/v1/workspaces/nope/touch", ``, 404, "not found"},
				{"POST", "/v1/workspaces", `{"name":"taken"}`, 409, "already taken"},
				{"POST", "/v1/workspaces", `{"name":""}`, 400, "name"},
				{"POST", "/v1/workspaces", `{"name":"x","desired_state":"ERROR"}`, 400, "desired_state"},
				{"POST", "/v1/workspaces", `not json`, 400, "request body"},
				{"POST", "/v1/workspaces", `{"name":"x"} {"name":"y"}`, 400, "trailing"},
				{"POST", "/v1/workspaces", `{"name":"a b"}`, 400, "name"},
				{"POST", "/v1/workspaces", `{"name":"../etc"}`, 400, "name"},
				{"POST", "/v1/workspaces", `{"name":"` + strings.Repeat("n", 64) + `"}`, 400, "name"},
				{"POST", "/v1/workspaces", `{"name":"x","owner":"bob"}`, 400, "unknown field"},
				{"POST", "/v1/workspaces", `{"name":"x","command":"` + strings.Repeat("y", 1<<20) + `"}`, 413, "too large"},
				{"POST", "/v1/tokens", `{"owner":"Not Valid"}`, 400, "owner"},
				{"POST", "/v1/tokens", `{"owner":"admin"}`, 400, "reserved"},
				{"POST", "/v1/tokens", `{"owner":"ok","expires_in":"soon"}`, 400, "expires_in"},
				{"GET", "/v1/audit?since=yesterday", ``, 400, "since"},
			}
			for _, tt := range tests {
				req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
				req.Header.Set("Authorization", "Bearer "+env.Admin)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.code || !strings.Contains(string(body), tt.msg) {
					t.Errorf("%s %s %s: %d %s, want %d containing %q", tt.method, tt.path, tt.body, resp.StatusCode, body, tt.code, tt.msg)
				}
			}
			after, _ := st.List(t.Context())
			if d := cmp.Diff(before, after); d != "" {
				t.Fatalf("database changed (-before +after):\n%s", d)
			}
		})
	}
}

// Touch through the client (`gantry ws touch`) records activity: the idle
// clock restarts and the desired version moves (a TTL decision read
// before it cannot land).
func TestAPITouch(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	env := wstest.NewAPIEnv(t, st, api.APIConfig{})
	ctx := t.Context()
	w, err := st.Create(ctx, workspace.NewWorkspace{Name: "busy"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	v0, act0, _ := st.DesiredVersion(ctx, w.ID)
	c := env.Client(env.Admin)
	if err := c.Touch(ctx, w.Name); err != nil {
		t.Fatal(err)
	}
	v1, act1, _ := st.DesiredVersion(ctx, w.ID)
	if v1 != v0+1 || act1 == nil || (act0 != nil && !act1.After(*act0)) {
		t.Fatalf("after touch: version %d → %d, activity %v → %v", v0, v1, act0, act1)
	}
	var ae *client.APIError
	if err := c.Touch(ctx, "nope"); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("touch of an unknown id = %v; want a 404", err)
	}
}

// Repeated failed authentications from one address are slowed down: 429
// with Retry-After, logged; a good token accepted before still passes from
// that address, and the address recovers once the bucket refills.
func TestAPIThrottlesFailedAuthentication(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	clk := clock.NewFake(time.Now())
	var log bytes.Buffer
	env := wstest.NewAPIEnv(t, st, api.APIConfig{Clock: clk, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Limiter: auth.NewLimiter(auth.LimiterConfig{Burst: 3, Every: 10 * time.Second, Clock: clk})})
	get := func(token string) *http.Response {
		req, _ := http.NewRequest("GET", env.Srv.URL+"/v1/workspaces", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	get(env.Admin) // accepted once: the authenticator knows it
	for i := range 3 {
		if code := get("wrong").StatusCode; code != 401 {
			t.Fatalf("failure %d: %d, want 401", i, code)
		}
	}
	resp := get("wrong")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "10" {
		t.Fatalf("4th failure: %d Retry-After %q; want 429 and 10", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// A valid token accepted before still passes (after one store read
	// only): the throttle slows guessing, it does not lock out the known
	// users behind the same address.
	if code := get(env.Admin).StatusCode; code != 200 {
		t.Fatalf("a good token from a throttled address: %d, want 200", code)
	}
	if code := get("wrong").StatusCode; code != http.StatusTooManyRequests {
		t.Fatalf("a bad token while throttled: %d, want 429", code)
	}
	clk.Advance(10 * time.Second)
	if code := get("wrong").StatusCode; code != http.StatusUnauthorized {
		t.Fatalf("after the refill: %d, want 401", code)
	}
	if n := strings.Count(log.String(), "authentication failed"); n != 4 {
		t.Fatalf("%d failures logged, want 4 (throttled ones are not):\n%s", n, log.String())
	}
	// Cross-site refusals cost an audit row only at the limiter's pace.
	clk.Advance(time.Hour)
	before, _ := st.Accounts().Audit(t.Context(), auth.AuditFilter{})
	for range 20 {
		req, _ := http.NewRequest("POST", env.Srv.URL+"/v1/workspaces", strings.NewReader(`{"name":"x"}`))
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-site POST: %d, want 403", resp.StatusCode)
		}
	}
	after, _ := st.Accounts().Audit(t.Context(), auth.AuditFilter{})
	if n := len(after) - len(before); n < 1 || n > 3 {
		t.Fatalf("20 cross-site refusals wrote %d audit rows, want 1 to 3 (the limiter's burst)", n)
	}
}

// The leader's retention pass removes audit rows older than the retention
// and expired sessions, and keeps the rest; a negative retention keeps all.
func TestRetentionPrunesTheAuditLog(t *testing.T) {
	for _, b := range wstest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			st := wstest.OpenStore(t, b.DSN(t)).Accounts()
			ctx := t.Context()
			now := time.Now().Truncate(time.Millisecond)
			for _, age := range []time.Duration{100 * 24 * time.Hour, 91 * 24 * time.Hour, 89 * 24 * time.Hour, time.Hour} {
				if err := st.RecordAudit(ctx, auth.AuditEntry{At: now.Add(-age), Action: "workspace.touch", Status: 204}); err != nil {
					t.Fatal(err)
				}
			}
			for i, exp := range []time.Time{now.Add(-time.Minute), now.Add(time.Hour)} {
				if err := st.CreateSession(ctx, auth.Session{ID: fmt.Sprint("s", i), TokenID: "t", Hash: "h", CreatedAt: now, ExpiresAt: exp}); err != nil {
					t.Fatal(err)
				}
			}
			(&singletons.Retention{Store: st, Audit: -1}).Prune(ctx, now)
			if es, _ := st.Audit(ctx, auth.AuditFilter{}); len(es) != 4 {
				t.Fatalf("negative retention kept %d rows, want 4", len(es))
			}
			(&singletons.Retention{Store: st}).Prune(ctx, now)
			es, err := st.Audit(ctx, auth.AuditFilter{})
			if err != nil || len(es) != 2 || !es[0].At.Equal(now.Add(-89*24*time.Hour)) {
				t.Fatalf("after the default 90-day retention: %+v, %v; want the 89-day and 1-hour rows", es, err)
			}
			if _, ok, _ := st.Session(ctx, "s0"); ok {
				t.Fatal("an expired session survived")
			}
			if _, ok, _ := st.Session(ctx, "s1"); !ok {
				t.Fatal("a live session was removed")
			}
		})
	}
}
