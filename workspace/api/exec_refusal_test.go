package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// `ws exec` with -t, -i or both gets the server's refusal (an unknown id:
// 404, a workspace that is not RUNNING: 409, a bad token: 401) at once,
// though its stdin stays open: a refused request's body is not waited for.
// Before, the server read the unsent body before answering and the client
// kept sending it, so the command hung until killed.
func TestExecRefusedAtOnceThroughCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; TestExecRefusalNeedsNoBody is its in-process twin")
	}
	s := wstest.StartServe(t, "", t.TempDir())
	idle := strings.TrimSpace(s.CLI("create", "idle"))
	s.CLI("wait", idle, "STANDBY", "--timeout", "30s")
	cases := []struct {
		name, id, token, want string
	}{
		{"unknown-id", "nosuch", s.Token(), `not found: "nosuch" (HTTP 404)`},
		{"standby", idle, s.Token(), "is STANDBY, not RUNNING: bring it up first (HTTP 409)"},
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
func execWithOpenStdin(t *testing.T, s *wstest.Serve, token, id, mode string) (string, int, time.Duration) {
	t.Helper()
	stdin, keep, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	defer keep.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Bin, "ws", "--server", s.URL, "exec", id, mode, "--", "true")
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

// noExec is a Container that can exec, though no test here may get so far.
type noExec struct {
	provider.ContainerFuncs
	t *testing.T
}

func (n noExec) Exec(context.Context, provider.ExecSpec, io.Reader, io.Writer, io.Writer) (int, error) {
	n.t.Error("a refused exec ran")
	return 0, errors.New("refused")
}

// TestExecRefusalNeedsNoBody is TestExecRefusedAtOnceThroughCLI in one
// process: Client.Exec with a terminal, stdin that never ends or both gets
// each refusal (404, 409, 401) as an *APIError at once.
func TestExecRefusalNeedsNoBody(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	env := wstest.NewAPIEnv(t, st, api.APIConfig{Container: noExec{t: t}})
	idle, err := env.Client(env.Admin).Create(t.Context(), workspace.NewWorkspace{Name: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	stdin, keep := io.Pipe() // never written to, never closed until the end
	defer keep.Close()
	for _, tc := range []struct {
		name, id, token string
		status          int
	}{
		{"unknown-id", "nosuch", env.Admin, 404},
		{"not-running", idle.ID, env.Admin, 409},
		{"bad-token", idle.ID, "gws_nope", 401},
	} {
		for _, mode := range []string{"-t", "-i", "-it"} {
			eio := execMode(mode, stdin)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			t0 := time.Now()
			_, err := env.Client(tc.token).Exec(ctx, tc.id, []string{"true"}, eio)
			took := time.Since(t0)
			cancel()
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != tc.status || took > time.Second {
				t.Errorf("%s %s: %v after %v; want HTTP %d within 1s", tc.name, mode, err, took.Round(time.Millisecond), tc.status)
			}
		}
	}
}

// TestExecReturnsWhenItsContextEnds: against a server that never answers,
// Exec with a stdin that never ends returns when its context does, in
// every mode. (net/http waits for the request body's Read under way before
// it gives up on a request: with the caller's stdin as the body, it waited
// forever.)
func TestExecReturnsWhenItsContextEnds(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hold)
	stdin, keep := io.Pipe()
	defer keep.Close()
	for _, mode := range []string{"-t", "-i", "-it"} {
		eio := execMode(mode, stdin)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		done := make(chan error, 1)
		go func() {
			_, err := (&client.Client{Base: srv.URL}).Exec(ctx, "w", []string{"true"}, eio)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: %v, want the context's deadline", mode, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: Exec still waits 10s after its context ended", mode)
		}
		cancel()
	}
}

// execMode is the ExecIO of `ws exec` with mode's flags (-i: stdin, -t: a
// terminal), its output discarded.
func execMode(mode string, stdin io.Reader) client.ExecIO {
	eio := client.ExecIO{Stdout: io.Discard, Stderr: io.Discard}
	if strings.Contains(mode, "i") {
		eio.Stdin = stdin
	}
	if strings.Contains(mode, "t") {
		eio.TTY = &provider.TTY{}
	}
	return eio
}
