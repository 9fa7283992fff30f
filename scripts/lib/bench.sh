# Shared by the scripts that time `gantry sort local` against GNU sort round by round
# (bench-sort-local.sh, bench-sort-lines.sh); source it from the repository root after
# setting $work (the work dir: results, time and err files go there).

# measure LABEL CMD...: run once, append "LABEL seconds maxrss_kb" to $work/results.
measure() {
	local label=$1
	shift
	sync
	if ! /usr/bin/time -f "%e %M" -o "$work/time" "$@" >/dev/null 2>"$work/err"; then
		echo "$label failed:" >&2
		cat "$work/err" >&2
		exit 1
	fi
	echo "$label $(cat "$work/time")" >>"$work/results"
}

# median LABEL FIELD: the median of field FIELD (2 seconds, 3 RSS) of LABEL's runs.
median() { grep "^$1 " "$work/results" | awk '{print $'"$2"'}' | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# div A B: A/B, 0 when B is 0.
div() { awk "BEGIN { d = $2; print (d > 0 ? $1 / d : 0) }"; }
# all LABEL: every run's seconds.
all() { grep "^$1 " "$work/results" | awk '{printf "%s ", $2}'; }
