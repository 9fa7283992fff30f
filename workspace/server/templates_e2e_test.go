package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// Templates through the CLI on a real server (process provider): an admin
// writes one with parameters (flags, and a JSON file with a pattern), an
// owner makes a running workspace from it whose command and env hold the
// parameters; a bad parameter is refused naming it; a new version marks
// the workspace in ws list, ws update --template-version latest --restart
// moves it, and the template cannot be deleted while in use.
func TestTemplatesThroughTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	s := wstest.StartServe(t, "", t.TempDir())
	s.CLI("template", "create", "greeter", "--cmd", `echo "{{.greeting}} $WHO v1" > out; exec sleep infinity`,
		"--env", "WHO={{.who}}", "--param", "greeting=hello", "--param", "who", "--pids", "200")
	file := filepath.Join(t.TempDir(), "t.json")
	os.WriteFile(file, []byte(`{"command":"exec sleep infinity","params":[{"name":"n","type":"int","min":1,"max":9}]}`), 0o600)
	s.CLI("template", "create", "counted", "--file", file)

	alice := strings.TrimSpace(s.CLI("token", "create", "--owner", "alice"))
	asAlice := func(args ...string) (string, error) {
		out, err := exec.Command(s.Bin, append([]string{"ws", "--server", s.URL, "--token", alice}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := asAlice("template", "create", "mine", "--cmd", "true"); err == nil || !strings.Contains(out, "403") {
		t.Fatalf("an owner's template create: %v\n%s; want HTTP 403", err, out)
	}
	if out, err := asAlice("create", "c", "--template", "counted", "--param", "n=12"); err == nil || !strings.Contains(out, "parameter n") {
		t.Fatalf("n=12 (max 9): %v\n%s; want a refusal naming parameter n", err, out)
	}
	if out, err := asAlice("create", "g", "--template", "greeter"); err == nil || !strings.Contains(out, "parameter who is required") {
		t.Fatalf("without who: %v\n%s; want a refusal naming parameter who", err, out)
	}
	id, err := asAlice("create", "g", "--template", "greeter", "--param", "who=world", "--desired", "RUNNING")
	if err != nil {
		t.Fatalf("create from greeter: %v\n%s", err, id)
	}
	readOut := func() string {
		out, _ := asAlice("exec", id, "--", "cat", "out")
		return out
	}
	wstest.WaitFor(t, 30*time.Second, "v1's output", func() (bool, string) { o := readOut(); return o == "hello world v1", o })

	s.CLI("template", "update", "greeter", "--cmd", `echo "{{.greeting}} $WHO v2" > out; exec sleep infinity`)
	if out, _ := asAlice("list"); !strings.Contains(out, "greeter@1 (latest 2)") {
		t.Fatalf("ws list after a new version does not mark g outdated:\n%s", out)
	}
	if out, err := asAlice("update", id, "--template-version", "latest", "--restart", "--timeout", "60s"); err != nil {
		t.Fatalf("move to latest: %v\n%s", err, out)
	}
	wstest.WaitFor(t, 30*time.Second, "v2's output", func() (bool, string) { o := readOut(); return o == "hello world v2", o })
	w := s.Get(id)
	if w.Spec.Template == nil || w.Spec.Template.Version != 2 || w.TemplateLatest != 0 || w.DesiredState != workspace.Running {
		t.Fatalf("after the move: template %+v latest %d desired %s", w.Spec.Template, w.TemplateLatest, w.DesiredState)
	}
	if out, err := s.CLIErr("template", "delete", "greeter"); err == nil || !strings.Contains(out, "used by 1 workspace") {
		t.Fatalf("delete in use: %v\n%s; want a refusal", err, out)
	}
	s.CLI("template", "delete", "counted")
	if out := s.CLI("template", "list"); strings.Contains(out, "counted") || !strings.Contains(out, "greeter") {
		t.Fatalf("template list after deleting counted:\n%s", out)
	}
}
