package workspace

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRootImportsNothingThatDoesIO: the root holds the vocabulary and the
// pure rules only, so it imports no storage, no HTTP and no provider
// implementation (the provider package's seams and the archive key are
// vocabulary), nor any other gantry package.
func TestRootImportsNothingThatDoesIO(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"github.com/gantryhq/gantry/workspace/provider": true}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, is := range f.Imports {
			path, _ := strconv.Unquote(is.Path.Value)
			switch {
			case allowed[path]:
			case strings.HasPrefix(path, "github.com/gantryhq/gantry/"), strings.HasPrefix(path, "net"),
				path == "database/sql", path == "os", path == "os/exec", strings.Contains(path, "."):
				t.Errorf("%s imports %s: the root holds the vocabulary and the pure rules only", name, path)
			}
		}
	}
}
