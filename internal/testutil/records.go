package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteRecords writes data to path (0644), creating its directory; it
// fails the test on error.
func WriteRecords(tb testing.TB, path string, data []byte) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}
