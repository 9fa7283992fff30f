package extsort

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCheckSeparate(t *testing.T) {
	root := t.TempDir()
	in, in2, out, tmp := filepath.Join(root, "in"), filepath.Join(root, "in2"), filepath.Join(root, "out"), filepath.Join(root, "tmp")
	for _, d := range []string{in, in2, out, tmp} {
		os.Mkdir(d, 0o755)
	}
	alias := filepath.Join(root, "alias")
	if err := os.Symlink(in, alias); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		inputs        []string
		output, tmp   string
		wantErr       bool
		wantMentioned string
	}{
		{"separate", []string{in, in2}, out, tmp, false, ""},
		{"output in temp is fine", []string{in}, filepath.Join(tmp, "out"), tmp, false, ""},
		{"in place", []string{in}, in, tmp, true, "sorting in place"},
		{"in place through a symlink", []string{alias}, in, tmp, true, "sorting in place"},
		{"output inside input", []string{in2, in}, filepath.Join(in, "out"), tmp, true, "inside the input directory " + in},
		{"input inside output", []string{filepath.Join(out, "x")}, out, tmp, true, "is inside the output directory"},
		{"temp inside input", []string{in}, out, filepath.Join(in, "tmp"), true, "temp directory"},
		{"temp is the input", []string{in}, out, in, true, "temp directory"},
		{"temp inside output", []string{in}, out, filepath.Join(out, "t"), true, "temp directory " + filepath.Join(out, "t") + " is inside the output directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSeparate(tc.inputs, tc.output, tc.tmp)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("err = %v, want ErrConfig", err)
			}
			if !contains(err.Error(), tc.wantMentioned) {
				t.Errorf("err = %q, want it to mention %q", err, tc.wantMentioned)
			}
		})
	}
	if ents, _ := os.ReadDir(in); len(ents) != 0 {
		t.Errorf("CheckSeparate created %d entries", len(ents))
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestSweepStaleKeepsLiveOwners(t *testing.T) {
	parent := t.TempDir()
	live, err := createOwnedDir(parent, spillPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	os.WriteFile(filepath.Join(live.path, "run-0"), []byte("x"), 0o644)

	// A dead owner: the lock is released (as the kernel does when a
	// process dies) but the directory stays.
	dead, err := createOwnedDir(parent, spillPrefix)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dead.path, "run-0"), []byte("x"), 0o644)
	dead.lock.Close()

	// Without an owner file: an older gantry's leftover once old enough,
	// a directory being created when new.
	oldOwnerless := filepath.Join(parent, spillPrefix+"old")
	newOwnerless := filepath.Join(parent, spillPrefix+"new")
	os.Mkdir(oldOwnerless, 0o755)
	os.Mkdir(newOwnerless, 0o755)
	past := time.Now().Add(-2 * ownerlessGrace)
	os.Chtimes(oldOwnerless, past, past)
	// Not ours at all.
	other := filepath.Join(parent, "someone-elses")
	os.Mkdir(other, 0o755)

	swept, err := sweepStale(parent, spillPrefix)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(swept)
	want := []string{dead.path, oldOwnerless}
	slices.Sort(want)
	if !slices.Equal(swept, want) {
		t.Errorf("swept %v, want %v", swept, want)
	}
	for _, d := range []string{live.path, newOwnerless, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(live.path, "run-0")); err != nil {
		t.Errorf("a live owner's file was removed: %v", err)
	}
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close left %s: %v", live.path, err)
	}
	if err := live.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
