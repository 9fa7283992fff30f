// Package record sits above internal/: internal/testutil imports it from
// a plain file (a finding), from a test file and from a generated file
// (neither a finding).
package record

// Size is a fixture constant.
const Size = 100
