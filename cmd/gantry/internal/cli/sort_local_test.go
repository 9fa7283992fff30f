package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/progress"
	"github.com/gantryhq/gantry/internal/testutil"

	"github.com/gantryhq/gantry/record"
)

// sortTestRun runs a gantry command line in-process and returns its exit status
// and stderr.
func sortTestRun(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Execute(t.Context(), Env{Args: args, Stdout: &stdout, Stderr: &stderr})
	return code, stdout.String() + stderr.String()
}

// sortTestRecords writes count gensort records starting at first to path.
func sortTestRecords(t *testing.T, path string, first, count uint64, opt record.GenOptions) {
	t.Helper()
	buf := make([]byte, count*record.Size)
	record.Generate(buf, first, opt)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sortTestChecksum is valsort --checksum-only over every file under dirs.
func sortTestChecksum(t *testing.T, dirs ...string) record.Summary {
	t.Helper()
	var files []string
	for _, d := range dirs {
		filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				files = append(files, p)
			}
			return err
		})
	}
	if len(files) == 0 {
		return record.Summary{FirstUnordered: -1}
	}
	s, err := record.Validate(t.Context(), files, record.ValidateOptions{ChecksumOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sortTestCheck validates the output dir as one sequence and compares it with
// the input's record count and checksum.
func sortTestCheck(t *testing.T, out string, in record.Summary) {
	t.Helper()
	got, err := record.Validate(t.Context(), []string{out}, record.ValidateOptions{})
	if err != nil {
		t.Fatalf("valsort %s: %v", out, err)
	}
	if !got.Sorted() {
		t.Errorf("output unordered: first unordered record %d", got.FirstUnordered)
	}
	if got.Records != in.Records || got.Checksum != in.Checksum {
		t.Errorf("output has %d records, checksum %s; input had %d, checksum %s",
			got.Records, got.Checksum, in.Records, in.Checksum)
	}
}

func TestSortLocalInputs(t *testing.T) {
	bin, asc, skew := record.GenOptions{}, record.GenOptions{ASCII: true}, record.GenOptions{Skew: true}
	tests := []struct {
		name   string
		layout func(t *testing.T, in string) // writes the input under in/
		memory string
	}{
		{"empty input dirs", func(t *testing.T, in string) {
			os.MkdirAll(filepath.Join(in, "a"), 0o755)
			os.MkdirAll(filepath.Join(in, "b"), 0o755)
		}, "64MiB"},
		{"zero-byte files among data", func(t *testing.T, in string) {
			sortTestRecords(t, filepath.Join(in, "a", "empty1"), 0, 0, bin)
			sortTestRecords(t, filepath.Join(in, "a", "data"), 0, 5000, bin)
			sortTestRecords(t, filepath.Join(in, "b", "empty2"), 0, 0, bin)
		}, "64MiB"},
		{"3000 tiny files", func(t *testing.T, in string) {
			for i := 0; i < 3000; i++ {
				sortTestRecords(t, filepath.Join(in, fmt.Sprintf("d%d", i%3), fmt.Sprintf("f%04d", i)), uint64(i*3), uint64(i%4), asc)
			}
		}, "64MiB"},
		{"one large file external", func(t *testing.T, in string) {
			sortTestRecords(t, filepath.Join(in, "a", "big"), 0, 400000, bin)
		}, "16MiB"},
		{"ascii and binary mixed", func(t *testing.T, in string) {
			sortTestRecords(t, filepath.Join(in, "a", "ascii"), 0, 30000, asc)
			sortTestRecords(t, filepath.Join(in, "b", "binary"), 30000, 30000, bin)
		}, "16MiB"},
		{"skewed keys", func(t *testing.T, in string) {
			sortTestRecords(t, filepath.Join(in, "a", "s1"), 0, 50000, skew)
			sortTestRecords(t, filepath.Join(in, "a", "s2"), 0, 50000, skew) // same records again: duplicates
		}, "16MiB"},
		{"all keys equal", func(t *testing.T, in string) {
			buf := make([]byte, 100000*record.Size)
			record.Generate(buf, 0, asc)
			for i := 0; i < len(buf); i += record.Size {
				copy(buf[i:], "SAME-KEY!!")
			}
			os.MkdirAll(filepath.Join(in, "a"), 0o755)
			os.WriteFile(filepath.Join(in, "a", "same"), buf, 0o644)
		}, "16MiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			in, out, tmp := filepath.Join(root, "in"), filepath.Join(root, "out"), filepath.Join(root, "tmp")
			os.Mkdir(tmp, 0o755)
			tc.layout(t, in)
			var dirs []string
			ents, _ := os.ReadDir(in)
			for _, e := range ents {
				dirs = append(dirs, filepath.Join(in, e.Name()))
			}
			want := sortTestChecksum(t, dirs...)
			args := append([]string{"sort", "local", "-I"}, dirs...)
			args = append(args, "-O", out, "--tmp", tmp, "--memory", tc.memory, "--partition-size", "1MiB")
			code, msg := sortTestRun(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, msg)
			}
			if want.Records == 0 {
				if !strings.Contains(msg, "nothing to sort") {
					t.Errorf("empty input: message %q does not say there is nothing to sort", msg)
				}
				if ents, _ := os.ReadDir(out); len(ents) != 0 {
					t.Errorf("empty input produced %d output entries", len(ents))
				}
			} else {
				sortTestCheck(t, out, want)
			}
			if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
				t.Errorf("temp dir holds %d entries after the sort", len(ents))
			}
		})
	}
}

func TestSortLocalBadSize(t *testing.T) {
	root := t.TempDir()
	sortTestRecords(t, filepath.Join(root, "in", "good"), 0, 10, record.GenOptions{})
	os.WriteFile(filepath.Join(root, "in", "torn"), make([]byte, 1234), 0o644)
	code, msg := sortTestRun(t, "sort", "local", "-I", filepath.Join(root, "in"), "-O", filepath.Join(root, "out"))
	if code == 0 {
		t.Fatal("a torn input file was accepted")
	}
	for _, want := range []string{filepath.Join(root, "in", "torn"), "1234 bytes"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not name %q", msg, want)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "out")); len(ents) != 0 {
		t.Errorf("a failed sort left %d entries in the output dir", len(ents))
	}
}

func TestSortLocalUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"sort", "local", "-O", "x"},
		{"sort", "local", "-I", "x"},
		{"sort", "local", "-I", "x", "-O", "y", "--memory", "lots"},
		{"sort", "local", "-I", t.TempDir(), "-O", t.TempDir(), "--memory", "1MiB"},
	} {
		if code, msg := sortTestRun(t, args...); code == 0 || msg == "" {
			t.Errorf("%v: exit %d, message %q; want a failure with a message", args, code, msg)
		}
	}
}

// gantryBinary returns the gantry binary (testutil.GantryBinary), in a
// directory any user can read, for the process-level tests (signals, other
// users); -short skips them.
func gantryBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process-level test: skipped by -short")
	}
	bin := testutil.GantryBinary(t)
	// Some tests run it as user nobody, who must reach it.
	os.Chmod(filepath.Dir(bin), 0o755)
	return bin
}

// asUnprivileged runs cmd as user nobody when the tests run as root, since
// root reads and writes past file permissions; otherwise as the current user.
func asUnprivileged(t *testing.T, cmd *exec.Cmd, dirs ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	for _, d := range dirs {
		for p := d; p != "/" && p != "."; p = filepath.Dir(p) {
			if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o005 != 0o005 {
				os.Chmod(p, st.Mode().Perm()|0o005)
			}
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}

func TestSortLocalPermissionErrors(t *testing.T) {
	bin := gantryBinary(t)
	t.Run("unreadable input file", func(t *testing.T) {
		root := t.TempDir()
		in, out := filepath.Join(root, "in"), filepath.Join(root, "out")
		sortTestRecords(t, filepath.Join(in, "ok"), 0, 100, record.GenOptions{})
		sortTestRecords(t, filepath.Join(in, "secret"), 100, 100, record.GenOptions{})
		os.Chmod(filepath.Join(in, "secret"), 0o000)
		os.Mkdir(out, 0o777)
		os.Chmod(out, 0o777)
		cmd := exec.Command(bin, "sort", "local", "-I", in, "-O", out, "--tmp", out)
		asUnprivileged(t, cmd, in, out)
		msg, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("an unreadable input was accepted: %s", msg)
		}
		if !strings.Contains(string(msg), "secret") || !strings.Contains(string(msg), "permission denied") {
			t.Errorf("message %q does not name the unreadable file and the reason", msg)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("output dir holds %d entries", len(ents))
		}
	})
	t.Run("unwritable output dir", func(t *testing.T) {
		root := t.TempDir()
		in, out, tmp := filepath.Join(root, "in"), filepath.Join(root, "out"), filepath.Join(root, "tmp")
		sortTestRecords(t, filepath.Join(in, "data"), 0, 1000, record.GenOptions{})
		os.Mkdir(out, 0o555)
		os.Mkdir(tmp, 0o777)
		os.Chmod(tmp, 0o777)
		cmd := exec.Command(bin, "sort", "local", "-I", in, "-O", out, "--tmp", tmp)
		asUnprivileged(t, cmd, in, out, tmp)
		msg, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("an unwritable output dir was accepted: %s", msg)
		}
		if !strings.Contains(string(msg), out) || !strings.Contains(string(msg), "permission denied") {
			t.Errorf("message %q does not name the output dir and the reason", msg)
		}
		if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
			t.Errorf("temp dir holds %d entries", len(ents))
		}
	})
}

// TestSortLocalNoSpaceOnTemp spills to a 4 MiB tmpfs, which fills up.
func TestSortLocalNoSpaceOnTemp(t *testing.T) {
	root := t.TempDir()
	in, out, tmp := filepath.Join(root, "in"), filepath.Join(root, "out"), filepath.Join(root, "tmp")
	sortTestRecords(t, filepath.Join(in, "data"), 0, 200000, record.GenOptions{}) // 20 MB
	os.Mkdir(tmp, 0o755)
	var mount []string
	if os.Geteuid() != 0 { // a private mount namespace lets an ordinary user mount tmpfs
		mount = []string{"unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
			`mount -t tmpfs -o size=4m tmpfs "$1" && shift && "$@"; code=$?; ls -A "$0"/* 2>/dev/null | head; exit $code`}
	} else {
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", tmp).CombinedOutput(); err != nil {
			t.Fatalf("mount tmpfs: %v: %s", err, out)
		}
		defer exec.Command("umount", tmp).Run()
	}
	args := []string{gantryBinary(t), "sort", "local", "-I", in, "-O", out, "--tmp", tmp, "--memory", "16MiB"}
	if mount != nil {
		args = append(append(mount, tmp), args...)
	}
	msg, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err == nil {
		t.Fatalf("sort succeeded with 4 MiB of temp space for 20 MB: %s", msg)
	}
	if !strings.Contains(string(msg), "no space left on device") {
		t.Errorf("message %q does not say the device is full", msg)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("temp dir holds %d entries after the failure", len(ents))
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("output dir holds %d entries after the failure", len(ents))
	}
}

// TestSortLocalInterrupt sends SIGINT in the middle of a sort: the process
// must exit non-zero saying it was interrupted, remove its temp files and
// leave no output.
func TestSortLocalInterrupt(t *testing.T) {
	root := t.TempDir()
	in, out, tmp := filepath.Join(root, "in"), filepath.Join(root, "out"), filepath.Join(root, "tmp")
	sortTestRecords(t, filepath.Join(in, "data"), 0, 600000, record.GenOptions{}) // 60 MB
	os.Mkdir(tmp, 0o755)
	cmd := exec.Command(gantryBinary(t), "sort", "local", "-I", in, "-O", out, "--tmp", tmp, "--memory", "16MiB")
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the first run is spilled, then interrupt.
	waitForSpill(t, cmd, tmp, stderr)
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("an interrupted sort exited 0")
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the sort did not exit within 15 s of SIGINT")
	}
	if !strings.Contains(stderr.String(), "gantry: sort local: interrupted; no new partitions in "+out) {
		t.Errorf("stderr %q does not say the sort was interrupted", stderr.String())
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("temp dir holds %d entries after SIGINT", len(ents))
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("output dir holds %d entries after SIGINT", len(ents))
	}
}

// waitForSpill waits until the sort cmd, started with --tmp tmp, has spilled
// its first run; if it does not within 30 s, cmd is killed and the test
// fails with its stderr.
func waitForSpill(t *testing.T, cmd *exec.Cmd, tmp string, stderr *testutil.Buffer) {
	t.Helper()
	t.Cleanup(func() { cmd.Process.Kill() }) // a no-op once the test has ended it
	testutil.WaitFor(t, 30*time.Second, "the first spilled run", func() (bool, string) {
		runs, _ := filepath.Glob(filepath.Join(tmp, "gantry-sort-*", "run-*"))
		return len(runs) > 0, "stderr: " + stderr.String()
	})
}

// Ctrl-C (here: a context cancelled at once) says "interrupted" and what is
// left, as gensort does, not the step extsort was in; exit status 130.
func TestSortLocalInterruptedSaysSo(t *testing.T) {
	root := t.TempDir()
	in, out := filepath.Join(root, "in"), filepath.Join(root, "out")
	sortTestRecords(t, filepath.Join(in, "data"), 0, 10000, record.GenOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var stdout, stderr bytes.Buffer
	code := Execute(ctx, Env{Args: []string{"sort", "local", "-I", in, "-O", out, "--tmp", root, "-q"}, Stdout: &stdout, Stderr: &stderr})
	want := "gantry: sort local: interrupted; no new partitions in " + out + " (earlier ones are as they were), temporary files removed\n"
	if code != 130 || stderr.String() != want {
		t.Errorf("exit %d, stderr %q; want 130 and %q", code, stderr.String(), want)
	}
}

// The progress lines count input bytes: for 10 MB of input they say "of
// 10.0 MB" (each byte is read once and written once: each pass counts
// half).
func TestSortLocalProgressCountsTheInput(t *testing.T) {
	defer func(iv time.Duration) { progress.LineInterval = iv }(progress.LineInterval)
	progress.LineInterval = time.Millisecond
	root := t.TempDir()
	in, out := filepath.Join(root, "in"), filepath.Join(root, "out")
	sortTestRecords(t, filepath.Join(in, "data"), 0, 100000, record.GenOptions{}) // 10 MB
	code, output := sortTestRun(t, "sort", "local", "-I", in, "-O", out, "--tmp", root, "--memory", "16MiB")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, output)
	}
	re := regexp.MustCompile(`^sort: (\d+\.\d)% \(([^,]+) of ([^,]+), [^)]* elapsed\)$`)
	lines := 0
	for l := range strings.SplitSeq(output, "\n") {
		m := re.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		lines++
		if m[3] != "10.0 MB" {
			t.Errorf("progress line %q: want a total of 10.0 MB (the input)", l)
		}
	}
	if lines == 0 {
		t.Fatalf("no progress line in:\n%s", output)
	}
}

// TestSortLocalLinesIsGNUSort runs `gantry sort local --format lines` with
// GNU-style short options and checks the partitions, read in order, against
// `LC_ALL=C sort` with the same options; options of lines without
// --format lines, a bad key and an unknown format are refused.
func TestSortLocalLinesIsGNUSort(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	os.MkdirAll(in, 0o755)
	var b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&b, "user%d,%d.%d,%s\n", i%37, (i*7919)%2000-1000, i%10, []string{"b", "A", "a", ""}[i%4])
	}
	b.WriteString("last,-0,no newline")
	os.WriteFile(filepath.Join(in, "csv"), []byte(b.String()), 0o644)
	args := []string{"-t", ",", "-k", "2,2nr", "-k", "1,1", "-s"}
	out := filepath.Join(dir, "out")
	code, msg := sortTestRun(t, append([]string{"sort", "local", "--format", "lines", "-q", "-I", in, "-O", out, "--partition-size", "10000"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, msg)
	}
	parts, _ := filepath.Glob(filepath.Join(out, "partition.*"))
	if len(parts) < 5 {
		t.Fatalf("%d partitions of a 60 KB output at --partition-size 10000", len(parts))
	}
	var got []byte
	for n := range parts {
		p, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("partition.%d", n)))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p...)
	}
	cmd := exec.Command("sort", append(args, filepath.Join(in, "csv"))...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	want, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the partitions differ from GNU sort's output (%d bytes against %d)", len(got), len(want))
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-k", "2"}, "--key orders lines; add --format lines"},
		{[]string{"--format", "lines", "-k", "2x"}, `-k "2x": stray character`},
		{[]string{"--format", "csv"}, `--format "csv": want gensort or lines`},
		{[]string{"--format", "lines", "-t", ""}, "the field separator is empty"},
		{[]string{"--format", "lines", "-n", "-d"}, "options n and d are incompatible"},
	} {
		code, msg := sortTestRun(t, append([]string{"sort", "local", "-I", in, "-O", filepath.Join(dir, "o2")}, tc.args...)...)
		if code == 0 || !strings.Contains(msg, tc.want) {
			t.Errorf("%v: exit %d, %q; want a failure saying %q", tc.args, code, msg, tc.want)
		}
	}
}
