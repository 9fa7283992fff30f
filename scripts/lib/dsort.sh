# Shared by the scripts that run distributed-sort jobs on this machine
# (demo.sh, bench-dsort.sh, bench-dsort-memory.sh); source it from the
# repository root.

# workdir NAME: a temp dir $work under $TMPDIR (default /tmp), removed at
# exit unless KEEP=1 after the processes in $pids are killed; builds gantry
# into $G.
workdir() {
	work=$(mktemp -d "${TMPDIR:-/tmp}/gantry-$1-XXXXXX")
	pids=()
	trap _workdir_cleanup EXIT
	G="$work/gantry"
	echo "building gantry…" >&2
	go build -o "$G" ./cmd/gantry
}

_workdir_cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ "${KEEP:-0}" = 1 ] && echo "kept $work" >&2 || rm -rf "$work"
}

# master_port: waits up to 10 s for the master's first stdout line (IP:PORT)
# in $work/master.out and prints the port. Empty master.out before starting
# the master, so that this never reads an earlier master's line.
master_port() {
	for _ in $(seq 200); do [ -s "$work/master.out" ] && break; sleep 0.05; done
	local addr
	addr=$(head -1 "$work/master.out")
	echo "${addr##*:}"
}

# check_output IN_SUM: gantry valsort of the workers' outputs in the
# master's worker order (its second stdout line; worker i bound
# 127.0.0.(i+2) and writes $work/w<i>/out) into $work/valsort.out; fails
# unless sorted with checksum IN_SUM. Sets out_sum.
check_output() {
	local outs
	outs=$(sed -n 2p "$work/master.out" | tr ',' '\n' | while read -r ip; do echo "$work/w$((${ip##*.} - 2))/out"; done)
	"$G" valsort $outs >"$work/valsort.out" 2>&1 || { cat "$work/valsort.out" >&2; exit 1; }
	out_sum=$(awk '/^Checksum/ {print $2}' "$work/valsort.out")
	[ "$1" = "$out_sum" ] || { echo "checksum mismatch: input $1, output $out_sum" >&2; exit 1; }
}

# load: the 1-minute load average.
load() { cut -d' ' -f1 /proc/loadavg; }

# median: the median of the numbers on stdin, one per line.
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
