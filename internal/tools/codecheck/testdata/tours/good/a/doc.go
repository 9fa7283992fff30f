// Package a is a fixture whose tour is true.
//
// The files: a.go holds [Thing] and Thing.Name (a field) and Thing.Say (a
// method); extra_*.go the rest (Extra); a.Extra is named qualified.
package a
