package archive_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/fs"
	"github.com/gantryhq/gantry/workspace/provider/providertest"
)

func TestFSBlobStoreConformance(t *testing.T) {
	providertest.BlobStore(t, &fs.BlobStore{Dir: t.TempDir()})
}

func newStorage(t *testing.T) (*archive.Storage, string) {
	root := t.TempDir()
	return &archive.Storage{Root: filepath.Join(root, "volumes"), Blobs: &fs.BlobStore{Dir: filepath.Join(root, "blobs")}}, root
}

func TestArchiveRestoreRoundTrip(t *testing.T) {
	ctx := t.Context()
	s, root := newStorage(t)
	if err := s.Provision(ctx, "ws1"); err != nil {
		t.Fatal(err)
	}
	vol := s.VolumePath("ws1")
	os.MkdirAll(filepath.Join(vol, "src/deep"), 0o755)
	os.WriteFile(filepath.Join(vol, "src/deep/main.go"), []byte("package main\n"), 0o644)
	os.WriteFile(filepath.Join(vol, "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink("src/deep/main.go", filepath.Join(vol, "link"))
	before := treeSHA256(t, vol)

	key, err := s.Archive(ctx, "ws1", "op-1")
	if err != nil {
		t.Fatal(err)
	}
	if key != provider.ArchiveKey("ws1", "op-1") {
		t.Fatalf("key = %q", key)
	}
	meta, err := os.ReadFile(filepath.Join(root, "blobs", filepath.FromSlash(key)+".meta"))
	if err != nil {
		t.Fatalf(".meta missing: %v", err)
	}
	blob, _ := os.ReadFile(filepath.Join(root, "blobs", filepath.FromSlash(key)))
	sum := sha256.Sum256(blob)
	if want := "sha256:" + hex.EncodeToString(sum[:]) + "\n"; string(meta) != want {
		t.Fatalf(".meta = %q, want %q", meta, want)
	}
	// A repeat (crash after the write) writes nothing new.
	st, _ := os.Stat(filepath.Join(root, "blobs", filepath.FromSlash(key)))
	if _, err := s.Archive(ctx, "ws1", "op-1"); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(filepath.Join(root, "blobs", filepath.FromSlash(key)))
	if !st2.ModTime().Equal(st.ModTime()) {
		t.Fatal("repeated Archive rewrote the blob")
	}
	if err := s.DeleteVolume(ctx, "ws1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(ctx, "ws1", key); err != nil {
		t.Fatal(err)
	}
	if after := treeSHA256(t, vol); after != before {
		t.Fatalf("tree sha256 after restore %s, before %s", after, before)
	}
}

// writeRaw stores a hand-made tar+zstd archive with a correct .meta.
func writeRaw(t *testing.T, s *archive.Storage, key string, entries func(tw *tar.Writer)) {
	var buf bytes.Buffer
	enc, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(enc)
	entries(tw)
	tw.Close()
	enc.Close()
	ctx := t.Context()
	if err := s.Blobs.Put(ctx, key, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	s.Blobs.Put(ctx, provider.MetaKey(key), bytes.NewReader([]byte("sha256:"+hex.EncodeToString(sum[:])+"\n")))
}

func TestRestoreRefusesBadArchives(t *testing.T) {
	file := func(name, body string) func(tw *tar.Writer) {
		return func(tw *tar.Writer) {
			tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
			tw.Write([]byte(body))
		}
	}
	tests := []struct {
		name    string
		entries func(tw *tar.Writer)
		mangle  func(t *testing.T, s *archive.Storage, key string)
		reason  string
	}{
		{name: "dotdot", entries: file("../../escaped", "x"), reason: "UnsafeArchive"},
		{name: "absolute", entries: file("/tmp/escaped-abs", "x"), reason: "UnsafeArchive"},
		{name: "symlink escape", entries: func(tw *tar.Writer) {
			tw.WriteHeader(&tar.Header{Name: "evil", Linkname: "../../..", Typeflag: tar.TypeSymlink})
			tw.WriteHeader(&tar.Header{Name: "evil/escaped", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
			tw.Write([]byte("x"))
		}, reason: "UnsafeArchive"},
		{name: "through an absolute symlink", entries: func(tw *tar.Writer) {
			tw.WriteHeader(&tar.Header{Name: "evil", Linkname: "/tmp", Typeflag: tar.TypeSymlink})
			tw.WriteHeader(&tar.Header{Name: "evil/escaped-abs", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
			tw.Write([]byte("x"))
		}, reason: "UnsafeArchive"},
		{name: "empty symlink", entries: func(tw *tar.Writer) {
			tw.WriteHeader(&tar.Header{Name: "evil", Linkname: "", Typeflag: tar.TypeSymlink})
		}, reason: "UnsafeArchive"},
		{name: "corrupt", entries: file("ok", "fine"), mangle: func(t *testing.T, s *archive.Storage, key string) {
			p := filepath.Join(s.Blobs.(*fs.BlobStore).Dir, filepath.FromSlash(key))
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0xff
			os.WriteFile(p, b, 0o644)
		}, reason: "ChecksumMismatch|CorruptArchive"},
		{name: "truncated", entries: file("ok", string(bytes.Repeat([]byte("abc"), 10000))), mangle: func(t *testing.T, s *archive.Storage, key string) {
			p := filepath.Join(s.Blobs.(*fs.BlobStore).Dir, filepath.FromSlash(key))
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
		}, reason: "ChecksumMismatch|CorruptArchive"},
		{name: "no meta", entries: file("ok", "fine"), mangle: func(t *testing.T, s *archive.Storage, key string) {
			s.Blobs.Delete(t.Context(), provider.MetaKey(key))
		}, reason: "MetaNotFound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, root := newStorage(t)
			key := provider.ArchiveKey("ws1", "op")
			writeRaw(t, s, key, tt.entries)
			if tt.mangle != nil {
				tt.mangle(t, s, key)
			}
			os.MkdirAll(filepath.Join(root, "volumes", ".staging"), 0o755)
			before := treeSHA256(t, root)
			err := s.Restore(t.Context(), "ws1", key)
			var pe *provider.PermanentError
			if !errors.As(err, &pe) {
				t.Fatalf("Restore err = %v, want a PermanentError", err)
			}
			if !bytes.Contains([]byte(tt.reason), []byte(pe.Reason)) {
				t.Fatalf("reason %q, want %s (err %v)", pe.Reason, tt.reason, err)
			}
			if ok, _ := s.VolumeExists(t.Context(), "ws1"); ok {
				t.Fatal("a failed restore left a volume")
			}
			if _, err := os.Stat("/tmp/escaped-abs"); err == nil {
				t.Fatal("wrote outside the volume")
			}
			if after := treeSHA256(t, root); after != before {
				t.Fatal("the data dir changed outside the volume")
			}
		})
	}
}

// A volume's symbolic links that point outside it (absolute, as a Python
// venv's bin/python3 -> /usr/bin/python3, or up through "..") come back from
// an archive as the same links, never followed: the tree's digest is the
// same and the files they point at are untouched.
func TestRestoreKeepsLinksThatLeaveTheVolume(t *testing.T) {
	s, _ := newStorage(t)
	ctx := t.Context()
	if err := s.Provision(ctx, "ws1"); err != nil {
		t.Fatal(err)
	}
	vol := s.VolumePath("ws1")
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("not the workspace's"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"venv/bin/python3": "/usr/bin/python3", "up": "../../..", "abs-file": outside}
	if err := os.MkdirAll(filepath.Join(vol, "venv", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(vol, name)); err != nil {
			t.Fatal(err)
		}
	}
	before := treeSHA256(t, vol)
	key, err := s.Archive(ctx, "ws1", "op-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVolume(ctx, "ws1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(ctx, "ws1", key); err != nil {
		t.Fatalf("restore of a volume with links out of it: %v", err)
	}
	if after := treeSHA256(t, vol); after != before {
		t.Errorf("tree sha256 after restore %s, before %s", after, before)
	}
	for name, target := range links {
		if got, err := os.Readlink(filepath.Join(vol, name)); err != nil || got != target {
			t.Errorf("%s: link to %q, %v; want %q", name, got, err, target)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "not the workspace's" {
		t.Errorf("the file a link points at changed: %q", b)
	}
}

func treeSHA256(t *testing.T, dir string) string {
	t.Helper()
	s, err := archive.TreeDigest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
