// Package testutil imports down and sideways (good.go) and up (bad.go).
//
// The files: good.go (this comment: imports of internal/fsutil, the
// standard library, a module whose path merely starts with this one's and
// the nested module under nested/, none of them findings), bad.go (imports
// of record and of the module root, two findings), gen.go (generated code
// importing record, not a finding).
package testutil

import (
	"strings"

	"example.com/floor/internal/fsutil"
	"example.com/floor/nested"
	"example.com/floorplan/rooms"
)

// Good uses the imports.
var Good = strings.ToUpper(fsutil.Dir) + nested.Name + rooms.Name
