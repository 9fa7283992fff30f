package dsort

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// tlsFlags are the flags of host's certificate made by `gantry sort certs`
// in dir, with ca as the CA file.
func tlsFlags(dir, host, ca string) []string {
	return []string{"--tls-cert", filepath.Join(dir, host+".crt"), "--tls-key", filepath.Join(dir, host+".key"), "--tls-ca", ca}
}

// makeCerts runs `gantry sort certs dir --hosts hosts`.
func makeCerts(t *testing.T, dir string, hosts ...string) {
	t.Helper()
	needBinary(t)
	out, err := exec.Command(gantryBin, "sort", "certs", dir, "--hosts", strings.Join(hosts, ",")).CombinedOutput()
	if err != nil {
		t.Fatalf("gantry sort certs: %v\n%s", err, out)
	}
}

// TestMutualTLS runs a job whose master and two workers use mutual TLS
// with certificates from `gantry sort certs`: it succeeds and validates.
// Meanwhile a worker whose certificate another CA signed (and which trusts
// the job's CA too, so it is the master that says no) and a plaintext
// worker are refused at the handshake, each exits non-zero saying so, and
// the master logs each refusal.
func TestMutualTLS(t *testing.T) {
	t.Parallel() // waits on processes (main_test.go)
	certs := t.TempDir()
	jobCerts, otherCerts := filepath.Join(certs, "job"), filepath.Join(certs, "other")
	makeCerts(t, jobCerts, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	makeCerts(t, otherCerts, "127.0.0.9")
	ca := filepath.Join(jobCerts, "ca.crt")
	// The rogue trusts both CAs: its own check of the master passes, and
	// its certificate verifies against its own --tls-ca at start.
	both := filepath.Join(certs, "both.crt")
	a, _ := os.ReadFile(ca)
	b, _ := os.ReadFile(filepath.Join(otherCerts, "ca.crt"))
	if err := os.WriteFile(both, append(a, b...), 0o644); err != nil {
		t.Fatal(err)
	}

	j := newJob(t, 2, 20000, tlsFlags(jobCerts, "127.0.0.1", ca)...)
	if !strings.HasPrefix(j.addr, "127.0.0.1:") {
		t.Fatalf("master at %s, want 127.0.0.1", j.addr)
	}
	in := t.TempDir() // the rogues' own input: not part of the job's data
	if out, err := exec.Command(gantryBin, "gensort", "1", filepath.Join(in, "f")).CombinedOutput(); err != nil {
		t.Fatalf("gensort: %v\n%s", err, out)
	}
	rogue := startProc(t, "rogue worker", nil, append([]string{"sort", "worker", j.addr, "-I", in, "-O", t.TempDir(),
		"--tmp", t.TempDir(), "--bind", "127.0.0.9", "--register-timeout", "20s"}, tlsFlags(otherCerts, "127.0.0.9", both)...)...)
	if code := rogue.wait(15 * time.Second); code == 0 {
		t.Fatal("a worker with another CA's certificate exited 0")
	}
	rogue.waitLine(false, regexp.MustCompile(`TLS handshake with master 127\.0\.0\.1:\d+ failed.*unknown certificate authority`), time.Second)
	j.master.waitLine(false, regexp.MustCompile(`refused a TLS handshake.*certificate signed by unknown authority`), 5*time.Second)
	// (The master logs a refusal at most once a second: the plaintext
	// worker's retries for 3 s get one of theirs in.)
	plain := startProc(t, "plaintext worker", nil, "sort", "worker", j.addr, "-I", in, "-O", t.TempDir(),
		"--tmp", t.TempDir(), "--bind", "127.0.0.8", "--register-timeout", "3s")
	if code := plain.wait(30 * time.Second); code == 0 {
		t.Fatal("a plaintext worker exited 0")
	}
	plain.waitLine(false, regexp.MustCompile(`cannot register.*serves TLS`), time.Second)
	j.master.waitLine(false, regexp.MustCompile(`refused a TLS handshake.*does not look like a TLS handshake`), 5*time.Second)

	// sort status: with the client certificate it answers; plaintext, it
	// says the master serves TLS.
	st := startProc(t, "status", nil, append([]string{"sort", "status", j.addr}, tlsFlags(jobCerts, "client", ca)...)...)
	if code := st.wait(15 * time.Second); code != 0 {
		t.Fatalf("sort status with the client certificate exited %d", code)
	}
	st.waitLine(true, regexp.MustCompile(`^job \S+: registering, 0/2 workers registered`), time.Second)
	st = startProc(t, "plaintext status", nil, "sort", "status", j.addr)
	if code := st.wait(15 * time.Second); code == 0 {
		t.Fatal("plaintext sort status of a TLS master exited 0")
	}
	st.waitLine(false, regexp.MustCompile(`closed a plaintext connection: it serves TLS`), time.Second)

	for w, ws := range j.workers {
		ws.extra = tlsFlags(jobCerts, ws.bind, ca)
		j.startWorker(w)
	}
	order := j.workerOrder()
	if code := j.master.wait(2 * time.Minute); code != 0 {
		t.Fatalf("master exited %d", code)
	}
	for i, w := range j.workers {
		if code := w.proc.wait(30 * time.Second); code != 0 {
			t.Fatalf("worker %d exited %d", i, code)
		}
	}
	j.validate(order)
	if log := j.master.tail(100000); strings.Contains(log, "plaintext gRPC") {
		t.Errorf("the master warned of plaintext under TLS:\n%s", log)
	}
}
