// Package linesort sorts newline-terminated lines of any length on one
// machine within a memory budget, ordered the way GNU sort orders them in
// the C locale (`LC_ALL=C sort`): keys (-k F1[.C1][bdfinr][,F2[.C2][bdfinr]]),
// the field separator (-t), the global options (-b -d -f -i -n -r) and -s.
// Its output, the partition.<n> files read in order, is byte for byte what
// GNU sort writes for the same inputs and options (the tests check it
// against GNU sort itself). It is `gantry sort local --format lines`;
// package extsort is the same for gensort's fixed records.
//
// A tour:
//
//   - [NewOrder] parses [Options] (keys.go): each -k becomes a key, the
//     global options fill the keys that have none of their own, as GNU's
//     do. [Order.AppendKey] (encode.go) turns a line into its sort key: the
//     keys' encodings concatenated, each one prefix-free and ordered as
//     bytes (text escaped and terminated; a number as class, digit count,
//     digits), so that comparing two lines is one bytes.Compare of their
//     keys and r is a complement. [Order.Compare] adds GNU's last resort:
//     equal keys are ordered by the whole lines unless -s.
//   - [Sort] (sort.go) reads the inputs as one stream of lines (a file's
//     missing final newline added), a chunk at a time: the lines, an
//     entry each (8 bytes of the key, then offsets), cut into one bucket
//     per core by key range and each sorted 8 key bytes at a time (an MSD
//     sort: a line is read once per level, not once per comparison). One
//     chunk for the whole input is written straight to the output;
//     otherwise each chunk is spilled as a run (a file of sorted lines) and
//     the runs are merged (merge.go: a heap whose ties go to the earlier
//     run, so equal lines keep their input order, -s included).
//   - The output goes through extsort's staging directory: partition.<n>
//     files ending at line ends, renamed into place when all are written.
//   - dist.go serves a distributed sort (package dsort, --format lines):
//     [SortRuns] writes the runs to a directory of the caller's,
//     [Order.AppendFullKey] gives the key that orders a line among all
//     others (last resort included), [Searcher] cuts a sorted run at full
//     keys without an index, and [MergeSegments] merges byte ranges of runs.
//   - linetest (a package of its own) makes generated and adversarial
//     lines for tests and runs GNU sort, the reference.
package linesort
