package dsort

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// certFiles are the TLS files of host's certificate made by MakeCerts in
// dir, with its CA.
func certFiles(dir, host string) TLSFiles {
	return TLSFiles{Cert: filepath.Join(dir, host+".crt"), Key: filepath.Join(dir, host+".key"), CA: filepath.Join(dir, "ca.crt")}
}

// MakeCerts never overwrites: one existing file fails the call before
// anything is written; a fresh directory gets the CA, each host's pair and
// the client pair, keys private.
func TestMakeCertsNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "10.0.0.2.key")
	if err := os.WriteFile(keep, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := MakeCerts(dir, []string{"10.0.0.1", "10.0.0.2"}, time.Hour); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), keep) {
		t.Fatalf("MakeCerts over an existing key: %v, want ErrConfig naming %s", err, keep)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("a refused MakeCerts left %d files, want only the one that was there", len(ents))
	}
	if b, _ := os.ReadFile(keep); string(b) != "mine" {
		t.Fatalf("the existing file now holds %q", b)
	}
	for _, bad := range [][]string{nil, {"a/b"}, {"ca"}, {""}, {"10.0.0.1", "10.0.0.1"}} {
		if _, err := MakeCerts(t.TempDir(), bad, time.Hour); !errors.Is(err, ErrConfig) {
			t.Errorf("MakeCerts(%q): %v, want ErrConfig", bad, err)
		}
	}
	fresh := filepath.Join(t.TempDir(), "tls")
	paths, err := MakeCerts(fresh, []string{"10.0.0.1", "node-b.example"}, time.Hour)
	if err != nil || len(paths) != 8 {
		t.Fatalf("MakeCerts: %d paths, %v; want 8", len(paths), err)
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(p, ".key") && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", p, fi.Mode().Perm())
		}
	}
	for _, h := range []string{"10.0.0.1", "node-b.example", "client"} {
		if _, err := loadTLS(certFiles(fresh, h), nil); err != nil {
			t.Errorf("loading %s's certificate: %v", h, err)
		}
	}
}

// loadTLS fails at start, naming the file, on what would otherwise fail
// at the first handshake.
func TestLoadTLSRefusesBadFiles(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if _, err := MakeCerts(a, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := MakeCerts(b, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	f := certFiles(a, "127.0.0.1")
	cert, key, ca := f.Cert, f.Key, f.CA
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o644)
	for _, tc := range []struct {
		name  string
		files TLSFiles
		want  string
	}{
		{"cert only", TLSFiles{Cert: cert}, "--tls-key"},
		{"no CA", TLSFiles{Cert: cert, Key: key}, "--tls-ca"},
		{"another cert's key", TLSFiles{Cert: cert, Key: filepath.Join(b, "127.0.0.1.key"), CA: ca}, cert},
		{"missing CA file", TLSFiles{Cert: cert, Key: key, CA: filepath.Join(a, "nope.crt")}, "nope.crt"},
		{"CA not PEM", TLSFiles{Cert: cert, Key: key, CA: notPEM}, notPEM},
		{"another CA", TLSFiles{Cert: cert, Key: key, CA: filepath.Join(b, "ca.crt")}, "not a client certificate of the CA"},
	} {
		_, err := loadTLS(tc.files, nil)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrConfig naming %q", tc.name, err, tc.want)
		}
	}
}

// Plaintext warns once per process, and only when an address is not
// loopback.
func TestPlaintextWarnsOnce(t *testing.T) {
	var buf strings.Builder
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	warnPlaintext(logger, false, "127.0.0.1:9000", "[::1]:9000")
	warnPlaintext(logger, true, "10.0.0.1:9000")
	if buf.Len() != 0 {
		t.Fatalf("warned for loopback or TLS: %s", buf.String())
	}
	warnPlaintext(logger, false, "127.0.0.1:9000", "10.0.0.1:9000")
	warnPlaintext(logger, false, "10.0.0.2:9000")
	if n := strings.Count(buf.String(), "plaintext gRPC"); n != 1 || !strings.Contains(buf.String(), "addr=10.0.0.1:9000") {
		t.Fatalf("warned %d times, want once naming 10.0.0.1:9000:\n%s", n, buf.String())
	}
}

// The dialing side checks the master too: a client refuses a master whose
// certificate another CA signed, or one made for another address, and
// says it was the TLS handshake; with the job's CA and the master's own
// certificate it gets the job's status.
func TestClientsCheckTheMastersCertificate(t *testing.T) {
	job, other := t.TempDir(), t.TempDir()
	if _, err := MakeCerts(job, []string{"127.0.0.1", "127.0.0.2"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := MakeCerts(other, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	client := certFiles(job, "client")
	for _, tc := range []struct {
		name   string
		master TLSFiles
		want   string // "" = answers
	}{
		{"the job's certificate", certFiles(job, "127.0.0.1"), ""},
		{"another CA's", certFiles(other, "127.0.0.1"), "certificate signed by unknown authority"},
		{"made for 127.0.0.2", certFiles(job, "127.0.0.2"), "not 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, m, stop := runMaster(t, MasterConfig{Workers: 1, TLS: tc.master})
			defer stop()
			info, err := JobStatus(t.Context(), addr, "", client)
			switch {
			case tc.want == "" && (err != nil || info.JobID != m.JobID()):
				t.Fatalf("JobStatus: %+v, %v; want job %s", info, err, m.JobID())
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "TLS handshake") || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("JobStatus: %v; want a TLS handshake failure saying %q", err, tc.want)
			}
		})
	}
}
