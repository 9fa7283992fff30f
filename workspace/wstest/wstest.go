// Package wstest holds what the workspace packages' tests share: the two
// SQL backends, a store per test, waiting for a condition, a one-line row
// description, the API on httptest with an admin token, the server as a
// process, fixtures, and the -short policy of the slow suites.
//
// Tour:
//
//	wstest.go    Backends, OpenStore, WaitFor, Describe, APIEnv, SkipShortBut,
//	             ParallelInShort
//	serve.go     Serve: `gantry ws serve` as a process, the CLI against it
//	fixtures.go  rows and trees to start from (CreateMany, SeedConverged,
//	             WriteTree), MetricValue
package wstest

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// Backend is one SQL store to run a suite on.
type Backend struct {
	Name string
	DSN  func(testing.TB) string
}

// Backends are SQLite and Postgres (GANTRY_TEST_POSTGRES).
var Backends = []Backend{{"sqlite", storetest.SQLiteDSN}, {"postgres", storetest.PostgresDSN}}

// OpenStore opens a fresh store on dsn, closed when t ends.
func OpenStore(t testing.TB, dsn string) *store.Store {
	t.Helper()
	return storetest.Open(t, dsn)
}

// WaitFor polls cond until it holds or d passes (testutil.WaitFor).
func WaitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testutil.WaitFor(t, d, what, cond)
}

// Describe is w's state in one line, for failure messages.
func Describe(w workspace.Workspace) string {
	return fmt.Sprintf("observed=%s desired=%s op=%s err=%d info=%+v", w.ObservedStatus, w.DesiredState, w.Operation, w.ErrorCount, w.ErrorInfo)
}

// APIEnv is the API over a store on httptest, with an admin token.
type APIEnv struct {
	St    *store.Store
	Srv   *httptest.Server
	Admin string
}

// NewAPIEnv serves api.NewAPI(cfg) over st on httptest until t ends.
func NewAPIEnv(t *testing.T, st *store.Store, cfg api.APIConfig) *APIEnv {
	t.Helper()
	cfg.Store, cfg.Accounts = st, st.Accounts()
	if cfg.Templates == nil {
		cfg.Templates = st.Templates()
	}
	srv := httptest.NewServer(api.NewAPI(cfg))
	t.Cleanup(srv.Close)
	return &APIEnv{St: st, Srv: srv, Admin: storetest.Token(t, st, workspace.AdminOwner, true)}
}

// Client is a client of the API with token.
func (e *APIEnv) Client(token string) *client.Client {
	return &client.Client{Base: e.Srv.URL, Token: token}
}

// SkipShortBut skips a store's subtest in -short unless it runs on keep:
// one store shows the behaviour in the quick loop, make test runs them all.
func SkipShortBut(t *testing.T, keep string) {
	t.Helper()
	if name := t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]; testing.Short() && name != keep {
		t.Skipf("-short: on the %s store only; make test runs %s", keep, name)
	}
}

// ParallelInShort runs a test that mostly waits on real time (backoffs,
// timeouts, slow fake calls) beside the others like it in -short, where the
// quick loop's time counts; make test keeps it on its own, as its time
// bounds were set for.
func ParallelInShort(t *testing.T) {
	if testing.Short() {
		t.Parallel()
	}
}
