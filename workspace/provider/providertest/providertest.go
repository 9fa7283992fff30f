// Package providertest holds conformance tests every provider.BlobStore and
// provider.Container implementation must pass (fs, s3, process, docker):
// BlobStore (Put/Get/Stat/Delete, failed Puts change nothing) and Container
// (Start/Stop/Observe, each idempotent). An implementation's own test calls
// them with a fresh instance.
package providertest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace/provider"
)

// BlobStore checks Put/Get/Stat/Delete semantics on bs.
func BlobStore(t *testing.T, bs provider.BlobStore) {
	t.Helper()
	ctx := t.Context()
	key := "archives/ws1/op1/home.tar.zst"
	if _, ok, err := bs.Stat(ctx, key); err != nil || ok {
		t.Fatalf("Stat(missing) = ok %v, err %v; want false, nil", ok, err)
	}
	if _, err := bs.Get(ctx, key); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("Get(missing) err = %v, want ErrNotFound", err)
	}
	data := bytes.Repeat([]byte("gantry"), 100000)
	blobRoundTrip(t, bs, key, data)
	blobFailedPuts(t, bs, key, int64(len(data)))
	if err := bs.Delete(ctx, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := bs.Delete(ctx, key); err != nil {
		t.Fatalf("Delete twice: %v", err)
	}
	if _, ok, _ := bs.Stat(ctx, key); ok {
		t.Fatal("blob still there after Delete")
	}
	blobDeletedWhileOpen(t, bs)
	blobList(t, bs)
}

// blobDeletedWhileOpen checks that a blob deleted between Get and the
// first Read reads either whole or as ErrNotFound (a listing racing a
// retention delete must tell "gone" from a failure).
func blobDeletedWhileOpen(t *testing.T, bs provider.BlobStore) {
	t.Helper()
	ctx := t.Context()
	key := "archives/ws1/op2/home.tar.zst.meta"
	if err := bs.Put(ctx, key, strings.NewReader("meta")); err != nil {
		t.Fatal(err)
	}
	rc, err := bs.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	if err := bs.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err != nil && !errors.Is(err, provider.ErrNotFound) || err == nil && string(got) != "meta" {
		t.Fatalf("reading a blob deleted after Get: %q, %v; want it whole or ErrNotFound", got, err)
	}
}

// blobList checks that List finds exactly the blobs under a prefix, with
// their sizes and recent modification times.
func blobList(t *testing.T, bs provider.BlobStore) {
	t.Helper()
	ctx := t.Context()
	keys := map[string]int{"archives/a1/op1/home.tar.zst": 10, "archives/a1/op1/home.tar.zst.meta": 3,
		"archives/a1/op2/home.tar.zst": 5, "archives/a10/op1/home.tar.zst": 7, "other/x": 1}
	for k, n := range keys {
		if err := bs.Put(ctx, k, strings.NewReader(strings.Repeat("x", n))); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for k := range keys {
			bs.Delete(context.WithoutCancel(ctx), k)
		}
	})
	for prefix, want := range map[string][]string{
		"archives/a1/": {"archives/a1/op1/home.tar.zst", "archives/a1/op1/home.tar.zst.meta", "archives/a1/op2/home.tar.zst"},
		"archives/":    {"archives/a1/op1/home.tar.zst", "archives/a1/op1/home.tar.zst.meta", "archives/a1/op2/home.tar.zst", "archives/a10/op1/home.tar.zst"},
		"archives/a1":  {"archives/a1/op1/home.tar.zst", "archives/a1/op1/home.tar.zst.meta", "archives/a1/op2/home.tar.zst", "archives/a10/op1/home.tar.zst"},
		"nothing/":     nil,
	} {
		got, err := bs.List(ctx, prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		var names []string
		for _, b := range got {
			names = append(names, b.Key)
			if int(b.Size) != keys[b.Key] || time.Since(b.Modified) > time.Hour || time.Until(b.Modified) > time.Minute {
				t.Fatalf("List(%q): %+v; want size %d and a recent time", prefix, b, keys[b.Key])
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			t.Fatalf("List(%q) = %q, want %q", prefix, names, want)
		}
	}
}

// blobRoundTrip puts data under key and checks that Stat and Get see it.
func blobRoundTrip(t *testing.T, bs provider.BlobStore, key string, data []byte) {
	t.Helper()
	ctx := t.Context()
	if err := bs.Put(ctx, key, bytes.NewReader(data)); err != nil {
		t.Fatalf("Put: %v", err)
	}
	size, ok, err := bs.Stat(ctx, key)
	if err != nil || !ok || size != int64(len(data)) {
		t.Fatalf("Stat = %d, %v, %v; want %d, true, nil", size, ok, err, len(data))
	}
	rc, err := bs.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get read %d bytes (err %v), want the %d put", len(got), err, len(data))
	}
}

// blobFailedPuts checks that a Put whose reader fails changes nothing: the
// blob of size bytes under key stays, and a new key stays missing.
func blobFailedPuts(t *testing.T, bs provider.BlobStore, key string, size int64) {
	t.Helper()
	ctx := t.Context()
	failing := io.MultiReader(strings.NewReader("partial"), errReader{})
	if err := bs.Put(ctx, key, failing); err == nil {
		t.Fatal("Put with a failing reader succeeded")
	}
	if got, ok, _ := bs.Stat(ctx, key); !ok || got != size {
		t.Fatalf("after failed Put: Stat = %d, %v; want the old blob (%d bytes)", got, ok, size)
	}
	if err := bs.Put(ctx, key+".other", io.MultiReader(strings.NewReader("x"), errReader{})); err == nil {
		t.Fatal("Put with a failing reader succeeded")
	}
	if _, ok, _ := bs.Stat(ctx, key+".other"); ok {
		t.Fatal("a failed Put left a visible blob")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("reader failed") }

// Container checks Start/Stop/Observe idempotence on c for spec (whose
// command must keep running until stopped).
func Container(t *testing.T, c provider.Container, spec provider.Spec) {
	t.Helper()
	ctx := t.Context()
	observe := func(want ...provider.ContainerState) {
		t.Helper()
		st, err := c.Observe(ctx, spec.ID)
		if err != nil {
			t.Fatalf("Observe: %v", err)
		}
		for _, w := range want {
			if st == w {
				return
			}
		}
		t.Fatalf("Observe = %v, want one of %v", st, want)
	}
	observe(provider.Missing)
	if err := c.Stop(ctx, spec.ID); err != nil {
		t.Fatalf("Stop(missing): %v", err)
	}
	for range 2 {
		if err := c.Start(ctx, spec); err != nil {
			t.Fatalf("Start: %v", err)
		}
		observe(provider.Running)
	}
	for range 2 {
		if err := c.Stop(ctx, spec.ID); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		observe(provider.Stopped, provider.Missing)
	}
	if err := c.Start(ctx, spec); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	observe(provider.Running)
	if err := c.Stop(ctx, spec.ID); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}
