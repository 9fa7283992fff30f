#!/usr/bin/env bash
# Benchmarks `gantry sort local` against GNU sort on the same gensort data, in
# one run, alternating the contenders round by round, and prints medians.
#
#   scripts/bench-sort-local.sh [RECORDS] [ROUNDS]     (default 10000000 = 1 GB, 5 rounds)
#
# GNU sort is line-based, so both sort the ASCII form (gensort -a: every
# record is one CRLF-terminated line); gantry also sorts the binary form,
# which GNU sort cannot. The outputs are compared byte for byte. The I/O
# floor is `cat` of the input into one output file. Peak RSS comes from
# /usr/bin/time (apt-get install time if it is missing). Work files go to a
# temp dir under $TMPDIR (default /tmp), removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000000}
ROUNDS=${2:-5}
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/gantry-bench-XXXXXX")
trap 'rm -rf "$work"' EXIT
G="$work/gantry"
go build -o "$G" ./cmd/gantry
mkdir -p "$work/asc" "$work/bin" "$work/tmp"
"$G" gensort -q -a "$N" "$work/asc/input"
"$G" gensort -q "$N" "$work/bin/input"
bytes=$(stat -c %s "$work/asc/input")

. scripts/lib/bench.sh

for r in $(seq "$ROUNDS"); do
	echo "round $r/$ROUNDS" >&2
	rm -rf "$work/out"
	measure "gantry-256MiB-ascii" "$G" sort local -q -I "$work/asc" -O "$work/out" --memory 256MiB --tmp "$work/tmp"
	rm -f "$work/gnu.out"
	measure "gnu-sort-256M-ascii" env LC_ALL=C sort -S 256M --parallel=2 -T "$work/tmp" -o "$work/gnu.out" "$work/asc/input"
	rm -rf "$work/out"
	measure "gantry-4GiB-ascii" "$G" sort local -q -I "$work/asc" -O "$work/out" --memory 4GiB --tmp "$work/tmp"
	rm -f "$work/gnu.out"
	measure "gnu-sort-4G-ascii" env LC_ALL=C sort -S 4G --parallel=2 -T "$work/tmp" -o "$work/gnu.out" "$work/asc/input"
	rm -rf "$work/outb"
	measure "gantry-256MiB-binary" "$G" sort local -q -I "$work/bin" -O "$work/outb" --memory 256MiB --tmp "$work/tmp"
	rm -rf "$work/outb"
	measure "gantry-4GiB-binary" "$G" sort local -q -I "$work/bin" -O "$work/outb" --memory 4GiB --tmp "$work/tmp"
	rm -f "$work/cat.out"
	measure "cat-floor" sh -c "cat '$work/asc/input' > '$work/cat.out'"
done

# The outputs must agree: gantry's partitions, concatenated, are GNU sort's output.
cmp <(cat $(ls -v "$work"/out/partition.*)) "$work/gnu.out" >/dev/null || { echo "gantry and GNU sort outputs differ" >&2; exit 1; }
"$G" valsort -q "$work/outb" >/dev/null || { echo "binary output fails valsort" >&2; exit 1; }

echo
echo "$N records ($bytes bytes), $ROUNDS rounds, $(nproc) CPUs, $(date -u +%F)"
printf "%-22s %9s %9s %12s   %s\n" contender median_s MB/s peak_RSS_MiB "all runs (s)"
for l in gantry-256MiB-ascii gnu-sort-256M-ascii gantry-4GiB-ascii gnu-sort-4G-ascii gantry-256MiB-binary gantry-4GiB-binary cat-floor; do
	s=$(median "$l" 2)
	m=$(median "$l" 3)
	printf "%-22s %9.2f %9.0f %12.0f   %s\n" "$l" "$s" "$(div "$bytes" "1000000 * $s")" "$(div "$m" 1024)" "$(all "$l")"
done
echo
r1=$(div "$(median gnu-sort-256M-ascii 2)" "$(median gantry-256MiB-ascii 2)")
r2=$(div "$(median gnu-sort-4G-ascii 2)" "$(median gantry-4GiB-ascii 2)")
f1=$(div "$(median gantry-256MiB-ascii 2)" "$(median cat-floor 2)")
f2=$(div "$(median gantry-4GiB-ascii 2)" "$(median cat-floor 2)")
printf "speedup over GNU sort: %.2fx at 256 MiB, %.2fx in memory\n" "$r1" "$r2"
printf "time relative to the cat floor: %.2fx at 256 MiB, %.2fx in memory\n" "$f1" "$f2"
