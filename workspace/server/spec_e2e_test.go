package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// A workspace's environment and limits, set at create, changed with `ws
// update` (at the next start, or now with --restart), and the limits the
// process provider cannot enforce refused with the reason.
func TestSpecThroughCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	s := wstest.StartServe(t, "", t.TempDir())
	// The command reports its environment, then tries to allocate 256 MiB
	// under a 96 MiB memory limit.
	script := `echo "greeting=$GREETING empty=[$EMPTY]"; python3 -c 'bytearray(256<<20)' 2>/dev/null; echo "alloc status $?"; exec sleep infinity`
	id := strings.TrimSpace(s.CLI("create", "envy", "--cmd", script, "--env", "GREETING=hello world", "--env", "EMPTY=",
		"--memory", "96MiB", "--desired", "RUNNING"))
	s.CLI("wait", id, "RUNNING", "--timeout", "30s")
	waitLog := func(want string) string {
		t.Helper()
		var out string
		wstest.WaitFor(t, 10*time.Second, "log line "+want, func() (bool, string) {
			out, _ = s.CLIErr("logs", id)
			return strings.Contains(out, want), out
		})
		return out
	}
	waitLog("greeting=hello world empty=[]")
	waitLog("alloc status 1") // MemoryError: the limit holds
	w := s.Get(id)
	if !slices.Equal(w.Env, []string{"GREETING=hello world", "EMPTY="}) || w.Memory != 96<<20 {
		t.Fatalf("spec as stored: env %q memory %d", w.Env, w.Memory)
	}

	// Refused with the reason: what the process provider cannot enforce,
	// the variables gantry sets, malformed entries, a memory limit too small.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "x", "--cpus", "1"}, "cannot bound CPU"},
		{[]string{"create", "x", "--env", "PORT=1"}, "PORT is set by gantry"},
		{[]string{"create", "x", "--env", "NOEQUALS"}, "want KEY=VALUE"},
		{[]string{"create", "x", "--memory", "1MiB"}, "at least 16 MiB"},
		{[]string{"update", id, "--cpus", "2"}, "cannot bound CPU"},
		{[]string{"update", id, "--env", "1X=y"}, "want KEY=VALUE"},
	} {
		if out, err := s.CLIErr(c.args...); err == nil || !strings.Contains(out, c.want) {
			t.Fatalf("gantry ws %s: %v %q; want an error saying %q", strings.Join(c.args, " "), err, out, c.want)
		}
	}

	// An update is stored at once and applied at the next start.
	var upd workspace.Workspace
	if err := json.Unmarshal([]byte(s.CLI("update", id, "--env", "GREETING=bye", "--unset-env", "EMPTY", "--memory", "0")), &upd); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(upd.Env, []string{"GREETING=bye"}) || upd.Memory != 0 {
		t.Fatalf("after update: env %q memory %d", upd.Env, upd.Memory)
	}
	if out := s.CLI("logs", id); strings.Contains(out, "greeting=bye") {
		t.Fatalf("the running command changed without a restart:\n%s", out)
	}
	// exec runs with the workspace's current environment.
	if out := s.CLI("exec", id, "--", "sh", "-c", "echo $GREETING"); out != "bye\n" {
		t.Fatalf("exec after update: %q", out)
	}
	s.CLI("update", id, "--restart", "--timeout", "60s")
	waitLog("greeting=bye empty=[]")
	waitLog("alloc status 0") // no memory limit any more
	if w := s.Get(id); w.ObservedStatus != workspace.Running || w.DesiredState != workspace.Running {
		t.Fatalf("after --restart: %s", wstest.Describe(w))
	}

	// --http: the start completes only once PORT accepts connections, so
	// the proxy answers as soon as the workspace is RUNNING.
	web := strings.TrimSpace(s.CLI("create", "slow-web", "--http", "--desired", "RUNNING",
		"--cmd", `sleep 1.5; exec python3 -m http.server --bind 127.0.0.1 "$PORT"`))
	s.CLI("wait", web, "RUNNING", "--timeout", "30s")
	req, _ := http.NewRequest("GET", s.URL+"/w/"+web+"/", nil)
	req.Header.Set("Authorization", "Bearer "+s.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("right after RUNNING, /w/%s/ answered %d", web, resp.StatusCode)
	}
	// One that ends before it serves is a failed start, with its output.
	dud := strings.TrimSpace(s.CLI("create", "dud", "--http", "--desired", "RUNNING", "--cmd", "echo no server here; exit 4"))
	wstest.WaitFor(t, 10*time.Second, "the failed start reported", func() (bool, string) {
		w := s.Get(dud)
		return w.ErrorInfo != nil && w.ErrorInfo.ExitStatus == "exit 4" && strings.Contains(w.ErrorInfo.Output, "no server here"), wstest.Describe(w)
	})
}
