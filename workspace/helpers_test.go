package workspace

import (
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreAnyFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	)
}

type backend struct {
	name string
	dsn  func(testing.TB) string
}

var backends = []backend{{"sqlite", storetest.SQLiteDSN}, {"postgres", storetest.PostgresDSN}}

func openStore(t testing.TB, dsn string) *store.Store {
	t.Helper()
	return storetest.Open(t, dsn)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testutil.WaitFor(t, d, what, cond)
}

func describe(w Workspace) string {
	return fmt.Sprintf("observed=%s desired=%s op=%s err=%d info=%+v", w.ObservedStatus, w.DesiredState, w.Operation, w.ErrorCount, w.ErrorInfo)
}

func getenv(k string) string { return os.Getenv(k) }

// apiEnv is the API over a store on httptest, with an admin token.
type apiEnv struct {
	st    *store.Store
	srv   *httptest.Server
	admin string
}

func newAPIEnv(t *testing.T, st *store.Store, cfg APIConfig) *apiEnv {
	t.Helper()
	cfg.Store = st
	srv := httptest.NewServer(NewAPI(cfg))
	t.Cleanup(srv.Close)
	return &apiEnv{st: st, srv: srv, admin: storetest.Token(t, st, AdminOwner, true)}
}

func (e *apiEnv) client(token string) *Client { return &Client{Base: e.srv.URL, Token: token} }

// skipShortBut skips a store's subtest in -short unless it runs on keep:
// one store shows the behaviour in the quick loop, make test runs them all.
func skipShortBut(t *testing.T, keep string) {
	t.Helper()
	if name := t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]; testing.Short() && name != keep {
		t.Skipf("-short: on the %s store only; make test runs %s", keep, name)
	}
}

// parallelInShort runs a test that mostly waits on real time (backoffs,
// timeouts, slow fake calls) beside the others like it in -short, where the
// quick loop's time counts; make test keeps it on its own, as its time
// bounds were set for.
func parallelInShort(t *testing.T) {
	if testing.Short() {
		t.Parallel()
	}
}
