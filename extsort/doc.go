// Package extsort sorts gensort records (100 bytes, 10-byte key compared as
// unsigned bytes) on one machine within a memory budget. It has no network
// code; package dsort uses it on every worker.
//
// A tour, in the order the data flows:
//
//   - [ScanInputs] lists the input files of one or more directories and
//     rejects any whose size is not a whole number of records.
//   - Run generation ([GenerateRuns]) reads the inputs in order, one chunk
//     of the memory budget at a time, sorts each chunk with a parallel MSD
//     radix sort on a 16-byte entry (key prefix + record index, never
//     bytes.Compare per comparison) and spills it as a sorted run file.
//   - [Merge] k-way merges sorted segments of run files with a loser tree.
//   - [Sort] ties them together: when the input fits the budget it sorts in
//     memory and writes the output directly; otherwise it spills runs, cuts
//     them into balanced ranges with composite splitters (key, run, offset),
//     and merges the ranges in parallel into exact-size partition files.
//
// Every sort here is stable: records with equal keys keep their input order
// (files in the order given, then file offset). The distributed sort relies
// on this to split runs of equal keys deterministically across workers.
//
// Sort leaves the output directory holding only partition.<n> files, and
// removes its temporary files on success, on failure and on cancellation.
//
// The files:
//
//	config.go      Config (zero values are defaults), Phase, DefaultMemory
//	input.go       Input, ScanInputs
//	runs.go        Run, Segment and run generation (read, sort, spill)
//	radix.go       the 16-byte entry and its parallel MSD radix sort
//	split.go       composite splitters that cut runs into balanced ranges
//	merge.go       Merge, the loser tree and BlockWriter
//	sorted.go      Sorted: a whole input sorted in memory (SortInMemory), read with ReadAt
//	inputmap*.go   SortInMemory's input mapped (or read) into one range and its in-place entry sort; mapped merge segments
//	output.go      partition files, written at offsets; CheckSeparate
//	sort.go        Sort and Stats
//	hugemem*.go    the sort's large buffers (zeroed, transparent huge pages where there are)
package extsort
