package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/internal/progress"
	"github.com/gantryhq/gantry/record"
)

// valsortOptions are the flags of `gantry valsort`.
type valsortOptions struct {
	quiet        bool
	summaryOut   string // -o
	summaries    bool   // -s: the arguments are summary files
	checksumOnly bool
	allowEmpty   bool
	workers      int
	verbose      bool
}

func newValsortCmd(env *Env) *cobra.Command {
	var o valsortOptions
	cmd := &cobra.Command{
		Use:   "valsort [-q] [-o SUMMARY] [-s] [--checksum-only] FILE|DIR|S3URL...",
		Short: "Validate sorted records as valsort does, over many files at once",
		Long: `Check that the records in the given files, read as ONE sequence in the
order given, are sorted by their 10-byte keys, and print valsort's report:
the first unordered record, the record count, the checksum (128-bit sum of each
record's crc32, order-independent) and the duplicate keys. A directory stands
for its partition.<n> files in numeric order; anything else in it is an error
(with --checksum-only, for every file in it, whatever the names).

An argument s3://bucket/prefix?endpoint=http://host:port is a prefix in an
S3-compatible store (MinIO, AWS S3) and stands for its objects as a directory
does: the partition.<n> objects directly under it in numeric order (with
--checksum-only, every object under it in key order); names that start with
"." (a sort's done marker and staged uploads) are skipped. A URL with nothing
under it that names one object stands for that object. Credentials come from
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Objects are read in parallel
(--threads at once), local files and objects may be mixed in one sequence, and
the report names an object by its s3:// URL.

Exit status 1 on an unordered record, a file that ends in a partial record,
unreadable input, or no records at all (unless --allow-empty).

-o writes the summary as JSON; -s validates such summaries in order instead of
records, so each machine can validate its own output and one command checks
the seams between them. --checksum-only skips the order check, to compare an
unsorted input's checksum with its sorted output's.

valsort 1.5's own command lines (one file; -s with one summary file) print
valsort 1.5's bytes: the report on stderr, nothing on stdout. The forms
valsort does not have (a directory, several inputs, --checksum-only) print the
report on stdout. A progress bar and a speed line are added on stderr when it
is a terminal, or anywhere with -v.`,
		Example: `  gantry valsort sorted.bin                  # one file
  gantry valsort out/                        # out/partition.0, partition.1, … as one sequence
  gantry valsort w1/out w2/out w3/out        # a whole multi-worker output
  gantry valsort --checksum-only in/         # input checksum, to compare with the output's
  gantry valsort 's3://sorted/out?endpoint=http://127.0.0.1:9000'               # partition.<n> objects
  gantry valsort --checksum-only 's3://data/in?endpoint=http://127.0.0.1:9000'  # every object under in/
  gantry valsort -o w1.sum w1/out            # on each machine …
  gantry valsort -s w1.sum w2.sum w3.sum     # … then check the summaries in order`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runValsort(cmd.Context(), env, o, args)
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print nothing; the exit status tells")
	f.StringVarP(&o.summaryOut, "output", "o", "", "write the summary as JSON to `SUMMARY` (for -s)")
	f.BoolVarP(&o.summaries, "summaries", "s", false, "arguments are summary files from -o, validated in order")
	f.BoolVar(&o.checksumOnly, "checksum-only", false, "count records and sum checksums without checking order")
	f.BoolVar(&o.allowEmpty, "allow-empty", false, "accept input with no records (valsort refuses it)")
	f.IntVarP(&o.workers, "threads", "t", 0, "`N` validator goroutines, and S3 objects read at once (0 = one per core)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "progress and a speed line on stderr even when it is not a terminal")
	return cmd
}

// valsortResult is what valsort found over its inputs: the summary, the
// inputs' names and the records in each (to say where the first unordered
// record is).
type valsortResult struct {
	sum    record.Summary
	names  []string
	counts []uint64
}

// runValsort is `gantry valsort`: validate args (record files or
// directories, or with -s summary files), write the summary and print the
// report. An unordered record exits 1.
func runValsort(ctx context.Context, env *Env, o valsortOptions, args []string) error {
	if o.workers < 0 {
		return fmt.Errorf("--threads %d: want 0 (all cores) or more", o.workers)
	}
	if o.summaries && o.checksumOnly {
		return errors.New("-s and --checksum-only do not go together: a summary records whether order was checked")
	}
	res, err := validateArgs(ctx, env, o, args)
	if err != nil {
		return err
	}
	sum := res.sum
	if sum.Records == 0 && !o.allowEmpty {
		return fmt.Errorf("there must be at least one record to be validated: %s %s no records (--allow-empty accepts that)",
			strings.Join(args, ", "), map[bool]string{true: "hold", false: "holds"}[len(args) > 1])
	}
	if o.summaryOut != "" {
		if err := record.WriteSummaryFile(o.summaryOut, sum); err != nil {
			return err
		}
	}
	if !o.quiet {
		printValsortReport(reportOut(env, args, o.checksumOnly), sum, res.names, res.counts)
	}
	if sum.Unordered > 0 {
		return withCode(1, errors.New(""))
	}
	return nil
}

// validateArgs validates the summary files (-s), the local record files, or
// the local files and s3:// objects that args name.
func validateArgs(ctx context.Context, env *Env, o valsortOptions, args []string) (valsortResult, error) {
	s3Arg := slices.IndexFunc(args, isS3URL)
	switch {
	case o.summaries && s3Arg >= 0:
		return valsortResult{}, fmt.Errorf("-s reads local summary files, not %s", args[s3Arg])
	case o.summaries:
		return combineSummaryFiles(args)
	case s3Arg >= 0:
		return validateWithS3(ctx, env, o, args)
	}
	return validateRecordFiles(ctx, env, o, args)
}

// combineSummaryFiles is valsort -s: the summaries in the files, combined
// in order.
func combineSummaryFiles(paths []string) (valsortResult, error) {
	var res valsortResult
	parts, names, err := record.ReadSummaryFiles(paths)
	if err != nil {
		return res, err
	}
	res.names = names
	for _, p := range parts {
		res.counts = append(res.counts, p.Records)
	}
	if res.sum, err = record.Combine(parts); err != nil {
		return res, err
	}
	return res, nil
}

// validateRecordFiles validates the records of args (files, or directories
// of partition files; any files with --checksum-only) as one sequence, with
// a progress bar.
func validateRecordFiles(ctx context.Context, env *Env, o valsortOptions, args []string) (valsortResult, error) {
	var res valsortResult
	expand := record.ExpandPaths
	if o.checksumOnly {
		expand = record.ExpandInputPaths // input sets: any file names
	}
	var err error
	if res.names, err = expand(args); err != nil {
		return res, err
	}
	var total int64
	res.counts, total = localRecordCounts(res.names)
	p := progress.Start(speedOut(env, o.verbose, o.quiet), "valsort", total, progress.Bytes)
	res.sum, err = record.Validate(ctx, res.names, record.ValidateOptions{
		Workers: o.workers, ChecksumOnly: o.checksumOnly, Progress: p.Add,
	})
	if err != nil || res.sum.Records == 0 {
		p.Abort()
	} else {
		p.Finish()
	}
	return res, err
}

// localRecordCounts returns the whole records in each of the files (0 for
// one that is not a regular file: its size is not known before reading it)
// and their bytes in all.
func localRecordCounts(files []string) (counts []uint64, total int64) {
	counts = make([]uint64, 0, len(files))
	for _, n := range files {
		var size int64
		if st, err := os.Stat(n); err == nil && st.Mode().IsRegular() {
			size = st.Size()
		}
		counts = append(counts, uint64(size/record.Size))
		total += size
	}
	return counts, total
}

// reportOut is where the report goes: stderr, as valsort 1.5 prints it, for
// valsort 1.5's command line (one regular file); stdout for gantry's own
// forms, which scripts (and dsort's tests) read there.
func reportOut(env *Env, args []string, checksumOnly bool) io.Writer {
	if len(args) == 1 && !checksumOnly {
		if st, err := os.Stat(args[0]); err == nil && st.Mode().IsRegular() {
			return env.Stderr
		}
	}
	return env.Stdout
}

// printValsortReport prints valsort 1.5's lines (to stderr, as valsort does), with where the first
// unordered record is when there are several inputs.
func printValsortReport(w io.Writer, s record.Summary, names []string, counts []uint64) {
	if s.FirstUnordered >= 0 {
		fmt.Fprintf(w, "First unordered record is record %d\n", s.FirstUnordered)
		if len(names) > 1 {
			if i, off, ok := record.Locate(counts, s.FirstUnordered); ok {
				if off == 0 {
					fmt.Fprintf(w, "  (the first record of %s, after the last of %s)\n", names[i], names[max(0, i-1)])
				} else {
					fmt.Fprintf(w, "  (record %d of %s)\n", off, names[i])
				}
			}
		}
	}
	fmt.Fprintf(w, "Records: %d\n", s.Records)
	fmt.Fprintf(w, "Checksum: %s\n", s.Checksum)
	switch {
	case s.ChecksumOnly:
	case s.Unordered > 0:
		fmt.Fprintf(w, "ERROR - there are %d unordered records\n", s.Unordered)
	default:
		fmt.Fprintf(w, "Duplicate keys: %d\n", s.Duplicates)
		fmt.Fprintln(w, "SUCCESS - all records are in order")
	}
}
