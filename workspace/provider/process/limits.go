package process

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gantryhq/gantry/workspace/provider"
)

var _ provider.LimitChecker = (*Container)(nil)

// What the process provider enforces, without root-only features
// (cgroups): a limit becomes a shell `ulimit` before the command, so it
// binds the command and everything it starts.
//
//	Memory  RLIMIT_AS (`ulimit -v`): the address space of each process, not
//	        the workspace's total; runtimes that reserve large address
//	        ranges up front (Go, the JVM) need a limit well above their use.
//	Pids    RLIMIT_NPROC (`ulimit -u`): counts every process of the user the
//	        command runs as: the workspace's own when contained (its exec'd
//	        processes count, though they are not bound), else the server's
//	        user, whose other processes count too; it binds nothing for
//	        root, so a root server with SharedUser refuses it.
//	CPUs    not enforced (a rate needs cgroups): refused.
//
// Commands run with `ws exec` are not bound. Use --provider docker for
// limits that hold for the whole workspace.
var errNoCPULimit = errors.New("the process provider cannot bound CPU (that needs cgroups): use --provider docker")

// CheckLimits refuses the limits Start would not enforce.
func (c *Container) CheckLimits(l provider.Limits) error {
	l = c.withDefaults(l)
	if l.CPUs != 0 {
		return errNoCPULimit
	}
	if l.Pids != 0 && os.Geteuid() == 0 && !c.contained() {
		return errors.New("the process provider bounds processes with RLIMIT_NPROC, which binds nothing for root (workspaces run as the server's user, root, with --insecure-shared-user): use --provider docker")
	}
	return nil
}

// withDefaults fills l's zero fields from the container's Defaults.
func (c *Container) withDefaults(l provider.Limits) provider.Limits {
	if l.CPUs == 0 {
		l.CPUs = c.Defaults.CPUs
	}
	if l.Memory == 0 {
		l.Memory = c.Defaults.Memory
	}
	if l.Pids == 0 {
		l.Pids = c.Defaults.Pids
	}
	return l
}

// limitPrefix is the shell prefix that applies l's memory and pids limits.
func limitPrefix(l provider.Limits) string {
	var b strings.Builder
	if l.Memory > 0 {
		fmt.Fprintf(&b, "ulimit -v %d || exit 126; ", (l.Memory+1023)/1024)
	}
	if l.Pids > 0 {
		// bash and busybox spell RLIMIT_NPROC -u, dash -p.
		fmt.Fprintf(&b, "{ ulimit -u %d 2>/dev/null || ulimit -p %d; } || exit 126; ", l.Pids, l.Pids)
	}
	return b.String()
}
