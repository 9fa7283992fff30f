package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gantryhq/gantry/internal/progress"
	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/workspace/provider/s3"
)

// gensortOptions are the flags of `gantry gensort`.
type gensortOptions struct {
	gen      record.GenOptions
	checksum bool   // -c: print the checksum to stderr
	first    string // -b, parsed by plan
	parts    int
	partsSet bool // --parts was given (even as 1): name the files FILE.0000…
	workers  int
	quiet    bool
	verbose  bool
}

func newGensortCmd(env *Env) *cobra.Command {
	var o gensortOptions
	cmd := &cobra.Command{
		Use:   "gensort [-a] [-s] [-c] [-b N] [--parts K] NUM_RECORDS FILE|S3URL",
		Short: "Generate sort benchmark records, byte-identical to gensort 1.5",
		Long: `Generate NUM_RECORDS 100-byte records into FILE, byte for byte what
gensort 1.5 writes for the same flags: binary records by default, printable
records with -a, skewed keys with -s, starting at record number N with -b N.
Every core generates its own range through the generator's skip-ahead, and the
file appears under its name only when complete.

With --parts K the records go to K files FILE.0000, FILE.0001, … holding
consecutive ranges (as if each were made with its own -b), a ready input for a
multi-file sort. -c prints the checksum of all records to stderr, in gensort's
form.

FILE may be an object in an S3-compatible store (MinIO, AWS S3):
s3://bucket/[prefix/]name?endpoint=http://host:port (add &create=true to make
a missing bucket). Each file is generated in $TMPDIR, uploaded and removed, so
the object appears only when complete; --parts K writes the objects name.0000,
name.0001, … beside it. Credentials come from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY.

Output is gensort 1.5's, byte for byte: nothing on stdout, and on stderr only
the -c checksum. A progress bar and a speed line are added when stderr is a
terminal, or anywhere with -v.`,
		Example: `  gantry gensort 10000000 input.bin          # 1 GB of binary records 0..9999999
  gantry gensort -a 1000000 input.txt        # ASCII records (for GNU sort, or any line tool)
  gantry gensort -b2000 -c 1000 part2        # records 2000..2999, checksum on stderr
  gantry gensort -s --parts 8 1000000 in/f   # skewed keys in in/f.0000 … in/f.0007
  gantry gensort --parts 64 20000000 's3://data/in/f?endpoint=http://127.0.0.1:9000'  # objects in/f.0000 … in/f.0063`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.partsSet = cmd.Flags().Changed("parts")
			return runGensort(cmd.Context(), env, o, args[0], args[1])
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.BoolVarP(&o.gen.ASCII, "ascii", "a", false, "generate ASCII records (printable key, CRLF-terminated) as gensort -a")
	f.BoolVarP(&o.gen.Skew, "skew", "s", false, "generate skewed keys as gensort -s")
	f.BoolVarP(&o.checksum, "checksum", "c", false, "print the checksum of the records to stderr (gensort -c form)")
	f.StringVarP(&o.first, "begin", "b", "0", "start at record number `N` (gensort -bN)")
	f.IntVar(&o.parts, "parts", 1, "write `K` files FILE.0000… with consecutive record ranges")
	f.IntVarP(&o.workers, "threads", "t", 0, "`N` generator goroutines (0 = one per core)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "progress and a speed line on stderr even when it is not a terminal")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress or speed line, even on a terminal (only the -c checksum)")
	return cmd
}

// gensortPlan is what a gensort command line asks for: file i gets counts[i]
// records starting at record firsts[i].
type gensortPlan struct {
	paths  []string
	firsts []uint64
	counts []uint64
	total  uint64 // records over all files
}

// plan checks the arguments and flags and cuts the range into files.
func (o gensortOptions) plan(countArg, file string) (gensortPlan, error) {
	count, err := parseRecordCount("NUM_RECORDS", countArg)
	if err != nil {
		return gensortPlan{}, err
	}
	first, err := parseRecordCount("-b", o.first)
	if err != nil {
		return gensortPlan{}, err
	}
	if err := record.CheckRange(first, count); err != nil {
		return gensortPlan{}, fmt.Errorf("-b %d with %d records: the last record number would pass 2^64-1", first, count)
	}
	if o.parts < 1 {
		return gensortPlan{}, fmt.Errorf("--parts %d: want 1 or more files", o.parts)
	}
	if o.workers < 0 {
		return gensortPlan{}, fmt.Errorf("--threads %d: want 0 (all cores) or more", o.workers)
	}
	pl := gensortPlan{paths: []string{file}, firsts: []uint64{first}, counts: []uint64{count}, total: count}
	if o.partsSet {
		pl.paths = record.PartPaths(file, o.parts)
		pl.firsts, pl.counts = record.SplitCount(first, count, o.parts)
	}
	return pl, nil
}

// runGensort is `gantry gensort`: countArg records into file (or its
// parts), or into S3 objects when file is an s3:// URL.
func runGensort(ctx context.Context, env *Env, o gensortOptions, countArg, file string) error {
	pl, err := o.plan(countArg, file)
	if err != nil {
		return err
	}
	write := func(ctx context.Context, i int, progress func(int64)) (record.Checksum, error) {
		return record.GenerateFile(ctx, pl.paths[i], pl.firsts[i], pl.counts[i], o.gen, o.workers, progress)
	}
	if isS3URL(file) {
		bs, keys, err := openGensortObjects(ctx, file, o)
		if err != nil {
			return err
		}
		defer bs.Close()
		for i, k := range keys {
			pl.paths[i] = bs.URL(k)
		}
		write = func(ctx context.Context, i int, progress func(int64)) (record.Checksum, error) {
			return generateObject(ctx, bs, keys[i], pl.firsts[i], pl.counts[i], o, progress)
		}
	}
	p := progress.Start(speedOut(env, o.verbose, o.quiet), "gensort", int64(pl.total)*record.Size, progress.Bytes)
	var total record.Checksum
	for i, path := range pl.paths {
		s, err := write(ctx, i, p.Add)
		if err != nil {
			p.Abort()
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted; %s not written", path)
			}
			return err
		}
		total = total.Plus(s)
	}
	p.Finish()
	if o.checksum {
		fmt.Fprintln(env.Stderr, total)
	}
	return nil
}

// openGensortObjects opens the store of gensort's s3:// output URL, which
// names an object (s3://bucket/[prefix/]name?endpoint=…), and returns the
// keys to write in it: name, or with --parts name.0000, name.0001, ….
func openGensortObjects(ctx context.Context, url string, o gensortOptions) (*s3.BlobStore, []string, error) {
	bs, name, err := openS3Parent(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	if name == "" {
		bs.Close()
		return nil, nil, fmt.Errorf("%s names no object: want s3://bucket/[prefix/]name?endpoint=http://host:port", url)
	}
	keys := []string{name}
	if o.partsSet {
		keys = record.PartPaths(name, o.parts)
	}
	return bs, keys, nil
}

// generateObject writes count records from record first to the object key of
// bs: into a temporary file (in $TMPDIR) as gensort writes a file, which is
// then uploaded (in parallel parts; the object appears only when complete)
// and removed.
func generateObject(ctx context.Context, bs *s3.BlobStore, key string, first, count uint64, o gensortOptions, progress func(int64)) (record.Checksum, error) {
	dir, err := os.MkdirTemp("", "gantry-gensort-")
	if err != nil {
		return record.Checksum{}, err
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, filepath.Base(key))
	sum, err := record.GenerateFile(ctx, tmp, first, count, o.gen, o.workers, progress)
	if err != nil {
		return record.Checksum{}, err
	}
	if err := bs.PutFile(ctx, key, tmp); err != nil {
		return record.Checksum{}, err
	}
	return sum, nil
}

// speedOut is where gensort and valsort print progress and their speed line:
// nowhere by default, so that stdout and stderr stay byte-identical to
// gensort/valsort 1.5 for scripts that read them; stderr when it is a
// terminal (a person is watching) or when asked with -v.
func speedOut(env *Env, verbose, quiet bool) io.Writer {
	switch {
	case quiet:
		return nil
	case verbose:
		return env.Stderr
	}
	if f, ok := env.Stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return env.Stderr
	}
	return nil
}

// parseRecordCount parses a non-negative decimal record count or number.
func parseRecordCount(what, s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return 0, fmt.Errorf("%s %q: too large (at most %d)", what, s, uint64(1<<64-1))
		}
		return 0, fmt.Errorf("%s %q: want a non-negative whole number of records, such as 1000000", what, s)
	}
	return n, nil
}
