package live

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// authStack is the API with the live server (SSE) mounted, as `ws serve`
// serves it, without a reconciler: what the authorization tests need.
type authStack struct {
	st  *store.Store
	url string
	log *testutil.Buffer // the server's log output
}

func newAuthStack(t *testing.T, st *store.Store, q auth.Quotas, log *testutil.Buffer) *authStack {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hb := hints.NewLocal()
	srv, err := NewServer(Config{Store: st, Hints: hb, ResyncInterval: time.Hour, KeepAlive: time.Second, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	api := api.NewAPI(api.APIConfig{Store: st, Accounts: st.Accounts(), Hints: hb, Quotas: q, Logger: logger,
		Limiter: auth.NewLimiter(auth.LimiterConfig{Burst: 10_000})})
	api.Handle("/", srv)
	hs := httptest.NewServer(api)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); srv.Run(ctx) }()
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close(); cancel(); <-done })
	waitFor(t, "hub synced", srv.Hub().Synced)
	return &authStack{st: st, url: hs.URL, log: log}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, what, func() (bool, string) { return cond(), "not yet" })
}

// call sends one request with token ("" = none, else the whole header
// value after "Bearer ") and returns the status and body. A stream that
// is wrongly opened is cut after 5 s (its body is what came by then).
func (s *authStack) call(t *testing.T, token, method, path, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, s.url+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (s *authStack) create(t *testing.T, token, name string) string {
	t.Helper()
	code, body := s.call(t, token, "POST", "/v1/workspaces", `{"name":"`+name+`"}`)
	if code != http.StatusCreated {
		t.Fatalf("create %s: %d %s", name, code, body)
	}
	var w workspace.Workspace
	json.Unmarshal([]byte(body), &w)
	return w.ID
}

func (s *authStack) ids(t *testing.T, token, path string) map[string]bool {
	t.Helper()
	code, body := s.call(t, token, "GET", path, "")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	var ws []workspace.Workspace
	json.Unmarshal([]byte(body), &ws)
	out := map[string]bool{}
	for _, w := range ws {
		out[w.ID] = true
	}
	return out
}

// stream opens GET /events with token and returns the ids of its events,
// in order, on a channel.
func (s *authStack) stream(t *testing.T, ctx context.Context, token string) <-chan string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET /events: %s", resp.Status)
	}
	out := make(chan string, 256)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var e Event
				if json.Unmarshal([]byte(data), &e) == nil {
					out <- e.ID
				}
			}
		}
	}()
	return out
}

// until reads ids from c until want arrives, failing on any id in never.
func until(t *testing.T, c <-chan string, want string, never ...string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case id, ok := <-c:
			if !ok {
				t.Fatalf("stream ended before %s", want)
			}
			for _, n := range never {
				if id == n {
					t.Fatalf("the stream carried %s, which it must never show", id)
				}
			}
			if id == want {
				return
			}
		case <-timeout:
			t.Fatalf("no event for %s", want)
		}
	}
}

type sentCall struct {
	actions   []string // the audit actions it may be recorded as
	status    int
	tokenID   string
	workspace string
}

// The authorization matrix on both databases: no, malformed, unknown,
// expired and revoked tokens get 401 on every endpoint; a second owner gets
// 404 on every endpoint of the first owner's workspace and never sees it in
// a list or a stream; an admin sees and acts on all. Every mutating request
// leaves its audit row; no secret reaches the database or the log.
func TestAuthorizationMatrix(t *testing.T) {
	for _, b := range []struct {
		name string
		dsn  func(testing.TB) string
	}{{"sqlite", storetest.SQLiteDSN}, {"postgres", storetest.PostgresDSN}} {
		t.Run(b.name, func(t *testing.T) {
			dsn := b.dsn(t)
			st := storetest.Open(t, dsn)
			s := newAuthStack(t, st, auth.Quotas{}, &testutil.Buffer{})
			checkMatrix(t, s, dsn)
		})
	}
}

func tokenID(t *testing.T, secret string) string {
	id, err := auth.ParseSecret(auth.TokenPrefix, secret)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func checkMatrix(t *testing.T, s *authStack, dsn string) {
	ctx := t.Context()
	admin := storetest.Token(t, s.st, "admin", true)
	alice := storetest.Token(t, s.st, "alice", false)
	bob := storetest.Token(t, s.st, "bob", false)
	expiredTok, expired, err := auth.NewToken("carol", false, time.Now().Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.st.Accounts().CreateToken(ctx, expiredTok); err != nil {
		t.Fatal(err)
	}
	revoked := storetest.Token(t, s.st, "dave", false)
	unknown, _, _, _ := auth.NewSecret(auth.TokenPrefix)
	secrets := []string{admin, alice, bob, expired, revoked, unknown}

	var sent []sentCall
	mutate := func(token, method, path, body string, actions []string, ws string) int {
		code, resp := s.call(t, token, method, path, body)
		tid := ""
		if id, err := auth.ParseSecret(auth.TokenPrefix, token); err == nil {
			tid = id
		}
		sent = append(sent, sentCall{actions: actions, status: code, tokenID: tid, workspace: ws})
		if code >= 500 {
			t.Fatalf("%s %s: %d %s", method, path, code, resp)
		}
		return code
	}
	if code := mutate(admin, "DELETE", "/v1/tokens/"+tokenID(t, revoked), "", []string{"token.revoke"}, ""); code != 200 {
		t.Fatalf("revoke: %d", code)
	}

	aliceWS := s.create(t, alice, "w1")
	bobWS := s.create(t, bob, "w1") // names are per owner
	sent = append(sent, sentCall{[]string{"workspace.create"}, 201, tokenID(t, alice), aliceWS},
		sentCall{[]string{"workspace.create"}, 201, tokenID(t, bob), bobWS})

	type endpoint struct {
		method, path, body string
		actions            []string // nil: a read
	}
	on := func(id string) []endpoint {
		w := "/v1/workspaces/" + id
		return []endpoint{
			{"GET", w, "", nil},
			{"PUT", w + "/desired", `{"desired_state":"RUNNING"}`, []string{"workspace.desired", "workspace.up"}},
			{"POST", w + "/recover", "", []string{"workspace.recover"}},
			{"POST", w + "/touch", "", []string{"workspace.touch"}},
			{"DELETE", w, "", []string{"workspace.delete"}},
			{"GET", "/workspaces/" + id + "/events", "", nil},
		}
	}
	all := append(on(aliceWS),
		endpoint{"GET", "/v1/workspaces", "", nil},
		endpoint{"POST", "/v1/workspaces", `{"name":"sneaky"}`, []string{"workspace.create"}},
		endpoint{"GET", "/events", "", nil},
		endpoint{"GET", "/v1/whoami", "", nil},
		endpoint{"POST", "/v1/tokens", `{"owner":"mallory","admin":true}`, []string{"token.create"}},
		endpoint{"GET", "/v1/audit", "", nil},
	)
	for _, bad := range []struct{ name, token string }{
		{"none", ""}, {"malformed", "nope"}, {"unknown", unknown}, {"expired", expired}, {"revoked", revoked},
	} {
		for _, e := range all {
			var code int
			if e.actions != nil {
				code = mutate(bad.token, e.method, e.path, e.body, e.actions, pathID(e.path))
			} else {
				code, _ = s.call(t, bad.token, e.method, e.path, e.body)
			}
			if code != http.StatusUnauthorized {
				t.Errorf("%s token: %s %s = %d, want 401", bad.name, e.method, e.path, code)
			}
		}
	}

	// Bob: 404 on every endpoint of alice's workspace; lists and streams
	// without it. Bob's stream is opened first: it must carry bob's change
	// and never alice's, which comes before it.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bobEvents := s.stream(t, sctx, bob)
	until(t, bobEvents, bobWS, aliceWS)
	adminEvents := s.stream(t, sctx, admin)
	for _, e := range on(aliceWS) {
		var code int
		if e.actions != nil {
			code = mutate(bob, e.method, e.path, e.body, e.actions, aliceWS)
		} else {
			code, _ = s.call(t, bob, e.method, e.path, e.body)
		}
		if code != http.StatusNotFound {
			t.Errorf("bob: %s %s = %d, want 404", e.method, e.path, code)
		}
	}
	for _, path := range []string{"/v1/workspaces", "/v1/workspaces?owner=bob"} {
		if got := s.ids(t, bob, path); got[aliceWS] || !got[bobWS] || len(got) != 1 {
			t.Errorf("bob's %s = %v, want only %s", path, got, bobWS)
		}
	}
	if code, _ := s.call(t, bob, "GET", "/v1/workspaces?owner=alice", ""); code != http.StatusForbidden {
		t.Errorf("bob listing alice's: %d, want 403", code)
	}
	for _, path := range []string{"/v1/tokens", "/v1/audit"} {
		if code, _ := s.call(t, bob, "GET", path, ""); code != http.StatusForbidden {
			t.Errorf("bob: GET %s = %d, want 403", path, code)
		}
	}
	if code := mutate(bob, "POST", "/v1/tokens", `{"owner":"bob","admin":true}`, []string{"token.create"}, ""); code != http.StatusForbidden {
		t.Errorf("bob minting an admin token: %d, want 403", code)
	}
	mutate(alice, "PUT", "/v1/workspaces/"+aliceWS+"/desired", `{"desired_state":"PENDING"}`, []string{"workspace.archive"}, aliceWS)
	mutate(bob, "PUT", "/v1/workspaces/"+bobWS+"/desired", `{"desired_state":"PENDING"}`, []string{"workspace.archive"}, bobWS)
	until(t, bobEvents, bobWS, aliceWS)
	until(t, adminEvents, aliceWS)
	until(t, adminEvents, bobWS)

	// The admin sees and acts on both.
	if got := s.ids(t, admin, "/v1/workspaces"); !got[aliceWS] || !got[bobWS] {
		t.Errorf("admin's list = %v, want both", got)
	}
	if got := s.ids(t, admin, "/v1/workspaces?owner=alice"); !got[aliceWS] || len(got) != 1 {
		t.Errorf("admin's list of alice's = %v", got)
	}
	for _, id := range []string{aliceWS, bobWS} {
		if code, body := s.call(t, admin, "GET", "/v1/workspaces/"+id, ""); code != 200 {
			t.Errorf("admin GET %s: %d %s", id, code, body)
		}
		if code := mutate(admin, "POST", "/v1/workspaces/"+id+"/touch", "", []string{"workspace.touch"}, id); code != 204 {
			t.Errorf("admin touch %s: %d", id, code)
		}
	}
	// Nothing the refused requests asked for happened.
	for _, id := range []string{aliceWS, bobWS} {
		w, err := s.st.Get(ctx, id)
		if err != nil || w.DesiredState != workspace.Pending {
			t.Errorf("%s after the matrix: %+v, %v; want desired PENDING", id, w, err)
		}
	}
	if _, err := s.st.Lookup(ctx, "sneaky", ""); err == nil {
		t.Error("an unauthenticated create landed")
	}

	checkAudit(t, s, sent)
	checkNoSecrets(t, s, dsn, secrets)
}

func pathID(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/workspaces/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// checkAudit: one row per mutating request, in order, with its status,
// token, workspace and the remote address.
func checkAudit(t *testing.T, s *authStack, sent []sentCall) {
	t.Helper()
	rows, err := s.st.Accounts().Audit(t.Context(), auth.AuditFilter{Limit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(sent) {
		t.Fatalf("audit has %d rows for %d mutating requests", len(rows), len(sent))
	}
	for i, want := range sent {
		r := rows[i]
		okAction := false
		for _, a := range want.actions {
			okAction = okAction || r.Action == a
		}
		if !okAction || r.Status != want.status || r.TokenID != want.tokenID || r.Workspace != want.workspace || r.Remote != "127.0.0.1" {
			t.Errorf("audit row %d = %+v; want actions %v status %d token %q workspace %q from 127.0.0.1", i, r, want.actions, want.status, want.tokenID, want.workspace)
		}
		if r.Status >= 400 && r.Detail == "" {
			t.Errorf("audit row %d (refused, %d) says not why", i, r.Status)
		}
	}
}

// checkNoSecrets searches the database (SQLite's files; Postgres's rows as
// text) and the server's log for every secret and its random part.
func checkNoSecrets(t *testing.T, s *authStack, dsn string, secrets []string) {
	t.Helper()
	// A page session too: its cookie secret must not be stored either.
	resp, err := http.Post(s.url+"/v1/session", "application/json", strings.NewReader(`{"token":"`+secrets[1]+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session string
	for _, c := range resp.Cookies() {
		if c.Name == auth.SessionCookie && c.HttpOnly && c.SameSite == http.SameSiteStrictMode {
			session = c.Value
		}
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(session, auth.SessionPrefix) {
		t.Fatalf("login: %s, session cookie %q; want 200 and an HttpOnly SameSite=Strict session", resp.Status, session[:min(len(session), 8)])
	}
	var haystacks []string
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if b, err := os.ReadFile(path + suffix); err == nil {
				haystacks = append(haystacks, string(b))
			}
		}
		if len(haystacks) == 0 {
			t.Fatalf("no database file at %s", filepath.Dir(path))
		}
	} else {
		db := storetest.DB(t, dsn)
		for _, table := range []string{"tokens", "sessions", "audit", "workspaces"} {
			rows, err := db.QueryContext(t.Context(), `SELECT t::text FROM `+table+` t`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var row string
				rows.Scan(&row)
				haystacks = append(haystacks, row)
			}
			rows.Close()
		}
	}
	haystacks = append(haystacks, s.log.String())
	for _, secret := range append(secrets, session) {
		_, key, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(secret, auth.TokenPrefix), auth.SessionPrefix), "_") // the random part (base64url: may hold '_')
		if len(key) < 40 {
			t.Fatalf("secret %q has no 256-bit key after its id", secret[:8])
		}
		for i, h := range haystacks {
			if strings.Contains(h, secret) || strings.Contains(h, key) {
				t.Errorf("a token secret is in haystack %d of %d (the last is the log)", i, len(haystacks))
			}
		}
	}
	if !strings.Contains(s.log.String(), "authentication failed") {
		t.Error("failed authentications were not logged")
	}
}

// Quotas: 429 naming the limit and the count; on Postgres, 20 concurrent
// ups by one owner through two replicas (two API servers, two pools) with
// one running slot admit exactly one.
func TestQuotas(t *testing.T) {
	for _, b := range []struct {
		name     string
		dsn      func(testing.TB) string
		replicas int
	}{{"sqlite", storetest.SQLiteDSN, 1}, {"postgres", storetest.PostgresDSN, 2}} {
		t.Run(b.name, func(t *testing.T) {
			dsn := b.dsn(t)
			var stacks []*authStack
			for range b.replicas {
				stacks = append(stacks, newAuthStack(t, storetest.Open(t, dsn), auth.Quotas{Running: 1, Workspaces: 21}, &testutil.Buffer{}))
			}
			alice := storetest.Token(t, stacks[0].st, "alice", false)
			bob := storetest.Token(t, stacks[0].st, "bob", false)
			var ids []string
			for i := range 20 {
				ids = append(ids, stacks[i%len(stacks)].create(t, alice, fmt.Sprintf("w%d", i)))
			}
			var wg sync.WaitGroup
			codes := make([]int, len(ids))
			bodies := make([]string, len(ids))
			for i, id := range ids {
				wg.Go(func() {
					codes[i], bodies[i] = stacks[i%len(stacks)].call(t, alice, "PUT", "/v1/workspaces/"+id+"/desired", `{"desired_state":"RUNNING"}`)
				})
			}
			wg.Wait()
			ok := 0
			for i, c := range codes {
				switch {
				case c == 200:
					ok++
				case c != http.StatusTooManyRequests || !strings.Contains(bodies[i], "limit 1") || !strings.Contains(bodies[i], "has 1 running"):
					t.Errorf("up %d: %d %s; want 200 or 429 naming the limit and the count", i, c, bodies[i])
				}
			}
			if ok != 1 {
				t.Fatalf("%d of 20 concurrent ups admitted with --quota-running 1, want exactly 1", ok)
			}
			running := 0
			all, _ := stacks[0].st.List(t.Context())
			for _, w := range all {
				if w.DesiredState == workspace.Running {
					running++
				}
			}
			if running != 1 {
				t.Fatalf("%d workspaces desired RUNNING, want 1", running)
			}
			// Another owner has its own slot; alice's 21st workspace is her last.
			if id := stacks[0].create(t, bob, "b"); id == "" {
				t.Fatal("bob could not create")
			}
			if code, body := stacks[0].call(t, bob, "POST", "/v1/workspaces", `{"name":"b2","desired_state":"RUNNING"}`); code != 201 {
				t.Fatalf("bob's first running workspace: %d %s", code, body)
			}
			stacks[0].create(t, alice, "w20")
			code, body := stacks[0].call(t, alice, "POST", "/v1/workspaces", `{"name":"w21"}`)
			if code != http.StatusTooManyRequests || !strings.Contains(body, "limit 21") || !strings.Contains(body, "has 21 workspaces") {
				t.Fatalf("alice's 22nd workspace: %d %s; want 429 naming limit 21", code, body)
			}
		})
	}
}
