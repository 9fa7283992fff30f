package main

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func findings(t *testing.T, dir string) []string {
	t.Helper()
	got, err := check(filepath.Join("testdata", dir))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestToursTrue(t *testing.T) {
	if got := findings(t, "tours/good"); len(got) != 0 {
		t.Errorf("findings on a true tour:\n%s", got)
	}
}

func TestToursMissingFile(t *testing.T) {
	want := []string{
		"testdata/tours/missingfile/doc.go: tours: the package tour does not name two.go (add a line on what it holds)",
	}
	if diff := cmp.Diff(want, findings(t, "tours/missingfile")); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func TestToursStaleIdentifiers(t *testing.T) {
	want := []string{
		"testdata/tours/staleident/a/a.go: tours: the package tour links [Gone], which a does not declare",
		"testdata/tours/staleident/a/a.go: tours: the package tour names Thing.Lost, but Thing has no field or method Lost",
		"testdata/tours/staleident/a/a.go: tours: the package tour names a.Removed, which a does not declare",
		"testdata/tours/staleident/a/a.go: tours: the package tour names old.go, which does not exist in testdata/tours/staleident/a",
		"testdata/tours/staleident/b/b.go: tours: the package tour names a.Vanished, which example.com/fix/a does not declare",
	}
	if diff := cmp.Diff(want, findings(t, "tours/staleident")); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func TestSleepNeedsRealTimeReason(t *testing.T) {
	msg := `: testsleep: wait for the condition with testutil.WaitFor (or a channel), or, where real time is under test, say so with a "// real time: <reason>" comment`
	want := []string{
		"testdata/sleeps/sleeps_test.go:12:2" + msg,
		"testdata/sleeps/sleeps_test.go:13:2" + msg,
		"testdata/sleeps/sleeps_test.go:14:2" + msg,
	}
	if diff := cmp.Diff(want, findings(t, "sleeps")); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func TestFileLength(t *testing.T) {
	want := []string{
		"testdata/filelen/long.go: filelen: the file is 801 lines long, more than 800 (split it by role)",
	}
	if diff := cmp.Diff(want, findings(t, "filelen")); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func TestInternalFloor(t *testing.T) {
	msg := ", which sits above %s/ (internal/ holds only ground-floor helpers; move the helper up, or what it needs down)"
	want := []string{
		"testdata/internalfloor/internal/testutil/bad.go: internalfloor: imports example.com/floor" + fmt.Sprintf(msg, "internal"),
		"testdata/internalfloor/internal/testutil/bad.go: internalfloor: imports example.com/floor/record" + fmt.Sprintf(msg, "internal"),
		"testdata/internalfloor/sub/internal/deep/deep.go: internalfloor: imports example.com/floor/sub" + fmt.Sprintf(msg, "sub/internal"),
		"testdata/internalfloor/sub/internal/deep/deep.go: internalfloor: imports example.com/floor/sub/api" + fmt.Sprintf(msg, "sub/internal"),
	}
	if diff := cmp.Diff(want, findings(t, "internalfloor")); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}
