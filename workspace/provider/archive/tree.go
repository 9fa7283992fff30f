package archive

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// TreeDigest hashes a directory tree (names, modes, file contents, link
// targets) in walk order: equal trees give equal digests. Tests and the
// CLI's full-cycle checks use it.
func TreeDigest(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		io.WriteString(h, rel+"\x00"+info.Mode().String()+"\x00")
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			io.WriteString(h, l)
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			io.Copy(h, f)
			f.Close()
		}
		io.WriteString(h, "\x00")
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}
