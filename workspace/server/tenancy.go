package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// Workspaces that share the server's user (the process provider when the
// server is not root) can read the server's data and each other's files:
// such a server is for one owner. Unless ServerConfig.InsecureSharedUser
// says otherwise, NewServer refuses to start over workspaces of two owners,
// and the API refuses to create a workspace for a second owner (409).

// isolator is a Container that can say whether it contains workspaces
// from the server and from each other (the process provider: only as root).
type isolator interface{ Isolation() error }

// sharedUser is why c's workspaces are not contained, or nil (they are,
// or c cannot say: Docker and Kubernetes contain them in their own ways).
func sharedUser(c provider.Container) error {
	if i, ok := c.(isolator); ok {
		return i.Isolation()
	}
	return nil
}

// lister lists every workspace.
type lister interface {
	List(ctx context.Context) ([]workspace.Workspace, error)
}

// owners lists the owners of the workspaces not deleted, sorted (not the
// warm pools' unclaimed members, whose owners are their own).
func owners(ctx context.Context, st lister) ([]string, error) {
	all, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, w := range all {
		if w.DesiredState != workspace.Deleted && !workspace.IsPoolOwner(w.Owner) {
			seen[w.Owner] = true
		}
	}
	out := make([]string, 0, len(seen))
	for o := range seen {
		out = append(out, o)
	}
	sort.Strings(out)
	return out, nil
}

// sharedUserAdvice is what to do about a server whose workspaces share its user.
const sharedUserAdvice = "run ws serve as root, which gives each workspace a user and namespaces of its own, or give --insecure-shared-user to allow it anyway"

// checkTenancy refuses to start a server whose workspaces share its user
// over workspaces of several owners, unless cfg.InsecureSharedUser.
func checkTenancy(ctx context.Context, cfg ServerConfig, st lister) error {
	why := sharedUser(cfg.Container)
	if why == nil {
		return nil
	}
	if cfg.InsecureSharedUser {
		cfg.Logger.Warn("workspace: workspaces are not contained from each other nor from the server (--insecure-shared-user)", "why", why)
		return nil
	}
	have, err := owners(ctx, st)
	if err != nil {
		return err
	}
	if len(have) > 1 {
		return &ConfigError{Field: "InsecureSharedUser", Err: fmt.Errorf("the database holds workspaces of %d owners (%s), but %v; %s",
			len(have), strings.Join(have, ", "), why, sharedUserAdvice)}
	}
	return nil
}

// oneOwner is the API's store on a server whose workspaces share its user:
// it refuses to create a workspace for an owner while another owner has one.
type oneOwner struct {
	api.APIStore
	why error
	// mu serialises the check and the create on this server. (Replicas
	// over one Postgres could each admit one owner at once; the next start
	// of either then refuses, as checkTenancy does.)
	mu sync.Mutex
}

func (s *oneOwner) CreateWithin(ctx context.Context, n workspace.NewWorkspace, q auth.Quotas, now time.Time) (workspace.Workspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	have, err := owners(ctx, s.APIStore)
	if err != nil {
		return workspace.Workspace{}, err
	}
	for _, o := range have {
		if o != n.Owner {
			return workspace.Workspace{}, fmt.Errorf("%w: this server runs the workspaces of one owner (%q has some) because %v; %s",
				workspace.ErrConflict, o, s.why, sharedUserAdvice)
		}
	}
	return s.APIStore.CreateWithin(ctx, n, q, now)
}

// apiStore is the API's store: st, or oneOwner over it when the server's
// workspaces share its user and cfg does not allow several owners.
func apiStore(cfg ServerConfig, st api.APIStore) api.APIStore {
	if why := sharedUser(cfg.Container); why != nil && !cfg.InsecureSharedUser {
		return &oneOwner{APIStore: st, why: why}
	}
	return st
}

// openStore opens the server's store, its SQLite files mode 0600, and
// refuses one whose workspaces are several owners' when they would share
// the server's user (checkTenancy).
func openStore(ctx context.Context, cfg ServerConfig, gate *urgency.Gate) (*store.Store, error) {
	if err := restrictDB(cfg.DB); err != nil {
		return nil, &ConfigError{Field: "DB", Err: err}
	}
	st, err := store.OpenWith(ctx, cfg.DB, store.Options{Gate: gate})
	if err != nil {
		return nil, &ConfigError{Field: "DB", Err: err}
	}
	if err := restrictDB(cfg.DB); err != nil {
		st.Close()
		return nil, &ConfigError{Field: "DB", Err: err}
	}
	if err := checkTenancy(ctx, cfg, st); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// restrictDB makes a SQLite database's files (db, -wal, -shm) mode 0600,
// creating an empty database file so if there is none yet: they hold the
// workspaces' environments and the audit log. (SQLite gives the -wal and
// -shm files it makes the database file's mode.) Called before the store
// opens it and after.
func restrictDB(dsn string) error {
	path, ok := strings.CutPrefix(dsn, "sqlite:")
	if !ok || path == "" || strings.HasPrefix(path, ":memory:") {
		return nil
	}
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600); err == nil {
		f.Close()
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("%s: %w", filepath.Base(p), err)
		}
	}
	return nil
}
