#!/usr/bin/env bash
# Larger than memory: the distributed sort with every worker in a container
# whose memory limit (page cache included) is well below its share of the
# data, against GNU sort in a container with the whole job's memory, and
# the machine's disk throughput (the floor: the data must go to disk and
# back at least once), in one run.
#
#   scripts/bench-dsort-limited.sh [GB=4] [ROUNDS=1] [LIMIT_MIB=256]
#
# dsort: 4 workers, each `gantry sort worker` in its own container (the
# image of scripts/image.sh, --network host, on 127.0.0.2–.5) with
# `--memory LIMIT_MIB` (no swap) and `--memory` (the worker's budget) at
# LIMIT_MIB - 96 MiB, GB/4 of gensort records each; the master on the host.
# Timed from the master's start to the last process's exit; the output is
# checked with `gantry valsort` against the input's checksum.
# GNU sort: `LC_ALL=C sort --parallel=2 -S (4 × LIMIT_MIB - 128)M` in a
# container limited to 4 × LIMIT_MIB (the job's memory), on the ASCII form
# of the same records; its output is checked by `gantry valsort` too.
# Disk: dd of a file of GB with O_DIRECT, written then read (the floor a
# sort that spills once pays twice: its input and runs read, its runs and
# output written).
# Needs docker. Work files (about 6 × GB) live under $TMPDIR (default /tmp),
# removed at the end unless KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
GB=${1:-4}
ROUNDS=${2:-1}
LIMIT=${3:-256}
W=4
N=$((GB * 10000000))
command -v docker >/dev/null || { echo "needs docker" >&2; exit 1; }

. scripts/lib/dsort.sh
workdir bench-dsort-limited
: >"$work/results"
containers=()
cleanup_containers() { for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1 || true; done; }
trap 'cleanup_containers; _workdir_cleanup' EXIT

echo "building the images (gantry, and GNU sort FROM scratch)…" >&2
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/gantry-static" ./cmd/gantry
image=$(bash scripts/image.sh --tag gantry:bench-limited --binary "$work/gantry-static")
ctx="$work/sort-image"
mkdir -p "$ctx/root/usr/bin" "$ctx/root/tmp"
cp /usr/bin/sort "$ctx/root/usr/bin/sort"
for lib in $(ldd /usr/bin/sort | grep -o '/[^ ]*'); do
	mkdir -p "$ctx/root$(dirname "$lib")" && cp -L "$lib" "$ctx/root$lib"
done
chmod 1777 "$ctx/root/tmp"
printf 'FROM scratch\nCOPY root/ /\nENTRYPOINT ["/usr/bin/sort"]\n' >"$ctx/Dockerfile"
DOCKER_BUILDKIT=0 docker build -q -t gantry:bench-gnu-sort "$ctx" >/dev/null

echo "generating $GB GB for $W workers and its ASCII form…" >&2
per=$((N / W))
for i in $(seq 0 $((W - 1))); do
	mkdir -p "$work/w$i/in" "$work/w$i/out" "$work/w$i/tmp"
	"$G" gensort -b $((i * per)) "$per" "$work/w$i/in/data"
done
mkdir -p "$work/asc" "$work/gnu-tmp"
"$G" gensort -a "$N" "$work/asc/input"
in_sum=$("$G" valsort --checksum-only "$work"/w*/in 2>&1 | awk '/^Checksum/ {print $2}')
chmod -R a+rwX "$work"
sync

# run_dsort ROUND: master on the host, each worker in a memory-limited container.
run_dsort() {
	local r=$1 l start end status=0 port i
	l=$(load)
	for i in $(seq 0 $((W - 1))); do rm -rf "$work/w$i/out" && mkdir -p "$work/w$i/out" && chmod a+rwx "$work/w$i/out"; done
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
	start=$(date +%s.%N)
	: >"$work/master.out"
	"$G" sort master "$W" >"$work/master.out" 2>"$work/master.err" &
	local mpid=$!
	port=$(master_port)
	containers=()
	for i in $(seq 0 $((W - 1))); do
		containers+=("gantry-bench-w$i-$$")
		docker run -d --name "gantry-bench-w$i-$$" --network host --memory "${LIMIT}m" --memory-swap "${LIMIT}m" \
			-v "$work/w$i:/w" "$image" sort worker "127.0.0.1:$port" --bind "127.0.0.$((i + 2))" \
			-I /w/in -O /w/out --tmp /w/tmp --memory "$((LIMIT - 96))MiB" >/dev/null
	done
	wait "$mpid" || status=$?
	for c in "${containers[@]}"; do
		local code
		code=$(docker wait "$c")
		[ "$code" = 0 ] || { echo "worker container $c exited $code:" >&2; docker logs --tail 20 "$c" >&2; status=1; }
		[ "$(docker inspect -f '{{.State.OOMKilled}}' "$c")" = false ] || { echo "worker container $c was OOM-killed" >&2; status=1; }
	done
	end=$(date +%s.%N)
	[ "$status" = 0 ] || { tail -20 "$work/master.err" >&2; exit 1; }
	docker logs "${containers[0]}" 2>"$work/w0.err" >/dev/null || true
	cleanup_containers
	containers=()
	echo "dsort-${W}w-${LIMIT}MiB $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.2f", e - s}') $l" >>"$work/results"
}

# run_gnu ROUND: GNU sort in one container with the job's memory.
run_gnu() {
	local l mem=$((W * LIMIT)) start end
	l=$(load)
	rm -f "$work/asc/output"
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
	start=$(date +%s.%N)
	docker run --rm --memory "${mem}m" --memory-swap "${mem}m" -e LC_ALL=C -v "$work/asc:/d" -v "$work/gnu-tmp:/t" \
		gantry:bench-gnu-sort --parallel=2 -S "$((mem - 128))M" -T /t -o /d/output /d/input
	end=$(date +%s.%N)
	echo "gnu-sort-${mem}MiB $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.2f", e - s}') $l" >>"$work/results"
}

# run_dd: write then read GB with O_DIRECT, seconds each.
run_dd() {
	local l w r
	l=$(load)
	w=$( { /usr/bin/time -f %e dd if=/dev/zero of="$work/dd" bs=4M count=$((GB * 250)) oflag=direct conv=fsync status=none; } 2>&1)
	r=$( { /usr/bin/time -f %e dd if="$work/dd" of=/dev/null bs=4M iflag=direct status=none; } 2>&1)
	rm -f "$work/dd"
	echo "disk-write-${GB}GB $w $l" >>"$work/results"
	echo "disk-read-${GB}GB $r $l" >>"$work/results"
}

for r in $(seq "$ROUNDS"); do
	echo "round $r/$ROUNDS" >&2
	run_dsort "$r"
	check_output "$in_sum"
	run_gnu "$r"
	run_dd
done
"$G" valsort "$work/asc/output" >"$work/gnu-valsort.out" 2>&1 || { cat "$work/gnu-valsort.out" >&2; exit 1; }

median_of() { grep "^$1 " "$work/results" | awk '{print $2}' | median; }
echo
echo "every run (seconds, 1-min load average before the run):"
awk '{printf "  %-24s %8.2f s   load %s\n", $1, $2, $3}' "$work/results"
echo
d=$(median_of "dsort-${W}w-${LIMIT}MiB")
g=$(median_of "gnu-sort-$((W * LIMIT))MiB")
dw=$(median_of "disk-write-${GB}GB")
dr=$(median_of "disk-read-${GB}GB")
echo "$GB GB, $W workers at ${LIMIT} MiB each (budget $((LIMIT - 96)) MiB); $ROUNDS rounds; $(nproc) CPUs; $(date -u +'%F %H:%M UTC')"
printf "dsort, workers in %d MiB containers:      %8.2f s  %6.0f MB/s\n" "$LIMIT" "$d" "$(awk "BEGIN {print $GB * 1000 / $d}")"
printf "GNU sort in a %d MiB container:          %8.2f s  %6.0f MB/s  (dsort %.2fx)\n" "$((W * LIMIT))" "$g" \
	"$(awk "BEGIN {print $GB * 1000 / $g}")" "$(awk "BEGIN {print $g / $d}")"
printf "disk floor: write %.2f s (%.0f MB/s), read %.2f s (%.0f MB/s) of %d GB with O_DIRECT\n" "$dw" \
	"$(awk "BEGIN {print $GB * 1000 / $dw}")" "$dr" "$(awk "BEGIN {print $GB * 1000 / $dr}")" "$GB"
echo "dsort output: $(tail -1 "$work/valsort.out"), checksum $out_sum = input's; GNU sort output: $(tail -1 "$work/gnu-valsort.out")"
echo "worker 0 (stderr, phase durations):"
sed -n '/Phase Durations/,$p' "$work/w0.err" | head -8 | sed 's/^/  /'
