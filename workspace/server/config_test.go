package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/workspace/provider/fake"
)

// TestConfigErrorsNameTheField: NewServer names the ServerConfig field it
// refuses (the CLI maps it to a flag), and opens nothing before.
func TestConfigErrorsNameTheField(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fk := fake.New(0)
	for _, tc := range []struct {
		field string
		cfg   ServerConfig
	}{
		{"Container", ServerConfig{Data: dir, Storage: fk}},
		{"Storage", ServerConfig{Data: dir, Container: fk}},
		{"Listen", ServerConfig{Data: dir, Container: fk, Storage: fk, Listen: "0.0.0.0:0"}},
		{"TLSCert", ServerConfig{Data: dir, Container: fk, Storage: fk, TLSCert: file}},
		{"Data", ServerConfig{Data: filepath.Join(file, "sub"), Container: fk, Storage: fk}},
		{"DB", ServerConfig{Data: dir, Container: fk, Storage: fk, DB: "mysql://nowhere"}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := NewServer(t.Context(), tc.cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("NewServer: %v, want a ConfigError on %s", err, tc.field)
			}
			if want := "ServerConfig." + tc.field + ": "; err.Error()[:len(want)] != want {
				t.Fatalf("error %q does not start with %q", err, want)
			}
		})
	}
}

// TestOneServerPerSQLiteDB: a second server on a SQLite database in use
// (the same --data) is refused, naming the first's pid; once the first has
// stopped, the database is free again.
func TestOneServerPerSQLiteDB(t *testing.T) {
	dir := t.TempDir()
	fk := fake.New(0)
	cfg := ServerConfig{Data: dir, Container: fk, Storage: fk, Listen: "127.0.0.1:0"}
	first, err := NewServer(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewServer(t.Context(), cfg)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "DB" || !strings.Contains(err.Error(), "in use by another gantry ws serve (pid "+strconv.Itoa(os.Getpid())+")") {
		t.Fatalf("a second server on %s: %v; want it refused, naming pid %d", dir, err, os.Getpid())
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := first.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	again, err := NewServer(t.Context(), cfg)
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	ctx2, cancel2 := context.WithCancel(t.Context())
	cancel2()
	again.Run(ctx2)
}
