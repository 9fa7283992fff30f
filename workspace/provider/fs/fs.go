// Package fs is a provider.BlobStore on a local directory: each key is a
// file under Dir, written to a temporary name in the same directory, synced
// and renamed, so a blob is visible only when complete.
package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

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
		if p == ".." || strings.HasPrefix(p, ".tmp-") {
			return "", fmt.Errorf("%w: %q", ErrBadKey, key)
		}
	}
	return filepath.Join(b.Dir, filepath.FromSlash(key)), nil
}

// Put writes r to a temp file beside key's path, syncs it and renames it.
func (b *BlobStore) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-"+filepath.Base(p)+"-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = io.Copy(f, ctxReader{ctx, r})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(p)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
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
