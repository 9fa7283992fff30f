// Package sub has an internal/ of its own: sub/internal/deep must not
// import sub or sub/api.
package sub

// Name is a fixture constant.
const Name = "sub"
