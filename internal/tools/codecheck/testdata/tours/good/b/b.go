// Package b is a one-file fixture that cites a.Thing, and fmt.Nothing (not
// a package of the module, so not checked).
package b

import (
	"fmt"

	"example.com/fix/a"
)

// T uses the imports.
var T = fmt.Sprint(a.Thing{})
