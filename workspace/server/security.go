package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
)

// AdminTokenFile is the file under ServerConfig.Data where the first start writes the
// admin token (mode 0600).
const AdminTokenFile = "admin-token"

// checkTransport refuses plain HTTP on a non-loopback address unless the
// operator says a TLS proxy is in front, and a half-given or unreadable
// certificate pair, before anything is opened.
func checkTransport(cfg ServerConfig) error {
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return &ConfigError{Field: "TLSCert", Err: errors.New("TLSCert and TLSKey go together")}
	}
	if cfg.TLSCert != "" {
		if _, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey); err != nil {
			return &ConfigError{Field: "TLSCert", Err: err}
		}
	}
	if err := auth.CheckListen(cfg.Listen, cfg.TLSCert != "", cfg.InsecureListen); err != nil {
		return &ConfigError{Field: "Listen", Err: err}
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
	t, secret, err := auth.NewToken(workspace.AdminOwner, true, now, 0)
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
