package workspace_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/workspace"
)

func ptr[T any](v T) *T { return &v }

// What no provider could ever start is refused when it is asked for, with
// ErrBadInput (the API's 400), naming the field: a NUL byte (the kernel
// takes C strings) in the environment, the command or the image, and
// limits out of range (a memory near 2^63 overflowed the process
// provider's ulimit arithmetic). Create, PATCH and the limits' bounds.
func TestSpecRefusesWhatCannotStart(t *testing.T) {
	ok := workspace.Spec{Env: []string{"A=1"}, CPUs: 1.5, Memory: 64 << 20, Pids: 100}
	tests := []struct {
		name string
		n    workspace.NewWorkspace
		want string // "" = valid; else a word of the error
	}{
		{"a valid spec", workspace.NewWorkspace{Name: "x", Command: "echo hi", Image: "alpine:3", Spec: ok}, ""},
		{"the largest limits", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{CPUs: workspace.MaxCPUs, Memory: workspace.MaxMemory, Pids: workspace.MaxPids}}, ""},
		{"the smallest limits", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{CPUs: workspace.MinCPUs, Memory: workspace.MinMemory, Pids: 1}}, ""},
		{"a NUL in an env value", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{Env: []string{"X=a\x00b"}}}, "NUL"},
		{"a NUL in an env name", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{Env: []string{"X\x00=a"}}}, "environment"},
		{"a NUL in the command", workspace.NewWorkspace{Name: "x", Command: "echo a\x00b"}, "command"},
		{"a NUL in the image", workspace.NewWorkspace{Name: "x", Image: "alpine\x00:3"}, "image"},
		{"the longest command", workspace.NewWorkspace{Name: "x", Command: strings.Repeat("#", workspace.MaxCommandBytes)}, ""},
		{"a command no exec takes", workspace.NewWorkspace{Name: "x", Command: strings.Repeat("#", workspace.MaxCommandBytes+1)}, "command"},
		{"memory near 2^63", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{Memory: math.MaxInt64}}, "memory"},
		{"memory just over the bound", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{Memory: workspace.MaxMemory + 1}}, "memory"},
		{"negative memory", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{Memory: -1}}, "memory"},
		{"memory under the floor", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{Memory: 1 << 20}}, "memory"},
		{"negative cpus", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{CPUs: -1}}, "cpus"},
		{"absurd cpus", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{CPUs: 1e300}}, "cpus"},
		{"cpus over the bound", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{CPUs: workspace.MaxCPUs + 1}}, "cpus"},
		{"cpus NaN", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{CPUs: math.NaN()}}, "cpus"},
		{"cpus +Inf", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{CPUs: math.Inf(1)}}, "cpus"},
		{"cpus too small to enforce", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{CPUs: 1e-9}}, "cpus"},
		{"negative pids", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{Pids: -1}}, "pids"},
		{"absurd pids", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{Pids: math.MaxInt64}}, "pids"},
		{"pids over the bound", workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{Pids: workspace.MaxPids + 1}}, "pids"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkBadInput(t, "create", tt.n.Validate(), tt.want)
			// The same values through a PATCH of a valid workspace.
			u := workspace.SpecUpdate{Image: ptr(tt.n.Image), Command: ptr(tt.n.Command), Env: ptr(tt.n.Env),
				CPUs: ptr(tt.n.CPUs), Memory: ptr(tt.n.Memory), Pids: ptr(tt.n.Pids)}
			_, err := u.Apply(workspace.Workspace{Name: "x", Spec: ok})
			checkBadInput(t, "update", err, tt.want)
		})
	}
	// A workspace stored with a command longer than the bound (from before
	// it) stays editable: only a command given anew is measured.
	long := workspace.Workspace{Name: "x", Command: strings.Repeat("#", workspace.MaxCommandBytes+1), Spec: ok}
	if _, err := (workspace.SpecUpdate{EnvSet: []string{"Y=1"}}).Apply(long); err != nil {
		t.Errorf("an env change of a workspace with a long stored command: %v", err)
	}
	// env_set goes through the same check.
	_, err := workspace.SpecUpdate{EnvSet: []string{"Y=a\x00"}}.Apply(workspace.Workspace{Name: "x", Spec: ok})
	checkBadInput(t, "update env_set", err, "NUL")
}

func checkBadInput(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v, want it valid", what, err)
	case want != "" && (!errors.Is(err, workspace.ErrBadInput) || !strings.Contains(err.Error(), want)):
		t.Errorf("%s: %v, want ErrBadInput naming %q", what, err, want)
	}
}

// Apps are validated where they are asked for, each error naming the
// entry: names (a–z, 0–9, '-', short, no "--", no '-' at an end), ports
// 1–65535 (main, the $PORT app, none), share levels, no name or port
// twice, at most MaxApps.
func TestSpecApps(t *testing.T) {
	app := func(name string, port int, share workspace.Share) workspace.App {
		return workspace.App{Name: name, Port: port, Share: share}
	}
	many := make([]workspace.App, workspace.MaxApps+1)
	for i := range many {
		many[i] = app("a"+strings.Repeat("b", i), 1000+i, "")
	}
	for _, tc := range []struct {
		apps []workspace.App
		want string // "" = valid; else a word of the error
	}{
		{[]workspace.App{app("api", 8081, ""), app("docs", 8082, "public"), app("main", 0, "authenticated")}, ""},
		{many[:workspace.MaxApps], ""},
		{many, "at most"},
		{[]workspace.App{app("Api", 8081, "")}, `"Api"`},
		{[]workspace.App{app("a--b", 8081, "")}, `"a--b"`},
		{[]workspace.App{app("-a", 8081, "")}, `"-a"`},
		{[]workspace.App{app("a-", 8081, "")}, `"a-"`},
		{[]workspace.App{app("", 8081, "")}, `""`},
		{[]workspace.App{app(strings.Repeat("a", workspace.MaxAppNameLen+1), 8081, "")}, "app name"},
		{[]workspace.App{app("api", 0, "")}, "app api: port 0"},
		{[]workspace.App{app("api", 65536, "")}, "app api: port 65536"},
		{[]workspace.App{app("main", 8080, "")}, "app main"},
		{[]workspace.App{app("api", 8081, "everyone")}, `share "everyone"`},
		{[]workspace.App{app("api", 8081, ""), app("api", 8082, "")}, "api given twice"},
		{[]workspace.App{app("api", 8081, ""), app("web", 8081, "")}, "app web: port 8081"},
	} {
		err := workspace.Spec{Apps: tc.apps}.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.apps, err)
		case tc.want != "" && (!errors.Is(err, workspace.ErrBadInput) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want ErrBadInput naming %s", tc.apps, err, tc.want)
		}
	}
	// An update sets apps by name and removes them; main is always first.
	w := workspace.Workspace{Spec: workspace.Spec{Apps: []workspace.App{app("api", 8081, ""), app("docs", 8082, "")}}}
	w, err := workspace.SpecUpdate{AppSet: []workspace.App{app("api", 9000, "public")}, AppUnset: []string{"docs"}}.Apply(w)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.AllApps(); len(got) != 2 || got[0] != app("main", 0, "owner") || got[1] != app("api", 9000, "public") {
		t.Errorf("apps after the update: %+v", got)
	}
}
