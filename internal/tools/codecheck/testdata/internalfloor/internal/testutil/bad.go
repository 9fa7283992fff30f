package testutil

import (
	floor "example.com/floor"
	"example.com/floor/record"
)

// Bad uses the imports.
var Bad = floor.Version + string(rune(record.Size))
