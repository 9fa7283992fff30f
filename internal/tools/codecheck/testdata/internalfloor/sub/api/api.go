// Package api sits above sub/internal/.
package api

// Path is a fixture constant.
const Path = "/"
