package api_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// brokenStore is a store whose workspace list and token lookups fail with
// an error that names the database's address and password.
type brokenStore struct {
	*store.Store
}

const dsnSecret = "postgres://gantry:hunter2@db.internal:5432"

var errBroken = errors.New("dial " + dsnSecret + ": connection refused")

func (b *brokenStore) List(context.Context) ([]workspace.Workspace, error) { return nil, errBroken }

func (b *brokenStore) ListOwned(context.Context, string) ([]workspace.Workspace, error) {
	return nil, errBroken
}

// brokenAccounts fails every token lookup when fail is set.
type brokenAccounts struct {
	*store.Accounts
	fail bool
}

func (b *brokenAccounts) Token(ctx context.Context, id string) (auth.Token, bool, error) {
	if b.fail {
		return auth.Token{}, false, errBroken
	}
	return b.Accounts.Token(ctx, id)
}

// A 500 (the store failed a list) and a 503 (the token store failed) answer
// in general terms; the error itself, which can name the database's host,
// user and password, is only in the server's log.
func TestAPIKeepsInternalErrorsInTheLog(t *testing.T) {
	st := wstest.OpenStore(t, wstest.Backends[0].DSN(t))
	admin := storetest.Token(t, st, workspace.AdminOwner, true)
	for _, c := range []struct {
		name   string
		tokens bool
		code   int
	}{{"list fails", false, http.StatusInternalServerError}, {"token lookup fails", true, http.StatusServiceUnavailable}} {
		t.Run(c.name, func(t *testing.T) {
			var log testutil.Buffer
			srv := httptest.NewServer(api.NewAPI(api.APIConfig{Store: &brokenStore{Store: st}, Accounts: &brokenAccounts{Accounts: st.Accounts(), fail: c.tokens},
				Logger: slog.New(slog.NewTextHandler(&log, nil))}))
			defer srv.Close()
			req, _ := http.NewRequest("GET", srv.URL+"/v1/workspaces", nil)
			req.Header.Set("Authorization", "Bearer "+admin)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code || strings.Contains(string(body), "hunter2") || !strings.Contains(string(body), `"error"`) {
				t.Errorf("GET /v1/workspaces: %d %s; want %d with an error that names no detail", resp.StatusCode, body, c.code)
			}
			if !strings.Contains(log.String(), "hunter2") {
				t.Errorf("the log lacks the error:\n%s", log.String())
			}
		})
	}
}
