// Command codecheck holds the module's own lint rules, the ones gofmt, go vet,
// staticcheck and gocyclo do not cover (make lint runs it on ./...):
//
//   - funclen: no function in non-test, non-generated code is over 80 lines;
//   - filelen: no non-test, non-generated file is over 800 lines (split it
//     by role: a newcomer reads a file whole);
//   - pkgdoc: every package has a doc comment;
//   - testctx: tests take their context from t.Context() (b.Context(),
//     f.Context()), not context.Background() or context.TODO(), except in
//     TestMain, examples and helper-process entry points (functions named
//     …Main that TestMain runs in a child process), which have no t;
//   - testsleep: a time.Sleep in a test is refused unless real time is
//     under test, which a comment on its line or the line above says:
//     "real time:" and the reason; a test that waits for a condition uses
//     testutil.WaitFor (or a channel) instead;
//   - tours: each package's doc comment names its files and only
//     identifiers that exist (tours.go says exactly what is checked);
//   - internalfloor: for every directory D with an internal/ child (the
//     module root, sched, taskq, …), a non-test, non-generated file of a
//     package under D/internal/ imports no package of this module that lies
//     under D but outside D/internal/: internal/ holds the ground floor
//     (internal/testutil may import internal/fsutil, not record;
//     taskq/internal/rdb may import internal/clock, not taskq); a nested
//     module is not this module;
//   - issuerefs: comments and Markdown name no issue numbers of this
//     project (the word "issue" and a number): the history lives in git, the text must stand
//     on its own.
//
// Usage: go run ./internal/tools/codecheck [dir]   (default ".")
//
// It walks dir, skipping hidden directories, testdata and nested modules,
// and exits 1 with one line per finding.
package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// maxFuncLines bounds every function so that each stays readable on one
// screen; gocyclo bounds their complexity (make lint).
const maxFuncLines = 80

// maxFileLines bounds every non-test, non-generated file (DESIGN.md: files
// stay under ~800 lines).
const maxFileLines = 800

var issueRef = regexp.MustCompile(`\b[Ii]ssues? #?[0-9]+\b`)

// generated reports whether f carries the standard "Code generated … DO NOT
// EDIT." marker (https://go.dev/s/generatedcode).
var generatedRE = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

type checker struct {
	root     string // the walked directory
	module   string // the module path in root's go.mod, or ""
	fset     *token.FileSet
	findings []string
	docs     map[string]bool // package dir → has a doc comment
	pkgs     map[string]*pkgInfo
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	findings, err := check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codecheck:", err)
		os.Exit(2)
	}
	for _, f := range findings {
		fmt.Println(f)
	}
	if len(findings) > 0 {
		os.Exit(1)
	}
}

// check runs every rule on the tree at root and returns the findings, sorted.
func check(root string) ([]string, error) {
	c := &checker{root: root, module: modulePath(root), fset: token.NewFileSet(), docs: map[string]bool{}, pkgs: map[string]*pkgInfo{}}
	if err := filepath.WalkDir(root, c.visit(root)); err != nil {
		return nil, err
	}
	for dir, ok := range c.docs {
		if !ok {
			c.report("%s: package has no doc comment", dir)
		}
	}
	c.checkTours(root)
	sort.Strings(c.findings)
	return c.findings, nil
}

func (c *checker) report(format string, args ...any) {
	c.findings = append(c.findings, fmt.Sprintf(format, args...))
}

func (c *checker) visit(root string) fs.WalkDirFunc {
	return func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return skipDir(root, path, d.Name())
		}
		switch {
		case strings.HasSuffix(path, ".go"):
			return c.goFile(path)
		case strings.HasSuffix(path, ".md"):
			return c.markdown(path)
		}
		return nil
	}
}

// skipDir skips hidden directories, testdata and nested modules (bench/).
func skipDir(root, path, name string) error {
	if path == root {
		return nil
	}
	if strings.HasPrefix(name, ".") || name == "testdata" {
		return filepath.SkipDir
	}
	if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
		return filepath.SkipDir
	}
	return nil
}

func (c *checker) goFile(path string) error {
	f, err := parser.ParseFile(c.fset, path, nil, parser.ParseComments)
	if err != nil {
		return err
	}
	c.comments(f)
	test := strings.HasSuffix(path, "_test.go")
	c.collect(path, f, test)
	if test {
		c.testFile(path, f)
		return nil
	}
	dir := filepath.Dir(path)
	c.docs[dir] = c.docs[dir] || f.Doc != nil
	if !isGenerated(f) {
		c.funcLengths(f)
		c.internalFloor(path, f)
		if n := c.fset.File(f.Pos()).LineCount(); n > maxFileLines {
			c.report("%s: filelen: the file is %d lines long, more than %d (split it by role)", path, n, maxFileLines)
		}
	}
	return nil
}

func isGenerated(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for _, l := range g.List {
			if generatedRE.MatchString(l.Text) {
				return true
			}
		}
	}
	return false
}

func (c *checker) funcLengths(f *ast.File) {
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		lines := c.fset.Position(fn.End()).Line - c.fset.Position(fn.Pos()).Line + 1
		if lines > maxFuncLines {
			c.report("%s: funclen: %s is %d lines long, more than %d", c.fset.Position(fn.Pos()), fn.Name.Name, lines, maxFuncLines)
		}
	}
}

// internalFloor reports each import of file that reaches from under an
// internal/ directory up into the part of the module that directory's parent
// holds (the internalfloor rule).
func (c *checker) internalFloor(file string, f *ast.File) {
	if c.module == "" {
		return
	}
	dir, err := filepath.Rel(c.root, filepath.Dir(file))
	if err != nil {
		return
	}
	floors := internalParents(filepath.ToSlash(dir))
	if len(floors) == 0 {
		return
	}
	for _, im := range f.Imports {
		ip, _ := strconv.Unquote(im.Path.Value)
		rel, ok := c.moduleRel(ip)
		if !ok {
			continue
		}
		for _, d := range floors {
			if in := path.Join(d, "internal"); within(rel, d) && !within(rel, in) {
				c.report("%s: internalfloor: imports %s, which sits above %s/ (internal/ holds only ground-floor helpers; move the helper up, or what it needs down)", file, ip, in)
				break
			}
		}
	}
}

// internalParents returns every D such that dir (slash-separated, relative
// to the root) lies in D/internal, outermost first; "." is the root.
func internalParents(dir string) []string {
	var ds []string
	parts := strings.Split(dir, "/")
	for i, p := range parts {
		if p == "internal" {
			ds = append(ds, path.Join(append([]string{"."}, parts[:i]...)...))
		}
	}
	return ds
}

// within reports whether the slash path p is d or lies under it ("." holds all).
func within(p, d string) bool {
	return d == "." || p == d || strings.HasPrefix(p, d+"/")
}

// moduleRel returns the directory, relative to the root, of the package
// import path ip when it is a package of this module (not of a nested one).
func (c *checker) moduleRel(ip string) (string, bool) {
	rel := "."
	if ip != c.module {
		var ok bool
		if rel, ok = strings.CutPrefix(ip, c.module+"/"); !ok {
			return "", false
		}
	}
	for p := rel; p != "."; p = path.Dir(p) {
		if _, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(p), "go.mod")); err == nil {
			return "", false // a nested module's package
		}
	}
	return rel, true
}

func (c *checker) comments(f *ast.File) {
	for _, g := range f.Comments {
		for _, l := range g.List {
			if m := issueRef.FindString(l.Text); m != "" {
				c.report("%s: issuerefs: comment names %q", c.fset.Position(l.Pos()), m)
			}
		}
	}
}

// testFile checks the context and sleep rules of one test file.
func (c *checker) testFile(path string, f *ast.File) {
	justified := sleepJustifications(c.fset, f)
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		inMain := fn.Recv == nil && fn.Type.Params.NumFields() == 0 && (strings.HasSuffix(fn.Name.Name, "Main") || strings.HasPrefix(fn.Name.Name, "Example")) || fn.Name.Name == "TestMain"
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch selector(call.Fun) {
			case "context.Background", "context.TODO":
				if !inMain {
					c.report("%s: testctx: use t.Context() (b.Context(), f.Context(); context.WithoutCancel(t.Context()) in cleanups)", c.fset.Position(call.Pos()))
				}
			case "time.Sleep":
				if line := c.fset.Position(call.Pos()).Line; !justified[line] && !justified[line-1] {
					c.report("%s: testsleep: wait for the condition with testutil.WaitFor (or a channel), or, where real time is under test, say so with a \"// real time: <reason>\" comment", c.fset.Position(call.Pos()))
				}
			}
			return true
		})
	}
}

// sleepJustifications returns the lines that end with, or consist of, a
// comment starting "real time:" followed by a reason.
func sleepJustifications(fset *token.FileSet, f *ast.File) map[int]bool {
	lines := map[int]bool{}
	for _, g := range f.Comments {
		for _, l := range g.List {
			t := strings.TrimSpace(strings.TrimPrefix(l.Text, "//"))
			if reason, ok := strings.CutPrefix(t, "real time:"); ok && strings.TrimSpace(reason) != "" {
				lines[fset.Position(l.Pos()).Line] = true
			}
		}
	}
	return lines
}

// selector returns "pkg.Name" for a call of pkg.Name, or "".
func selector(e ast.Expr) string {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	id, ok := s.X.(*ast.Ident)
	if !ok {
		return ""
	}
	return id.Name + "." + s.Sel.Name
}

func (c *checker) markdown(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if m := issueRef.FindString(sc.Text()); m != "" {
			c.report("%s:%d: issuerefs: names %q", path, n, m)
		}
	}
	return sc.Err()
}
