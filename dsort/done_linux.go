package dsort

import (
	"os"
	"syscall"
)

// statIDs returns fi's change time (ns), inode and device.
func statIDs(fi os.FileInfo) (ctime int64, inode, dev uint64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, 0
	}
	return st.Ctim.Nano(), st.Ino, st.Dev
}
