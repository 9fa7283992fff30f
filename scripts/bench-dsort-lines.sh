#!/usr/bin/env bash
# End-to-end benchmark of the distributed sort of text lines (`--format lines`) against
# GNU sort with the same keys, in one run, the contenders alternating round by round.
#
#   scripts/bench-dsort-lines.sh [LINES] [ROUNDS] [WORKERS] [KEYS]
#        (default 34000000 lines ≈ 2 GB of CSV-like text from bench/cmd/linegen, 3 rounds,
#         4 workers, KEYS "-t , -k 2,2 -k 3,3nr")
#
# dsort: master start to the exit of the last process, WORKERS workers on this machine,
# each on its own loopback address (127.0.0.2, …) with LINES/WORKERS lines (its own seed),
# each worker's budget the default (a quarter of RAM shared by the workers here).
# Baseline: `LC_ALL=C sort KEYS --parallel=2 -S 4G` of the workers' files in worker
# order, as bench-dsort.sh gives GNU sort for records. The outputs must be equal byte for
# byte (the partitions in the master's worker order): with the last-resort comparison
# every tie is two equal lines, so any correct order is GNU sort's. Work files live in a
# temp dir under $TMPDIR (default /tmp), removed at the end unless KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-34000000}
ROUNDS=${2:-3}
W=${3:-4}
KEYS=${4:--t , -k 2,2 -k 3,3nr}
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

. scripts/lib/dsort.sh
workdir bench-dsort-lines
(cd bench && go build -o "$work/linegen" ./cmd/linegen)

echo "generating $N lines for $W workers…" >&2
per=$((N / W))
files=()
for i in $(seq 0 $((W - 1))); do
	mkdir -p "$work/w$i/in" "$work/w$i/out"
	n=$per
	[ "$i" -eq $((W - 1)) ] && n=$((N - per * (W - 1)))
	"$work/linegen" -lines "$n" -seed $((i + 1)) >"$work/w$i/in/lines.csv"
	files+=("$work/w$i/in/lines.csv")
done
bytes=$(cat "${files[@]}" | wc -c)
mkdir -p "$work/tmp"
sync
: >"$work/results"

# run_dsort ROUND: one job, master start to last exit.
run_dsort() {
	local r=$1 l start end status=0 port
	l=$(load)
	for i in $(seq 0 $((W - 1))); do rm -rf "$work/w$i/out"; mkdir -p "$work/w$i/out"; done
	sync
	pids=()
	start=$(date +%s.%N)
	: >"$work/master.out"
	# shellcheck disable=SC2086 # KEYS is a word list
	"$G" sort master "$W" --format lines $KEYS >"$work/master.out" 2>"$work/master.err" &
	pids+=($!)
	port=$(master_port)
	for i in $(seq 0 $((W - 1))); do
		# shellcheck disable=SC2086
		"$G" sort worker "127.0.0.1:$port" --bind "127.0.0.$((i + 2))" --format lines $KEYS \
			-I "$work/w$i/in" -O "$work/w$i/out" --tmp "$work/tmp" 2>"$work/w$i.err" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || status=$?; done
	end=$(date +%s.%N)
	pids=()
	if [ "$status" -ne 0 ]; then
		echo "dsort round $r failed (exit $status):" >&2
		tail -20 "$work/master.err" >&2
		exit 1
	fi
	echo "dsort $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.2f", e - s}') $l" >>"$work/results"
}

# run_gnu: GNU sort of the same files, in worker order.
run_gnu() {
	local l
	l=$(load)
	rm -f "$work/gnu.out"
	sync
	# shellcheck disable=SC2086
	/usr/bin/time -f "%e" -o "$work/time" env LC_ALL=C sort $KEYS --parallel=2 -S 4G -T "$work/tmp" \
		-o "$work/gnu.out" "${files[@]}"
	echo "gnu $(cat "$work/time") $l" >>"$work/results"
}

for r in $(seq "$ROUNDS"); do
	echo "round $r/$ROUNDS" >&2
	if [ $((r % 2)) -eq 1 ]; then run_dsort "$r"; run_gnu; else run_gnu; run_dsort "$r"; fi
done

# The partitions of the last round, in the master's worker order (its second stdout line),
# against GNU sort's output.
parts=()
for ip in $(sed -n 2p "$work/master.out" | tr -d ' ' | tr ',' ' '); do
	i=$((${ip##*.} - 2))
	while IFS= read -r f; do parts+=("$f"); done < <(ls -v "$work/w$i/out"/partition.* 2>/dev/null || true)
done
cmp <(cat "${parts[@]}") "$work/gnu.out" >/dev/null || { echo "dsort and GNU sort outputs differ" >&2; exit 1; }

d=$(grep '^dsort ' "$work/results" | awk '{print $2}' | median)
g=$(grep '^gnu ' "$work/results" | awk '{print $2}' | median)
echo
echo "$N lines ($bytes bytes) on $W workers, keys [$KEYS], $ROUNDS rounds, $(nproc) CPUs, $(date -u +%F); outputs equal"
printf "%-8s %9s   %s\n" "" median "all runs (seconds, load before)"
printf "%-8s %9.2f   %s\n" dsort "$d" "$(grep '^dsort ' "$work/results" | awk '{printf "%s (%s) ", $2, $3}')"
printf "%-8s %9.2f   %s\n" gnu "$g" "$(grep '^gnu ' "$work/results" | awk '{printf "%s (%s) ", $2, $3}')"
echo "dsort is $(awk -v a="$g" -v b="$d" 'BEGIN {printf "%.2f", a / b}')x GNU sort"
