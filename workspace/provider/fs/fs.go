// Package fs is a provider.BlobStore on a local directory: each key is a
// file under Dir, written to a temporary name in the same directory, synced
// and renamed, so a blob is visible only when complete.
package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/workspace/provider"
)

// BlobStore keeps blobs as files under Dir.
type BlobStore struct {
	Dir string
}

var _ provider.BlobStore = (*BlobStore)(nil)

// ErrBadKey is returned for keys that are empty, absolute or contain "..".
var ErrBadKey = errors.New("fs: bad blob key")

func (b *BlobStore) path(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "\\") || path.Clean(key) != key {
		return "", fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	for _, p := range strings.Split(key, "/") {
		if p == ".." || strings.HasPrefix(p, fsutil.TempPrefix) {
			return "", fmt.Errorf("%w: %q", ErrBadKey, key)
		}
	}
	return filepath.Join(b.Dir, filepath.FromSlash(key)), nil
}

// Put writes r to key atomically (fsutil.WriteAtomic: temp file, fsync, rename, dir fsync).
func (b *BlobStore) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return fsutil.WriteAtomic(p, 0o644, func(w io.Writer) error {
		_, err := io.Copy(w, ctxReader{ctx, r})
		return err
	})
}

// Get opens key's file.
func (b *BlobStore) Get(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := b.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", provider.ErrNotFound, key)
	}
	return f, err
}

// Stat reports key's size.
func (b *BlobStore) Stat(_ context.Context, key string) (int64, bool, error) {
	p, err := b.path(key)
	if err != nil {
		return 0, false, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return fi.Size(), true, nil
}

// Delete removes key's file.
func (b *BlobStore) Delete(_ context.Context, key string) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// List walks the files under Dir whose keys start with prefix, skipping
// the temporary files of Puts in progress.
func (b *BlobStore) List(ctx context.Context, prefix string) ([]provider.BlobInfo, error) {
	// Walk from the deepest directory the prefix names whole.
	start := b.Dir
	if i := strings.LastIndexByte(prefix, '/'); i > 0 {
		start = filepath.Join(b.Dir, filepath.FromSlash(prefix[:i]))
	}
	var out []provider.BlobInfo
	err := filepath.WalkDir(start, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // removed while we walked, or no such prefix
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), fsutil.TempPrefix) {
			return nil
		}
		rel, err := filepath.Rel(b.Dir, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		out = append(out, provider.BlobInfo{Key: key, Size: fi.Size(), Modified: fi.ModTime()})
		return nil
	})
	return out, err
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
