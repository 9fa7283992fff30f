// Package record is gantry's view of sort benchmark data: 100-byte records
// whose first 10 bytes are the key, compared as unsigned bytes.
//
// It holds the two tools every sort in gantry is measured with:
//
//   - a generator byte-identical to Chris Nyberg's gensort 1.5 (binary records,
//     -a ASCII records, -s skewed keys, -b first record number), built on the
//     same 128-bit linear congruential generator. Any record range can be made
//     on its own through the generator's skip-ahead, so [GenerateFile] fills
//     one file from every core and still produces the same bytes as the
//     single-threaded C program.
//   - a validator with valsort's semantics ([Validate]): record count,
//     duplicate keys, unordered records and the index of the first one, and the
//     order-independent checksum (the 128-bit sum of each record's zlib crc32).
//     Unlike valsort it reads several files as one sequence, expands
//     directories of partition.<n> files, and checks the sequence in parallel
//     chunks whose seams it checks afterwards ([Combine]).
//
// A tour:
//
//	Generate(dst, first, opt)            records first, first+1, … into dst
//	GenerateFile(ctx, path, …)           a whole file, in parallel, via temp name + rename
//	Validate(ctx, paths, opt) Summary    valsort over files/directories read as one sequence
//	Combine(parts) Summary               summaries in order → one; checks the seams
//	ParseSummaries / WriteSummaryFile    the JSON summary of `gantry valsort -o` / `-s`
//	Checksum                             sum of crc32s; String() prints like valsort
//
// The files: record.go (Size, KeySize, CompareKeys, Checksum), lcg.go (the
// 128-bit generator and its skip-ahead), gen.go (GenOptions, Generate),
// genfile.go (GenerateFile, CheckRange, PartPaths), validate.go (Validate),
// summary.go (Summary, Combine, the JSON summary files), paths.go
// (partition.<n> names, DoneMarker, ExpandPaths).
//
// Record layouts (gensort 1.5). Record i is built from X(i+1), X(i+2), …, where
// X(0)=0 and X(n+1) = a·X(n) + c mod 2^128:
//
//	binary  key  = top 10 bytes of X(i+1)
//	        then 9 × 10 bytes: top 10 bytes of X(i+2)…X(i+10), each XOR a per-slot constant
//	ASCII   10 key chars ' '+(x mod 95) (8 from the high 64 bits, 2 from the low),
//	        "  ", 32 upper-case hex digits of i, "  ", 13 hex digits ×4, "\r\n"
//	skew    up to 48 high key bits (binary) or 6 leading chars (ASCII) replaced
//	        by those of record 2^k-ish (≈log2 i); a quarter of records unchanged
package record
