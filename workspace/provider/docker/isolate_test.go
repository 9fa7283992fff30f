package docker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// execIn runs argv in workspace id's container and returns its exit code
// and output.
func execIn(t *testing.T, p *Provider, id string, argv ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code, err := p.Exec(t.Context(), provider.ExecSpec{ID: id, Argv: argv}, nil, &out, &out)
	if err != nil {
		t.Fatalf("exec %v in %s: %v", argv, id, err)
	}
	return code, strings.TrimSpace(out.String())
}

// gateway is the host's address on the network of workspace id's
// container (where the host answers the container).
func gateway(t *testing.T, cli *client.Client, id string) string {
	t.Helper()
	in, err := cli.ContainerInspect(t.Context(), ContainerName(id), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range in.Container.NetworkSettings.Networks {
		if ep != nil && ep.Gateway.IsValid() {
			return ep.Gateway.String()
		}
	}
	t.Fatalf("container of %s has no gateway", id)
	return ""
}

// TestOwnersIsolated: on the default network setup, one owner's container
// reaches neither another owner's workspace port nor the server's API port
// on the host; the server's proxy reaches both workspaces, and its owner
// check decides who gets through.
func TestOwnersIsolated(t *testing.T) {
	p, cli := newTestProvider(t, Config{})
	ctx := t.Context()
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	start := func(owner string) string {
		w, err := st.Create(ctx, workspace.NewWorkspace{Name: "web-" + randID(t), Owner: owner, Desired: workspace.Running}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cleanupWorkspace(t, p, w.ID)
		if err := p.Start(ctx, provider.Spec{ID: w.ID, Owner: owner, VolumeDir: t.TempDir(), HTTP: true}); err != nil {
			t.Fatal(err)
		}
		storetest.Force(t, st, w.ID, map[string]any{"observed_status": "RUNNING"})
		return w.ID
	}
	a, b, a2 := start("alice"), start("bob"), start("alice")
	addrA, _ := p.Endpoint(ctx, a)
	addrB, err := p.Endpoint(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewAPI(api.APIConfig{Store: st, Accounts: st.Accounts(), Container: p}))
	defer srv.Close()
	_, apiPort, _ := net.SplitHostPort(srv.Listener.Addr().String())

	// The dial works where it should: to alice's own port, from her other
	// workspace too (one owner's network).
	for _, from := range []string{a, a2} {
		if code, out := execIn(t, p, from, "/ws", "dial", addrA); code != 0 {
			t.Fatalf("alice's workspace %s dialling alice's %s: %s", from, addrA, out)
		}
	}
	gw := gateway(t, cli, a)
	// The API listens on the host's loopback (the default --listen): not
	// at the host's address on the workspace's network, nor at the
	// container's own loopback.
	for _, target := range []string{addrB, net.JoinHostPort(gw, apiPort), "127.0.0.1:" + apiPort} {
		if code, out := execIn(t, p, a, "/ws", "dial", target); code == 0 {
			t.Errorf("alice's workspace reached %s (bob's workspace %s, API port %s): %s", target, addrB, apiPort, out)
		}
	}

	// Through the proxy: bob's token reaches bob's workspace, alice's gets 404.
	get := func(token, id string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/w/"+id+"/x", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	bob, alice := storetest.Token(t, st, "bob", false), storetest.Token(t, st, "alice", false)
	if code, body := get(bob, b); code != 200 || body != "hello from "+b+" at /x" {
		t.Fatalf("bob through the proxy to his workspace: %d %q", code, body)
	}
	if code, body := get(alice, b); code != 404 {
		t.Fatalf("alice through the proxy to bob's workspace: %d %q; want 404", code, body)
	}
	if code, _ := get(alice, a); code != 200 {
		t.Fatalf("alice through the proxy to her workspace: %d", code)
	}
}

// TestOwnerNetworkLifetime: an owner's network is made at the first Start,
// shared by the owner's workspaces, internal unless NetworkEgress, and
// removed when the owner's last container stops.
func TestOwnerNetworkLifetime(t *testing.T) {
	p, cli := newTestProvider(t, Config{})
	ctx := t.Context()
	owner := "o" + randID(t)
	name := OwnerNetworkName(owner)
	t.Cleanup(func() { cli.NetworkRemove(context.WithoutCancel(t.Context()), name, client.NetworkRemoveOptions{}) })
	ids := []string{"t" + randID(t), "t" + randID(t)}
	for _, id := range ids {
		cleanupWorkspace(t, p, id)
		if err := p.Start(ctx, provider.Spec{ID: id, Owner: owner, VolumeDir: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err != nil {
		t.Fatalf("owner network %s after Start: %v", name, err)
	}
	if !n.Network.Internal || n.Network.Labels[LabelOwner] != owner || len(n.Network.Containers) != 2 {
		t.Fatalf("owner network: internal %v, labels %v, %d containers; want internal, labelled %s, both workspaces",
			n.Network.Internal, n.Network.Labels, len(n.Network.Containers), owner)
	}
	if err := p.Stop(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{}); err != nil {
		t.Fatalf("owner network gone while a workspace still runs on it: %v", err)
	}
	if err := p.Stop(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("owner network after its last workspace stopped: %v; want it removed", err)
	}

	// With egress, the network is an ordinary (not internal) bridge.
	pe, _ := newTestProvider(t, Config{NetworkEgress: true})
	id := "t" + randID(t)
	cleanupWorkspace(t, pe, id)
	if err := pe.Start(ctx, provider.Spec{ID: id, Owner: owner, VolumeDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if n, err := cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{}); err != nil || n.Network.Internal {
		t.Fatalf("owner network with NetworkEgress: %v, internal %v; want a non-internal bridge", err, n.Network.Internal)
	}
}

// TestContainerHardened: a workspace container runs as a non-root user
// (the image names none), with no capabilities, no-new-privileges, no
// mount but its volume, and only its own environment, not the server's.
func TestContainerHardened(t *testing.T) {
	t.Setenv("GANTRY_CANARY_SECRET", "canary-"+randID(t))
	p, cli := newTestProvider(t, Config{NetworkMode: "none"})
	ctx := t.Context()
	id := "t" + randID(t)
	cleanupWorkspace(t, p, id)
	vol := t.TempDir()
	if err := p.Start(ctx, provider.Spec{ID: id, Owner: "alice", VolumeDir: vol, Env: []string{"MINE=1"}}); err != nil {
		t.Fatal(err)
	}
	code, out := execIn(t, p, id, "/ws", "whoami")
	if code != 0 || !strings.Contains(out, "uid 65534 gid 65534") || !strings.Contains(out, "CapEff: 0000000000000000") ||
		!strings.Contains(out, "NoNewPrivs: 1") || !strings.Contains(out, "MINE=1") || strings.Contains(out, "CANARY") {
		t.Fatalf("whoami in the container (%d):\n%s\nwant uid 65534, no capabilities, no-new-privileges, MINE=1 and no server variable", code, out)
	}
	in, err := cli.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := in.Container
	if len(c.Mounts) != 1 || c.Mounts[0].Source != vol || c.HostConfig.Privileged || len(c.HostConfig.Binds) != 0 {
		t.Fatalf("mounts %+v, binds %v, privileged %v; want only the volume", c.Mounts, c.HostConfig.Binds, c.HostConfig.Privileged)
	}
	// The volume's root is the workspace user's: its command wrote there.
	if fi, err := os.Stat(filepath.Join(vol, "started-by-"+id)); err != nil || fi.Sys() == nil {
		t.Fatalf("the workspace's user could not write its volume: %v", err)
	}
}

// TestStopEndsExecd: Stop (down, delete) leaves no process of the
// workspace, exec'd ones included: the container is gone and the exec'd
// command is no longer in the host's process table.
func TestStopEndsExecd(t *testing.T) {
	p, cli := newTestProvider(t, Config{NetworkMode: "none"})
	ctx := t.Context()
	id := "t" + randID(t)
	cleanupWorkspace(t, p, id)
	if err := p.Start(ctx, provider.Spec{ID: id, VolumeDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	marker := "gantry-held-" + randID(t)
	done := make(chan error, 1)
	go func() {
		_, err := p.Exec(context.WithoutCancel(ctx), provider.ExecSpec{ID: id, Argv: []string{"/ws", "hold", marker}}, nil, io.Discard, io.Discard)
		done <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "the exec'd command in the host's process table", func() (bool, string) {
		return len(processesWith(t, marker)) > 0, "not yet"
	})
	if err := p.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container after Stop: %v; want it gone", err)
	}
	if pids := processesWith(t, marker); len(pids) != 0 {
		t.Fatalf("exec'd processes %v still run after Stop", pids)
	}
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, provider.ErrNotRunning) && !strings.Contains(err.Error(), "exec") {
			t.Logf("the exec ended with %v", err)
		}
	case <-time.After(10 * time.Second): // real time: the exec's stream ends with its container
		t.Fatal("the exec did not end with its container")
	}
}

// processesWith lists the host's processes whose command line holds marker.
func processesWith(t *testing.T, marker string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmd, []byte(marker)) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
