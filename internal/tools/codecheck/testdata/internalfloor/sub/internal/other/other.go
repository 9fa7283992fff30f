// Package other sits beside sub/internal/deep, on sub's ground floor.
package other

// Name is a fixture constant.
const Name = "other"
