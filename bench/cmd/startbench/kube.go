package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// kubeImage is the workspaces' image on the simulated cluster: kwok runs
// no container, so it is never pulled.
const kubeImage = "registry.invalid/startbench:1"

// kubeEnv is a namespace of this run's on the cluster of -kubeconfig.
type kubeEnv struct {
	kubeconfig, ns string
}

// newKube creates namespace ns on the cluster of kubeconfig ("" = the
// simulated one of `scripts/services.sh kubernetes`, started with it, as
// the tests do, when nothing answers on its port), waiting for its
// default service account (no Pod is admitted before).
func newKube(ctx context.Context, repo, kubeconfig, ns string) (*kubeEnv, error) {
	if kubeconfig == "" {
		dir := os.Getenv("GANTRY_SERVICES_DIR")
		if dir == "" {
			dir = filepath.Join(os.TempDir(), "gantry-services")
		}
		kubeconfig = filepath.Join(dir, "kubernetes", "kubeconfig")
		port := os.Getenv("GANTRY_KUBE_PORT")
		if port == "" {
			port = "16443"
		}
		if err := ensureCluster(ctx, repo, "127.0.0.1:"+port); err != nil {
			return nil, err
		}
	}
	k := &kubeEnv{kubeconfig: kubeconfig, ns: ns}
	if _, err := k.kubectl(ctx, "create", "namespace", ns); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := k.kubectl(ctx, "-n", ns, "get", "serviceaccount", "default"); err == nil {
			break
		} else if time.Now().After(deadline) {
			k.close()
			return nil, fmt.Errorf("namespace %s: no default service account after 60s: %w", ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	log.Printf("kubernetes: namespace %s on the cluster of %s", ns, kubeconfig)
	return k, nil
}

// ensureCluster runs `scripts/services.sh kubernetes` (its first build of
// the control plane takes minutes) when nothing answers on addr.
func ensureCluster(ctx context.Context, repo, addr string) error {
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		c.Close()
		return nil
	}
	log.Printf("kubernetes: nothing on %s; starting the simulated cluster: bash scripts/services.sh kubernetes", addr)
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repo, "scripts", "services.sh"), "kubernetes")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("--provider kubernetes: scripts/services.sh kubernetes: %w", err)
	}
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return fmt.Errorf("--provider kubernetes: no cluster on %s after scripts/services.sh kubernetes: %w", addr, err)
	}
	c.Close()
	return nil
}

func (k *kubeEnv) kubectl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// close deletes the namespace (and what is left in it), not waiting.
func (k *kubeEnv) close() {
	if _, err := k.kubectl(context.Background(), "delete", "namespace", k.ns, "--wait=false"); err != nil {
		log.Print(err)
	}
}
