#!/usr/bin/env bash
# End-to-end benchmark of the distributed sort and of `sort local` against GNU
# sort, in one run, the contenders interleaved round by round; prints every
# run, the medians and both ratios.
#
#   scripts/bench-dsort.sh [RECORDS] [ROUNDS] [WORKERS]
#        (default 20000000 records = 2 GB, 3 rounds, 4 workers)
#
# dsort: the time from the master's start to the exit of the last process
# (master and every worker), WORKERS workers on this machine, each on its own
# loopback address (127.0.0.2, …), RECORDS/WORKERS binary records each; then
# the same job with mutual TLS (certificates from `gantry sort certs`), to
# quote what TLS costs.
# Baseline: `LC_ALL=C sort --parallel=2 -S 4G` on the ASCII form (gensort -a)
# of the same record numbers in one file: GNU sort is line-based, and every
# ASCII record is one CRLF-terminated line.
# sort local: `gantry sort local --memory 256MiB` against
# `LC_ALL=C sort --parallel=2 -S 256M` on the ASCII form of RECORDS/2 records
# (1 GB by default).
#
# The dsort output of the last round is checked with `gantry valsort`
# (SUCCESS, checksum equal to the input's); sort local's output must equal GNU
# sort's byte for byte. The load average before each run is recorded: the
# machine may be shared. Logs of the last dsort round (master phase table,
# worker phase durations) are printed at the end. Everything talks over
# loopback. Work files live in a temp dir under $TMPDIR (default /tmp),
# removed at the end unless KEEP=1. PROFILE=DIR writes CPU profiles of the
# master and every worker of each round to DIR (master.R.prof, wI.R.prof).
# Each dsort job's CPU seconds (user + system of the master and every
# worker) are recorded beside its time: on a shared machine they move far
# less than the wall time. DSORT_ONLY=1 runs only the two dsort jobs each
# round (plain and TLS), for measuring what TLS costs.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000000}
ROUNDS=${2:-3}
W=${3:-4}
NL=$((N / 2))
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

. scripts/lib/dsort.sh
workdir bench-dsort

echo "generating $N records for $W workers and their ASCII form…" >&2
per=$((N / W))
for i in $(seq 0 $((W - 1))); do
	mkdir -p "$work/w$i/in" "$work/w$i/out"
	n=$per
	[ "$i" -eq $((W - 1)) ] && n=$((N - per * (W - 1)))
	"$G" gensort -b $((i * per)) "$n" "$work/w$i/in/data"
done
mkdir -p "$work/asc" "$work/local-in" "$work/tmp"
if [ "${DSORT_ONLY:-0}" != 1 ]; then
	"$G" gensort -a "$N" "$work/asc/input"
	"$G" gensort -a "$NL" "$work/local-in/input"
fi
in_sum=$("$G" valsort --checksum-only "$work"/w*/in 2>&1 | awk '/^Checksum/ {print $2}')
# The 5 GB just generated is still being written back to disk; let that finish
# before anything is timed, so no contender's round pays for it.
sync

: >"$work/results"

"$G" sort certs "$work/tls" --hosts "$(seq -s, -f '127.0.0.%g' 1 $((W + 1)))" >/dev/null
# tls_flags HOST: the TLS flags of HOST's certificate.
tls_flags() { echo --tls-cert "$work/tls/$1.crt" --tls-key "$work/tls/$1.key" --tls-ca "$work/tls/ca.crt"; }

# run_dsort ROUND [tls]: one job, master start to last exit.
run_dsort() {
	local r=$1 mode=${2:-} l label="dsort-${W}w-e2e" mtls=() wtls=()
	[ "$mode" = tls ] && label="dsort-${W}w-tls" && read -ra mtls <<<"$(tls_flags 127.0.0.1)"
	l=$(load)
	for i in $(seq 0 $((W - 1))); do rm -rf "$work/w$i/out"; mkdir -p "$work/w$i/out"; done
	sync
	pids=()
	local start end status=0
	start=$(date +%s.%N)
	local prof=() wprof=()
	[ -n "${PROFILE:-}" ] && mkdir -p "$PROFILE" && prof=(--cpuprofile "$PROFILE/master.$r$mode.prof")
	: >"$work/master.out" # master_port must not read the previous round's port
	rm -f "$work"/*.cpu
	/usr/bin/time -f "%U %S" -o "$work/master.cpu" "$G" sort master "$W" "${prof[@]}" "${mtls[@]}" >"$work/master.out" 2>"$work/master.err" &
	pids+=($!)
	local port
	port=$(master_port)
	for i in $(seq 0 $((W - 1))); do
		[ -n "${PROFILE:-}" ] && wprof=(--cpuprofile "$PROFILE/w$i.$r$mode.prof")
		[ "$mode" = tls ] && read -ra wtls <<<"$(tls_flags "127.0.0.$((i + 2))")"
		/usr/bin/time -f "%U %S" -o "$work/w$i.cpu" "$G" sort worker "127.0.0.1:$port" --bind "127.0.0.$((i + 2))" "${wprof[@]}" "${wtls[@]}" \
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
	echo "$label $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.2f", e - s}') $l" >>"$work/results"
	echo "$label-cpu $(cat "$work"/*.cpu | awk '{s += $1 + $2} END {printf "%.2f", s}') $l" >>"$work/results"
	[ "$mode" = tls ] && return
	# The master's own figure (registration of the last worker to success),
	# to see what start-up and exit add to the end-to-end time.
	echo "dsort-master-job $(sed -n 's/^job succeeded in \([0-9.]*\)\(m*s\):.*/\1 \2/p' "$work/master.err" |
		awk '{print ($2 == "ms" ? $1 / 1000 : $1)}') $l" >>"$work/results"
	cp "$work/master.err" "$work/master.$r.err"
}

# measure LABEL CMD...: one run, "LABEL seconds load" appended to results.
measure() {
	local label=$1 l
	shift
	l=$(load)
	sync
	if ! /usr/bin/time -f "%e" -o "$work/time" "$@" >/dev/null 2>"$work/err"; then
		echo "$label failed:" >&2
		cat "$work/err" >&2
		exit 1
	fi
	echo "$label $(cat "$work/time") $l" >>"$work/results"
}

for r in $(seq "$ROUNDS"); do
	echo "round $r/$ROUNDS" >&2
	# plain and TLS alternate which goes first: neither always inherits the
	# other's writeback and freed blocks
	if [ $((r % 2)) = 1 ]; then modes=("" tls); else modes=(tls ""); fi
	for m in "${modes[@]}"; do
		run_dsort "$r" "$m"
		check_output "$in_sum"
	done
	[ "${DSORT_ONLY:-0}" = 1 ] && continue
	rm -f "$work/gnu.out"
	measure gnu-sort-4G-2GB env LC_ALL=C sort --parallel=2 -S 4G -T "$work/tmp" -o "$work/gnu.out" "$work/asc/input"
	rm -f "$work/gnu.out"
	rm -rf "$work/local-out"
	measure local-256MiB-1GB "$G" sort local -q -I "$work/local-in" -O "$work/local-out" --memory 256MiB --tmp "$work/tmp"
	rm -f "$work/gnu-local.out"
	measure gnu-sort-256M-1GB env LC_ALL=C sort --parallel=2 -S 256M -T "$work/tmp" -o "$work/gnu-local.out" "$work/local-in/input"
done

# sort local's output against GNU sort's (each dsort run was checked as it ended).
[ "${DSORT_ONLY:-0}" = 1 ] || cmp <(cat $(ls -v "$work"/local-out/partition.*)) "$work/gnu-local.out" >/dev/null ||
	{ echo "sort local and GNU sort outputs differ" >&2; exit 1; }

median_of() { grep "^$1 " "$work/results" | awk '{print $2}' | median; }
div() { awk "BEGIN { d = $2; print (d > 0 ? $1 / d : 0) }"; }

echo
echo "every run (seconds, 1-min load average before the run):"
awk '{printf "  %-20s %8.2f s   load %s\n", $1, $2, $3}' "$work/results"
echo
echo "$N records ($((N / 10000)) MB) for dsort, $NL for sort local; $ROUNDS rounds; $(nproc) CPUs; $(date -u +'%F %H:%M UTC')"
printf "%-20s %9s %8s\n" contender median_s MB/s
for l in "dsort-${W}w-e2e" "dsort-${W}w-tls" dsort-master-job gnu-sort-4G-2GB local-256MiB-1GB gnu-sort-256M-1GB; do
	grep -q "^$l " "$work/results" || continue
	s=$(median_of "$l")
	b=$N
	case $l in *1GB) b=$NL ;; esac
	printf "%-20s %9.2f %8.0f\n" "$l" "$s" "$(div "$b * 100" "1000000 * $s")"
done
echo "CPU seconds per dsort job (master and workers, user + system; median): $(median_of "dsort-${W}w-e2e-cpu") plain, $(median_of "dsort-${W}w-tls-cpu") with TLS"
echo
printf "dsort with mutual TLS vs without:                                         %.2fx the time (goal within 1.15x), %.2fx the CPU\n" \
	"$(div "$(median_of "dsort-${W}w-tls")" "$(median_of "dsort-${W}w-e2e")")" "$(div "$(median_of "dsort-${W}w-tls-cpu")" "$(median_of "dsort-${W}w-e2e-cpu")")"
[ "${DSORT_ONLY:-0}" = 1 ] && exit 0
printf "dsort end to end (%d workers, master start to last exit) vs GNU sort -S 4G: %.2fx, %.0f MB/s (goal 3x and 450 MB/s)\n" "$W" \
	"$(div "$(median_of gnu-sort-4G-2GB)" "$(median_of "dsort-${W}w-e2e")")" "$(div "$N * 100" "1000000 * $(median_of "dsort-${W}w-e2e")")"
printf "sort local --memory 256MiB vs GNU sort -S 256M:                          %.2fx (goal 4x)\n" \
	"$(div "$(median_of gnu-sort-256M-1GB)" "$(median_of local-256MiB-1GB)")"
echo "dsort output of the last round: $(tail -1 "$work/valsort.out"), checksum $out_sum = input's"
echo
echo "last dsort round, master (stderr):"
grep -v '^time=' "$work/master.err" | tail -15 | sed 's/^/  /'
echo "last dsort round, worker 0 (stderr, phase durations):"
sed -n '/Phase Durations/,$p' "$work/w0.err" | head -12 | sed 's/^/  /'
