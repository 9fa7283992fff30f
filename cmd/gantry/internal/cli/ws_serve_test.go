package cli

import (
	"strings"
	"testing"
)

// TestWSServeRefusesBadSettings: `ws serve` refuses a setting the server
// cannot mean before it opens anything, naming the flag the user typed: a
// timeout of zero (the reconciler's policy has no "time out at once"; a
// connection timeout of zero would read as its default), a
// non-positive interval, a negative count or limit, and a server config
// error mapped back to its flag.
func TestWSServeRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--starting-timeout", "0"}, "--starting-timeout 0s: want a positive duration"},
		{[]string{"--archiving-timeout", "-1s"}, "--archiving-timeout -1s: want a positive duration"},
		{[]string{"--interval", "0"}, "--interval 0s: want a positive duration"},
		{[]string{"--read-timeout", "0"}, "--read-timeout 0s: want a positive duration (negative = none)"},
		{[]string{"--idle-conn-timeout", "0s"}, "--idle-conn-timeout 0s: want a positive duration"},
		{[]string{"--listen", "0.0.0.0:0"}, "--listen: "},
		{[]string{"--db", "mysql://nowhere"}, "--db: "},
		{[]string{"--quota-running", "-1"}, "--quota-running -1: want 0 or more"},
		{[]string{"--quota-workspaces", "-5"}, "--quota-workspaces -5: want 0 or more"},
		{[]string{"--max-retries", "-1"}, "--max-retries -1: want 0 or more"},
		{[]string{"--keep-archives", "-1"}, "--keep-archives -1: want 0 or more"},
		{[]string{"--default-pids", "-1"}, "--default-pids -1: want 0 or more"},
	} {
		args := append([]string{"ws", "serve", "--data", t.TempDir()}, tc.args...)
		code, _, stderr := runRecordCmd(t, args...)
		if code == 0 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "ServerConfig.") {
			t.Errorf("gantry %s: exit %d, stderr %q; want a failure naming %q", strings.Join(args, " "), code, stderr, tc.want)
		}
	}
}
