package docker

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// attackReport is what `/ws attack` (testdata/attack.go) prints.
type attackReport struct {
	FilesRead int      `json:"files_read"`
	Read      []string `json:"read"`
	Tokens    []string `json:"tokens"`
	Canaries  []struct {
		Canary int    `json:"canary"`
		Where  string `json:"where"`
	} `json:"canaries"`
	Own     []string `json:"own"`
	Learned []string `json:"learned"`
	Scanned int      `json:"scanned"`
	Open    []struct {
		Addr   string `json:"addr"`
		Answer string `json:"answer"`
	} `json:"open"`
	APIs  []string `json:"apis"`
	Tried []struct {
		API    string `json:"api"`
		Token  string `json:"token"`
		Status int    `json:"status"`
		Body   string `json:"body"`
	} `json:"tried"`
}

// reversed is s backwards: the attacker is given the canaries so, and
// its own command line is no finding.
func reversed(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}

// TestContainmentAttack is the Docker half of the containment test (the
// server package's TestContainment is the process provider's): alice's
// workspace command searches its container's whole file system, its
// processes and its environment for gantry tokens and the canaries (a
// variable of the server's environment, a file in bob's volume, the
// admin's and bob's tokens, which the server's data dir holds), dials the
// workspace port and the API port at every address it learns or scans
// (its /24, the default bridge's, the host's gateways, bob's address,
// 127.0.0.1), and tries every token it found at every API that answers.
// Nothing is found, no other owner's port answers, and no token works.
// The API listens on every host address here (not the default loopback)
// so that it does answer: only the tokens' absence keeps it shut.
func TestContainmentAttack(t *testing.T) {
	envCanary, fileCanary := "env-canary-"+randID(t), "file-canary-"+randID(t)
	t.Setenv("GANTRY_CANARY_SECRET", envCanary)
	p, cli := newTestProvider(t, Config{})
	ctx := t.Context()
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	// Owners of their own: an owner's network is shared by all its
	// workspaces, and other tests (other packages too, at the same time)
	// run workspaces of an "alice": a port of hers would answer here.
	aliceOwner, bobOwner := "alice-"+randID(t), "bob-"+randID(t)
	admin, bobToken := storetest.Token(t, st, "admin", true), storetest.Token(t, st, bobOwner, false)
	data := t.TempDir() // the server's --data: its admin-token, as ws serve writes it
	if err := os.WriteFile(filepath.Join(data, "admin-token"), []byte(admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bobVol := t.TempDir()
	if err := os.WriteFile(filepath.Join(bobVol, "secret.txt"), []byte(fileCanary+"\n"+bobToken+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func(owner, vol string) string {
		w, err := st.Create(ctx, workspace.NewWorkspace{Name: "web-" + randID(t), Owner: owner, Desired: workspace.Running}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cleanupWorkspace(t, p, w.ID)
		if err := p.Start(ctx, provider.Spec{ID: w.ID, Owner: owner, VolumeDir: vol, HTTP: true}); err != nil {
			t.Fatal(err)
		}
		storetest.Force(t, st, w.ID, map[string]any{"observed_status": "RUNNING"})
		return w.ID
	}
	bob, alice := start(bobOwner, bobVol), start(aliceOwner, t.TempDir())

	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(api.NewAPI(api.APIConfig{Store: st, Accounts: st.Accounts(), Container: p}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	_, apiPort, _ := net.SplitHostPort(ln.Addr().String())
	checkTargetsLive(t, srv.URL, bobToken, p, bob)

	bobAddr, _ := p.Endpoint(ctx, bob)
	bobIP, _, _ := net.SplitHostPort(bobAddr)
	canaries := []string{envCanary, fileCanary, admin, bobToken}
	var back []string
	for _, c := range canaries {
		back = append(back, reversed(c))
	}
	argv := []string{"/ws", "attack", apiPort, strings.Join(back, ","), bobIP, gateway(t, cli, alice), gateway(t, cli, bob), "127.0.0.1"}
	t0 := time.Now()
	code, out := execIn(t, p, alice, argv...)
	lines := strings.Split(out, "\n")
	var rep attackReport
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); code != 0 || err != nil {
		t.Fatalf("the attack (exit %d, %v):\n%s", code, err, out)
	}
	t.Logf("the attack took %v: read %d files, scanned %d addresses, learned %v; own %v; open %d; tried %d",
		time.Since(t0).Round(time.Millisecond), rep.FilesRead, rep.Scanned, rep.Learned, rep.Own, len(rep.Open), len(rep.Tried))
	checkAttackRan(t, rep)
	checkNothingGained(t, rep, apiPort, []string{"the server's environment", "bob's file", "the admin token", "bob's token"})
}

// checkTargetsLive: what the attack must not reach is there: bob's
// workspace answers at its address, bob's token works at the API.
func checkTargetsLive(t *testing.T, apiURL, bobToken string, p *Provider, bob string) {
	t.Helper()
	addr, err := p.Endpoint(t.Context(), bob)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("bob's workspace from the host: %v", err)
	}
	c.Close()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", apiURL+"/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+bobToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("bob's token at the API from the host: %v %v", resp, err)
	}
	resp.Body.Close()
}

// checkAttackRan: the attack did its work (a report of nothing searched
// would pass anything).
func checkAttackRan(t *testing.T, rep attackReport) {
	t.Helper()
	for _, f := range []string{"/ws", "/etc/hosts", "/proc/1/environ"} {
		if !slices.Contains(rep.Read, f) {
			t.Errorf("the attack did not read %s (read %d files: %v)", f, rep.FilesRead, rep.Read)
		}
	}
	if rep.Scanned < 2*254 || len(rep.Own) == 0 {
		t.Errorf("the attack dialled %d addresses from %v; want its /24 and the default bridge's", rep.Scanned, rep.Own)
	}
}

// checkNothingGained: no canary read, no token found, no port but the
// API's answered, and no token works at it.
func checkNothingGained(t *testing.T, rep attackReport, apiPort string, names []string) {
	t.Helper()
	for _, c := range rep.Canaries {
		t.Errorf("the attack read %s in %s", names[c.Canary], c.Where)
	}
	if len(rep.Tokens) > 0 {
		t.Errorf("the attack found tokens: %v", rep.Tokens)
	}
	for _, o := range rep.Open {
		if !strings.HasSuffix(o.Addr, ":"+apiPort) {
			t.Errorf("another workspace's port answered the attack at %s: %.100q", o.Addr, o.Answer)
		}
	}
	for _, tr := range rep.Tried {
		if tr.Status == http.StatusOK {
			t.Errorf("token %q works at %s: %s", tr.Token, tr.API, tr.Body)
		}
	}
	var tried []string
	for _, tr := range rep.Tried {
		tried = append(tried, fmt.Sprintf("%s with %q: %d", tr.API, tr.Token, tr.Status))
	}
	t.Logf("APIs that answered: %v; tokens tried there: %v", rep.APIs, tried)
}
