package workspace

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A Template is a named, versioned workspace spec: what `ws create
// --template NAME` starts from. Each change is a new version (1, 2, …);
// a workspace records the version it was made from (Spec.Template) and
// moves to another only when asked. Command and env values may hold
// {{.param}} placeholders, filled from the template's typed parameters.
type Template struct {
	Name    string  `json:"name"`
	Version int     `json:"version"`
	Image   string  `json:"image,omitempty"`
	Command string  `json:"command,omitempty"`
	Spec            // env (with placeholders), limits, http
	Params  []Param `json:"params,omitempty"`
	// Files is the archive every workspace made from this template starts
	// with (a copy of it), "" for an empty volume. The server sets it from
	// From, a workspace whose files (and, with no image, command or spec
	// given, whose spec) a create or update takes; an update keeps the
	// previous version's files unless given From.
	Files   string    `json:"files,omitempty"`
	From    string    `json:"from,omitempty"`
	Created time.Time `json:"created_at"`
	// Latest is the newest version of this template's name (filled by the
	// API on reads; 0 elsewhere).
	Latest int `json:"latest,omitempty"`
}

// A Param is one of a template's parameters. Type is "string" (the
// default), "int" or "bool"; Default is used when a create gives none,
// and a parameter without a default must be given. A value must match
// Pattern (a regular expression, whole value) and be one of Choices when
// those are set, and lie within Min..Max for an int when those are set.
type Param struct {
	Name        string   `json:"name"`
	Type        string   `json:"type,omitempty"`
	Default     *string  `json:"default,omitempty"`
	Pattern     string   `json:"pattern,omitempty"`
	Choices     []string `json:"choices,omitempty"`
	Min         *int64   `json:"min,omitempty"`
	Max         *int64   `json:"max,omitempty"`
	Description string   `json:"description,omitempty"`
}

// TemplateRef is what a workspace records of the template it was made
// from: its name, the version and the parameters given at create (the
// defaults are not stored: moving to a newer version takes its defaults).
type TemplateRef struct {
	Name    string            `json:"name"`
	Version int               `json:"version"`
	Params  map[string]string `json:"params,omitempty"`
}

// TemplateFilesPrefix starts the key of every template's files archive
// (apart from the workspaces' archives/, which the archive GC collects).
const TemplateFilesPrefix = "templates/"

// MaxParams bounds a template's parameters; MaxParamLen a value's bytes.
const (
	MaxParams   = 64
	MaxParamLen = 4096
)

// placeholder is {{.name}}, spaces allowed inside the braces.
var placeholder = regexp.MustCompile(`\{\{\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// Validate checks a template as stored: its name, image and command, its
// spec (with placeholders filled by sample values), its parameters, and
// that every placeholder names a parameter.
func (t Template) Validate() error {
	if err := ValidName(t.Name); err != nil {
		return fmt.Errorf("template: %w", err)
	}
	if len(t.Params) > MaxParams {
		return fmt.Errorf("%w: template %s: %d parameters, at most %d", ErrBadInput, t.Name, len(t.Params), MaxParams)
	}
	seen := map[string]bool{}
	for _, p := range t.Params {
		if err := p.validDecl(); err != nil {
			return fmt.Errorf("%w: template %s: %w", ErrBadInput, t.Name, err)
		}
		if seen[p.Name] {
			return fmt.Errorf("%w: template %s: parameter %s declared twice", ErrBadInput, t.Name, p.Name)
		}
		seen[p.Name] = true
	}
	for _, s := range append([]string{t.Command}, t.Env...) {
		for _, m := range placeholder.FindAllStringSubmatch(s, -1) {
			if !seen[m[1]] {
				return fmt.Errorf("%w: template %s: {{.%s}} names no parameter", ErrBadInput, t.Name, m[1])
			}
		}
	}
	if err := validRun(t.Image, t.Command); err != nil {
		return err
	}
	if err := validCommandLen(t.Command); err != nil {
		return err
	}
	if t.Spec.Template != nil {
		return fmt.Errorf("%w: template %s: a template is made from no other template", ErrBadInput, t.Name)
	}
	if t.Files != "" && !strings.HasPrefix(t.Files, TemplateFilesPrefix) {
		return fmt.Errorf("%w: template %s: files %q is no template's archive", ErrBadInput, t.Name, t.Files)
	}
	return fill(t.Spec, func(string) string { return "x" }).Validate()
}

func (p Param) validDecl() error {
	if !validEnvName(p.Name) {
		return fmt.Errorf("parameter name %q: want A–Z, a–z, 0–9 and '_', not starting with a digit", p.Name)
	}
	switch p.Type {
	case "", "string", "int", "bool":
	default:
		return fmt.Errorf("parameter %s: type %q, want string, int or bool", p.Name, p.Type)
	}
	if p.Pattern != "" {
		if _, err := regexp.Compile(p.Pattern); err != nil {
			return fmt.Errorf("parameter %s: pattern: %v", p.Name, err)
		}
	}
	if p.Min != nil && p.Max != nil && *p.Min > *p.Max {
		return fmt.Errorf("parameter %s: min %d above max %d", p.Name, *p.Min, *p.Max)
	}
	if (p.Min != nil || p.Max != nil) && p.Type != "int" {
		return fmt.Errorf("parameter %s: min and max bound an int; this one is a %s", p.Name, cmp.Or(p.Type, "string"))
	}
	// A choice no value check passes could never be given: the template
	// would be one nobody can use.
	for _, c := range p.Choices {
		if err := p.check(c); err != nil {
			return fmt.Errorf("choice %q: %w", c, err)
		}
	}
	if p.Default != nil {
		if err := p.check(*p.Default); err != nil {
			return fmt.Errorf("default: %w", err)
		}
	}
	return nil
}

// check validates a value of p.
func (p Param) check(v string) error {
	if len(v) > MaxParamLen || strings.IndexByte(v, 0) >= 0 {
		return fmt.Errorf("parameter %s: a value of at most %d bytes and no NUL byte", p.Name, MaxParamLen)
	}
	if err := p.checkType(v); err != nil {
		return err
	}
	if p.Pattern != "" && !regexp.MustCompile(`^(?:`+p.Pattern+`)$`).MatchString(v) {
		return fmt.Errorf("parameter %s: %q does not match %s", p.Name, v, p.Pattern)
	}
	if len(p.Choices) > 0 && !slices.Contains(p.Choices, v) {
		return fmt.Errorf("parameter %s: %q, want one of %s", p.Name, v, strings.Join(p.Choices, ", "))
	}
	return nil
}

// checkType checks v against p's type (and an int's range).
func (p Param) checkType(v string) error {
	switch p.Type {
	case "int":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("parameter %s: %q is not an integer", p.Name, v)
		}
		if p.Min != nil && n < *p.Min || p.Max != nil && n > *p.Max {
			return fmt.Errorf("parameter %s: %d is out of its range%s", p.Name, n, p.bounds())
		}
	case "bool":
		if v != "true" && v != "false" {
			return fmt.Errorf("parameter %s: %q, want true or false", p.Name, v)
		}
	}
	return nil
}

func (p Param) bounds() string {
	s := ""
	if p.Min != nil {
		s += fmt.Sprintf(" min %d", *p.Min)
	}
	if p.Max != nil {
		s += fmt.Sprintf(" max %d", *p.Max)
	}
	return s
}

// Values are the parameters of a create: every given one must be
// declared and valid, every declared one without a default given. The
// result holds every declared parameter's value.
func (t Template) Values(given map[string]string) (map[string]string, error) {
	declared := map[string]bool{}
	out := map[string]string{}
	for _, p := range t.Params {
		declared[p.Name] = true
		v, ok := given[p.Name]
		switch {
		case !ok && p.Default == nil:
			return nil, fmt.Errorf("%w: template %s: parameter %s is required", ErrBadInput, t.Name, p.Name)
		case !ok:
			v = *p.Default
		}
		if err := p.check(v); err != nil {
			return nil, fmt.Errorf("%w: template %s: %w", ErrBadInput, t.Name, err)
		}
		out[p.Name] = v
	}
	for k := range given {
		if !declared[k] {
			return nil, fmt.Errorf("%w: template %s has no parameter %s", ErrBadInput, t.Name, k)
		}
	}
	return out, nil
}

// Instantiate is the new workspace name of owner made from t with the
// given parameters: t's image, command and spec with the placeholders
// filled, recording t's name, version and the given parameters.
func (t Template) Instantiate(name string, given map[string]string) (NewWorkspace, error) {
	vals, err := t.Values(given)
	if err != nil {
		return NewWorkspace{}, err
	}
	get := func(k string) string { return vals[k] }
	n := NewWorkspace{Name: name, Image: t.Image, Command: fillString(t.Command, get), Spec: fill(t.Spec, get)}
	ref := &TemplateRef{Name: t.Name, Version: t.Version}
	if len(given) > 0 {
		ref.Params = given
	}
	n.Spec.Template = ref
	return n, nil
}

func fillString(s string, get func(string) string) string {
	return placeholder.ReplaceAllStringFunc(s, func(m string) string {
		return get(placeholder.FindStringSubmatch(m)[1])
	})
}

func fill(s Spec, get func(string) string) Spec {
	if len(s.Env) > 0 {
		env := make([]string, len(s.Env))
		for i, kv := range s.Env {
			env[i] = fillString(kv, get)
		}
		s.Env = env
	}
	return s
}
