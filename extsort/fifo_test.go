//go:build unix

package extsort

import (
	"syscall"
	"testing"
)

func syscallMkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}
