// Package storetest is test support for the workspace store: fresh
// databases (a SQLite file in a temp dir, a Postgres schema of its own),
// the list of real backends every store test runs on, and Force, which
// puts a row into a state a test needs without going through the
// reconciler (a simulated observation, an old timestamp, foreign error
// info). What a test does to the database beside the store under test
// (Force, Exec, DB) goes through connections of its own to the store's
// DSN, never through the store.
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/store"
)

// Backend is a real database a test can open.
type Backend struct {
	Name string
	DSN  func(testing.TB) string
}

// Backends are the real stores: SQLite and Postgres.
var Backends = []Backend{{"sqlite", SQLiteDSN}, {"postgres", PostgresDSN}}

// SQLiteDSN is a fresh SQLite file in the test's temp dir.
func SQLiteDSN(tb testing.TB) string { return "sqlite:" + filepath.Join(tb.TempDir(), "ws.db") }

// PostgresDSN returns the test Postgres (testutil.Postgres starts it if
// needed) with a fresh schema of its own on the search path, dropped at
// cleanup.
func PostgresDSN(tb testing.TB) string {
	tb.Helper()
	base := testutil.Postgres(tb)
	db, err := sql.Open("pgx", base)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		tb.Fatalf("Postgres at %s is not reachable (run scripts/services.sh postgres): %v", base, err)
	}
	schema := "ws_test_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
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

// Open opens dsn and closes it at cleanup.
func Open(tb testing.TB, dsn string) *store.Store {
	tb.Helper()
	return OpenWith(tb, dsn, store.Options{})
}

// OpenWith is Open with options (a Gate).
func OpenWith(tb testing.TB, dsn string, o store.Options) *store.Store {
	tb.Helper()
	st, err := store.OpenWith(tb.Context(), dsn, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// DB is a connection pool of the test's own on dsn (SQLite, as the store
// opens it, or Postgres), closed at cleanup: Postgres hints send NOTIFY on
// it, and tests inspect the server with it (pg_stat_activity).
func DB(tb testing.TB, dsn string) *sql.DB {
	tb.Helper()
	db, err := openDB(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func openDB(dsn string) (*sql.DB, error) {
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		// WAL (the store set it: it lasts in the file) lets this pool read
		// beside the store's; busy_timeout makes its writes wait for the
		// store's writer, as a second replica's would.
		return sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)")
	}
	return sql.Open("pgx", dsn)
}

// Exec runs one statement with ? placeholders (as the store writes them)
// on dsn, on a connection of its own, and returns the rows it affected.
func Exec(tb testing.TB, dsn, q string, args ...any) (int64, error) {
	tb.Helper()
	if !strings.HasPrefix(dsn, "sqlite:") {
		q = dollars(q)
	}
	db, err := openDB(dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	res, err := db.ExecContext(tb.Context(), q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// dollars spells q's ? placeholders $1, $2, … for Postgres.
func dollars(q string) string {
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Force sets columns of workspace id's row in st's database: times as
// time.Time, states as strings or workspace values, error_info as
// *workspace.ErrorInfo.
func Force(tb testing.TB, st *store.Store, id string, cols map[string]any) {
	tb.Helper()
	names := make([]string, 0, len(cols))
	for k := range cols {
		names = append(names, k)
	}
	sort.Strings(names)
	var set []string
	var args []any
	for _, k := range names {
		set = append(set, k+" = ?")
		args = append(args, column(cols[k]))
	}
	n, err := Exec(tb, st.DSN(), "UPDATE workspaces SET "+strings.Join(set, ", ")+" WHERE id = ?", append(args, id)...)
	if err != nil || n != 1 {
		tb.Fatalf("force %s %v: %d rows, %v", id, cols, n, err)
	}
}

func column(v any) any {
	switch v := v.(type) {
	case time.Time:
		return v.UnixMilli()
	case fmt.Stringer:
		if e, ok := v.(interface{ JSON() any }); ok {
			return e.JSON()
		}
		return v.String()
	case interface{ JSON() any }:
		return v.JSON()
	}
	return v
}

// Token stores a new API token for owner and returns its secret.
func Token(tb testing.TB, st *store.Store, owner string, admin bool) string {
	tb.Helper()
	t, secret, err := auth.NewToken(owner, admin, time.Now(), 0)
	if err != nil {
		tb.Fatal(err)
	}
	if err := st.Accounts().CreateToken(tb.Context(), t); err != nil {
		tb.Fatal(err)
	}
	return secret
}
