// Command mangen writes gantry's man pages, one per command (gantry.1,
// gantry-ws.1, gantry-ws-get.1, …), from the same command tree the binary
// runs, so a page never drifts from --help: `make man` (DIR: man/).
//
//	go run ./cmd/gantry/internal/mangen -dir man
//	man -l man/gantry-ws-get.1
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/gantryhq/gantry/cmd/gantry/internal/cli"
)

func main() {
	dir := flag.String("dir", "man", "directory to write the pages into (created if missing)")
	flag.Parse()
	n, err := write(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mangen:", err)
		os.Exit(1)
	}
	fmt.Printf("mangen: %d pages in %s\n", n, *dir)
}

// write writes a page for every command that --help lists into dir and
// returns how many.
func write(dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	// Some flags default to an environment variable ($GANTRY_TOKEN): a page
	// shows the default, so the generator's own must not leak into it.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GANTRY_") {
			os.Unsetenv(k)
		}
	}
	root := cli.Root()
	escapeTags(root)
	root.DisableAutoGenTag = true // no generation date: the same tree gives the same pages
	hdr := &doc.GenManHeader{Title: "GANTRY", Section: "1", Source: "gantry", Manual: "gantry manual"}
	if err := doc.GenManTree(root, hdr, dir); err != nil {
		return 0, err
	}
	return countPages(root), nil
}

// escapeTags escapes the '<' of c's texts and flag usages and of its
// subcommands': the pages go through Markdown, which would drop
// "<config dir>" as an HTML tag.
func escapeTags(c *cobra.Command) {
	esc := func(s string) string { return strings.ReplaceAll(s, "<", `\<`) }
	c.Short, c.Long = esc(c.Short), esc(c.Long)
	c.Flags().VisitAll(func(f *pflag.Flag) { f.Usage = esc(f.Usage) })
	c.PersistentFlags().VisitAll(func(f *pflag.Flag) { f.Usage = esc(f.Usage) })
	for _, sub := range c.Commands() {
		escapeTags(sub)
	}
}

// countPages is how many pages GenManTree writes for c: one per command
// that is available and not hidden (help and completion's own included).
func countPages(c *cobra.Command) int {
	n := 1
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
			n += countPages(sub)
		}
	}
	return n
}
