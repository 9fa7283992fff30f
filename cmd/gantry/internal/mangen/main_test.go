package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gantryhq/gantry/cmd/gantry/internal/cli"
)

// TestWritesAPagePerCommand: every command --help lists has its page,
// named by its path (gantry-ws-get.1), holding its synopsis and its flags;
// no other page is written, a usage's <placeholder> survives, and a secret in the generator's environment
// (a flag's default comes from $GANTRY_TOKEN) is in none.
func TestWritesAPagePerCommand(t *testing.T) {
	t.Setenv("GANTRY_TOKEN", "secret-token-1234")
	dir := t.TempDir()
	n, err := write(dir)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != n || n < 50 {
		t.Fatalf("%d files, %d pages reported; want one per command (gantry has more than 50)", len(entries), n)
	}
	var check func(c *cobra.Command)
	seen := 0
	check = func(c *cobra.Command) {
		seen++
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("command %q: %v", c.CommandPath(), err)
			return
		}
		page := string(b)
		for _, want := range []string{".TH \"GANTRY\" \"1\"", `\fB` + c.CommandPath() + " "} {
			if !strings.Contains(page, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && !strings.Contains(page, `\fB--`+f.Name) {
				t.Errorf("%s lacks its flag --%s", name, f.Name)
			}
		})
		if strings.Contains(page, "secret-token-1234") {
			t.Errorf("%s holds the generator's $GANTRY_TOKEN", name)
		}
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
				check(sub)
			}
		}
	}
	check(cli.Root())
	// A usage's "<config dir>" is text, not an HTML tag to drop.
	if b, err := os.ReadFile(filepath.Join(dir, "gantry-ws-config-ssh.1")); err != nil || !strings.Contains(string(b), "(default <config dir>/gantry/ssh_config)") {
		t.Errorf("gantry-ws-config-ssh.1 lost the <config dir> of --file's usage: %v", err)
	}
	if seen != n {
		t.Errorf("walked %d commands, wrote %d pages", seen, n)
	}
}
