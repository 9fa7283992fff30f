// Package archive is the workspace archive format over any BlobStore, and a
// provider.Storage made of volume directories plus a BlobStore (so the fs and
// s3 stores share one format and one set of safety checks).
//
// Format: a tar stream of the volume (directories, regular files, symlinks;
// sockets, devices and fifos are skipped) compressed with zstd, stored under
// key; then key+".meta" holding "sha256:<hex of the compressed bytes>\n".
// The .meta blob is written last and is the commit marker: an archive
// without it does not exist.
//
// Restore reads .meta, streams the blob through sha256 while extracting into
// a staging directory confined with os.Root, refuses absolute names, ".."
// components, links that point outside the volume and hard links, and only
// renames the staging directory into place when the checksum matches.
//
// The files:
//
//	format.go    Write, Committed, ReadMeta, Extract: the format over a BlobStore
//	storage.go   Storage: volume directories under Root plus a BlobStore (Archive, Restore, …)
//	tree.go      TreeDigest: a digest of a directory tree, to compare volumes
//	snapshots.go every archive a workspace wrote: list, hold, tombstone, delete
package archive

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/gantryhq/gantry/workspace/provider"
)

// Meta is the content of a .meta commit marker.
type Meta struct {
	SHA256 string // hex digest of the compressed blob
}

func (m Meta) encode() []byte { return []byte("sha256:" + m.SHA256 + "\n") }

func parseMeta(b []byte) (Meta, error) {
	s := strings.TrimSpace(string(b))
	hexd, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hexd) != 64 {
		return Meta{}, fmt.Errorf("%w: .meta = %q, want sha256:<64 hex digits>", provider.ErrCorruptArchive, s)
	}
	if _, err := hex.DecodeString(hexd); err != nil {
		return Meta{}, fmt.Errorf("%w: .meta digest %q: %v", provider.ErrCorruptArchive, hexd, err)
	}
	return Meta{SHA256: hexd}, nil
}

// Committed reports whether the archive under key and its .meta both exist.
func Committed(ctx context.Context, bs provider.BlobStore, key string) (bool, error) {
	_, ok, err := bs.Stat(ctx, provider.MetaKey(key))
	if err != nil || !ok {
		return false, err
	}
	_, ok, err = bs.Stat(ctx, key)
	return ok, err
}

// Write packs dir into bs under key and then writes key.meta. If the
// archive is already committed it writes nothing (a repeat after a crash).
func Write(ctx context.Context, bs provider.BlobStore, key, dir string) (Meta, error) {
	if ok, err := Committed(ctx, bs, key); err != nil {
		return Meta{}, err
	} else if ok {
		return ReadMeta(ctx, bs, key)
	}
	pr, pw := io.Pipe()
	h := sha256.New()
	go func() { pw.CloseWithError(pack(ctx, dir, io.MultiWriter(pw, h))) }()
	if err := bs.Put(ctx, key, pr); err != nil {
		pr.CloseWithError(err)
		return Meta{}, fmt.Errorf("archive: put %s: %w", key, err)
	}
	m := Meta{SHA256: hex.EncodeToString(h.Sum(nil))}
	if err := bs.Put(ctx, provider.MetaKey(key), strings.NewReader(string(m.encode()))); err != nil {
		return Meta{}, fmt.Errorf("archive: put %s: %w", provider.MetaKey(key), err)
	}
	return m, nil
}

// ReadMeta reads and parses key's .meta.
func ReadMeta(ctx context.Context, bs provider.BlobStore, key string) (Meta, error) {
	rc, err := bs.Get(ctx, provider.MetaKey(key))
	if errors.Is(err, provider.ErrNotFound) {
		return Meta{}, provider.Permanent("MetaNotFound", fmt.Errorf("%w: %s", provider.ErrMetaNotFound, key))
	}
	if err != nil {
		return Meta{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 4096))
	if errors.Is(err, provider.ErrNotFound) { // deleted after Get found it
		return Meta{}, provider.Permanent("MetaNotFound", fmt.Errorf("%w: %s", provider.ErrMetaNotFound, key))
	}
	if err != nil {
		return Meta{}, err
	}
	m, err := parseMeta(b)
	if err != nil {
		return Meta{}, provider.Permanent("CorruptArchive", err)
	}
	return m, nil
}

// pack writes dir as tar+zstd to w.
func pack(ctx context.Context, dir string, w io.Writer) error {
	enc, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(enc)
	werr := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		return packEntry(tw, p, rel, d)
	})
	if werr != nil {
		enc.Close()
		return werr
	}
	if err := tw.Close(); err != nil {
		enc.Close()
		return err
	}
	return enc.Close()
}

// packEntry writes the walked entry d at p (rel under the packed dir) to tw:
// directories, regular files and symbolic links; anything else is skipped.
func packEntry(tw *tar.Writer, p, rel string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	var link string
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	case info.IsDir(), info.Mode().IsRegular():
	default:
		return nil // sockets, fifos, devices: not workspace data
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	hdr.Name = filepath.ToSlash(rel)
	if info.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	f.Close()
	return err
}

// Extract verifies and unpacks the archive under key into dst, which must
// not exist: it unpacks into staging (created fresh, removed on failure) and
// renames staging to dst only after the checksum matched.
func Extract(ctx context.Context, bs provider.BlobStore, key, staging, dst string) error {
	m, err := ReadMeta(ctx, bs, key)
	if err != nil {
		return err
	}
	rc, err := bs.Get(ctx, key)
	if errors.Is(err, provider.ErrNotFound) {
		return provider.Permanent("ArchiveNotFound", fmt.Errorf("%w: %s", provider.ErrArchiveNotFound, key))
	}
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := os.RemoveAll(staging); err != nil {
		return err
	}
	if err := os.MkdirAll(staging, 0o755); err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(staging)
		}
	}()
	h := sha256.New()
	uerr := unpack(ctx, io.TeeReader(rc, h), staging)
	if uerr != nil && (ctx.Err() != nil || !errors.Is(uerr, provider.ErrCorruptArchive) && !errors.Is(uerr, provider.ErrUnsafePath)) {
		return uerr // a read or disk failure: the blob may be fine
	}
	// Drain what the tar reader left (zstd padding) so the digest covers
	// every byte of the blob; after a format error, so that a blob that
	// is not the one written is called that (ChecksumMismatch), not
	// corrupt.
	if _, err := io.Copy(h, rc); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != m.SHA256 {
		return provider.Permanent("ChecksumMismatch", fmt.Errorf("%w: %s: sha256 %s, .meta says %s", provider.ErrChecksumMismatch, key, got, m.SHA256))
	}
	if uerr != nil {
		return uerr
	}
	if err := os.Rename(staging, dst); err != nil {
		return err
	}
	ok = true
	return nil
}

// unpack reads a tar+zstd stream from r into dir, through an os.Root so no
// entry can reach outside dir.
func unpack(ctx context.Context, r io.Reader, dir string) error {
	dec, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return corruptArchive(err)
	}
	defer dec.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(dec)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return corruptArchive(err)
		}
		name, err := safeName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue
		}
		if err := unpackEntry(root, tr, hdr, name); err != nil {
			return err
		}
	}
}

// corruptArchive is the permanent error for an archive that does not decode.
func corruptArchive(err error) error {
	return provider.Permanent("CorruptArchive", fmt.Errorf("%w: %v", provider.ErrCorruptArchive, err))
}

// unpackEntry makes the entry hdr, whose checked name is name, under root:
// its parent directories, then the directory, file (content from tr) or
// symbolic link.
func unpackEntry(root *os.Root, tr *tar.Reader, hdr *tar.Header, name string) error {
	if d := path.Dir(name); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return unsafeOr(err)
		}
	}
	mode := fs.FileMode(hdr.Mode) & 0o777
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.MkdirAll(name, mode|0o700); err != nil {
			return unsafeOr(err)
		}
	case tar.TypeReg:
		f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
		if err != nil {
			return unsafeOr(err)
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return corruptArchive(err)
		}
		root.Chtimes(name, hdr.ModTime, hdr.ModTime)
	case tar.TypeSymlink:
		if err := safeLink(name, hdr.Linkname); err != nil {
			return err
		}
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return unsafeOr(err)
		}
	default:
		return provider.Permanent("UnsafeArchive", fmt.Errorf("%w: %q has tar type %q (only dirs, files and symlinks are allowed)", provider.ErrUnsafePath, hdr.Name, hdr.Typeflag))
	}
	return nil
}

// safeName cleans a tar entry name and refuses absolute names and "..".
func safeName(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") || strings.Contains(name, "\\") || filepath.IsAbs(name) {
		return "", provider.Permanent("UnsafeArchive", fmt.Errorf("%w: entry %q is absolute or empty", provider.ErrUnsafePath, name))
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", provider.Permanent("UnsafeArchive", fmt.Errorf("%w: entry %q has a \"..\" element", provider.ErrUnsafePath, name))
		}
	}
	return path.Clean(name), nil
}

// safeLink refuses a symlink with no target. A target outside the volume
// (absolute, or up through "..") is restored as it was archived: a
// workspace makes such links (a Python venv's bin/python3 ->
// /usr/bin/python3), refusing them would make its archive one that never
// restores, and no entry the restore writes goes through one (os.Root
// refuses a path that resolves outside the volume: unsafeOr).
func safeLink(name, target string) error {
	if target == "" {
		return provider.Permanent("UnsafeArchive", fmt.Errorf("%w: symlink %q has no target", provider.ErrUnsafePath, name))
	}
	return nil
}

// unsafeOr reports os.Root's refusals (a path through a symlink that leaves
// the root) as unsafe; other errors pass through.
func unsafeOr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes") {
		return provider.Permanent("UnsafeArchive", fmt.Errorf("%w: %v", provider.ErrUnsafePath, err))
	}
	return err
}
