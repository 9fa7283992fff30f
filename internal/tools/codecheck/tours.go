package main

import (
	"go/ast"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The tours rule keeps each package's doc comment (its tour) true to the
// package:
//
//   - every non-test .go file of the package is named in the tour, except
//     the file that holds it (often doc.go, or the only file);
//   - every file the tour names (a word ending in ".go", relative to the
//     package's directory) exists; a pattern (ram_*.go) matches at least one
//     file and names every file it matches;
//   - every doc link [Name] (exported, two letters or more: not [T] or [i])
//     names a top-level identifier of the package;
//   - every pkg.Name the tour names, where pkg is the package's own name or
//     the name under which one of its files imports a package of this module,
//     is declared in that package (an exported Name, for an imported one:
//     "taskq.attempt" is an attribute key, not an identifier);
//   - every Type.Member the tour names, where Type is a type declared in the
//     package, is a field or method of Type (or of a type it embeds).
//
// Bare words are not checked: a tour mixes identifiers with English ("Task",
// "OK/Warning/Critical") and names from the seeds, and nothing tells them
// apart; a qualified name or a file name is unambiguous.

var (
	tourFileRE = regexp.MustCompile(`(?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_*-]+(?:\.[A-Za-z0-9_*-]+)*\.go\b`)
	tourLinkRE = regexp.MustCompile(`\[\*?([A-Z][A-Za-z0-9_]+)\]`)
	tourQualRE = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)\b`)
)

// pkgInfo is what the tours rule needs to know about one package directory.
type pkgInfo struct {
	dir      string
	name     string                     // package name (of its non-_test files)
	doc      []*ast.CommentGroup        // package doc comments of non-test files
	testDoc  []*ast.CommentGroup        // package doc comments of test files (a test-only package)
	files    []string                   // non-test .go files (base names)
	docFiles map[string]bool            // the files among them that hold a doc comment
	decls    map[string]bool            // top-level names (test files too)
	types    map[string]bool            // top-level type names
	members  map[string]map[string]bool // type → its fields and methods
	embeds   map[string][]string        // type → the types it embeds
	imports  map[string]string          // import name → path (test files too)
}

func (c *checker) pkg(dir string) *pkgInfo {
	p := c.pkgs[dir]
	if p == nil {
		p = &pkgInfo{dir: dir, docFiles: map[string]bool{}, decls: map[string]bool{}, types: map[string]bool{}, members: map[string]map[string]bool{},
			embeds: map[string][]string{}, imports: map[string]string{}}
		c.pkgs[dir] = p
	}
	return p
}

// collect records what file f (at path) adds to its package.
func (c *checker) collect(file string, f *ast.File, test bool) {
	p := c.pkg(filepath.Dir(file))
	if !test {
		p.files = append(p.files, filepath.Base(file))
		p.name = f.Name.Name
		if f.Doc != nil {
			p.doc = append(p.doc, f.Doc)
			p.docFiles[filepath.Base(file)] = true
		}
	} else if f.Doc != nil && !strings.HasSuffix(f.Name.Name, "_test") {
		p.testDoc = append(p.testDoc, f.Doc)
	}
	for _, im := range f.Imports {
		ip, _ := strconv.Unquote(im.Path.Value)
		name := path.Base(ip)
		if im.Name != nil {
			name = im.Name.Name
		}
		if name == "_" || name == "." {
			continue
		}
		p.imports[name] = ip
	}
	for _, d := range f.Decls {
		p.decl(d)
	}
}

func (p *pkgInfo) decl(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil || len(d.Recv.List) == 0 {
			p.decls[d.Name.Name] = true
			return
		}
		if t := typeName(d.Recv.List[0].Type); t != "" {
			p.member(t, d.Name.Name)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				p.decls[s.Name.Name] = true
				p.types[s.Name.Name] = true
				p.typeMembers(s.Name.Name, s.Type)
			case *ast.ValueSpec:
				for _, n := range s.Names {
					p.decls[n.Name] = true
				}
			}
		}
	}
}

func (p *pkgInfo) member(typ, name string) {
	if p.members[typ] == nil {
		p.members[typ] = map[string]bool{}
	}
	p.members[typ][name] = true
}

func (p *pkgInfo) typeMembers(typ string, e ast.Expr) {
	var fields *ast.FieldList
	switch t := e.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields = t.Methods
	default:
		return
	}
	for _, f := range fields.List {
		if len(f.Names) == 0 {
			if n := typeName(f.Type); n != "" {
				p.embeds[typ] = append(p.embeds[typ], n)
				p.member(typ, n)
			}
			continue
		}
		for _, n := range f.Names {
			p.member(typ, n.Name)
		}
	}
}

// typeName returns the name of T, *T, T[…], pkg.T (as T), or "".
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.IndexExpr:
		return typeName(t.X)
	case *ast.IndexListExpr:
		return typeName(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	}
	return ""
}

// hasMember reports whether typ or a type it embeds (in this package) has name.
func (p *pkgInfo) hasMember(typ, name string, seen map[string]bool) bool {
	if seen[typ] {
		return false
	}
	seen[typ] = true
	if p.members[typ][name] {
		return true
	}
	for _, e := range p.embeds[typ] {
		if p.hasMember(e, name, seen) {
			return true
		}
	}
	return false
}

// checkTours runs the tours rule on every package collected; module is the
// module path of root's go.mod ("" if none).
func (c *checker) checkTours(root string) {
	module := modulePath(root)
	byPath := map[string]*pkgInfo{}
	for dir, p := range c.pkgs {
		rel, err := filepath.Rel(root, dir)
		if err == nil && module != "" {
			byPath[path.Join(module, filepath.ToSlash(rel))] = p
		}
	}
	dirs := make([]string, 0, len(c.pkgs))
	for dir := range c.pkgs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		c.checkTour(c.pkgs[dir], byPath)
	}
}

func (c *checker) checkTour(p *pkgInfo, byPath map[string]*pkgInfo) {
	groups := p.doc
	if len(p.files) == 0 {
		groups = p.testDoc
	}
	if len(groups) == 0 {
		return // pkgdoc reports it
	}
	var b strings.Builder
	for _, g := range groups {
		for _, l := range g.List {
			b.WriteString(l.Text)
			b.WriteByte('\n')
		}
	}
	text := b.String()
	where := c.fset.Position(groups[0].Pos()).Filename
	named := map[string]bool{}
	for _, m := range tourFileRE.FindAllString(text, -1) {
		matches, _ := filepath.Glob(filepath.Join(p.dir, filepath.FromSlash(m)))
		if len(matches) == 0 {
			c.report("%s: tours: the package tour names %s, which does not exist in %s", where, m, p.dir)
		}
		for _, f := range matches {
			named[filepath.Base(f)] = true
		}
	}
	for _, m := range tourLinkRE.FindAllStringSubmatch(text, -1) {
		if !p.decls[m[1]] {
			c.report("%s: tours: the package tour links [%s], which %s does not declare", where, m[1], p.name)
		}
	}
	sort.Strings(p.files)
	for _, f := range p.files {
		if p.docFiles[f] {
			continue
		}
		if !named[f] {
			c.report("%s: tours: the package tour does not name %s (add a line on what it holds)", where, f)
		}
	}
	for _, m := range tourQualRE.FindAllStringSubmatch(text, -1) {
		if msg := p.checkQualified(m[1], m[2], byPath); msg != "" {
			c.report("%s: tours: the package tour names %s.%s, %s", where, m[1], m[2], msg)
		}
	}
}

// checkQualified checks x.y as the rule says and returns what is wrong, or "".
func (p *pkgInfo) checkQualified(x, y string, byPath map[string]*pkgInfo) string {
	if x == "go" || y == "go" {
		return "" // a file name
	}
	if x == p.name {
		if !p.decls[y] {
			return "which " + p.name + " does not declare"
		}
		return ""
	}
	if ip, ok := p.imports[x]; ok {
		if q := byPath[ip]; q != nil && ast.IsExported(y) && !q.decls[y] {
			return "which " + ip + " does not declare"
		}
		return ""
	}
	if p.types[x] && !p.hasMember(x, y, map[string]bool{}) {
		return "but " + x + " has no field or method " + y
	}
	return ""
}

// modulePath returns the module path in root's go.mod, or "".
func modulePath(root string) string {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			return f[1]
		}
	}
	return ""
}
