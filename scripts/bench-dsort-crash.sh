#!/usr/bin/env bash
# What a crash costs the distributed sort: for each phase, a worker killed (SIGKILL) there
# and restarted at once with the same command (its temp dir kept, as a crashed process
# leaves it), and separately the master killed there and restarted with the same --state
# and --port; each against clean runs of the same job in the same run.
#
#   scripts/bench-dsort-crash.sh [RECORDS] [ROUNDS] [WORKERS]
#        (default 20000000 records = 2 GB, 3 rounds, 4 workers)
#
# A run's time is master start to the exit of the last process; its shuffle bytes are the
# pieces every worker process received (committed, from `--log-level debug`'s "piece
# received" lines, and discarded half-sent ones). Every round runs the clean job and then
# each crash, so the table gives, per phase and victim, the median over rounds of the
# added seconds and re-sent bytes against that round's clean run (which worker gets which
# index, and so which pieces stay local, varies from run to run: the bytes shuffled by
# clean runs differ by about 0.5 MB in 1,500). The worker victim
# (worker 1) stops at a fault point (GANTRY_DSORT_FAULT: Sampling = sample taken,
# Sorting = runs spilled, shuffle-piece = its first piece received, merge-partition = its
# first partition staged) and is killed there; the master is killed once the first
# worker reports entering the phase. Every output is checked with `gantry valsort`
# against the input's checksum. Work files live in a temp dir under $TMPDIR (default
# /tmp), removed at the end unless KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000000}
ROUNDS=${2:-3}
W=${3:-4}

. scripts/lib/dsort.sh
workdir bench-dsort-crash

echo "generating $N records for $W workers…" >&2
per=$((N / W))
for i in $(seq 0 $((W - 1))); do
	mkdir -p "$work/w$i/in"
	n=$per
	[ "$i" -eq $((W - 1)) ] && n=$((N - per * (W - 1)))
	"$G" gensort -b $((i * per)) "$n" "$work/w$i/in/data"
done
in_sum=$("$G" valsort --checksum-only "$work"/w*/in 2>&1 | awk '/^Checksum/ {print $2}')
sync
: >"$work/results"

# start_master [PORT]: the master (with a state file) in the background; sets mpid, port.
start_master() {
	local p=${1:-0}
	: >"$work/master.out"
	"$G" sort master "$W" --state "$work/master.state" --port "$p" >>"$work/master.out" 2>>"$work/master.err" &
	mpid=$!
	pids+=("$mpid")
	port=$(master_port)
}

# start_worker I [ENV...]: worker I in the background, its stderr appended to w<I>.err.
start_worker() {
	local i=$1
	shift
	env "$@" "$G" sort worker "127.0.0.1:$port" --bind "127.0.0.$((i + 2))" --log-level debug \
		-I "$work/w$i/in" -O "$work/w$i/out" --tmp "$work/w$i/tmp" 2>>"$work/w$i.err" &
	wpid[$i]=$!
	pids+=("${wpid[$i]}")
}

# wait_log FILE REGEX: wait until FILE has a line matching REGEX (at most 5 minutes).
wait_log() {
	for _ in $(seq 6000); do grep -qE -e "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
	echo "timed out waiting for /$2/ in $1" >&2
	exit 1
}

# run LABEL [worker|master PHASE POINT]: one job; appends "LABEL seconds bytes" to results.
run() {
	local label=$1 victim=${2:-} phase=${3:-} point=${4:-} start end status=0 bytes dead=none
	rm -rf "$work/master.state" "$work"/w*/out "$work"/w*/tmp "$work"/*.err
	sync
	pids=()
	start=$(date +%s.%N)
	start_master
	for i in $(seq 0 $((W - 1))); do
		if [ "$victim" = worker ] && [ "$i" -eq 1 ]; then start_worker "$i" GANTRY_DSORT_FAULT="$point"; else start_worker "$i"; fi
	done
	case $victim in
	worker)
		wait_log "$work/w1.err" "fault point $point reached"
		kill -9 "${wpid[1]}" || { echo "$label: the worker had exited before the kill" >&2; exit 1; }
		wait "${wpid[1]}" 2>/dev/null || true
		dead=${wpid[1]}
		start_worker 1
		;;
	master)
		wait_log "$(ls "$work"/w*.err | head -1)" "-> $phase:"
		local old=$port
		kill -9 "$mpid" || { echo "$label: the master had exited before the kill" >&2; exit 1; }
		wait "$mpid" 2>/dev/null || true
		dead=$mpid
		start_master "$old"
		;;
	esac
	for p in "${pids[@]}"; do
		[ "$p" = "$dead" ] && continue # killed and reaped
		wait "$p" || status=$?
	done
	end=$(date +%s.%N)
	pids=()
	if [ "$status" -ne 0 ]; then
		echo "$label failed (exit $status):" >&2
		tail -20 "$work/master.err" >&2
		exit 1
	fi
	check_output "$in_sum"
	bytes=$(cat "$work"/w*.err | awk '/piece received|discarded an incomplete shuffle piece/ {
		for (i = 1; i <= NF; i++) if ($i ~ /^bytes=/) { sub(/^bytes=/, "", $i); s += $i } } END {print s + 0}')
	echo "$label $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.2f", e - s}') $bytes $round" >>"$work/results"
}

phases=(Sampling:Sampling Sorting:Sorting Shuffling:shuffle-piece Merging:merge-partition)
for round in $(seq "$ROUNDS"); do
	echo "round $round/$ROUNDS" >&2
	run clean
	for ph in "${phases[@]}"; do
		run "worker-${ph%%:*}" worker "${ph%%:*}" "${ph##*:}"
		run "master-${ph%%:*}" master "${ph%%:*}"
	done
done

med() { grep "^$1 " "$work/results" | awk -v f="$2" '{print $f}' | median; }
# delta LABEL FIELD: the median over rounds of LABEL's field minus the clean run's of the
# same round (the machine's speed drifts from round to round more than a crash costs).
delta() {
	awk -v l="$1" -v f="$2" '$1 == "clean" {c[$4] = $f} $1 == l {v[$4] = $f} END {for (r in v) print v[r] - c[r]}' \
		"$work/results" | median
}
ct=$(med clean 2)
cb=$(med clean 3)
echo
echo "$N records ($((N / 10000)) MB) on $W workers, $ROUNDS rounds, $(nproc) CPUs, $(date -u +%F); every output valsort-checked"
printf "clean run: %.2f s, %.1f MB shuffled (medians; runs: %s)\n" "$ct" "$(awk -v b="$cb" 'BEGIN {print b / 1e6}')" "$(grep '^clean ' "$work/results" | awk '{printf "%s ", $2}')"
printf "%-10s %-7s %9s %12s   %s\n" phase killed "added s" "re-sent MB" "runs (s)"
for ph in "${phases[@]}"; do
	for v in worker master; do
		l="$v-${ph%%:*}"
		printf "%-10s %-7s %9.2f %12.1f   %s\n" "${ph%%:*}" "$v" "$(delta "$l" 2)" \
			"$(awk -v d="$(delta "$l" 3)" 'BEGIN {print d / 1e6}')" "$(grep "^$l " "$work/results" | awk '{printf "%s ", $2}')"
	done
done
