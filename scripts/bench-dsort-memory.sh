#!/usr/bin/env bash
# Peak memory of the distributed sort's workers against their budget.
#
#   scripts/bench-dsort-memory.sh [spill|inmem] [ROUNDS] [RECORDS] [WORKERS] [MEMORY]
#
# spill (default): RECORDS = 40000000 (4 GB) on WORKERS = 4 workers with
#   --memory MEMORY = 128MiB: each worker's input does not fit half its
#   budget, so it spills runs to disk. The verdict: every worker's peak RSS
#   at most 32 MiB over the budget.
# inmem: RECORDS = 20000000 (2 GB) on 4 workers with the default memory
#   (a quarter of RAM shared by the workers on this machine, the
#   `make bench-dsort` setup): each input is sorted and kept in memory. Peak
#   RSS per worker is printed beside the time; no verdict.
#
# Each round runs one job: the master and WORKERS workers on this machine,
# each on its own loopback address (127.0.0.2, …) with its own --tmp, as on
# separate machines, RECORDS/WORKERS binary records each (gensort -b). Every
# worker runs under /usr/bin/time -f %M (its peak RSS). The wall time is the
# master's start to the last process's exit. The 1-minute load average
# before each round is recorded: the machine may be shared. The output of
# every round is checked with `gantry valsort` (SUCCESS, checksum equal to
# the input's).
#
# COMPARE=BINARY also runs every round with another gantry binary (e.g. one
# built before a change), interleaved with the tree's on the same data,
# which runs first alternating round by round: both are listed, the verdict
# and the output check are the tree's. Work files live in a temp dir
# under $TMPDIR (default /tmp), removed at the end unless KEEP=1; they need
# about 3 × RECORDS × 100 bytes of disk.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-spill}
ROUNDS=${2:-3}
case $MODE in
spill) N=${3:-40000000} MEM=${5:-128MiB} ;;
inmem) N=${3:-20000000} MEM=${5:-} ;;
*) echo "usage: $0 [spill|inmem] [ROUNDS] [RECORDS] [WORKERS] [MEMORY]" >&2; exit 2 ;;
esac
W=${4:-4}
SLACK=$((32 << 20))
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

. scripts/lib/dsort.sh
workdir bench-dsort-memory

need=$((N * 100 * 3 / 1024)) # KiB: input, runs, output
avail=$(df -Pk "$work" | awk 'NR == 2 {print $4}')
[ "$avail" -gt "$need" ] || { echo "not enough disk under $work: $((avail >> 20)) GiB free, $((need >> 20)) GiB needed" >&2; exit 1; }

bins=(tree)
if [ -n "${COMPARE:-}" ]; then
	cp "$COMPARE" "$work/gantry-compare"
	bins+=(compare)
fi
bin() { [ "$1" = tree ] && echo "$G" || echo "$work/gantry-compare"; }

# bytes SIZE: a --memory value (e.g. 128MiB, 1GiB, 512MB) in bytes.
bytes() {
	awk -v s="$1" 'BEGIN {
		n = s + 0; u = s; sub(/^[0-9.]+/, "", u)
		m["B"] = 1; m[""] = 1; m["KiB"] = 1024; m["MiB"] = 1048576; m["GiB"] = 1073741824
		m["KB"] = 1e3; m["MB"] = 1e6; m["GB"] = 1e9
		if (!(u in m)) { print "bad size " s > "/dev/stderr"; exit 1 }
		printf "%d", n * m[u]
	}'
}
memflag=()
budget=
if [ -n "$MEM" ]; then
	memflag=(--memory "$MEM")
	budget=$(bytes "$MEM")
fi

echo "generating $N records for $W workers…" >&2
per=$((N / W))
for i in $(seq 0 $((W - 1))); do
	mkdir -p "$work/w$i/in" "$work/w$i/out" "$work/w$i/tmp"
	n=$per
	[ "$i" -eq $((W - 1)) ] && n=$((N - per * (W - 1)))
	"$G" gensort -b $((i * per)) "$n" "$work/w$i/in/data"
done
in_sum=$("$G" valsort --checksum-only "$work"/w*/in 2>&1 | awk '/^Checksum/ {print $2}')
sync

: >"$work/results"

# run LABEL ROUND: one job with the binary LABEL; appends
# "LABEL ROUND seconds load peak_kib..." to results.
run() {
	local label=$1 r=$2 l status=0 b
	b=$(bin "$label")
	l=$(load)
	for i in $(seq 0 $((W - 1))); do rm -rf "$work/w$i/out"; mkdir -p "$work/w$i/out"; done
	sync
	pids=()
	local start end
	# Emptied here, not by the background job's redirection, which may come
	# after master_port has read the previous round's port.
	: >"$work/master.out"
	start=$(date +%s.%N)
	"$b" sort master "$W" >"$work/master.out" 2>"$work/master.err" &
	pids+=($!)
	local port
	port=$(master_port)
	for i in $(seq 0 $((W - 1))); do
		/usr/bin/time -f %M -o "$work/w$i.rss" "$b" sort worker "127.0.0.1:$port" --bind "127.0.0.$((i + 2))" \
			"${memflag[@]}" -I "$work/w$i/in" -O "$work/w$i/out" --tmp "$work/w$i/tmp" 2>"$work/w$i.err" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || status=$?; done
	end=$(date +%s.%N)
	pids=()
	if [ "$status" -ne 0 ]; then
		echo "$label round $r failed (exit $status):" >&2
		tail -20 "$work/master.err" >&2
		for i in $(seq 0 $((W - 1))); do
			echo "worker $i:" >&2
			tail -5 "$work/w$i.err" >&2
		done
		exit 1
	fi
	local line="$label $r $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.2f", e - s}') $l"
	for i in $(seq 0 $((W - 1))); do line="$line $(tail -1 "$work/w$i.rss")"; done
	echo "$line" >>"$work/results"
}

# The two binaries alternate which runs first, round by round.
for r in $(seq "$ROUNDS"); do
	order=("${bins[@]}")
	if [ $((r % 2)) -eq 0 ] && [ ${#bins[@]} -eq 2 ]; then order=(compare tree); fi
	for label in "${order[@]}"; do
		echo "round $r/$ROUNDS: $label" >&2
		run "$label" "$r"
		if [ "$label" = tree ]; then check_output "$in_sum"; fi
	done
done

echo "mode $MODE: $N records ($((N / 10000)) MB) on $W workers, memory ${MEM:-default}; $ROUNDS rounds; $(nproc) CPUs; $(date -u +'%F %H:%M UTC')"
shared=$(sed -n 's/.*memory budget shared.*budget_bytes=\([0-9]*\).*/\1/p' "$work/w0.err" | head -1)
[ -n "$shared" ] && echo "budget per worker (default memory shared on this machine): $((shared >> 20)) MiB"
[ -n "$budget" ] && echo "budget per worker: $((budget >> 20)) MiB; bound: peak RSS ≤ $(((budget + SLACK) >> 20)) MiB"
echo "every run (wall seconds, master start to last exit; 1-min load before; peak RSS per worker in MiB):"
awk '{printf "  %-7s round %-5s %7.2f s  load %-5s  peak MiB:", $1, $2, $3, $4; for (i = 5; i <= NF; i++) printf " %6.1f", $i / 1024; print ""}' "$work/results"
for label in "${bins[@]}"; do
	max_kib=$(awk -v b="$label" '$1 == b {for (i = 5; i <= NF; i++) if ($i > m) m = $i} END {print m}' "$work/results")
	printf "%-7s median wall time %6.2f s, median load %s, max peak RSS %.1f MiB\n" "$label" \
		"$(awk -v b="$label" '$1 == b {print $3}' "$work/results" | median)" \
		"$(awk -v b="$label" '$1 == b {print $4}' "$work/results" | median)" \
		"$(awk -v k="$max_kib" 'BEGIN {print k / 1024}')"
	if [ "$label" = tree ]; then tree_kib=$max_kib; fi
done
echo "output of every tree round: $(tail -1 "$work/valsort.out"), checksum $out_sum = input's"
if [ -n "$budget" ]; then
	over=$((tree_kib * 1024 - budget))
	verdict=PASS
	[ "$over" -le "$SLACK" ] || verdict=FAIL
	echo "tree: max over budget $(awk -v o="$over" 'BEGIN {printf "%.1f", o / 1048576}') MiB (bound 32 MiB): $verdict"
	[ "$verdict" = PASS ]
fi
