package server

import (
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider/process"
)

// sharedUserServer is NewServer under data with the process provider
// running workspaces as the server's own user (as it does when the server
// is not root), served over httptest until closed.
func sharedUserServer(t *testing.T, data string, insecure bool) (*Server, *httptest.Server, error) {
	c, st := DefaultProviders(data)
	c.(*process.Container).SharedUser = true
	srv, err := NewServer(t.Context(), ServerConfig{Data: data, Container: c, Storage: st, InsecureSharedUser: insecure})
	if err != nil {
		return nil, nil, err
	}
	return srv, httptest.NewServer(srv.API), nil
}

// TestSharedUserServerIsOneOwners: a server whose workspaces share its
// user creates workspaces for one owner only: another owner's create is
// refused (409), saying why and what to do; with InsecureSharedUser
// (--insecure-shared-user) it is created; and a server over two owners'
// workspaces refuses to start without it.
func TestSharedUserServerIsOneOwners(t *testing.T) {
	ctx := t.Context()
	data := filepath.Join(t.TempDir(), "data")
	srv, hs, err := sharedUserServer(t, data, false)
	if err != nil {
		t.Fatal(err)
	}
	adminToken, _ := os.ReadFile(filepath.Join(data, AdminTokenFile))
	admin := &client.Client{Base: hs.URL, Token: strings.TrimSpace(string(adminToken))}
	tok, err := admin.CreateToken(ctx, api.TokenRequest{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Create(ctx, workspace.NewWorkspace{Name: "mine"}); err != nil {
		t.Fatal(err)
	}
	alice := &client.Client{Base: hs.URL, Token: tok.Secret}
	_, err = alice.Create(ctx, workspace.NewWorkspace{Name: "hers"})
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "--insecure-shared-user") || !strings.Contains(err.Error(), `"admin"`) {
		t.Fatalf("alice's create on admin's shared-user server: %v; want 409 naming admin and --insecure-shared-user", err)
	}
	if _, err := admin.Create(ctx, workspace.NewWorkspace{Name: "mine2"}); err != nil {
		t.Fatalf("the one owner's second workspace: %v", err)
	}
	hs.Close()
	srv.Close()

	srv, hs, err = sharedUserServer(t, data, true)
	if err != nil {
		t.Fatal(err)
	}
	alice.Base = hs.URL
	if _, err := alice.Create(ctx, workspace.NewWorkspace{Name: "hers"}); err != nil {
		t.Fatalf("alice's create with InsecureSharedUser: %v", err)
	}
	hs.Close()
	srv.Close()

	_, _, err = sharedUserServer(t, data, false)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "InsecureSharedUser" || !strings.Contains(err.Error(), "2 owners (admin, alice)") {
		t.Fatalf("a restart over two owners' workspaces without InsecureSharedUser: %v", err)
	}
}

// TestDataIsPrivate: the data directory is 0700 (an existing one made
// 0700 too), and the database's files 0600.
func TestDataIsPrivate(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	c, st := DefaultProviders(data)
	srv, err := NewServer(t.Context(), ServerConfig{Data: data, Container: c, Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.API)
	defer hs.Close()
	adminToken, _ := os.ReadFile(filepath.Join(data, AdminTokenFile))
	admin := &client.Client{Base: hs.URL, Token: strings.TrimSpace(string(adminToken))}
	if _, err := admin.Create(t.Context(), workspace.NewWorkspace{Name: "w", Spec: workspace.Spec{Env: []string{"SECRET=1"}}}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{".": 0o700, "workspaces.db": 0o600, "workspaces.db-wal": 0o600, AdminTokenFile: 0o600} {
		fi, err := os.Stat(filepath.Join(data, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v; want %v", name, err, fi.Mode().Perm(), want)
		}
	}
}
