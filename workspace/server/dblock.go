package server

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/internal/fsutil"
)

// A SQLite database is one server's: replicas need Postgres (its leader
// election is what lets several run the singletons), and two servers on one
// SQLite file would both run the monitor, TTL, GC and pool loops over the
// same workspaces. lockDB holds (flock) <path>.lock beside the database
// for as long as the server runs, the file naming its pid, so that a second
// server on the same database is refused naming the first. Postgres takes
// no lock: its replicas may share a host and a data directory.
func lockDB(dsn string) (unlock func(), err error) {
	path, ok := strings.CutPrefix(dsn, "sqlite:")
	if !ok || path == "" || strings.HasPrefix(path, ":memory:") {
		return func() {}, nil
	}
	lock := path + ".lock"
	f, err := fsutil.LockFile(lock)
	if errors.Is(err, fsutil.ErrBusy) {
		b, _ := os.ReadFile(lock)
		holder := strings.TrimSpace(string(b))
		if _, perr := strconv.Atoi(holder); perr != nil {
			holder = "unknown"
		}
		return nil, &ConfigError{Field: "DB", Err: fmt.Errorf("the SQLite database %s is in use by another gantry ws serve (pid %s); give each server its own --data, or run replicas on Postgres (--db postgres://…)", path, holder)}
	}
	if err != nil {
		return nil, &ConfigError{Field: "DB", Err: err}
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}
