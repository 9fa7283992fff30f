// Package filelen is a codecheck fixture: long.go is over 800 lines,
// short.go and long_test.go are not counted against it.
//
// The files: doc.go (this comment), long.go (801 lines), short.go.
package filelen
