package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/server"
)

// missingNamespace is a namespace name no test creates.
func missingNamespace() string {
	var b [4]byte
	rand.Read(b[:])
	return "gantry-missing-" + hex.EncodeToString(b[:])
}

// TestCheckNamespace: the provider's namespace exists, or CheckNamespace says it does not
// and how to make it.
func TestCheckNamespace(t *testing.T) {
	c := newTestCluster(t)
	if err := c.provider(c.config()).CheckNamespace(t.Context()); err != nil {
		t.Fatalf("the test's own namespace %s: %v", c.ns, err)
	}
	cfg := c.config()
	cfg.Namespace = missingNamespace()
	err := c.provider(cfg).CheckNamespace(t.Context())
	if !errors.Is(err, ErrNoNamespace) || !strings.Contains(err.Error(), `"`+cfg.Namespace+`" does not exist: create it first`) {
		t.Fatalf("namespace %s: %v; want ErrNoNamespace naming it and saying to create it", cfg.Namespace, err)
	}
}

// TestCreateWithoutAnImageIsRefused: on a server with no default image, a workspace that
// names none is refused at create (and at update) with HTTP 400 naming --image, instead of
// being accepted and its start retried; with an image, or with a default, it is accepted. A
// Start of a spec without an image (a workspace made before the check) fails for good at once.
func TestCreateWithoutAnImageIsRefused(t *testing.T) {
	c := newTestCluster(t)
	cfg := c.config()
	cfg.Image = ""
	p := c.provider(cfg)
	s := startServer(t, p)
	ctx := t.Context()
	var ae *client.APIError
	_, err := s.Create(ctx, workspace.NewWorkspace{Name: "noimage"})
	if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, "--image") {
		t.Fatalf("create without an image: %v; want HTTP 400 naming --image", err)
	}
	w, err := s.Create(ctx, workspace.NewWorkspace{Name: "withimage", Image: "registry.invalid/workspace:1"})
	if err != nil {
		t.Fatalf("create with an image: %v", err)
	}
	empty := ""
	if _, err := s.Update(ctx, w.ID, workspace.SpecUpdate{Image: &empty}); !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, "--image") {
		t.Fatalf("update to no image: %v; want HTTP 400 naming --image", err)
	}
	if err := p.CheckSpec(provider.Spec{}); !errors.Is(err, ErrNoImage) {
		t.Fatalf("CheckSpec without an image: %v", err)
	}
	if err := c.provider(c.config()).CheckSpec(provider.Spec{}); err != nil {
		t.Fatalf("CheckSpec without an image, with the server's default: %v", err)
	}
	var pe *provider.PermanentError
	if err := p.Start(ctx, provider.Spec{ID: "old"}); !errors.As(err, &pe) || pe.Reason != "NoImage" || !errors.Is(err, ErrNoImage) {
		t.Fatalf("Start without an image: %v; want a permanent NoImage failure", err)
	}
}

// TestServeChecksNamespaceAndImage, through the CLI: `ws serve --provider kubernetes`
// refuses to start on a namespace that does not exist, saying so; on one that exists but
// without --image, `ws create` without --image is refused naming --image.
func TestServeChecksNamespaceAndImage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the gantry binary")
	}
	c := newTestCluster(t)
	bin := testutil.GantryBinary(t)
	serve := func(ns string) *exec.Cmd {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return exec.Command(bin, "ws", "serve", "--provider", "kubernetes", "--kubeconfig", kubeconfig(t), "--namespace", ns,
			"--storage", "file://"+c.blobs, "--data", t.TempDir(), "--listen", addr)
	}

	missing := missingNamespace()
	cmd := serve(missing)
	var out testutil.Buffer // written by the server's output copier while the test reads it
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		want := `--namespace ` + missing + `: kubernetes: no such namespace: namespace "` + missing + `" does not exist: create it first`
		if err == nil || !strings.Contains(out.String(), want) {
			t.Fatalf("serve on a missing namespace: %v after %v\n%s\nwant a failure saying %q", err, time.Since(t0), out.String(), want)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("serve on a missing namespace still runs after 30s:\n%s", out.String())
	}

	cmd = serve(c.ns)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	data, listen := cmd.Args[len(cmd.Args)-3], cmd.Args[len(cmd.Args)-1]
	var token []byte
	testutil.WaitFor(t, 30*time.Second, "serve up", func() (bool, string) {
		var err error
		token, err = os.ReadFile(filepath.Join(data, server.AdminTokenFile))
		if err == nil {
			var conn net.Conn
			if conn, err = net.Dial("tcp", listen); err == nil {
				conn.Close()
			}
		}
		return err == nil, errString(err) + "\n" + out.String()
	})
	create := exec.CommandContext(context.WithoutCancel(t.Context()), bin, "ws", "--server", "http://"+listen, "create", "box")
	create.Env = append(os.Environ(), "GANTRY_TOKEN="+strings.TrimSpace(string(token)))
	got, err := create.CombinedOutput()
	if err == nil || !strings.Contains(string(got), "--image") || !strings.Contains(string(got), "(HTTP 400)") {
		t.Fatalf("ws create without an image: %v\n%s\nwant a refusal (HTTP 400) naming --image", err, got)
	}
}
