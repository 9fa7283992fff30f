#!/usr/bin/env bash
# Benchmarks `gantry sort local --format lines` against GNU sort (`LC_ALL=C sort`, the same
# keys) on the same text, in one run, alternating the contenders round by round, and prints
# medians and ratios per key set.
#
#   scripts/bench-sort-lines.sh [LINES] [ROUNDS] [MEMORY]
#        (default 17000000 lines ≈ 1 GB, 3 rounds, 256MiB: larger than the budget, so both
#         spill sorted runs and merge them)
#
# The input comes from bench/cmd/linegen (CSV-like lines, fixed seed). Each key set is
# sorted by both; the outputs must be equal byte for byte (gantry's partitions in order
# against GNU sort's one file). GNU sort gets the same budget (-S) and both cores
# (--parallel=2). Peak RSS from /usr/bin/time (apt-get install time). Work files go to a
# temp dir under $TMPDIR (default /tmp), removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-17000000}
ROUNDS=${2:-3}
MEM=${3:-256MiB}
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/gantry-bench-lines-XXXXXX")
trap 'rm -rf "$work"' EXIT
G="$work/gantry"
go build -o "$G" ./cmd/gantry
(cd bench && go build -o "$work/linegen" ./cmd/linegen)
mkdir -p "$work/in" "$work/tmp"
"$work/linegen" -lines "$N" >"$work/in/lines.csv"
bytes=$(stat -c %s "$work/in/lines.csv")
gnumem=${MEM%iB}   # 256MiB → 256M

# The key sets, as GNU sort's arguments (gantry takes the same).
specs=("" "-t , -k 3,3n" "-t , -k 2,2 -k 3,3nr")

. scripts/lib/bench.sh

for r in $(seq "$ROUNDS"); do
	for i in "${!specs[@]}"; do
		echo "round $r/$ROUNDS, keys [${specs[$i]}]" >&2
		# shellcheck disable=SC2086 # the key set is a word list
		{
			rm -rf "$work/out$i"
			measure "gantry-$i" "$G" sort local --format lines -q ${specs[$i]} -I "$work/in" -O "$work/out$i" --memory "$MEM" --tmp "$work/tmp"
			rm -f "$work/gnu$i.out"
			measure "gnu-$i" env LC_ALL=C sort ${specs[$i]} -S "$gnumem" --parallel=2 -T "$work/tmp" -o "$work/gnu$i.out" "$work/in/lines.csv"
		}
	done
done

for i in "${!specs[@]}"; do
	cmp <(cat $(ls -v "$work/out$i"/partition.*)) "$work/gnu$i.out" >/dev/null ||
		{ echo "gantry and GNU sort outputs differ for keys [${specs[$i]}]" >&2; exit 1; }
done

echo
echo "$N lines ($bytes bytes), memory $MEM, $ROUNDS rounds, $(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F)"
printf "%-24s %9s %9s %12s %8s   %s\n" keys gantry_s gnu_s "RSS MiB g/G" speedup "all runs (gantry | gnu)"
for i in "${!specs[@]}"; do
	g=$(median "gantry-$i" 2)
	s=$(median "gnu-$i" 2)
	printf "%-24s %9.2f %9.2f %5.0f/%-6.0f %7.2fx   %s| %s\n" "[${specs[$i]}]" "$g" "$s" \
		"$(div "$(median "gantry-$i" 3)" 1024)" "$(div "$(median "gnu-$i" 3)" 1024)" "$(div "$s" "$g")" "$(all "gantry-$i")" "$(all "gnu-$i")"
done
