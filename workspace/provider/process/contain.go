package process

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// What contains a workspace's processes. When the server runs as root (and
// SharedUser is not set), each workspace runs
//
//   - as a user and group of its own, allocated from UIDs (uids.go), with
//     no supplementary groups: it cannot read the server's files (the data
//     directory is 0700, the database, admin token and logs 0600) nor
//     another workspace's (each volume is its uid's, mode 0700), nor signal
//     or trace another workspace's processes;
//   - in a mount namespace of its own (ns.go) where the topmost directory
//     above its volume that others may not enter (the data directory) is
//     covered by an empty tmpfs holding only the path to its volume, and
//     /proc shows only its own processes (hidepid): the volume keeps its
//     path, and nothing else of the data directory is there to see; there
//     /etc/passwd and /etc/group also name its user and group (gantry-UID,
//     HOME its volume), so what looks its user up (scp, sftp-server) runs;
//   - with Network NetworkPrivate (the default), in a network namespace of
//     its own with only a loopback interface: it reaches neither the
//     server's API, nor another workspace's PORT, nor the host's loopback
//     services, nor any other network; the server reaches its PORT by
//     dialing from inside that namespace (Dial);
//   - with a minimal environment: PATH (SafePath), HOME, PORT,
//     GANTRY_WORKSPACE_ID and _NAME and the spec's variables, never the
//     server's; umask 077.
//
// `ws exec` runs as the same user, in the same namespaces, with the same
// environment. Stop ends every process of the workspace's uid, exec'd ones
// included, with one kill(-1) as that uid (kill.go).
//
// Not as root, every workspace runs as the server's own user, with the
// minimal environment and umask only; Stop then ends the processes that
// carry the workspace's GANTRY_WORKSPACE_ID. Such a server is for one
// owner (`ws serve` refuses a second one unless --insecure-shared-user).

// Network is what a workspace's processes reach when the server runs as root.
type Network int

const (
	// NetworkPrivate: a network namespace of its own, with only a loopback
	// interface (the default).
	NetworkPrivate Network = iota
	// NetworkHost: the host's network, loopback included: the workspace
	// reaches the server's API, the other workspaces' ports and the host's
	// loopback services directly (not through the proxy's owner check).
	NetworkHost
)

func (n Network) String() string {
	switch n {
	case NetworkPrivate:
		return "private"
	case NetworkHost:
		return "host"
	}
	return fmt.Sprintf("Network(%d)", int(n))
}

// ParseNetwork reads "private" or "host".
func ParseNetwork(s string) (Network, error) {
	for _, n := range []Network{NetworkPrivate, NetworkHost} {
		if s == n.String() {
			return n, nil
		}
	}
	return 0, fmt.Errorf("process: network %q: want private or host", s)
}

// SafePath is the PATH of a workspace's commands unless its spec sets one:
// the system's directories, never the server's PATH.
const SafePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Isolation is nil when each workspace runs contained (its own uid, mount
// and network namespaces: the server runs as root and SharedUser is not
// set); otherwise it says why not.
func (c *Container) Isolation() error {
	switch {
	case c.SharedUser:
		return errors.New("workspaces run as the server's own user (process.Container.SharedUser, ws serve --insecure-shared-user)")
	case os.Geteuid() != 0:
		return fmt.Errorf("the server runs as uid %d, not root, so every workspace runs as that user: "+
			"a workspace's commands can read the server's data (its admin token, its database) and the other workspaces' files", os.Geteuid())
	}
	return nil
}

// Check refuses a bad UIDs range or Network.
func (c *Container) Check() error {
	if err := c.UIDs.check(); err != nil {
		return err
	}
	if c.Network != NetworkPrivate && c.Network != NetworkHost {
		return fmt.Errorf("process: %v: want NetworkPrivate or NetworkHost", c.Network)
	}
	return nil
}

// contained reports whether this server runs workspaces as their own users.
func (c *Container) contained() bool { return c.Isolation() == nil }

// credential is the credential of a process of a workspace that runs as
// uid (its group the same number, no other groups); nil for -1, the
// server's own user.
func credential(uid int) *syscall.Credential {
	if uid < 0 {
		return nil
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
}

// workspaceEnv is the whole environment of a workspace's process: PATH,
// HOME, GANTRY_WORKSPACE_ID, PORT, extra, then the spec's variables (which
// may set PATH; the API refuses the others).
func workspaceEnv(id, home string, port int, spec []string, extra ...string) []string {
	env := []string{"PATH=" + SafePath, "HOME=" + home, "GANTRY_WORKSPACE_ID=" + id, "PORT=" + strconv.Itoa(port)}
	return append(append(env, extra...), spec...)
}

// lookPath finds name as the workspace would: in env's PATH (the last
// one), not the server's. A name with a slash is taken as it is.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in the workspace's $PATH (%s)", name, path)
}

// claimVolume makes vol uid's: its top mode 0700, and each file and
// directory in it owned by uid:uid (a restored archive's files are root's,
// and so is what an operator put there). It walks through an os.Root, so a
// symbolic link in the volume never leads it outside, and it leaves a file
// with more than one name (a hard link, maybe to a file outside the
// volume) as it is. No process of the workspace runs meanwhile.
func claimVolume(vol string, uid int) error {
	root, err := os.OpenRoot(vol)
	if err != nil {
		return err
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || int(st.Uid) == uid && int(st.Gid) == uid || !fi.IsDir() && st.Nlink > 1 {
			return nil
		}
		return root.Lchown(p, uid, uid)
	})
	if err != nil {
		return fmt.Errorf("process: giving volume %s to uid %d: %w", vol, uid, err)
	}
	return root.Chmod(".", 0o700)
}
