// Package deep, under sub/internal/, may import sub/internal/other, the
// root's internal/fsutil and record (above the root's internal/, but
// deep is not under it: not a finding); sub and sub/api are findings.
package deep

import (
	"example.com/floor/internal/fsutil"
	"example.com/floor/record"
	"example.com/floor/sub"
	"example.com/floor/sub/api"
	"example.com/floor/sub/internal/other"
)

// Deep uses the imports.
var Deep = fsutil.Dir + string(rune(record.Size)) + sub.Name + api.Path + other.Name
