// Package nested is a module of its own inside the fixture: codecheck
// skips it, and an import of it is not an import of this module.
package nested

// Name is a fixture constant.
const Name = "nested"
