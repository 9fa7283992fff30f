package server_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/wstest"
)

func poolStatus(t *testing.T, out string) workspace.PoolStatus {
	t.Helper()
	var st workspace.PoolStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("pool status %q: %v", out, err)
	}
	return st
}

func createdJSON(t *testing.T, out string) workspace.Workspace {
	t.Helper()
	var w workspace.Workspace
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		t.Fatalf("ws create --json %q: %v", out, err)
	}
	return w
}

// A warm pool through the CLI on a real server (process provider): an
// admin sizes a template's pool and waits for it; an owner's create with
// --desired RUNNING comes back RUNNING from the pool (its command already
// ran, with the defaults) and the pool refills; a create whose parameter
// changes the env takes a member too, whose command restarts in place with
// it (ws wait waits for that); one that asks STANDBY starts cold; the members are
// nobody's (not in any list, each its own uid and volume); a template
// update drains the pool and rebuilds it with the new version; a template
// whose parameter has no default gets no pool (400 naming it); size 0
// drains it.
func TestWarmPoolThroughTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	s := wstest.StartServe(t, "", t.TempDir())
	s.CLI("template", "create", "py", "--cmd", `echo "$GREETING v1" >> out; exec sleep infinity`,
		"--env", "GREETING={{.greeting}}", "--param", "greeting=hi")
	st := poolStatus(t, s.CLI("template", "pool", "py", "3", "--wait", "--timeout", "60s"))
	if st.Size != 3 || st.Ready != 3 || st.Version != 1 {
		t.Fatalf("pool after --wait: %+v; want 3 of 3 ready at version 1", st)
	}
	if out := s.CLI("list"); strings.Contains(out, workspace.PoolOwnerPrefix) {
		t.Fatalf("the admin's ws list shows pool members:\n%s", out)
	}
	var members []workspace.Workspace
	if err := json.Unmarshal([]byte(s.CLI("list", "--json", "--pool")), &members); err != nil || len(members) != 3 {
		t.Fatalf("ws list --pool: %d members, %v; want 3", len(members), err)
	}

	alice := strings.TrimSpace(s.CLI("token", "create", "--owner", "alice"))
	asAlice := func(args ...string) (string, error) {
		out, err := exec.Command(s.Bin, append([]string{"ws", "--server", s.URL, "--token", alice}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	out, err := asAlice("create", "a1", "--template", "py", "--desired", "RUNNING", "--json")
	if err != nil {
		t.Fatalf("claim: %v\n%s", err, out)
	}
	a1 := createdJSON(t, out)
	if !a1.Pooled || a1.ObservedStatus != workspace.Running || a1.Owner != "alice" || a1.Name != "a1" {
		t.Fatalf("create from a ready pool: %+v; want alice's a1, RUNNING, pooled", a1)
	}
	if got, err := asAlice("exec", a1.ID, "--", "cat", "out"); err != nil || got != "hi v1" {
		t.Fatalf("a1's output: %q, %v; want the default's (hi v1)", got, err)
	}
	if !isMember(members, a1.ID) {
		t.Fatalf("a1 (%s) was none of the members listed", a1.ID)
	}
	vol := filepath.Join(s.Data, "volumes", a1.ID)
	if fi, err := os.Stat(vol); err == nil {
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok && sys.Uid == 0 {
			t.Fatalf("a1's volume is root's: a pool member should run as its own uid")
		}
	}
	st = poolStatus(t, s.CLI("template", "pool", "py", "--wait", "--timeout", "60s"))
	if st.Ready != 3 {
		t.Fatalf("pool after a claim: %+v; want it refilled to 3", st)
	}

	out, err = asAlice("create", "a2", "--template", "py", "--param", "greeting=yo", "--desired", "RUNNING", "--json")
	a2 := createdJSON(t, out)
	if err != nil || !a2.Pooled || !a2.RestartPending || !slices.Contains(a2.Env, "GREETING=yo") {
		t.Fatalf("a create with another greeting (only the env differs): %v\n%s; want a member, its command to restart in place", err, out)
	}
	if out, err := asAlice("wait", a2.ID, "RUNNING", "--timeout", "30s"); err != nil {
		t.Fatalf("ws wait a2 RUNNING: %v\n%s", err, out)
	}
	// ws wait waited for the restart: the member's command ran with the
	// defaults, then again, in the same volume, with a2's env.
	if got, err := asAlice("exec", a2.ID, "--", "cat", "out"); err != nil || got != "hi v1\nyo v1" {
		t.Fatalf("a2's output after ws wait: %q, %v; want the member's run, then its own (hi v1, yo v1)", got, err)
	}
	if out, err := asAlice("get", a2.ID, "--json"); err != nil || createdJSON(t, out).RestartPending {
		t.Fatalf("a2 after its restart: %v\n%s; want no restart pending", err, out)
	}
	out, err = asAlice("create", "a3", "--template", "py", "--json")
	if err != nil || createdJSON(t, out).Pooled {
		t.Fatalf("a STANDBY create: %v\n%s; want no claim", err, out)
	}
	if got, _ := asAlice("list"); strings.Count(got, "\n") != 3 { // header and a1..a3
		t.Fatalf("alice's list:\n%s", got)
	}

	s.CLI("template", "update", "py", "--cmd", `echo "$GREETING v2" > out; exec sleep infinity`)
	wstest.WaitFor(t, 60*time.Second, "the pool rebuilt at version 2", func() (bool, string) {
		out, _ := s.CLIErr("template", "pool", "py")
		st := poolStatus(t, out)
		return st.Version == 2 && st.Ready == 3 && st.Draining == 0 && st.Starting == 0, out
	})
	out, err = asAlice("create", "a4", "--template", "py", "--desired", "RUNNING", "--json")
	if err != nil || !createdJSON(t, out).Pooled {
		t.Fatalf("claim after the update: %v\n%s", err, out)
	}
	if got, err := asAlice("exec", createdJSON(t, out).ID, "--", "cat", "out"); err != nil || got != "hi v2" {
		t.Fatalf("a4's output: %q, %v; want version 2's", got, err)
	}
	if got, err := asAlice("template", "update", "py", "--pool", "5"); err == nil || !strings.Contains(got, "403") {
		t.Fatalf("an owner sizing a pool: %v\n%s; want HTTP 403", err, got)
	}

	s.CLI("template", "create", "req", "--cmd", "exec sleep infinity", "--env", "X={{.x}}", "--param", "x")
	if got, err := s.CLIErr("template", "update", "req", "--pool", "2"); err == nil || !strings.Contains(got, "x has none") {
		t.Fatalf("a pool for a template with a required parameter: %v\n%s; want a refusal naming x", err, got)
	}
	st = poolStatus(t, s.CLI("template", "update", "py", "--pool", "0"))
	if st.Size != 0 {
		t.Fatalf("pool 0: %+v", st)
	}
	wstest.WaitFor(t, 60*time.Second, "the pool drained", func() (bool, string) {
		out, _ := s.CLIErr("template", "pool", "py")
		st := poolStatus(t, out)
		return st.Ready+st.Starting+st.Draining == 0, out
	})
	entries, _ := os.ReadDir(filepath.Join(s.Data, "volumes"))
	if len(entries) != 4 { // a1…a4; every member's volume removed
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("volumes after the drain: %v; want alice's 4", names)
	}
}

func isMember(ms []workspace.Workspace, id string) bool {
	for _, m := range ms {
		if m.ID == id {
			return true
		}
	}
	return false
}

// TestWarmPoolSurvivesSIGKILL: the server is killed while it refills a
// pool (members inserted, some starting); restarted, it completes the pool
// to its size and no more, and leaves no process or volume that is not a
// workspace's: every volume and live pidfile is a member's or the claimed
// workspace's, which still runs.
func TestWarmPoolSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	s := wstest.StartServe(t, "", t.TempDir())
	s.CLI("template", "create", "py", "--cmd", "exec sleep infinity")
	s.CLI("template", "pool", "py", "2", "--wait", "--timeout", "60s")
	claimed := createdJSON(t, s.CLI("create", "c1", "--template", "py", "--desired", "RUNNING", "--json"))
	if !claimed.Pooled {
		t.Fatalf("claim: %+v", claimed)
	}
	s.CLI("template", "pool", "py", "12")
	wstest.WaitFor(t, 30*time.Second, "the refill under way", func() (bool, string) {
		out, _ := s.CLIErr("template", "pool", "py")
		st := poolStatus(t, out)
		return st.Starting > 0 && st.Ready < 12, out
	})
	s.Stop(syscall.SIGKILL)
	s.Start()
	st := poolStatus(t, s.CLI("template", "pool", "py", "--wait", "--timeout", "60s"))
	if st.Ready != 12 || st.Starting+st.Draining != 0 {
		t.Fatalf("pool after the restart: %+v; want 12 ready, nothing else", st)
	}
	var members []workspace.Workspace
	if err := json.Unmarshal([]byte(s.CLI("list", "--json", "--pool")), &members); err != nil || len(members) != 12 {
		t.Fatalf("members after the restart: %d, %v; want 12", len(members), err)
	}
	want := map[string]bool{claimed.ID: true}
	for _, m := range members {
		want[m.ID] = true
	}
	vols, _ := os.ReadDir(filepath.Join(s.Data, "volumes"))
	for _, v := range vols {
		if !want[v.Name()] {
			t.Errorf("volume %s is no workspace's", v.Name())
		}
	}
	if len(vols) != len(want) {
		t.Errorf("%d volumes; want %d (12 members and c1)", len(vols), len(want))
	}
	pids, _ := filepath.Glob(filepath.Join(s.Data, "run", "*.pid"))
	for _, p := range pids {
		id := strings.TrimSuffix(filepath.Base(p), ".pid")
		if wstest.PIDAlive(t, s.Data, id) && !want[id] {
			t.Errorf("a process runs for %s, which is no workspace", id)
		}
	}
	for id := range want {
		if !wstest.PIDAlive(t, s.Data, id) {
			t.Errorf("workspace %s does not run", id)
		}
	}
	if w := s.Get(claimed.ID); w.ObservedStatus != workspace.Running || w.Owner != claimed.Owner || w.Name != "c1" {
		t.Fatalf("the claimed workspace after the restart: %+v", w)
	}
}
