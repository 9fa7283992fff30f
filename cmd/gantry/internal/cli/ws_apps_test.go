package cli

import (
	"strings"
	"testing"
)

// `ws create/update --app` refuses a malformed app before any request,
// naming the flag and the value: NAME=PORT[,share=LEVEL], main[,share=…]
// for the default app.
func TestWSAppFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		cmd  []string
		app  string
		want string
	}{
		{[]string{"create", "x"}, "web", "want NAME=PORT"},
		{[]string{"create", "x"}, "web=", `port ""`},
		{[]string{"create", "x"}, "web=0", `port "0": want 1–65535`},
		{[]string{"create", "x"}, "web=70000", `port "70000"`},
		{[]string{"create", "x"}, "web=http", `port "http"`},
		{[]string{"create", "x"}, "Web=8081", "a–z, 0–9 and '-'"},
		{[]string{"create", "x"}, "a--b=8081", `no "--"`},
		{[]string{"create", "x"}, "web=8081,share=all", `share "all": want owner, authenticated or public`},
		{[]string{"create", "x"}, "web=8081,tls", `option "tls"`},
		{[]string{"update", "x"}, "main=8080", "main is the default app"},
		{[]string{"update", "x"}, "main,share=everyone", `share "everyone"`},
	} {
		args := append(append([]string{"ws", "--server", "http://127.0.0.1:1", "--token", "t"}, tc.cmd...), "--app", tc.app)
		code, _, stderr := runRecordCmd(t, args...)
		if code == 0 || !strings.Contains(stderr, `--app "`+tc.app+`"`) || !strings.Contains(stderr, tc.want) {
			t.Errorf("gantry %s: exit %d, stderr %q; want a failure naming --app %q and %q", strings.Join(args, " "), code, stderr, tc.app, tc.want)
		}
	}
}

// The flag's forms parse into the apps the API takes.
func TestWSAppFlagParse(t *testing.T) {
	apps, err := parseAppFlags([]string{"api=8081", "docs=8082,share=public", "main,share=authenticated"})
	if err != nil {
		t.Fatal(err)
	}
	if len(apps) != 3 || apps[0].Port != 8081 || apps[0].Share != "" || apps[1].Share != "public" || apps[2].Name != "main" || apps[2].Port != 0 || apps[2].Share != "authenticated" {
		t.Errorf("parsed %+v", apps)
	}
}
