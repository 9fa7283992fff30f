package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/internal/progress"
	"github.com/gantryhq/gantry/record"
)

func newValsortCmd(env *Env) *cobra.Command {
	var (
		quiet        bool
		summaryOut   string
		summaries    bool
		checksumOnly bool
		allowEmpty   bool
		workers      int
		verbose      bool
	)
	cmd := &cobra.Command{
		Use:   "valsort [-q] [-o SUMMARY] [-s] [--checksum-only] FILE|DIR...",
		Short: "Validate sorted records as valsort does, over many files at once",
		Long: `Check that the records in the given files, read as ONE sequence in the
order given, are sorted by their 10-byte keys, and print valsort's report:
the first unordered record, the record count, the checksum (128-bit sum of each
record's crc32, order-independent) and the duplicate keys. A directory stands
for its partition.<n> files in numeric order; anything else in it is an error
(with --checksum-only, for every file in it, whatever the names).

Exit status 1 on an unordered record, a file that ends in a partial record,
unreadable input, or no records at all (unless --allow-empty).

-o writes the summary as JSON; -s validates such summaries in order instead of
records, so each machine can validate its own output and one command checks
the seams between them. --checksum-only skips the order check, to compare an
unsorted input's checksum with its sorted output's.

The report goes to stderr and stdout stays empty, byte for byte what valsort
1.5 prints for one file. A progress bar and a speed line are added when stderr
is a terminal, or anywhere with -v.`,
		Example: `  gantry valsort sorted.bin                  # one file
  gantry valsort out/                        # out/partition.0, partition.1, … as one sequence
  gantry valsort w1/out w2/out w3/out        # a whole multi-worker output
  gantry valsort --checksum-only in/         # input checksum, to compare with the output's
  gantry valsort -o w1.sum w1/out            # on each machine …
  gantry valsort -s w1.sum w2.sum w3.sum     # … then check the summaries in order`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if workers < 0 {
				return fmt.Errorf("--threads %d: want 0 (all cores) or more", workers)
			}
			if summaries && checksumOnly {
				return errors.New("-s and --checksum-only do not go together: a summary records whether order was checked")
			}
			var (
				sum    record.Summary
				counts []uint64 // records per input, to say where the first unordered record is
				names  []string
				err    error
			)
			if summaries {
				var parts []record.Summary
				parts, names, err = record.ReadSummaryFiles(args)
				if err != nil {
					return err
				}
				for _, p := range parts {
					counts = append(counts, p.Records)
				}
				if sum, err = record.Combine(parts); err != nil {
					return err
				}
			} else {
				expand := record.ExpandPaths
				if checksumOnly {
					expand = record.ExpandInputPaths // input sets: any file names
				}
				if names, err = expand(args); err != nil {
					return err
				}
				var total int64
				for _, n := range names {
					var size int64
					if st, err := os.Stat(n); err == nil && st.Mode().IsRegular() {
						size = st.Size()
					}
					counts = append(counts, uint64(size/record.Size))
					total += size
				}
				p := progress.Start(speedOut(env, verbose, quiet), "valsort", total, progress.Bytes)
				sum, err = record.Validate(cmd.Context(), names, record.ValidateOptions{
					Workers: workers, ChecksumOnly: checksumOnly, Progress: p.Add,
				})
				if err != nil || sum.Records == 0 {
					p.Abort()
				} else {
					p.Finish()
				}
				if err != nil {
					return err
				}
			}

			if sum.Records == 0 && !allowEmpty {
				return fmt.Errorf("there must be at least one record to be validated: %s %s no records (--allow-empty accepts that)",
					strings.Join(args, ", "), map[bool]string{true: "hold", false: "holds"}[len(args) > 1])
			}
			if summaryOut != "" {
				if err := record.WriteSummaryFile(summaryOut, sum); err != nil {
					return err
				}
			}
			if !quiet {
				printValsortReport(env.Stderr, sum, names, counts)
			}
			if sum.Unordered > 0 {
				return withCode(1, errors.New(""))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.BoolVarP(&quiet, "quiet", "q", false, "print nothing; the exit status tells")
	f.StringVarP(&summaryOut, "output", "o", "", "write the summary as JSON to `SUMMARY` (for -s)")
	f.BoolVarP(&summaries, "summaries", "s", false, "arguments are summary files from -o, validated in order")
	f.BoolVar(&checksumOnly, "checksum-only", false, "count records and sum checksums without checking order")
	f.BoolVar(&allowEmpty, "allow-empty", false, "accept input with no records (valsort refuses it)")
	f.IntVarP(&workers, "threads", "t", 0, "`N` validator goroutines (0 = one per core)")
	f.BoolVarP(&verbose, "verbose", "v", false, "progress and a speed line on stderr even when it is not a terminal")
	return cmd
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
