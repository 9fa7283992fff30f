// Package a is a fixture whose tour cites names that are gone: [Gone],
// a.Removed, Thing.Lost and old.go.
package a

// Thing is a fixture type.
type Thing struct{ Name string }
