//go:build !unix

package extsort

import "testing"

func syscallMkfifo(t *testing.T, path string) {
	t.Helper()
	t.Skip("no FIFOs on this platform")
}
