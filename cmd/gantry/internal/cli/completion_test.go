package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// completeScript loads bash-completion (as an interactive bash on Debian
// does) and `gantry completion bash`, and completes each line of stdin as bash does on
// a tab (COMP_WORDS, COMP_CWORD, COMP_LINE, COMP_POINT, then the function
// the script registered with complete -F), printing each candidate on a
// line and "--" after each line's.
const completeScript = `source /usr/share/bash-completion/bash_completion
source <(gantry completion bash)
fn=$(complete -p gantry | sed -n 's/.*-F \([^ ]*\) .*/\1/p')
while IFS= read -r line; do
	read -ra COMP_WORDS <<<"$line"
	[[ $line == *" " ]] && COMP_WORDS+=("")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1)) COMP_LINE=$line COMP_POINT=${#line} COMP_TYPE=9 COMPREPLY=()
	"$fn" gantry "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
	printf '%s\n' "${COMPREPLY[@]}"
	echo --
done
`

// TestBashCompletion drives the bash completion script as bash does on a
// tab: subcommands, flags, and (from a running API, with the token in
// $GANTRY_TOKEN) the caller's workspace names, not another owner's.
func TestBashCompletion(t *testing.T) {
	testutil.EnsureFile(t, "bash_completion", "/usr/share/bash-completion/bash_completion")
	bin := testutil.GantryBinary(t)
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	env := wstest.NewAPIEnv(t, st, api.APIConfig{})
	alice := storetest.Token(t, st, "alice", false)
	bob := storetest.Token(t, st, "bob", false)
	for _, n := range []struct{ token, name string }{{alice, "web-1"}, {alice, "web-2"}, {alice, "db"}, {bob, "web-bob"}} {
		if _, err := env.Client(n.token).Create(t.Context(), workspace.NewWorkspace{Name: n.name}); err != nil {
			t.Fatal(err)
		}
	}
	lines := []string{"gantry w", "gantry ws ge", "gantry ws get --j", "gantry ws get web", "gantry ws exec ", "gantry completion z", "gantry ws --server http://127.0.0.1:1 get "}
	cmd := exec.CommandContext(t.Context(), "bash", "--norc", "--noprofile", "-c", completeScript)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"GANTRY_SERVER="+env.Srv.URL, "GANTRY_TOKEN="+alice)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash: %v\n%s%s", err, out, stderr.String())
	}
	// compopt (which the script calls to say "no space after this") works
	// only inside a completion bash itself started: outside one it says so.
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if l != "" && !strings.Contains(l, "compopt: not currently executing completion function") {
			t.Errorf("bash said: %s", l)
		}
	}
	got := strings.Split(strings.TrimSuffix(string(out), "--\n"), "--\n")
	if len(got) != len(lines) {
		t.Fatalf("%d answers for %d lines:\n%s", len(got), len(lines), out)
	}
	want := [][]string{
		{"ws"},                   // the subcommand
		{"get"},                  // a ws subcommand
		{"--json"},               // a flag
		{"web-1", "web-2"},       // alice's workspaces by name (not bob's)
		{"db", "web-1", "web-2"}, // every one of hers
		{"zsh"},                  // an argument from a fixed list
		nil,                      // a server that does not answer: nothing, no error
	}
	for i, line := range lines {
		cands := strings.Fields(got[i])
		slices.Sort(cands)
		if !slices.Equal(cands, want[i]) {
			t.Errorf("%q completes to %q; want %q", line, cands, want[i])
		}
	}
}

// `gantry completion` writes a script for each shell it names and refuses
// any other.
func TestCompletionShells(t *testing.T) {
	for sh, want := range map[string]string{"bash": "__start_gantry", "zsh": "#compdef gantry", "fish": "complete -c gantry", "powershell": "Register-ArgumentCompleter"} {
		code, stdout, stderr := runRecordCmd(t, "completion", sh)
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("completion %s: exit %d, stderr %q, script has %q: %v", sh, code, stderr, want, strings.Contains(stdout, want))
		}
	}
	if code, _, stderr := runRecordCmd(t, "completion", "tcsh"); code == 0 || !strings.Contains(stderr, "tcsh") {
		t.Errorf("completion tcsh: exit %d, stderr %q; want a failure naming it", code, stderr)
	}
}

// --queue completes with the queues the --redis given knows, in order.
func TestQueueFlagCompletion(t *testing.T) {
	redis := testutil.StartRedis(t)
	for _, q := range []string{"mail", "billing"} {
		if code, _, stderr := runRecordCmd(t, "queue", "enqueue", "--redis", redis.Addr(), "--queue", q, "--type", "noop"); code != 0 {
			t.Fatalf("enqueue into %s: %s", q, stderr)
		}
	}
	code, stdout, stderr := runRecordCmd(t, "__complete", "queue", "tasks", "list", "--redis", redis.Addr(), "--queue", "")
	if code != 0 || !strings.HasPrefix(stdout, "billing\nmail\n:4\n") {
		t.Fatalf("__complete --queue: exit %d, stdout %q, stderr %q; want billing, mail and no file completion", code, stdout, stderr)
	}
}
