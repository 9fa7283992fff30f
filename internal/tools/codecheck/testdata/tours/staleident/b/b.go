// Package b cites a.Vanished, which package a does not declare.
package b

import "example.com/fix/a"

// T uses the import.
var T = a.Thing{}
