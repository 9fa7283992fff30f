package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// sshCmd is OpenSSH's ssh with the config `ws config-ssh` wrote, batch
// mode and alice's token in its environment (the ProxyCommand reads it).
func (e *env) sshCmd(args ...string) *exec.Cmd {
	cmd := exec.Command("ssh", append([]string{"-F", e.sshConfig, "-o", "BatchMode=yes"}, args...)...)
	cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+e.alice)
	return cmd
}

// mux are ssh's options for connection multiplexing over the master.
func (e *env) mux(master string) []string {
	return []string{"-o", "ControlMaster=" + master, "-o", "ControlPath=" + e.ctlPath, "-o", "ControlPersist=yes"}
}

// timed runs cmd and returns its wall time; it fails unless cmd exits 0.
func timed(cmd *exec.Cmd) (time.Duration, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("%v: %v\n%s", cmd.Args, err, out.String())
	}
	return d, nil
}

// benchSSH measures `ssh gantry-NAME true` cold (a new ssh and
// ProxyCommand each time) and warm (multiplexed over a master already
// up), and `gantry ws exec ID true`, interleaved, n samples each. A failed
// command is counted, its output printed, and the run goes on; a warm
// sample counts only if the master's socket was there before and after it
// (else the master is started again, untimed).
func (e *env) benchSSH(res *results) error {
	host := "gantry-" + e.name
	if err := e.sshMaster(host); err != nil {
		return err
	}
	fmt.Printf("ssh %s true / gantry ws exec ID true, %d samples each, interleaved:\n", host, e.cfg.n)
	var cold, light, warm, wsExec []time.Duration
	failed := map[string]int{}
	sample := func(kind string, into *[]time.Duration, cmd *exec.Cmd) bool {
		d, err := timed(cmd)
		if err != nil {
			if failed[kind]++; failed[kind] <= 3 {
				fmt.Printf("  FAILED %s: %v\n", kind, err)
			}
			return false
		}
		*into = append(*into, d)
		return true
	}
	cpu0 := cpuOf(e.serve.Process.Pid)
	for range e.cfg.n {
		sample("ssh cold", &cold, e.sshCmd(host, "true"))
		sample("ssh cold, light ProxyCommand", &light, e.sshCmd(append(e.lightProxy(), host, "true")...))
		if _, err := os.Stat(e.ctlPath); err != nil {
			failed["ssh master gone before a warm sample"]++
			if err := e.sshMaster(host); err != nil {
				return err
			}
		}
		if sample("ssh warm", &warm, e.sshCmd(append(e.mux("no"), host, "true")...)) {
			if _, err := os.Stat(e.ctlPath); err != nil {
				failed["ssh master gone after a warm sample (dropped)"]++
				warm = warm[:len(warm)-1]
			}
		}
		cmd := exec.Command(e.gantry, "ws", "--server", e.base, "exec", e.id, "--", "true")
		cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+e.alice)
		sample("ws exec", &wsExec, cmd)
	}
	cpu := cpuOf(e.serve.Process.Pid) - cpu0
	res.addLatencies("ssh true cold", cold)
	res.addLatencies("ssh true cold, appbench proxy", light)
	res.addLatencies("ssh true warm (ControlMaster)", warm)
	res.addLatencies("gantry ws exec true", wsExec)
	nfail := 0
	for k, v := range failed {
		fmt.Printf("  %s: %d\n", k, v)
		nfail += v
	}
	res.add("ssh failures", float64(nfail))
	fmt.Printf("  server CPU: %v over %d commands (%v a command, all four kinds)\n", cpu, 4*e.cfg.n, cpu/time.Duration(4*e.cfg.n))
	if nfail > 0 {
		return fmt.Errorf("%d failures: %v (master log: %s)", nfail, failed, tail(filepath.Join(e.dir, "ssh-master.log"), 1000))
	}
	return nil
}

// sshMaster starts the multiplexing master for host unless it is up: -f
// puts it in the background once it is connected; it stays
// (ControlPersist) until close's `ssh -O exit`. Its output goes to a file:
// a pipe would stay open as long as it runs.
func (e *env) sshMaster(host string) error {
	if _, err := timed(e.sshCmd(append(e.mux("no"), "-O", "check", host)...)); err == nil {
		return nil
	}
	master := e.sshCmd(append(e.mux("yes"), "-f", "-N", host)...)
	f, err := os.OpenFile(filepath.Join(e.dir, "ssh-master.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	master.Stderr = f
	if err := master.Run(); err != nil {
		return fmt.Errorf("ssh master: %w", err)
	}
	if _, err := timed(e.sshCmd(append(e.mux("no"), "-O", "check", host)...)); err != nil {
		return fmt.Errorf("no ssh master: %w", err)
	}
	return nil
}

// tail is the last n bytes of file.
func tail(file string, n int) string {
	b, _ := os.ReadFile(file)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
