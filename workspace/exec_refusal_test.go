package workspace

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// `ws exec` with -t, -i or both gets the server's refusal (an unknown id:
// 404, a workspace that is not RUNNING: 409, a bad token: 401) at once,
// though its stdin stays open: a refused request's body is not waited for.
// Before, the server read the unsent body before answering and the client
// kept sending it, so the command hung until killed.
func TestExecRefusedAtOnceThroughCLI(t *testing.T) {
	s := startServe(t, "", t.TempDir())
	idle := strings.TrimSpace(s.cli("create", "idle"))
	s.cli("wait", idle, "STANDBY", "--timeout", "30s")
	cases := []struct {
		name, id, token, want string
	}{
		{"unknown-id", "nosuch", s.token(), `not found: "nosuch" (HTTP 404)`},
		{"standby", idle, s.token(), "is STANDBY, not RUNNING: bring it up first (HTTP 409)"},
		{"bad-token", idle, "gws_nope", "(HTTP 401)"},
	}
	for _, tc := range cases {
		for _, mode := range []string{"-t", "-i", "-it"} {
			t.Run(tc.name+mode, func(t *testing.T) {
				out, code, took := execWithOpenStdin(t, s, tc.token, tc.id, mode)
				if code == 0 || !strings.Contains(out, tc.want) || took > time.Second {
					t.Fatalf("exec %s %s: exit %d after %v, output %q; want a non-zero exit with %q within 1s",
						tc.id, mode, code, took.Round(time.Millisecond), out, tc.want)
				}
			})
		}
	}
}

// execWithOpenStdin runs `gantry ws exec ID MODE -- true` with a stdin
// that never ends (a pipe whose writer stays open) and returns its output,
// exit code and run time; a command that hangs is killed after 5 s.
func execWithOpenStdin(t *testing.T, s *e2eServer, token, id, mode string) (string, int, time.Duration) {
	t.Helper()
	stdin, keep, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	defer keep.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, "ws", "--server", s.url, "exec", id, mode, "--", "true")
	cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+token)
	cmd.Stdin = stdin
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err = cmd.Run()
	took := time.Since(t0)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), cmd.ProcessState.ExitCode(), took
}
