package workspace

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace/auth"
)

// AdminTokenFile is the file under --data where the first start writes the
// admin token (mode 0600).
const AdminTokenFile = "admin-token"

// checkTransport refuses plain HTTP on a non-loopback address unless the
// operator says a TLS proxy is in front, and a half-given or unreadable
// certificate pair, before anything is opened.
func checkTransport(cfg ServerConfig) error {
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if cfg.TLSCert != "" {
		if _, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey); err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
	}
	if err := auth.CheckListen(cfg.Listen, cfg.TLSCert != "", cfg.InsecureListen); err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	return nil
}

// AdminStore is what the first start needs: whether an admin can log in,
// and a place to put a new admin token.
type AdminStore interface {
	HasUsableAdmin(ctx context.Context, now time.Time) (bool, error)
	CreateToken(ctx context.Context, t auth.Token) error
}

// ensureAdminToken makes an admin token when the database has none that
// works (its first start, or every admin token revoked or expired) and
// writes its secret to <data>/admin-token, mode 0600; the log names the
// file and the token id, never the secret. An admin-token file already
// there is kept, renamed admin-token.<time>.old: it may belong to another
// database.
func ensureAdminToken(ctx context.Context, st AdminStore, data string, log *slog.Logger, now time.Time) error {
	ok, err := st.HasUsableAdmin(ctx, now)
	if err != nil || ok {
		return err
	}
	t, secret, err := auth.NewToken(AdminOwner, true, now, 0)
	if err != nil {
		return err
	}
	path := filepath.Join(data, AdminTokenFile)
	if _, err := os.Stat(path); err == nil {
		old := fmt.Sprintf("%s.%s.old", path, now.UTC().Format("20060102T150405"))
		if err := os.Rename(path, old); err != nil {
			return fmt.Errorf("admin token: keeping the old %s: %w", path, err)
		}
		log.Warn("workspace: the admin-token file does not open this database; kept it aside", "old", old)
	}
	if err := writeSecretFile(path, secret+"\n"); err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	if err := st.CreateToken(ctx, t); err != nil {
		os.Remove(path)
		return fmt.Errorf("admin token: %w", err)
	}
	log.Info("workspace: created an admin token; its secret is in the file (mode 0600)", "file", path, "token_id", t.ID)
	return nil
}

// writeSecretFile writes content to path, mode 0600, atomically.
func writeSecretFile(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteString(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// DefaultAuditRetention is how long audit rows are kept by default.
const DefaultAuditRetention = 90 * 24 * time.Hour

// Retention removes audit rows older than Audit and expired page sessions,
// once per Interval; it runs on the leader (RunSingletons).
type Retention struct {
	Store interface {
		PruneAccounts(ctx context.Context, before, now time.Time) (int64, error)
	}
	Audit    time.Duration // zero = DefaultAuditRetention; negative = keep audit rows forever
	Interval time.Duration // zero = 1h
	Clock    clock.Clock
	Logger   *slog.Logger
}

// Run prunes at once and then every Interval until ctx ends.
func (r *Retention) Run(ctx context.Context) error {
	c := clock.Or(r.Clock)
	every := r.Interval
	if every <= 0 {
		every = time.Hour
	}
	for {
		r.Prune(ctx, c.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-c.After(every):
		}
	}
}

// Prune runs one pass at now.
func (r *Retention) Prune(ctx context.Context, now time.Time) {
	keep := r.Audit
	if keep == 0 {
		keep = DefaultAuditRetention
	}
	before := time.Time{} // keep forever: remove nothing older than the epoch
	if keep > 0 {
		before = now.Add(-keep)
	}
	n, err := r.Store.PruneAccounts(ctx, before, now)
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case err != nil && ctx.Err() == nil:
		log.Warn("workspace: pruning the audit log", "err", err)
	case n > 0:
		log.Info("workspace: pruned the audit log", "rows", n, "older_than", before)
	}
}
