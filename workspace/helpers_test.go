package workspace

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreAnyFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	)
}

// pgDSN returns the test Postgres DSN (GANTRY_TEST_POSTGRES or the project
// default) with a fresh schema of its own on the search path.
func pgDSN(t testing.TB) string {
	t.Helper()
	base := os.Getenv("GANTRY_TEST_POSTGRES")
	if base == "" {
		base = "postgres://gantry:gantry@127.0.0.1:5432/gantry?sslmode=disable"
	}
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("Postgres at %s is not reachable (run scripts/services.sh postgres): %v", base, err)
	}
	schema := "ws_test_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err == nil {
			db.Exec("DROP SCHEMA " + schema + " CASCADE")
			db.Close()
		}
	})
	u, _ := url.Parse(base)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func sqliteDSN(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "ws.db")
}

type backend struct {
	name string
	dsn  func(testing.TB) string
}

var backends = []backend{{"sqlite", sqliteDSN}, {"postgres", pgDSN}}

func openStore(t testing.TB, dsn string) *Store {
	t.Helper()
	st, err := OpenStore(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s (last: %s)", d, what, last)
}

func describe(w Workspace) string {
	return fmt.Sprintf("observed=%s desired=%s op=%s err=%d info=%+v", w.ObservedStatus, w.DesiredState, w.Operation, w.ErrorCount, w.ErrorInfo)
}

func getenv(k string) string { return os.Getenv(k) }
