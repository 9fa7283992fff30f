package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/internal/progress"
	"github.com/gantryhq/gantry/linesort"
)

func newSortCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sort",
		Short: "Sort gensort records or text lines: on one machine (local) or over many (master/worker)",
	}
	cmd.AddCommand(newSortLocalCmd(env))
	addDistributedSortCmds(cmd, env)
	return cmd
}

// sortLocalOptions are the flags of `gantry sort local`; cfg holds the
// ones that are extsort's own (--memory, --tmp, --partition-size).
type sortLocalOptions struct {
	inputs  []string
	output  string
	cfg     extsort.Config
	quiet   bool
	workers int
	format  formatFlags
}

func newSortLocalCmd(env *Env) *cobra.Command {
	var o sortLocalOptions
	cmd := &cobra.Command{
		Use:   "local -I DIR... -O DIR",
		Short: "Sort all records or lines of the input directories on this machine, within a memory budget",
		Long: `Sort reads every file under the input directories, sorts it and writes
partition.<n> files into the output directory, which holds nothing else when
done. Runs that do not fit --memory are spilled to --tmp and merged; temporary
files are removed on success, failure and Ctrl-C.

--format gensort (the default): 100-byte gensort records, ASCII or binary,
ordered by their 10-byte key, in partition files of exactly --partition-size
bytes (the last one shorter).

--format lines: newline-terminated lines of any length, ordered as
LC_ALL=C sort orders them with the same options: -k KEYDEF (F1[.C1][OPTS]
[,F2[.C2][OPTS]], OPTS from b d f i n r; several keys compare in turn), -t SEP,
-b -d -f -i -n -r (for the whole line, and for each key with no option of its
own) and -s. cat'ing the partition files in order gives sort's output byte for
byte; each file ends at the first line end past --partition-size bytes.`,
		Example: `  gantry sort local -I data/in1 data/in2 -O data/out --memory 256MiB
  gantry valsort data/out
  gantry sort local --format lines -t , -k 3,3nr -k 1,1 -I logs -O sorted && cat sorted/partition.*`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lines, err := o.format.options(cmd, "sort local")
			if err != nil {
				return err
			}
			if lines == nil {
				return runSortLocal(cmd.Context(), env, cmd.ErrOrStderr(), o)
			}
			return runSortLines(cmd.Context(), env, cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.inputs, "input", "I", nil, "input directories (several may follow one -I)")
	f.StringVarP(&o.output, "output", "O", "", "output directory for partition.<n> files")
	f.Var(sizeValue{&o.cfg.Memory}, "memory", "memory budget, e.g. 256MiB, 2G (default: a quarter of RAM)")
	f.StringVar(&o.cfg.TempDir, "tmp", "", "directory for spilled runs (default: $TMPDIR or /tmp)")
	f.Var(sizeValue{&o.cfg.PartitionSize}, "partition-size", "size of each output partition file (default 128MiB)")
	f.IntVar(&o.workers, "workers", 0, "goroutines for sorting and merging (default: GOMAXPROCS)")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress output")
	o.format.addFlags(f)
	return cmd
}

// formatFlags are --format and GNU sort's ordering flags, which sort local,
// sort master and sort worker share.
type formatFlags struct {
	format string
	lines  linesort.Options
}

// addFlags declares the flags.
func (ff *formatFlags) addFlags(f *pflag.FlagSet) {
	f.StringVar(&ff.format, "format", "gensort", "what the inputs hold: gensort (100-byte records) or lines (text, ordered like LC_ALL=C sort)")
	l := &ff.lines
	f.StringArrayVarP(&l.Keys, "key", "k", nil, "lines: sort by a key, F1[.C1][OPTS][,F2[.C2][OPTS]] as GNU sort's -k (repeat for more keys)")
	f.StringVarP(&l.Separator, "field-separator", "t", "", "lines: the byte that separates fields (default: blanks start a field)")
	f.BoolVarP(&l.Numeric, "numeric-sort", "n", false, "lines: compare by numeric value (-?digits[.digits])")
	f.BoolVarP(&l.Reverse, "reverse", "r", false, "lines: reverse the order")
	f.BoolVarP(&l.Stable, "stable", "s", false, "lines: keep the input order of lines with equal keys (no last-resort comparison)")
	f.BoolVarP(&l.IgnoreBlanks, "ignore-leading-blanks", "b", false, "lines: ignore leading blanks of keys")
	f.BoolVarP(&l.Fold, "ignore-case", "f", false, "lines: compare a-z as A-Z")
	f.BoolVarP(&l.Dictionary, "dictionary-order", "d", false, "lines: compare only blanks and letters and digits")
	f.BoolVarP(&l.Printable, "ignore-nonprinting", "i", false, "lines: compare only printable ASCII")
}

// options checks the flags as what (the command) was given them: nil for
// gensort records, else the lines' ordering options.
func (ff *formatFlags) options(cmd *cobra.Command, what string) (*linesort.Options, error) {
	switch ff.format {
	case "gensort":
		for _, name := range lineFlags {
			if cmd.Flags().Changed(name) {
				return nil, fmt.Errorf("%s: --%s orders lines; add --format lines", what, name)
			}
		}
		return nil, nil
	case "lines":
		if cmd.Flags().Changed("field-separator") && ff.lines.Separator == "" {
			return nil, fmt.Errorf("%s: -t: the field separator is empty", what)
		}
		if _, err := linesort.NewOrder(ff.lines); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		l := ff.lines
		return &l, nil
	}
	return nil, fmt.Errorf("%s: --format %q: want gensort or lines", what, ff.format)
}

// lineFlags are the flags that only --format lines reads.
var lineFlags = []string{"key", "field-separator", "numeric-sort", "reverse", "stable",
	"ignore-leading-blanks", "ignore-case", "dictionary-order", "ignore-nonprinting"}

// runSortLocal is `gantry sort local`: sort every record under o.inputs
// into o.output, with a progress bar and a summary on stderr.
func runSortLocal(ctx context.Context, env *Env, stderr io.Writer, o sortLocalOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	cfg := o.cfg
	cfg.Workers = o.workers
	cfg.Logger = env.Logger
	in, total, err := extsort.ScanInputs(o.inputs)
	if err != nil {
		return err
	}
	if total == 0 {
		fmt.Fprintf(stderr, "sort local: no records in %d input file(s); nothing to sort, no output written\n", len(in))
		_, err := extsort.Sort(ctx, cfg, in, o.output) // still checks the output dir
		return err
	}
	return o.sortWithProgress(ctx, stderr, total, len(in), func(progress func(extsort.Phase, int64)) (sortSummary, error) {
		cfg.Progress = progress
		st, err := extsort.Sort(ctx, cfg, in, o.output)
		return sortSummary{st, "records"}, err
	})
}

// runSortLines is `gantry sort local --format lines`.
func runSortLines(ctx context.Context, env *Env, stderr io.Writer, o sortLocalOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	ord, err := linesort.NewOrder(o.format.lines)
	if err != nil {
		return fmt.Errorf("sort local: %w", err)
	}
	in, total, err := extsort.ScanFiles(o.inputs)
	if err != nil {
		return err
	}
	if total == 0 {
		fmt.Fprintf(stderr, "sort local: no lines in %d input file(s); no partition written\n", len(in))
	}
	cfg := linesort.Config{Memory: o.cfg.Memory, TempDir: o.cfg.TempDir, Workers: o.workers,
		PartitionSize: o.cfg.PartitionSize, Logger: env.Logger}
	return o.sortWithProgress(ctx, stderr, total, len(in), func(progress func(extsort.Phase, int64)) (sortSummary, error) {
		cfg.Progress = progress
		st, err := linesort.Sort(ctx, cfg, ord, in, o.output)
		return sortSummary{extsort.Stats{Records: st.Lines, Bytes: st.Bytes, InMemory: st.InMemory, Runs: st.Runs,
			Partitions: st.Partitions, ReadSort: st.ReadSort, Spill: st.Spill, Merge: st.Merge}, "lines"}, err
	})
}

// check refuses a sort local without inputs or output.
func (o sortLocalOptions) check() error {
	if len(o.inputs) == 0 {
		return errors.New("sort local: give at least one input directory with -I")
	}
	if o.output == "" {
		return errors.New("sort local: give the output directory with -O")
	}
	return nil
}

// sortSummary is what a finished sort of either format reports: its
// figures (Records counts the units) and the name of its units.
type sortSummary struct {
	extsort.Stats
	units string
}

// sortWithProgress runs run with a progress bar over total input bytes
// (none with --quiet), names what is left after a Ctrl-C, and prints the
// summary of files input files.
func (o sortLocalOptions) sortWithProgress(ctx context.Context, stderr io.Writer, total int64, files int,
	run func(progress func(extsort.Phase, int64)) (sortSummary, error)) error {
	var pw = stderr
	if o.quiet {
		pw = nil
	}
	bar := progress.Start(pw, "sort", total, progress.Bytes)
	start := time.Now()
	sum, err := run(inputProgress(bar))
	bar.Abort()
	if err != nil && ctx.Err() != nil {
		// Ctrl-C: the sort's error names the step it stopped in; what the
		// user needs is what is left (as gensort says it).
		return fmt.Errorf("sort local: interrupted; no new partitions in %s (earlier ones are as they were), temporary files removed", o.output)
	}
	if err != nil {
		return err
	}
	printSortStats(stderr, sum, files, time.Since(start), o.output)
	return nil
}

// inputProgress counts a sort's progress in input bytes: every byte is
// read (and sorted) once and written once, spilled runs aside, so each of
// the two passes adds half of what it did, and the bar ends at the input's
// size ("1.35 GB of 1.50 GB", not read plus write against twice the
// input). Safe for concurrent use.
func inputProgress(bar *progress.Reporter) func(extsort.Phase, int64) {
	var passes atomic.Int64 // bytes read plus bytes written
	return func(p extsort.Phase, n int64) {
		if p == extsort.PhaseSpill {
			return
		}
		after := passes.Add(n)
		bar.Add(after/2 - (after-n)/2) // the adds sum to passes/2, whatever their order
	}
}

// printSortStats prints the two summary lines of a sort that took el.
func printSortStats(w io.Writer, st sortSummary, files int, el time.Duration, output string) {
	mode := "in memory"
	if !st.InMemory {
		mode = fmt.Sprintf("external, %d runs", st.Runs)
	}
	fmt.Fprintf(w, "sorted %d %s (%s) from %d files in %s: %.0f MB/s (%s)\n",
		st.Records, st.units, progress.FormatBytes(st.Bytes), files, el.Round(time.Millisecond),
		float64(st.Bytes)/1e6/el.Seconds(), mode)
	fmt.Fprintf(w, "  read+sort %s, spill %s, merge+write %s; %d partition file(s) in %s\n",
		st.ReadSort.Round(time.Millisecond), st.Spill.Round(time.Millisecond),
		st.Merge.Round(time.Millisecond), st.Partitions, output)
}
