package workspace

import "testing"

// TestTemplateClaims: a create from a template is served by its warm pool
// when it is what the members run (the defaults), or differs only in its
// env (a restart in place); a parameter in the command, another version,
// STANDBY or files of its own make it a cold start.
func TestTemplateClaims(t *testing.T) {
	def, word := "hi", "a"
	tp := Template{Name: "t", Version: 2, Command: "echo {{.word}}; exec sleep infinity",
		Spec:   Spec{Env: []string{"GREETING={{.greeting}}"}, CPUs: 1},
		Params: []Param{{Name: "greeting", Default: &def}, {Name: "word", Default: &word}}}
	from := func(given map[string]string, edit func(*NewWorkspace)) NewWorkspace {
		n, err := tp.Instantiate("w", given)
		if err != nil {
			t.Fatal(err)
		}
		n.Desired = Running
		if edit != nil {
			edit(&n)
		}
		return n
	}
	for _, c := range []struct {
		name        string
		n           NewWorkspace
		ok, restart bool
	}{
		{"the defaults", from(nil, nil), true, false},
		{"the defaults given", from(map[string]string{"greeting": "hi", "word": "a"}, nil), true, false},
		{"another env", from(map[string]string{"greeting": "yo"}, nil), true, true},
		{"another command", from(map[string]string{"word": "b"}, nil), false, false},
		{"another command and env", from(map[string]string{"word": "b", "greeting": "yo"}, nil), false, false},
		{"another limit", from(nil, func(n *NewWorkspace) { n.Spec.CPUs = 2 }), false, false},
		{"another limit and env", from(map[string]string{"greeting": "yo"}, func(n *NewWorkspace) { n.Spec.CPUs = 2 }), false, false},
		{"STANDBY", from(nil, func(n *NewWorkspace) { n.Desired = Standby }), false, false},
		{"an older version", from(nil, func(n *NewWorkspace) { n.Spec.Template.Version = 1 }), false, false},
		{"files of its own", from(nil, func(n *NewWorkspace) { n.ArchiveKey = "archives/x" }), false, false},
	} {
		if ok, restart := tp.Claims(c.n); ok != c.ok || restart != c.restart {
			t.Errorf("%s: Claims = %v, restart %v; want %v, %v", c.name, ok, restart, c.ok, c.restart)
		}
	}
}
