package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gantryhq/gantry/workspace/provider"
)

// Namespaces. A thread's namespaces and umask are its own (once it has
// unshared its fs attributes), and a child process inherits those of the
// thread that forks it. So a workspace's command starts from an OS thread
// locked to one goroutine and moved into new namespaces first (isolate),
// and an exec'd command from one moved into the command's namespaces
// (enter): os/exec forks from the calling thread. Such a thread is never
// handed back to the Go runtime: it ends with its goroutine (onThread). The
// runtime starts new threads from a clean template thread, never from a
// locked one. The namespaces live as long as a process is in them: nothing
// is mounted or left on the host.

// onThread runs f on an OS thread locked to it that is not the process's
// main thread: the runtime never ends that one (it wedges it instead), and
// a thread f leaves changed must end. If f reports it left the thread as it
// found it, the thread goes back to the runtime; otherwise it ends with
// f's goroutine.
func onThread(f func() (clean bool)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// On the main thread: run f from another goroutine, which
			// cannot run here while this one holds the thread.
			onThread(f)
			runtime.UnlockOSThread()
			return
		}
		if f() {
			runtime.UnlockOSThread()
		}
	}()
	<-done
}

// spawn runs start on a fresh OS thread with umask 077 that enter (if not
// nil) has first moved into a workspace's namespaces.
func spawn(start func() error, enter func() error) error {
	var err error
	onThread(func() bool {
		if err = unix.Unshare(unix.CLONE_FS); err != nil {
			err = fmt.Errorf("process: unshare(CLONE_FS): %w", err)
			return false
		}
		unix.Umask(0o077)
		if enter != nil {
			if err = enter(); err != nil {
				return false
			}
		}
		err = start()
		return false
	})
	return err
}

// isolate moves the calling thread into a new mount namespace, where the
// volume is all that shows of the directory that holds it (hide), /proc
// shows only the processes of the reader's own uid and /etc/passwd and
// /etc/group name uid (users), and with NetworkPrivate into a new network
// namespace whose loopback is up.
func isolate(vol string, network Network, uid int) func() error {
	return func() error {
		flags := unix.CLONE_NEWNS
		if network == NetworkPrivate {
			flags |= unix.CLONE_NEWNET
		}
		if err := unix.Unshare(flags); err != nil {
			return fmt.Errorf("process: unshare (new mount and network namespaces need root): %w", err)
		}
		// Nothing mounted here propagates back to the host.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("process: making mounts private: %w", err)
		}
		if network == NetworkPrivate {
			if err := loopbackUp(); err != nil {
				return err
			}
		}
		if err := hide(vol); err != nil {
			return err
		}
		if err := users(coverFor(vol), vol, uid); err != nil {
			return err
		}
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=2"); err != nil {
			return fmt.Errorf("process: mounting /proc with hidepid: %w", err)
		}
		return nil
	}
}

// hide covers the topmost directory above vol that others may not enter
// (coverFor) with an empty tmpfs, makes vol's path again inside it and
// binds the volume there. The workspace's user, "other" to every directory
// above its volume, reaches the volume by its usual path, and sees nothing
// else that the tmpfs covers: the data directory's admin token, database,
// logs, pidfiles, archives and the other volumes are not there.
func hide(vol string) error {
	if !filepath.IsAbs(vol) {
		return fmt.Errorf("process: volume %q: want an absolute path", vol)
	}
	top := coverFor(vol)
	if top == "/" {
		return fmt.Errorf("process: volume %s: no directory above it to cover", vol)
	}
	fd, err := unix.Open(vol, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("process: volume %s: %w", vol, err)
	}
	defer unix.Close(fd)
	if err := unix.Mount("tmpfs", top, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("process: covering %s: %w", top, err)
	}
	rel, err := filepath.Rel(top, vol)
	if err != nil {
		return err
	}
	p := top
	for _, part := range strings.Split(rel, "/") {
		p = filepath.Join(p, part)
		if err := unix.Mkdir(p, 0o755); err != nil {
			return fmt.Errorf("process: mkdir %s in the cover: %w", p, err)
		}
		if err := unix.Chmod(p, 0o755); err != nil { // the thread's umask is 077
			return err
		}
	}
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), vol, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("process: binding volume %s: %w", vol, err)
	}
	return nil
}

// users binds over /etc/passwd and /etc/group copies (written in the
// cover, top, and unlinked from it once bound) that add the workspace's user and group: name gantry-UID, uid and
// gid UID, HOME its volume, shell /bin/sh. Programs that look their user
// up (scp, sftp-server, rsync, a shell's prompt) then find it. The host's
// files stay as they are; a uid they already name is left as it is.
func users(top, vol string, uid int) error {
	name := "gantry-" + strconv.Itoa(uid)
	for _, f := range []struct{ path, line, prefix string }{
		{"/etc/passwd", fmt.Sprintf("%s:x:%d:%d:gantry workspace:%s:/bin/sh\n", name, uid, uid, vol), fmt.Sprintf(":x:%d:", uid)},
		{"/etc/group", fmt.Sprintf("%s:x:%d:\n", name, uid), fmt.Sprintf(":x:%d:", uid)},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return fmt.Errorf("process: users: %w", err)
		}
		if bytes.Contains(b, []byte(f.prefix)) {
			continue
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		cp := filepath.Join(top, "."+filepath.Base(f.path))
		if err := writeShared(cp, append(b, f.line...)); err != nil {
			return err
		}
		err = unix.Mount(cp, f.path, "", unix.MS_BIND, "")
		unix.Unlink(cp) // the mount keeps it: the cover holds only the volume's path
		if err != nil {
			return fmt.Errorf("process: binding %s over %s: %w", cp, f.path, err)
		}
	}
	return nil
}

// writeShared writes a new file p, mode 0644 whatever the umask.
func writeShared(p string, b []byte) error {
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("process: %s: %w", p, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, 0o644); err != nil {
		return err
	}
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			return fmt.Errorf("process: writing %s: %w", p, err)
		}
		b = b[n:]
	}
	return nil
}

// coverFor is the topmost directory above vol whose mode lets others not
// enter it (the data directory, 0700, or one above it), or vol's parent.
func coverFor(vol string) string {
	top := ""
	for d := filepath.Dir(vol); ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if unix.Stat(d, &st) == nil && st.Mode&0o001 == 0 {
			top = d
		}
		if d == "/" || d == "." {
			break
		}
	}
	if top == "" {
		top = filepath.Dir(vol)
	}
	return top
}

// loopbackUp sets the calling thread's network namespace's lo up.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("process: loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("process: loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("process: loopback up: %w", err)
	}
	return nil
}

// nsFD opens rec's process's namespace of kind ("mnt", "net"); same
// reports it is the server's own (then fd is -1). The process is checked
// to be rec's after the open, so a recycled pid is never entered.
func nsFD(rec record, kind string) (fd int, same bool, err error) {
	fd, err = unix.Open(fmt.Sprintf("/proc/%d/ns/%s", rec.pid, kind), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false, fmt.Errorf("%w: %v", provider.ErrNotRunning, err)
	}
	if st, ok := procStart(rec.pid); !ok || st != rec.start {
		unix.Close(fd)
		return -1, false, fmt.Errorf("%w: its process ended", provider.ErrNotRunning)
	}
	var theirs, ours unix.Stat_t
	if err := unix.Fstat(fd, &theirs); err != nil {
		unix.Close(fd)
		return -1, false, err
	}
	if unix.Stat("/proc/thread-self/ns/"+kind, &ours) == nil && ours.Ino == theirs.Ino && ours.Dev == theirs.Dev {
		unix.Close(fd)
		return -1, true, nil
	}
	return fd, false, nil
}

// enter opens rec's process's mount and network namespaces and returns
// the spawn hook that moves a thread into them (nil if they are the
// server's own) and the func that closes what it opened.
func enter(rec record) (hook func() error, done func(), err error) {
	var fds [2]int
	kinds := [2]struct {
		name string
		flag int
	}{{"mnt", unix.CLONE_NEWNS}, {"net", unix.CLONE_NEWNET}}
	var open []int
	done = func() {
		for _, fd := range open {
			unix.Close(fd)
		}
	}
	for i, k := range kinds {
		fd, same, err := nsFD(rec, k.name)
		if err != nil {
			done()
			return nil, nil, err
		}
		fds[i] = fd
		if !same {
			open = append(open, fd)
		}
	}
	if len(open) == 0 {
		return nil, done, nil
	}
	return func() error {
		for i, k := range kinds {
			if fds[i] < 0 {
				continue
			}
			if err := unix.Setns(fds[i], k.flag); err != nil {
				return fmt.Errorf("process: entering the workspace's %s namespace: %w", k.name, err)
			}
		}
		return nil
	}, done, nil
}

// dialIn dials addr from inside the network namespace ns: the socket is
// made there, and the thread goes back to the server's namespace.
func dialIn(ctx context.Context, ns int, addr string) (conn net.Conn, err error) {
	onThread(func() bool {
		self, oerr := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if oerr != nil {
			err = oerr
			return true
		}
		defer unix.Close(self)
		if serr := unix.Setns(ns, unix.CLONE_NEWNET); serr != nil {
			err = fmt.Errorf("process: entering the workspace's network namespace: %w", serr)
			return true
		}
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", addr)
		if serr := unix.Setns(self, unix.CLONE_NEWNET); serr != nil {
			if conn != nil {
				conn.Close()
			}
			conn, err = nil, errors.Join(err, fmt.Errorf("process: back to the server's network namespace: %w", serr))
			return false
		}
		return true
	})
	return conn, err
}

// startCmd is cmd.Start as spawn wants it.
func startCmd(cmd *exec.Cmd) func() error { return cmd.Start }
