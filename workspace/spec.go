package workspace

import (
	"fmt"
	"strings"
)

// Spec is what a workspace runs with beyond its image and command: its
// environment and resource limits. It is stored with the workspace and
// applied at each start, so a change (PATCH) takes effect at the next one.
type Spec struct {
	// Env is the command's extra environment, KEY=VALUE. The provider's
	// own variables (HOME, PORT, GANTRY_WORKSPACE_*) cannot be set.
	Env []string `json:"env,omitempty"`
	// CPUs, Memory (bytes) and Pids bound the workspace; zero takes the
	// server's default (ws serve --default-cpus/-memory/-pids).
	CPUs   float64 `json:"cpus,omitempty"`
	Memory int64   `json:"memory,omitempty"`
	Pids   int64   `json:"pids,omitempty"`
	// HTTP: the command serves HTTP on $PORT, and a start is complete only
	// once that port accepts connections (so /w/{id}/ answers at once).
	HTTP bool `json:"http,omitempty"`
	// Template is the template this workspace was made from (template.go);
	// set by the API only, never from a request body.
	Template *TemplateRef `json:"template,omitempty"`
	// Apps are the workspace's apps besides the default one on $PORT
	// (apps.go), and main's share level if set.
	Apps []App `json:"apps,omitempty"`
}

// MaxEnv bounds a spec's environment: entries and bytes.
const (
	MaxEnv      = 128
	MaxEnvBytes = 64 << 10
)

// MaxCommandBytes bounds a workspace's command: it is one argument of
// `sh -c` (after the process provider's short limits prefix), and Linux
// refuses an argument of 128 KiB or more (MAX_ARG_STRLEN) at exec, so a
// longer one could never start. Checked when a command is given (create,
// a PATCH of the command, a template), so that a workspace stored before
// the bound stays editable.
const MaxCommandBytes = 120 << 10

// The limits' bounds (zero, the server's default, is always allowed):
//
//	cpus    MinCPUs (0.01, Docker's floor) to MaxCPUs (1024); a finite number
//	memory  MinMemory (16 MiB: the engine's own floor is 6 MiB and a shell
//	        needs more) to MaxMemory (4 TiB, past any single machine's RAM
//	        today and far from the int64 edge that overflowed the process
//	        provider's ulimit arithmetic)
//	pids    1 to MaxPids (4194304: Linux's PID_MAX_LIMIT, more processes
//	        than one machine can have)
const (
	MinCPUs   = 0.01
	MaxCPUs   = 1024
	MinMemory = 16 << 20
	MaxMemory = 4 << 40
	MaxPids   = 1 << 22
)

// Validate checks the environment (names, no NUL byte, size) and the
// limits' ranges: what no provider could start is ErrBadInput at once,
// not a workspace retried until ERROR.
func (s Spec) Validate() error {
	if err := validEnv(s.Env); err != nil {
		return err
	}
	if err := validApps(s.Apps); err != nil {
		return err
	}
	return s.validLimits()
}

func validEnv(env []string) error {
	if len(env) > MaxEnv {
		return fmt.Errorf("%w: %d environment variables, at most %d", ErrBadInput, len(env), MaxEnv)
	}
	size := 0
	seen := map[string]bool{}
	for _, kv := range env {
		size += len(kv)
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || !validEnvName(k):
			return fmt.Errorf("%w: environment entry %q: want KEY=VALUE with KEY of A–Z, a–z, 0–9 and '_', not starting with a digit", ErrBadInput, kv)
		case strings.IndexByte(v, 0) >= 0:
			return fmt.Errorf("%w: environment variable %s: its value holds a NUL byte", ErrBadInput, k)
		case reservedEnv(k):
			return fmt.Errorf("%w: environment variable %s is set by gantry", ErrBadInput, k)
		case seen[k]:
			return fmt.Errorf("%w: environment variable %s given twice", ErrBadInput, k)
		}
		seen[k] = true
	}
	if size > MaxEnvBytes {
		return fmt.Errorf("%w: environment of %d bytes, at most %d", ErrBadInput, size, MaxEnvBytes)
	}
	return nil
}

func (s Spec) validLimits() error {
	switch {
	case s.CPUs != 0 && !(s.CPUs >= MinCPUs && s.CPUs <= MaxCPUs): // NaN too
		return fmt.Errorf("%w: cpus %g, want 0 (the default) or %g to %d", ErrBadInput, s.CPUs, MinCPUs, MaxCPUs)
	case s.Memory != 0 && (s.Memory < MinMemory || s.Memory > MaxMemory):
		return fmt.Errorf("%w: memory %d bytes, want 0 (the default) or at least %d MiB and at most %d TiB", ErrBadInput, s.Memory, MinMemory>>20, MaxMemory>>40)
	case s.Pids != 0 && (s.Pids < 1 || s.Pids > MaxPids):
		return fmt.Errorf("%w: pids %d, want 0 (the default) or 1 to %d", ErrBadInput, s.Pids, MaxPids)
	}
	return nil
}

// validRun checks what a workspace runs beyond its spec: the kernel takes
// the image and the command as C strings, so neither may hold a NUL byte.
func validRun(image, command string) error {
	if strings.IndexByte(image, 0) >= 0 {
		return fmt.Errorf("%w: the image holds a NUL byte", ErrBadInput)
	}
	if strings.IndexByte(command, 0) >= 0 {
		return fmt.Errorf("%w: the command holds a NUL byte", ErrBadInput)
	}
	return nil
}

// validCommandLen checks a command given anew against MaxCommandBytes.
func validCommandLen(command string) error {
	if len(command) > MaxCommandBytes {
		return fmt.Errorf("%w: a command of %d bytes, at most %d (put a longer script in a file in the workspace)", ErrBadInput, len(command), MaxCommandBytes)
	}
	return nil
}

func validEnvName(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return k != ""
}

func reservedEnv(k string) bool {
	return k == "HOME" || k == "PORT" || strings.HasPrefix(k, "GANTRY_WORKSPACE_")
}

// SpecUpdate is a PATCH of a workspace's spec: each field set replaces
// the workspace's; nil fields are kept.
type SpecUpdate struct {
	Image   *string   `json:"image,omitempty"`
	Command *string   `json:"command,omitempty"`
	Env     *[]string `json:"env,omitempty"` // the whole environment
	// EnvSet sets (KEY=VALUE) and EnvUnset removes (KEY) single variables,
	// after Env.
	EnvSet   []string `json:"env_set,omitempty"`
	EnvUnset []string `json:"env_unset,omitempty"`
	CPUs     *float64 `json:"cpus,omitempty"`
	Memory   *int64   `json:"memory,omitempty"`
	Pids     *int64   `json:"pids,omitempty"`
	HTTP     *bool    `json:"http,omitempty"`
	// TemplateVersion moves a workspace made from a template to another
	// version of it ("latest" or a number); the API turns it into the
	// fields above and Template, and it goes with no other field.
	TemplateVersion string `json:"template_version,omitempty"`
	// Template is the template reference the update records (the API's).
	Template *TemplateRef `json:"-"`
	// Apps replaces the whole list of apps; then AppSet sets (by name)
	// and AppUnset removes single apps.
	Apps     *[]App   `json:"apps,omitempty"`
	AppSet   []App    `json:"app_set,omitempty"`
	AppUnset []string `json:"app_unset,omitempty"`
}

// Apply returns w with u's fields set, validated.
func (u SpecUpdate) Apply(w Workspace) (Workspace, error) {
	if u.Image != nil {
		w.Image = *u.Image
	}
	if u.Command != nil {
		w.Command = *u.Command
	}
	if u.Env != nil {
		w.Env = *u.Env
	}
	w.Env = editEnv(w.Env, u.EnvSet, u.EnvUnset)
	if u.CPUs != nil {
		w.CPUs = *u.CPUs
	}
	if u.Memory != nil {
		w.Memory = *u.Memory
	}
	if u.Pids != nil {
		w.Pids = *u.Pids
	}
	if u.HTTP != nil {
		w.HTTP = *u.HTTP
	}
	if u.Template != nil {
		w.Spec.Template = u.Template
	}
	if u.Apps != nil {
		w.Apps = *u.Apps
	}
	w.Apps = StoredApps(editApps(w.Apps, u.AppSet, u.AppUnset))
	if err := validRun(w.Image, w.Command); err != nil {
		return w, err
	}
	if u.Command != nil {
		if err := validCommandLen(w.Command); err != nil {
			return w, err
		}
	}
	return w, w.Spec.Validate()
}

// editEnv returns env with set's entries replacing or adding theirs and
// unset's names removed, in a new slice (nil when empty).
func editEnv(env, set, unset []string) []string {
	if len(set) == 0 && len(unset) == 0 {
		return env
	}
	drop := map[string]bool{}
	for _, k := range unset {
		drop[k] = true
	}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		drop[k] = true
	}
	var out []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}
