package workspace_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/workspace"
)

// A template declaring a parameter no value could satisfy is refused when
// it is made, not when somebody tries to use it: a choice its type or
// pattern refuses, min or max on what is not an int.
func TestTemplateRefusesParamsNobodyCanGive(t *testing.T) {
	one, five := int64(1), int64(5)
	for _, tc := range []struct {
		name string
		p    workspace.Param
		want string // "" = valid
	}{
		{"bool choices that are no bool", workspace.Param{Name: "x", Type: "bool", Choices: []string{"a"}}, `choice "a"`},
		{"int choices out of range", workspace.Param{Name: "x", Type: "int", Choices: []string{"3", "9"}, Min: &one, Max: &five}, `choice "9"`},
		{"choices the pattern refuses", workspace.Param{Name: "x", Pattern: "[a-z]+", Choices: []string{"ok", "NO"}}, `choice "NO"`},
		{"min on a string", workspace.Param{Name: "x", Min: &one}, "min and max bound an int"},
		{"max on a bool", workspace.Param{Name: "x", Type: "bool", Max: &five}, "min and max bound an int"},
		{"valid choices", workspace.Param{Name: "x", Type: "int", Choices: []string{"1", "5"}, Min: &one, Max: &five}, ""},
		{"valid bool", workspace.Param{Name: "x", Type: "bool", Choices: []string{"true"}}, ""},
	} {
		err := workspace.Template{Name: "t", Command: "echo {{.x}}", Params: []workspace.Param{tc.p}}.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, workspace.ErrBadInput) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want ErrBadInput saying %q", tc.name, err, tc.want)
		}
	}
}
