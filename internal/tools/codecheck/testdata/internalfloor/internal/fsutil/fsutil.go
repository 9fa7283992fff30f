// Package fsutil is a ground-floor helper every package may import.
package fsutil

// Dir is a fixture constant.
const Dir = "/tmp"
