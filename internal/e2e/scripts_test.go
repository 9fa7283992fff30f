package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/testutil"
)

// scripts/demo.sh refuses arguments it cannot use with a usage message
// naming the argument and exit status 2, before it builds or starts
// anything (it used to stop on "abc: unbound variable").
func TestDemoScriptRefusesBadArguments(t *testing.T) {
	script := filepath.Join(testutil.RepoRoot(t), "scripts", "demo.sh")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"abc"}, `RECORDS "abc": want a whole number of records, 1 or more`},
		{[]string{"0"}, `RECORDS "0": want a whole number of records, 1 or more`},
		{[]string{"1000", "x"}, `WORKERS "x": want a whole number from 1 to 253`},
		{[]string{"1000", "254"}, `WORKERS "254": want a whole number from 1 to 253`},
		{[]string{"1", "2", "3"}, "at most two arguments, got 3"},
	} {
		out, err := exec.Command("bash", append([]string{script}, tc.args...)...).CombinedOutput()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 2 || !strings.Contains(string(out), "scripts/demo.sh: "+tc.want+"\nusage: scripts/demo.sh [RECORDS] [WORKERS]") ||
			strings.Contains(string(out), "building") {
			t.Errorf("demo.sh %s: exit %d (err %v), output:\n%s\nwant 2 and %q with the usage, before building", strings.Join(tc.args, " "), code, err, out, tc.want)
		}
	}
}
