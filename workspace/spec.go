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
}

// MaxEnv bounds a spec's environment: entries and bytes.
const (
	MaxEnv      = 128
	MaxEnvBytes = 64 << 10
)

// MinMemory is the smallest memory limit a workspace takes (the engine's
// own floor is 6 MiB; a shell needs more).
const MinMemory = 16 << 20

// Validate checks the environment's names and the limits' ranges.
func (s Spec) Validate() error {
	if len(s.Env) > MaxEnv {
		return fmt.Errorf("%w: %d environment variables, at most %d", ErrBadInput, len(s.Env), MaxEnv)
	}
	size := 0
	seen := map[string]bool{}
	for _, kv := range s.Env {
		size += len(kv)
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !validEnvName(k) {
			return fmt.Errorf("%w: environment entry %q: want KEY=VALUE with KEY of A–Z, a–z, 0–9 and '_', not starting with a digit", ErrBadInput, kv)
		}
		if reservedEnv(k) {
			return fmt.Errorf("%w: environment variable %s is set by gantry", ErrBadInput, k)
		}
		if seen[k] {
			return fmt.Errorf("%w: environment variable %s given twice", ErrBadInput, k)
		}
		seen[k] = true
	}
	if size > MaxEnvBytes {
		return fmt.Errorf("%w: environment of %d bytes, at most %d", ErrBadInput, size, MaxEnvBytes)
	}
	switch {
	case s.CPUs < 0 || s.CPUs > 1024:
		return fmt.Errorf("%w: cpus %g, want 0 (the default) to 1024", ErrBadInput, s.CPUs)
	case s.Memory < 0 || s.Memory > 0 && s.Memory < MinMemory:
		return fmt.Errorf("%w: memory %d bytes, want 0 (the default) or at least %d MiB", ErrBadInput, s.Memory, MinMemory>>20)
	case s.Pids < 0:
		return fmt.Errorf("%w: pids %d, want 0 (the default) or more", ErrBadInput, s.Pids)
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
