#!/usr/bin/env bash
# make test (what CI runs): install and start the services, lint, and run every test with -race,
# printing how long each step took at the end, pass or fail.
#
# On a fresh machine most of the wait is compiling (module downloads first) and installing
# packages, so the steps overlap where they can: the -race build of every package starts at
# once, beside services.sh's package installs (network and disk more than CPU); lint and the
# tests start once it is done (two go commands compiling the same package at once would each
# do the work), side by side: lint reuses it (make lint LINTFLAGS=-race), so every package is
# compiled once, for lint and tests alike, and the tests, often waiting on containers and
# processes, leave it room. The process-level tests share one gantry binary. The
# services that build from source (MinIO, Kubernetes) build at a lower CPU priority, so they
# fill the cores' idle time instead of slowing the steps everybody waits for; the tests that
# need them wait for them.
#
#   scripts/test.sh            # what make test runs
#   GO=go1.26 TESTFLAGS=… PKGS=… scripts/test.sh
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PKGS=${PKGS:-./...}
TESTFLAGS=${TESTFLAGS:--timeout 20m}
log=${TMPDIR:-/tmp}/gantry-test-logs
mkdir -p "$log"

start=$SECONDS
summary=()
# timed NAME CMD…: runs CMD, records how long it took and how it ended.
timed() {
	local name=$1 t=$SECONDS rc=0
	shift
	"$@" || rc=$?
	summary+=("$(printf '  %-34s %5ds  %s' "$name" $((SECONDS - t)) "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")")")
	return $rc
}
report() {
	echo "test.sh: seconds each step took (the background services: when they were up, from the start)" >&2
	printf '%s\n' "${summary[@]}" >&2
	local s f
	for s in minio kubernetes jupyter; do
		f=${GANTRY_SERVICES_DIR:-${TMPDIR:-/tmp}/gantry-services}/$s.ready
		[ -s "$f" ] && printf '  %-34s %5ds\n' "$s up (background)" $(($(cat "$f") - GANTRY_TEST_START)) >&2
	done
	printf '  %-34s %5ds\n' "total" $((SECONDS - start)) >&2
}
bin= bin_pid=
trap 'report; [ -z "$bin_pid" ] || kill "$bin_pid" 2>/dev/null; wait; [ -z "$bin" ] || rm -rf "$bin"' EXIT
GANTRY_TEST_START=$(date +%s)

# The -race build of every package and of what only the tests import, in the background.
warm() {
	local deps
	$GO mod download || return
	# shellcheck disable=SC2086
	deps=$($GO list -test -deps -f '{{if not (or .Standard .ForTest)}}{{.ImportPath}}{{end}}' $PKGS | grep -v '\.test$' | sort -u) || return
	# shellcheck disable=SC2086
	$GO build -race $deps
}
warm >"$log/race-build.log" 2>&1 &
warm_pid=$!
# The gantry binary the process-level tests run, built once for every package, from the start
# (not -race: its packages are not in the race build; each test process would otherwise link
# its own: ~13 CPU-seconds each).
bin=$(mktemp -d "${TMPDIR:-/tmp}/gantry-test-bin-XXXXXX")
($GO mod download && $GO build -o "$bin/gantry" ./cmd/gantry) >"$log/test-binary.log" 2>&1 &
bin_pid=$!

timed "services (foreground part)" bash scripts/services.sh || exit 1
timed "-race build (rest of it)" wait $warm_pid || { cat "$log/race-build.log" >&2; exit 1; }
# Lint type-checks against that same -race build (LINTFLAGS): no second compile of every package.
# It runs beside the tests (they start once the binary is built): its compile work is done by the
# race build, and the tests leave a core idle much of the time (waiting on containers and
# processes). Its output is printed when it ends; a lint failure stops the tests.
(
	t=$SECONDS
	make --no-print-directory lint LINTFLAGS=-race >"$log/lint.log" 2>&1
	echo "$? $((SECONDS - t))" >"$log/lint.status"
) &
lint_pid=$!
timed "test binary (rest of it)" wait $bin_pid || { cat "$log/test-binary.log" >&2; exit 1; }
# go test's own vet pass is off: lint runs go vet (every analyzer) on every package.
export GANTRY_TEST_BINARY="$bin/gantry"
# go test starts packages in the order given, -p (the cores) at a time. In ./...'s order the
# slowest (the workspace packages, last alphabetically) started after ~9 of 13 minutes and ran
# nearly alone at the end; started first, they run beside the many short ones. The list is the
# slowest of a warm run (over 60 s under -race) but those that wait for a service built in the
# background on a fresh machine (Kubernetes, the e2e image), which would hold a slot idle; the
# others follow in ./...'s order.
if [ "$PKGS" = ./... ]; then
	slow="workspace/reconcile taskq workspace/server workspace/api dsort workspace/provider/docker extsort"
	mod=$($GO list -m)
	all=$($GO list ./...)
	first=$(for p in $slow; do grep -x "$mod/$p" <<<"$all"; done)
	# shellcheck disable=SC2086 # word lists
	PKGS="$first $(grep -vxF -f <(printf '%s\n' $first) <<<"$all")"
fi
test_start=$SECONDS
# shellcheck disable=SC2086 # TESTFLAGS and PKGS are word lists
$GO test -race -vet=off $TESTFLAGS $PKGS &
test_pid=$!
wait $lint_pid
read -r lint_rc lint_s <"$log/lint.status"
cat "$log/lint.log" >&2
summary+=("$(printf '  %-34s %5ds  %s' "lint (beside the tests)" "$lint_s" "$([ "$lint_rc" = 0 ] && echo ok || echo "FAILED ($lint_rc)")")")
if [ "$lint_rc" != 0 ]; then
	kill -INT $test_pid 2>/dev/null
	wait $test_pid
	exit 1
fi
rc=0
wait $test_pid || rc=$?
summary+=("$(printf '  %-34s %5ds  %s' "go test -race" $((SECONDS - test_start)) "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")")")
exit $rc
