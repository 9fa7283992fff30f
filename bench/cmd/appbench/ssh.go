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
// up), and `gantry ws exec ID true`, interleaved, n samples each.
func (e *env) benchSSH(res *results) error {
	host := "gantry-" + e.name
	// The master: -f puts it in the background once it is connected; it
	// stays (ControlPersist) until close's `ssh -O exit`. Its output goes to
	// a file: a pipe would stay open as long as it runs.
	if _, err := timed(e.sshCmd(append(e.mux("no"), "-O", "check", host)...)); err != nil {
		master := e.sshCmd(append(e.mux("yes"), "-f", "-N", host)...)
		if master.Stderr, err = os.OpenFile(filepath.Join(e.dir, "ssh-master.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return err
		}
		err = master.Run()
		master.Stderr.(*os.File).Close()
		if err != nil {
			return fmt.Errorf("ssh master: %w", err)
		}
	}
	if _, err := timed(e.sshCmd(append(e.mux("no"), "-O", "check", host)...)); err != nil {
		return fmt.Errorf("no ssh master: %w", err)
	}
	fmt.Printf("ssh %s true / gantry ws exec ID true, %d samples each, interleaved:\n", host, e.cfg.n)
	var cold, warm, wsExec []time.Duration
	cpu0 := cpuOf(e.serve.Process.Pid)
	for range e.cfg.n {
		d, err := timed(e.sshCmd(host, "true"))
		if err != nil {
			return err
		}
		cold = append(cold, d)
		if d, err = timed(e.sshCmd(append(e.mux("no"), host, "true")...)); err != nil {
			return err
		}
		warm = append(warm, d)
		cmd := exec.Command(e.gantry, "ws", "--server", e.base, "exec", e.id, "--", "true")
		cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+e.alice)
		if d, err = timed(cmd); err != nil {
			return err
		}
		wsExec = append(wsExec, d)
	}
	cpu := cpuOf(e.serve.Process.Pid) - cpu0
	if _, err := timed(e.sshCmd(append(e.mux("no"), "-O", "check", host)...)); err != nil {
		return fmt.Errorf("the ssh master went away during the run (warm samples may have connected anew): %w", err)
	}
	res.addLatencies("ssh true cold", cold)
	res.addLatencies("ssh true warm (ControlMaster)", warm)
	res.addLatencies("gantry ws exec true", wsExec)
	fmt.Printf("  server CPU: %v over %d commands (%v a command, all three kinds)\n", cpu, 3*e.cfg.n, cpu/time.Duration(3*e.cfg.n))
	return nil
}
