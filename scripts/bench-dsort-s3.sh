#!/usr/bin/env bash
# End-to-end benchmark of the distributed sort reading and writing S3 (MinIO on loopback),
# against the same job on local files, in one run, the two alternating round by round.
#
#   scripts/bench-dsort-s3.sh [RECORDS] [ROUNDS] [OBJECTS] [WORKERS]
#        (default 20000000 records = 2 GB as 64 objects, 3 rounds, 4 workers)
#
# The input: RECORDS gensort records written by `gantry gensort` as OBJECTS objects under
# s3://<bucket>/in/ (a bucket of its own, removed at the end), and the same objects as
# local files, OBJECTS/WORKERS per worker. S3 job: every worker gets -I s3://…/in and
# --share i/WORKERS (the workers divide the objects by bytes) and -O s3://…/out/w<i>;
# master start to the exit of the last process, which is after every partition is in S3
# and committed. Each round's output is checked with `gantry valsort` reading S3, in the
# master's worker order, against the input's checksum (`valsort --checksum-only` of the
# input objects). Local job: the same records from local files into local dirs.
# MinIO: by default a server of the benchmark's own on a free loopback port, its data on
# tmpfs (/dev/shm): an S3 service's disks are not its clients' in any real deployment, and
# MinIO writing every object synchronously to this machine's one disk would measure that
# disk; its CPU is still this machine's, and the CPU seconds it used are printed. With
# GANTRY_BENCH_S3=host:port, an existing server instead (credentials $AWS_ACCESS_KEY_ID/
# $AWS_SECRET_ACCESS_KEY, default the test MinIO's). SPLIT=1 also runs, each round, S3 in
# with local out and local in with S3 out; PROFILE=1 writes each worker's CPU profile
# (KEEP=1 keeps them). Each result line in $work/results: kind, seconds, load before,
# MinIO's CPU seconds, the workers' CPU seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000000}
ROUNDS=${2:-3}
OBJ=${3:-64}
W=${4:-4}
export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-gantry} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-gantry-secret}

. scripts/lib/dsort.sh
workdir bench-dsort-s3
(cd bench && go build -o "$work/s3bucket" ./cmd/s3bucket)
minio_pid= shm=
cleanup() {
	[ -n "${BUCKET:-}" ] && [ -z "$minio_pid" ] && "$work/s3bucket" remove "$(url "")" 2>/dev/null
	[ -n "$minio_pid" ] && kill "$minio_pid" 2>/dev/null && wait "$minio_pid" 2>/dev/null
	[ -n "$shm" ] && rm -rf "$shm"
	_workdir_cleanup
}
trap cleanup EXIT
if [ -n "${GANTRY_BENCH_S3:-}" ]; then
	EP=$GANTRY_BENCH_S3
else
	bin=${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}/bin/minio
	[ -x "$bin" ] || bash scripts/services.d/minio.sh # builds it (and starts the test server)
	shm=$(mktemp -d /dev/shm/gantry-bench-minio-XXXXXX)
	EP=127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY MINIO_BROWSER=off MINIO_UPDATE=off \
		"$bin" server --quiet --address "$EP" "$shm" >"$work/minio.log" 2>&1 &
	minio_pid=$!
	for _ in $(seq 100); do curl -fsS -m 1 "http://$EP/minio/health/live" >/dev/null 2>&1 && break; sleep 0.1; done
fi
curl -fsS -m 2 "http://$EP/minio/health/live" >/dev/null || { echo "no S3 server at $EP" >&2; exit 1; }
BUCKET=gantry-bench-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
url() { echo "s3://$BUCKET/$1?endpoint=http://$EP"; }
"$work/s3bucket" make "$(url '')"

echo "generating $N records as $OBJ objects…" >&2
per=$((N / OBJ))
gen=()
for o in $(seq 0 $((OBJ - 1))); do
	n=$per
	[ "$o" -eq $((OBJ - 1)) ] && n=$((N - per * (OBJ - 1)))
	w=$((o * W / OBJ))
	mkdir -p "$work/w$w/in"
	f="$work/w$w/in/obj$(printf %03d "$o")"
	"$G" gensort -b$((o * per)) "$n" "$f" >/dev/null
	"$G" gensort -b$((o * per)) "$n" "$(url "in/obj$(printf %03d "$o")")" >/dev/null &
	gen+=($!)
	if [ ${#gen[@]} -ge 2 ]; then wait "${gen[@]}"; gen=(); fi # not a bare wait: MinIO is a child too
done
[ ${#gen[@]} -eq 0 ] || wait "${gen[@]}"
in_sum=$("$G" valsort --checksum-only "$(url in)" 2>&1 | awk '/^Checksum/ {print $2}')
local_sum=$("$G" valsort --checksum-only "$work"/w*/in 2>&1 | awk '/^Checksum/ {print $2}')
[ -n "$in_sum" ] && [ "$in_sum" = "$local_sum" ] || { echo "input checksums differ: S3 $in_sum, local $local_sum" >&2; exit 1; }
mkdir -p "$work/tmp"
sync
: >"$work/results"

# minio_cpu: CPU seconds the local MinIO server has used (0 if it is not a local process).
minio_cpu() {
	[ -n "$minio_pid" ] && awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$minio_pid/stat" || echo 0
}

# run_job ROUND KIND: one job (KIND s3 or local), master start to last exit.
run_job() {
	local r=$1 kind=$2 l start end status=0 port i in out c0
	l=$(load)
	c0=$(minio_cpu)
	for i in $(seq 0 $((W - 1))); do rm -rf "$work/w$i/out"; done
	sync
	pids=()
	start=$(date +%s.%N)
	: >"$work/master.out"
	"$G" sort master "$W" >"$work/master.out" 2>"$work/master.err" &
	pids+=($!)
	port=$(master_port)
	for i in $(seq 0 $((W - 1))); do
		in=(-I "$work/w$i/in") out=$work/w$i/out
		case $kind in s3 | s3in) in=(-I "$(url in)" --share "$i/$W") ;; esac
		case $kind in s3 | s3out) out=$(url "out/w$i") ;; esac
		/usr/bin/time -f "%U %S %F %R" -o "$work/w$i.$kind.cpu" "$G" sort worker "127.0.0.1:$port" --bind "127.0.0.$((i + 2))" "${in[@]}" -O "$out" --tmp "$work/tmp" ${PROFILE:+--cpuprofile "$work/w$i.$kind.prof"} 2>"$work/w$i.$kind.err" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || status=$?; done
	end=$(date +%s.%N)
	pids=()
	if [ "$status" -ne 0 ]; then
		echo "$kind round $r failed (exit $status):" >&2
		tail -20 "$work/master.err" >&2
		exit 1
	fi
	echo "$kind $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.2f", e - s}') $l $(awk -v a="$c0" -v b="$(minio_cpu)" 'BEGIN {printf "%.1f", b - a}') $(cat "$work"/w*."$kind".cpu | awk '{s += $1 + $2} END {printf "%.1f", s}')" >>"$work/results"
	check "$kind"
}

# check KIND: valsort of the job's outputs in the master's worker order.
check() {
	local outs=() ip
	for ip in $(sed -n 2p "$work/master.out" | tr -d ' ' | tr ',' ' '); do
		if [ "$1" = s3 ] || [ "$1" = s3out ]; then outs+=("$(url "out/w$((${ip##*.} - 2))")"); else outs+=("$work/w$((${ip##*.} - 2))/out"); fi
	done
	"$G" valsort "${outs[@]}" >"$work/valsort.out" 2>&1 || { cat "$work/valsort.out" >&2; exit 1; }
	out_sum=$(awk '/^Checksum/ {print $2}' "$work/valsort.out")
	[ "$in_sum" = "$out_sum" ] || { echo "$1: checksum mismatch: input $in_sum, output $out_sum" >&2; exit 1; }
}

for r in $(seq "$ROUNDS"); do
	echo "round $r/$ROUNDS" >&2
	if [ $((r % 2)) -eq 1 ]; then run_job "$r" s3; run_job "$r" local; else run_job "$r" local; run_job "$r" s3; fi
	if [ -n "${SPLIT:-}" ]; then run_job "$r" s3in; run_job "$r" s3out; fi
done

s=$(grep '^s3 ' "$work/results" | awk '{print $2}' | median)
l=$(grep '^local ' "$work/results" | awk '{print $2}' | median)
echo
echo "$N records ($((N / 10000000)).$((N / 1000000 % 10)) GB) as $OBJ objects on $W workers, $ROUNDS rounds, $(nproc) CPUs, $(date -u +%F); every output valsorted with the input's checksum $in_sum"
printf "%-22s %9s   %s\n" "" median "all runs (seconds, load before)"
printf "%-22s %9.2f   %s\n" "S3 in, S3 out" "$s" "$(grep '^s3 ' "$work/results" | awk '{printf "%s (%s) ", $2, $3}')"
printf "%-22s %9.2f   %s\n" "local files" "$l" "$(grep '^local ' "$work/results" | awk '{printf "%s (%s) ", $2, $3}')"
for k in s3in:"S3 in, local out" s3out:"local in, S3 out"; do
	grep -q "^${k%%:*} " "$work/results" || continue
	printf "%-22s %9.2f   %s\n" "${k#*:}" "$(grep "^${k%%:*} " "$work/results" | awk '{print $2}' | median)" \
		"$(grep "^${k%%:*} " "$work/results" | awk '{printf "%s (%s) ", $2, $3}')"
done
echo "workers' CPU seconds per job (median): $(for k in s3 local s3in s3out; do grep -q "^$k " "$work/results" && printf "%s %s  " "$k" "$(grep "^$k " "$work/results" | awk '{print $5}' | median)"; done)"
echo "S3 costs $(awk -v a="$s" -v b="$l" 'BEGIN {printf "%.2f", a / b}')x the local job; MinIO, on the same $(nproc) CPUs, used $(grep '^s3 ' "$work/results" | awk '{print $4}' | median) CPU seconds per S3 job (median)"
