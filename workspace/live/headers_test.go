package live

import (
	"context"
	"errors"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
)

// The page and its files are served with headers that keep it out of
// frames and off other origins' scripts and styles, never sniffed, no
// referrer; HSTS only over TLS (over plain HTTP the header would be
// meaningless, and behind a TLS proxy the proxy sets it).
func TestPageSecurityHeaders(t *testing.T) {
	srv, err := NewServer(Config{Store: &fakeSource{}})
	if err != nil {
		t.Fatal(err)
	}
	plain := httptest.NewServer(srv)
	defer plain.Close()
	tls := httptest.NewTLSServer(srv)
	defer tls.Close()
	want := map[string]string{
		"X-Frame-Options":        "DENY",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
	}
	for _, hs := range []*httptest.Server{plain, tls} {
		for _, path := range []string{"/", "/static/app.js", "/static/style.css", "/healthz"} {
			resp, err := hs.Client().Get(hs.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			h := resp.Header
			for k, v := range want {
				if h.Get(k) != v {
					t.Errorf("%s %s: %s %q, want %q", hs.URL, path, k, h.Get(k), v)
				}
			}
			csp := h.Get("Content-Security-Policy")
			for _, d := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "form-action 'self'", "base-uri 'none'"} {
				if !strings.Contains(csp, d) {
					t.Errorf("%s %s: Content-Security-Policy %q lacks %q", hs.URL, path, csp, d)
				}
			}
			hsts := h.Get("Strict-Transport-Security")
			if hs == tls && !strings.HasPrefix(hsts, "max-age=") || hs == plain && hsts != "" {
				t.Errorf("%s %s: Strict-Transport-Security %q; want it under TLS only", hs.URL, path, hsts)
			}
		}
	}
}

// failingSource is a fakeSource whose reads fail with err once set.
type failingSource struct {
	fakeSource
	err error // under fakeSource.mu
}

func (f *failingSource) States(ctx context.Context) iter.Seq2[workspace.Workspace, error] {
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return func(yield func(workspace.Workspace, error) bool) { yield(workspace.Workspace{}, err) }
	}
	return f.fakeSource.States(ctx)
}

func (f *failingSource) Lookup(ctx context.Context, ref, owner string) (workspace.Workspace, error) {
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return workspace.Workspace{}, err
	}
	return f.fakeSource.Lookup(ctx, ref, owner)
}

// /readyz (public) and a failed stream say what failed in general terms
// only; the store's error (which can name a database host and user) and a
// readiness check's own text go to the log.
func TestErrorsKeepDetailsInTheLog(t *testing.T) {
	const secret = "postgres://gantry:hunter2@db.internal:5432"
	src := &failingSource{}
	var log testutil.Buffer
	srv, err := NewServer(Config{Store: src, ResyncInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Ready: func() error { return errors.New("reconciler: " + secret) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "hub synced", srv.Hub().Synced)
	src.mu.Lock()
	src.err = errors.New("store: dial " + secret + ": connection refused")
	src.mu.Unlock()
	hs := httptest.NewServer(as(srv, adminPrincipal))
	defer hs.Close()
	for _, c := range []struct {
		path string
		code int
	}{{"/readyz", http.StatusServiceUnavailable}, {"/workspaces/x/events", http.StatusInternalServerError}} {
		resp, err := http.Get(hs.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || strings.Contains(string(body), "hunter2") || len(body) == 0 {
			t.Errorf("%s: %d %q; want %d without the error's details", c.path, resp.StatusCode, body, c.code)
		}
	}
	for _, want := range []string{"store: dial", "reconciler: postgres"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, log.String())
		}
	}
}
