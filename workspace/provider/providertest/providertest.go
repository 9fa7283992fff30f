// Package providertest holds conformance tests every provider.BlobStore and
// provider.Container implementation must pass (fs, s3, process, docker).
package providertest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/workspace/provider"
)

// BlobStore checks Put/Get/Stat/Delete semantics on bs.
func BlobStore(t *testing.T, bs provider.BlobStore) {
	t.Helper()
	ctx := context.Background()
	key := "archives/ws1/op1/home.tar.zst"
	if _, ok, err := bs.Stat(ctx, key); err != nil || ok {
		t.Fatalf("Stat(missing) = ok %v, err %v; want false, nil", ok, err)
	}
	if _, err := bs.Get(ctx, key); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("Get(missing) err = %v, want ErrNotFound", err)
	}
	data := bytes.Repeat([]byte("gantry"), 100000)
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
	// A Put whose reader fails leaves the old blob in place.
	failing := io.MultiReader(strings.NewReader("partial"), errReader{})
	if err := bs.Put(ctx, key, failing); err == nil {
		t.Fatal("Put with a failing reader succeeded")
	}
	if size, ok, _ := bs.Stat(ctx, key); !ok || size != int64(len(data)) {
		t.Fatalf("after failed Put: Stat = %d, %v; want the old blob (%d bytes)", size, ok, len(data))
	}
	// A failed Put of a new key leaves nothing.
	if err := bs.Put(ctx, key+".other", io.MultiReader(strings.NewReader("x"), errReader{})); err == nil {
		t.Fatal("Put with a failing reader succeeded")
	}
	if _, ok, _ := bs.Stat(ctx, key+".other"); ok {
		t.Fatal("a failed Put left a visible blob")
	}
	if err := bs.Delete(ctx, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := bs.Delete(ctx, key); err != nil {
		t.Fatalf("Delete twice: %v", err)
	}
	if _, ok, _ := bs.Stat(ctx, key); ok {
		t.Fatal("blob still there after Delete")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("reader failed") }

// Container checks Start/Stop/Observe idempotence on c for spec (whose
// command must keep running until stopped).
func Container(t *testing.T, c provider.Container, spec provider.Spec) {
	t.Helper()
	ctx := context.Background()
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
