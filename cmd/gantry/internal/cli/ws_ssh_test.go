package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// TestConfigSSHWritesAFileOfItsOwn: `ws config-ssh --file` writes a Host
// gantry-NAME for each of the caller's workspaces (not another owner's)
// whose ProxyCommand is `ws ssh --stdio ID` against the server, into the
// given file (mode 0600; a path with a space and a % is quoted and
// escaped), never the token; it prints the Include line. `ws ssh` without
// --stdio says what to do.
func TestConfigSSHWritesAFileOfItsOwn(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	env := wstest.NewAPIEnv(t, st, api.APIConfig{})
	alice := storetest.Token(t, st, "alice", false)
	bob := storetest.Token(t, st, "bob", false)
	ids := map[string]string{}
	for _, n := range []struct{ token, name string }{{alice, "one"}, {alice, "two"}, {bob, "bobs"}} {
		w, err := env.Client(n.token).Create(t.Context(), workspace.NewWorkspace{Name: n.name})
		if err != nil {
			t.Fatal(err)
		}
		ids[n.name] = w.ID
	}
	file := filepath.Join(t.TempDir(), "my 100% dir", "ssh_config")
	code, stdout, stderr := runRecordCmd(t, "ws", "--server", env.Srv.URL, "--token", alice, "config-ssh", "--file", file)
	if code != 0 {
		t.Fatalf("config-ssh: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "Include \""+file+"\"\n") {
		t.Fatalf("config-ssh printed %q; want the Include line of %q", stdout, file)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	for _, want := range []string{
		"Host gantry-one\n", "Host gantry-two\n", "  User alice\n", "  StrictHostKeyChecking accept-new\n",
		" ws --server " + env.Srv.URL + " ssh --stdio " + ids["one"] + "\n",
		"  UserKnownHostsFile \"" + strings.ReplaceAll(filepath.Join(filepath.Dir(file), "gantry_known_hosts"), "%", "%%") + "\"\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("the config lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "bobs") || strings.Contains(conf, alice) {
		t.Errorf("the config names bob's workspace or holds the token:\n%s", conf)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the config's mode: %v %v; want 0600", fi, err)
	}
	code, _, stderr = runRecordCmd(t, "ws", "--server", env.Srv.URL, "--token", alice, "ssh", ids["one"])
	if code == 0 || !strings.Contains(stderr, "needs --stdio") {
		t.Errorf("ws ssh without --stdio: exit %d, %q", code, stderr)
	}
}
