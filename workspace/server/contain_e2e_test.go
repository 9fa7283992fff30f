package server

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace/wstest"
)

// attackReport is what testdata/attack.py prints on its last line.
type attackReport struct {
	FilesRead    int      `json:"files_read"`
	NamesSeen    int      `json:"names_seen"`
	Tokens       []string `json:"tokens"`
	PortsScanned int      `json:"ports_scanned"`
	Whoami       []struct {
		Token  string `json:"token"`
		Status *int   `json:"status"`
		Body   string `json:"body"`
	} `json:"whoami"`
	Canaries  []map[string]string `json:"canaries"`
	OpenPorts []map[string]any    `json:"open_ports"`
	BobProxy  []struct {
		Token  string `json:"token"`
		Status *int   `json:"status"`
	} `json:"bob_proxy"`
}

func nonce(t *testing.T, what string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return fmt.Sprintf("%s-%x", what, b)
}

// TestContainment: an owner's workspace (the process provider, a root
// server) searches the machine for gantry tokens (the admin-token file, the
// database, process environments and command lines), the server's
// environment (a canary variable), another owner's files (a canary file in
// bob's volume, a canary in bob's spec) and every loopback port (from the
// pidfiles and by a scan of 1-65535), then tries each token it found against
// the API and the proxy: it finds nothing usable, reads no canary, and no
// port answers but its own. It runs as the workspace's command (its report in
// `ws logs`) and through `ws exec`.
func TestContainment(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	if os.Geteuid() != 0 {
		t.Skip("the process provider contains workspaces only when the server runs as root")
	}
	envCanary, fileCanary, specCanary := nonce(t, "server-env"), nonce(t, "bob-file"), nonce(t, "bob-spec")
	t.Setenv("GANTRY_CONTAIN_CANARY", envCanary) // the server inherits it
	data := filepath.Join(t.TempDir(), "data")
	s := wstest.StartServe(t, "", data)
	alice := strings.TrimSpace(s.CLI("token", "create", "--owner", "alice"))
	bob := strings.TrimSpace(s.CLI("token", "create", "--owner", "bob"))
	as := func(token string, args ...string) string {
		t.Helper()
		cmd := exec.Command(s.Bin, append([]string{"ws", "--server", s.URL}, args...)...)
		cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+token)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("gantry ws %s: %v\n%s\nserver log:\n%s", strings.Join(args, " "), err, out, wstest.Tail(s.Log.String(), 3000))
		}
		return strings.TrimSpace(string(out))
	}
	bobID := as(bob, "create", "bweb", "--http", "--desired", "RUNNING", "--env", "BOB_CANARY="+specCanary,
		"--cmd", "echo "+fileCanary+` > secret.txt; exec python3 -m http.server --bind 127.0.0.1 "$PORT"`)
	as(bob, "wait", bobID, "RUNNING", "--timeout", "30s")
	if got := proxied(t, s.URL, bobID, bob, "secret.txt"); strings.TrimSpace(got) != fileCanary {
		t.Fatalf("bob's own app through the proxy: %q, want his secret", got)
	}

	attacker := as(alice, "create", "attacker", "--env", "ATTACK_API="+s.URL, "--env", "ATTACK_DATA="+data,
		"--env", "ATTACK_CANARIES="+backwards(envCanary)+","+backwards(fileCanary)+","+backwards(specCanary), "--env", "ATTACK_BOB_ID="+bobID,
		"--env", "ATTACK_BUDGET=4", "--cmd", "python3 attack.py; exec sleep infinity")
	as(alice, "wait", attacker, "STANDBY", "--timeout", "30s")
	script, err := os.ReadFile("testdata/attack.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "volumes", attacker, "attack.py"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	as(alice, "up", attacker)
	as(alice, "wait", attacker, "RUNNING", "--timeout", "30s")
	var logs string
	wstest.WaitFor(t, 90*time.Second, "the attacker's report in its log", func() (bool, string) {
		logs = as(alice, "logs", attacker)
		return strings.Contains(logs, `"ports_scanned"`), wstest.Tail(logs, 300)
	})
	checkAttack(t, "as the workspace's command", logs)
	checkAttack(t, "through ws exec", as(alice, "exec", attacker, "--", "python3", "attack.py"))
}

// checkAttack fails t if the report on out's last line found anything.
func checkAttack(t *testing.T, how, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var r attackReport
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("%s: no report: %v\n%s", how, err, out)
	}
	t.Logf("%s: read %d files, saw %d names, scanned %d ports, found %d tokens", how, r.FilesRead, r.NamesSeen, r.PortsScanned, len(r.Tokens))
	if r.FilesRead == 0 || r.NamesSeen < 1000 || r.PortsScanned < 65534 {
		t.Fatalf("%s: the attack did not run its course: %+v", how, r)
	}
	var found []string
	for _, w := range r.Whoami {
		var who struct {
			Owner string `json:"owner"`
			Admin bool   `json:"admin"`
		}
		if w.Status != nil && *w.Status == http.StatusOK && (json.Unmarshal([]byte(w.Body), &who) != nil || who.Owner != "alice" || who.Admin) {
			found = append(found, fmt.Sprintf("token %s… works: %s", w.Token, strings.Join(strings.Fields(w.Body), " ")))
		}
	}
	for _, b := range r.BobProxy {
		if b.Status != nil && *b.Status < 300 {
			found = append(found, fmt.Sprintf("token %s… reaches bob's app through the proxy (%d)", b.Token, *b.Status))
		}
	}
	for _, c := range r.Canaries {
		found = append(found, fmt.Sprintf("canary %s read from %s", map[string]string{"0": "server-env", "1": "bob-file", "2": "bob-spec"}[c["canary"]], c["where"]))
	}
	for _, p := range r.OpenPorts {
		found = append(found, fmt.Sprintf("port %v answers: %v", p["port"], p["answer"]))
	}
	if len(found) > 0 {
		t.Errorf("%s: the workspace reached what it must not (%d):\n  %s", how, len(found), strings.Join(found, "\n  "))
	}
}

// backwards is s reversed: the attacker gets its canaries so, and turns
// them around, so that its own environment does not hold them.
func backwards(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// proxied GETs /w/{id}/path with token and returns the body.
func proxied(t *testing.T, base, id, token, path string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/w/"+id+"/"+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /w/%s/%s: %d %s", id, path, resp.StatusCode, b)
	}
	return string(b)
}

// TestDownAndDeleteEndEveryProcess: `ws down` and `ws delete` end every
// process of the workspace, by the process tree: its command's children,
// what `ws exec` left in the background and what it started in a session of
// its own.
func TestDownAndDeleteEndEveryProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	data := filepath.Join(t.TempDir(), "data")
	s := wstest.StartServe(t, "", data)
	id := strings.TrimSpace(s.CLI("create", "tree", "--desired", "RUNNING", "--cmd", "sleep 1000 & exec sleep infinity"))
	for _, step := range []string{"down", "delete"} {
		s.CLI("up", id)
		s.CLI("wait", id, "RUNNING", "--timeout", "30s")
		s.CLI("exec", id, "--", "sh", "-c", "sleep 1001 >/dev/null 2>&1 &")
		s.CLI("exec", id, "--", "sh", "-c", "setsid sleep 1002 </dev/null >/dev/null 2>&1 &")
		wstest.WaitFor(t, 10*time.Second, "the workspace's four processes", func() (bool, string) {
			p := workspaceProcesses(id)
			return len(p) >= 4, fmt.Sprint(p)
		})
		s.CLI(step, id)
		s.CLI("wait", id, map[string]string{"down": "STANDBY", "delete": "DELETED"}[step], "--timeout", "30s")
		if p := workspaceProcesses(id); len(p) > 0 {
			t.Fatalf("after ws %s: processes of the workspace remain: %v", step, p)
		}
	}
}

// workspaceProcesses lists the live processes (pid: command line) whose
// environment names workspace id: every process the provider starts has it.
func workspaceProcesses(id string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil || !strings.Contains("\x00"+string(env), "\x00GANTRY_WORKSPACE_ID="+id+"\x00") {
			continue
		}
		if st, err := os.ReadFile(filepath.Join(d, "stat")); err == nil {
			if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) > 0 && f[0] == "Z" {
				continue
			}
		}
		cmd, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		pid, _ := strconv.Atoi(filepath.Base(d))
		out = append(out, fmt.Sprintf("%d: %s", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
	}
	return out
}
