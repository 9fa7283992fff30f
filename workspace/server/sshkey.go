package server

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// SSHHostKeyFile is the file under ServerConfig.Data that holds the host
// key of the API's SSH server (api's ssh.go): made at the first start
// (ed25519, mode 0600) and kept, so a restarted server is the same host to
// the known_hosts of `ws config-ssh` (StrictHostKeyChecking accept-new
// would refuse a new key). Servers with data directories of their own have
// keys of their own: behind one address, give them the same file.
const SSHHostKeyFile = "ssh_host_ed25519_key"

// sshHostKey reads data's SSH host key, making it first if there is none.
func sshHostKey(data string) (ssh.Signer, error) {
	path := filepath.Join(data, SSHHostKeyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		_, priv, gerr := ed25519.GenerateKey(rand.Reader)
		if gerr != nil {
			return nil, fmt.Errorf("ssh host key: %w", gerr)
		}
		blk, merr := ssh.MarshalPrivateKey(priv, "gantry ws serve")
		if merr != nil {
			return nil, fmt.Errorf("ssh host key: %w", merr)
		}
		b = pem.EncodeToMemory(blk)
		err = writeSecretFile(path, string(b))
	}
	if err != nil {
		return nil, fmt.Errorf("ssh host key: %w", err)
	}
	key, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("ssh host key %s: %w", path, err)
	}
	return key, nil
}
