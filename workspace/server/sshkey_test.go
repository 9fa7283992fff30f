package server

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The SSH host key is made once (mode 0600) and is the same key at the
// next start, so OpenSSH's known_hosts still knows the server.
func TestSSHHostKeyKeptUnderData(t *testing.T) {
	data := t.TempDir()
	first, err := sshHostKey(data)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(data, SSHHostKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("host key file: %v %v; want mode 0600", st, err)
	}
	again, err := sshHostKey(data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.PublicKey().Marshal(), again.PublicKey().Marshal()) {
		t.Fatal("the second start made a new host key")
	}
}
