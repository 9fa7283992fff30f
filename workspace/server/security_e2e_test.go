package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// selfSigned writes a certificate for 127.0.0.1 and its key (PEM) to dir.
func selfSigned(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "gantry test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	return cert, key
}

// `ws serve` on a non-loopback address without TLS exits non-zero at start
// and names the flags that would make it start; nothing is created.
func TestServeRefusesPlainHTTPOffLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		data := filepath.Join(t.TempDir(), "data")
		cmd := exec.Command(testutil.GantryBinary(t), "ws", "serve", "--listen", addr, "--data", data)
		out, err := cmd.CombinedOutput()
		if err == nil || cmd.ProcessState.ExitCode() == 0 {
			t.Fatalf("--listen %s without TLS started (%v):\n%s", addr, err, out)
		}
		for _, want := range []string{"--tls-cert", "--tls-key", "--insecure-listen", "non-loopback"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("--listen %s: the message does not name %s:\n%s", addr, want, out)
			}
		}
		if _, err := os.Stat(filepath.Join(data, AdminTokenFile)); err == nil {
			t.Errorf("--listen %s: a refused start still made an admin token", addr)
		}
	}
}

// Over HTTPS with a certificate made here: the CLI's whole cycle with
// --ca-cert, the admin token from <data>/admin-token (mode 0600, its secret
// not in the log), a token for another owner, and the audit log through
// `ws audit --json`. Without --ca-cert the CLI refuses the certificate.
func TestHTTPSCycleThroughCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	data := filepath.Join(dir, "data")
	addr := testutil.FreeAddr(t)
	s := &wstest.Serve{T: t, Bin: testutil.GantryBinary(t), URL: "https://" + addr, Data: data, CLIArgs: []string{"--ca-cert", cert},
		Args: []string{"ws", "serve", "--listen", addr, "--data", data, "--tls-cert", cert, "--tls-key", key,
			"--interval", "300ms", "--monitor-interval", "300ms", "--log-level", "debug", "--quota-running", "1"}}
	s.Start()
	t.Cleanup(func() { s.Stop(syscall.SIGTERM) })

	fi, err := os.Stat(filepath.Join(data, AdminTokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin-token: %v, mode %v; want mode 0600", err, fi.Mode().Perm())
	}
	admin := s.Token()
	if _, err := auth.ParseSecret(auth.TokenPrefix, admin); err != nil {
		t.Fatalf("admin-token holds no token: %v", err)
	}

	alice := strings.TrimSpace(s.CLI("token", "create", "--owner", "alice", "--expires", "1h"))
	asAlice := func(args ...string) (string, error) {
		cmd := exec.Command(s.Bin, append([]string{"ws", "--server", s.URL, "--ca-cert", cert, "--token", alice}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	id, err := asAlice("create", "cycle", "--cmd", "exec sleep 600")
	if err != nil {
		t.Fatalf("alice create: %v\n%s", err, id)
	}
	id = strings.TrimSpace(id)
	for _, step := range [][]string{{"up", id}, {"wait", id, "RUNNING", "--timeout", "30s"}, {"down", id},
		{"wait", id, "STANDBY", "--timeout", "30s"}, {"up", "cycle"}, {"wait", "cycle", "RUNNING", "--timeout", "30s"}} {
		if out, err := asAlice(step...); err != nil {
			t.Fatalf("alice %v: %v\n%s\nserver log:\n%s", step, err, out, wstest.Tail(s.Log.String(), 3000))
		}
	}
	// Her second running workspace is over the quota: non-zero exit, the limit named.
	if out, err := asAlice("create", "second", "--desired", "RUNNING"); err == nil || !strings.Contains(out, "limit 1") || !strings.Contains(out, "429") {
		t.Fatalf("alice's second running workspace: %v\n%s", err, out)
	}
	// The admin sees alice's workspace; a wrong token is refused (and audited).
	if out := s.CLI("list", "--owner", "alice"); !strings.Contains(out, id) || !strings.Contains(out, "alice") {
		t.Fatalf("admin's list --owner alice:\n%s", out)
	}
	bogus, _, _, _ := auth.NewSecret(auth.TokenPrefix)
	if out, err := s.CLIErr("--token", bogus, "delete", id); err == nil || !strings.Contains(out, "401") {
		t.Fatalf("delete with an unknown token: %v\n%s", err, out)
	}
	for _, step := range [][]string{{"delete", id}, {"wait", id, "DELETED", "--timeout", "30s"}} {
		if out, err := asAlice(step...); err != nil {
			t.Fatalf("alice %v: %v\n%s", step, err, out)
		}
	}

	// Without the CA the CLI does not trust the server.
	plain := exec.Command(s.Bin, "ws", "--server", s.URL, "--token", admin, "list")
	if out, err := plain.CombinedOutput(); err == nil || !strings.Contains(string(out), "certificate") {
		t.Fatalf("list without --ca-cert: %v\n%s", err, out)
	}

	var rows []auth.AuditEntry
	if err := json.Unmarshal([]byte(s.CLI("audit", "--json", "--workspace", id)), &rows); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Action+":"+r.Owner+":"+strconv.Itoa(r.Status))
	}
	want := "workspace.create:alice:201 workspace.up:alice:200 workspace.down:alice:200 workspace.up:alice:200 workspace.delete::401 workspace.delete:alice:202"
	if strings.Join(got, " ") != want {
		t.Fatalf("ws audit --json --workspace %s:\n got %s\nwant %s", id, strings.Join(got, " "), want)
	}
	s.Stop(syscall.SIGTERM) // its log is complete, and no longer written
	if strings.Contains(s.Log.String(), admin) || strings.Contains(s.Log.String(), alice) {
		t.Fatal("a token secret is in the server's log")
	}
}

// TestAdminTokenFileAgrees: wstest names the admin token's file itself (it
// cannot import this package); both must say the same.
func TestAdminTokenFileAgrees(t *testing.T) {
	if wstest.AdminTokenFile != AdminTokenFile {
		t.Fatalf("wstest.AdminTokenFile %q, server.AdminTokenFile %q", wstest.AdminTokenFile, AdminTokenFile)
	}
}
