#!/usr/bin/env bash
# The quick-start job: a local cluster sorts generated data.
#
#   scripts/demo.sh [RECORDS] [WORKERS]      (default 10000000 records = 1 GB, 4 workers)
#
# Builds gantry, generates gensort data for every worker (two input dirs each,
# ASCII and binary files mixed), starts one master and WORKERS workers as
# separate processes on 127.0.0.2, 127.0.0.3, …, waits for the job, checks the
# concatenated output with `gantry valsort` against the inputs' checksum, and
# prints the throughput and the master's phase table. Everything lives in a
# temp dir under $TMPDIR (default /tmp), removed at the end unless KEEP=1.
# While it runs, each process serves Prometheus metrics on loopback, port
# $METRICS_PORT (default 19464): the master on 127.0.0.1, worker i on
# 127.0.0.(i+2), e.g. `curl -s 127.0.0.1:19464/metrics | grep gantry_dsort`.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
	echo "scripts/demo.sh: $1" >&2
	echo "usage: scripts/demo.sh [RECORDS] [WORKERS]   (default 10000000 records = 1 GB, 4 workers)" >&2
	exit 2
}
[ $# -le 2 ] || usage "at most two arguments, got $#"
N=${1:-10000000}
W=${2:-4}
[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 1 ] || usage "RECORDS \"$N\": want a whole number of records, 1 or more"
# Worker i listens on 127.0.0.(i+2): at most 253 workers.
[[ $W =~ ^[0-9]+$ ]] && [ "$W" -ge 1 ] && [ "$W" -le 253 ] || usage "WORKERS \"$W\": want a whole number from 1 to 253"
MP=${METRICS_PORT:-19464}
. scripts/lib/dsort.sh
workdir demo

# Each worker gets N/W records in two input dirs: an ASCII file and two binary
# files with consecutive record numbers (-b), so no two files repeat records.
per=$((N / W))
first=0
for i in $(seq 0 $((W - 1))); do
	mkdir -p "$work/w$i/in1" "$work/w$i/in2" "$work/w$i/out"
	a=$((per / 2)) b=$((per / 4)) c=$((per - per / 2 - per / 4))
	"$G" gensort -q -a -b "$first" "$a" "$work/w$i/in1/ascii"
	"$G" gensort -q -b $((first + a)) "$b" "$work/w$i/in2/bin.0"
	"$G" gensort -q -b $((first + a + b)) "$c" "$work/w$i/in2/bin.1"
	first=$((first + per))
done
echo "generated $N records ($((N / 10000)) MB) for $W workers" >&2
in_sum=$("$G" valsort --checksum-only $(ls -d "$work"/w*/in*) 2>&1 | awk '/^Checksum/ {print $2}')

start=$(date +%s.%N)
"$G" sort master "$W" --metrics-addr "127.0.0.1:$MP" >"$work/master.out" 2>"$work/master.err" &
pids+=($!)
master_pid=$!
port=$(master_port)
addr=$(head -1 "$work/master.out")
echo "master listening on $addr; metrics: http://127.0.0.1:$MP/metrics" >&2
for i in $(seq 0 $((W - 1))); do
	"$G" sort worker "127.0.0.1:$port" --bind "127.0.0.$((i + 2))" --metrics-addr "127.0.0.$((i + 2)):$MP" \
		-I "$work/w$i/in1" "$work/w$i/in2" -O "$work/w$i/out" --tmp "$work" \
		2>"$work/w$i/worker.err" &
	pids+=($!)
done
status=0
wait "$master_pid" || status=$?
for p in "${pids[@]:1}"; do wait "$p" || status=$?; done
end=$(date +%s.%N)
if [ "$status" -ne 0 ]; then
	echo "the job failed (exit $status); master log:" >&2
	tail -20 "$work/master.err" >&2
	exit 1
fi
echo "master stdout:" >&2
sed 's/^/  /' "$work/master.out" >&2
echo >&2
grep -v '^time=' "$work/master.err" | tail -20 >&2 || true
echo >&2
# Worker order is registration order: the master's second line lists the
# workers' IPs in that order, and worker i of this script bound 127.0.0.(i+2).
check_output "$in_sum"
cat "$work/valsort.out"
awk -v n="$N" -v s="$start" -v e="$end" -v w="$W" 'BEGIN {
	t = e - s; printf "sorted %d records (%.2f GB) on %d workers in %.2f s: %.0f MB/s; checksum matches the input\n", n, n * 100 / 1e9, w, t, n * 100 / 1e6 / t }'
