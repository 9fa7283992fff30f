// Package floor is a codecheck fixture for the internalfloor rule: the
// module root, which internal/testutil must not import.
package floor

// Version is what internal/testutil/bad.go reaches up for.
const Version = "1"
