#!/usr/bin/env bash
# Installs (apt-get) and starts what the tests need on loopback, and does nothing for what is
# already there. Safe to run many times, from many test processes at once (a lock serialises it).
#
#   scripts/services.sh              # everything
#   scripts/services.sh redis        # only the named services
#
# Services: protoc (for the generated-code check), redis (127.0.0.1:6379), postgres
# (postgres://gantry:gantry@127.0.0.1:5432/gantry), plus whatever scripts/services.d/*.sh add:
# each of those files defines service_<name>() and appends <name> to SERVICES.
# State (data dirs, logs) lives under $GANTRY_SERVICES_DIR (default: $TMPDIR/gantry-services).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
state=${GANTRY_SERVICES_DIR:-${TMPDIR:-/tmp}/gantry-services}
mkdir -p "$state"
# One run at a time. flock -o holds the lock in the flock process and closes it for the
# script, so the daemons started below never inherit (and never keep holding) the lock.
if [ -z "${GANTRY_SERVICES_LOCKED:-}" ]; then
	GANTRY_SERVICES_LOCKED=1 exec flock -o "$state/services.lock" bash "$0" "$@"
fi

log() { echo "services.sh: $*" >&2; }

apt_updated=
# apt_install PKG... installs the Debian packages that are missing.
apt_install() {
	local missing=()
	for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		log "missing ${missing[*]}: install them with your package manager"
		return 1
	fi
	log "installing ${missing[*]}"
	if [ -z "$apt_updated" ]; then apt-get update -qq >/dev/null; apt_updated=1; fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# wait_port HOST PORT SECONDS: waits until a TCP connect succeeds (tries at least once).
wait_port() {
	local i
	for ((i = 0; ; i++)); do
		(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
		((i < $3 * 10)) || return 1
		sleep 0.1
	done
}

SERVICES=(protoc redis postgres)

# packages_<name> (here and in services.d) prints the Debian packages service <name> would
# install now (nothing when it has them): services.sh installs all of them in one apt-get call
# before it starts anything (one package list read, one dpkg run), and the services' own
# apt_install calls find them there.
packages_protoc() { command -v protoc >/dev/null 2>&1 || echo protobuf-compiler; }
packages_redis() { command -v redis-server >/dev/null 2>&1 || echo redis-server; }
packages_postgres() {
	ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1 || echo postgresql
	command -v psql >/dev/null 2>&1 || echo postgresql-client
}

# shellcheck disable=SC2046 # package names have no spaces
service_protoc() { apt_install $(packages_protoc); }

service_redis() {
	wait_port 127.0.0.1 6379 0 && return 0
	# shellcheck disable=SC2046 # package names have no spaces
	apt_install $(packages_redis)
	mkdir -p "$state/redis"
	# No persistence: the shared test instance is scratch space. Tests that need AOF or a
	# restart start their own private redis-server.
	redis-server --bind 127.0.0.1 --port 6379 --dir "$state/redis" --save "" --appendonly no \
		--daemonize yes --logfile "$state/redis/redis.log" --pidfile "$state/redis/redis.pid"
	wait_port 127.0.0.1 6379 10 || { log "redis did not start (see $state/redis/redis.log)"; return 1; }
	log "redis on 127.0.0.1:6379"
}

service_postgres() {
	local dsn="postgresql://gantry:gantry@127.0.0.1:5432/gantry"
	if wait_port 127.0.0.1 5432 0; then
		psql "$dsn" -qAtc 'select 1' >/dev/null 2>&1 && return 0
		log "something listens on 127.0.0.1:5432 but $dsn does not work; set GANTRY_TEST_POSTGRES"
		return 1
	fi
	local bin
	bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	if [ -z "$bin" ]; then
		apt_install postgresql
		bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
	fi
	command -v psql >/dev/null 2>&1 || apt_install postgresql-client
	local data="$state/postgres"
	mkdir -p "$data"
	chown postgres: "$data" 2>/dev/null || true
	chmod 700 "$data"
	if ! runuser -u postgres -- test -w "$data" 2>/dev/null; then
		# A private state dir (e.g. TMPDIR=$(mktemp -d)): the postgres user cannot
		# reach it, so the cluster lives in that user's home instead.
		data="$(getent passwd postgres | cut -d: -f6)/gantry-test-cluster"
		mkdir -p "$data" && chown postgres: "$data" && chmod 700 "$data"
		log "postgres cannot enter $state; its data dir is $data"
	fi
	if [ ! -s "$data/PG_VERSION" ]; then
		(cd / && runuser -u postgres -- "$bin/initdb" -D "$data" -A trust -U postgres >/dev/null)
	fi
	# fsync off: a test database, thrown away with the machine; it makes the suite much faster.
	# From /: the postgres user may not be able to enter the caller's working directory.
	(cd / && runuser -u postgres -- "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -o \
		"-c listen_addresses=127.0.0.1 -p 5432 -k $data -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" start >/dev/null)
	wait_port 127.0.0.1 5432 20 || { log "postgres did not start (see $data/server.log)"; return 1; }
	psql -h 127.0.0.1 -U postgres -qAtc "select 1 from pg_roles where rolname='gantry'" | grep -q 1 ||
		psql -h 127.0.0.1 -U postgres -qc "create role gantry login superuser password 'gantry'"
	psql -h 127.0.0.1 -U postgres -qAtc "select 1 from pg_database where datname='gantry'" | grep -q 1 ||
		psql -h 127.0.0.1 -U postgres -qc "create database gantry owner gantry"
	log "postgres on 127.0.0.1:5432"
}

for f in "$here"/services.d/*.sh; do
	[ -e "$f" ] || continue
	# shellcheck source=/dev/null
	. "$f"
done

want=("$@")
# Started without names (make test, CI), a service listed in DEFERRED whose start is slow
# (MinIO's and Kubernetes' first starts build them, Jupyter's is a large apt-get install) goes on in the
# background once the others are up (so no two apt-get installs overlap): lint and the tests that do not
# need it run meanwhile, and a test that needs it runs `scripts/services.sh <name>`
# (testutil.Ensure), which waits for that build under its lock.
DEFERRED=(minio kubernetes jupyter)
deferred=()
defer_slow=0
if [ ${#want[@]} -eq 0 ]; then
	want=("${SERVICES[@]}")
	defer_slow=1
fi
# Slow builds (a service's prepare_<name>, e.g. MinIO's go install) start in the
# background now, so they overlap the apt-get installs of the others; the
# service's own function waits for its build under the build's lock.
# lowered: run in the background at a lower CPU priority, so a build fills the cores' idle time
# instead of slowing what the caller waits for (lint, the tests that do not need it).
lowered() { renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true; "$@"; }
for s in "${want[@]}"; do
	if declare -F "prepare_${s//-/_}" >/dev/null; then
		lowered "prepare_${s//-/_}" >>"$state/$s.prepare.log" 2>&1 </dev/null &
	fi
done
pkgs=()
for s in "${want[@]}"; do
	if declare -F "packages_${s//-/_}" >/dev/null; then
		# shellcheck disable=SC2207 # package names have no spaces
		pkgs+=($("packages_${s//-/_}"))
	fi
done
if [ ${#pkgs[@]} -gt 0 ]; then
	# shellcheck disable=SC2046
	apt_install $(printf '%s\n' "${pkgs[@]}" | sort -u)
fi
for s in "${want[@]}"; do
	fn="service_${s//-/_}"
	if ! declare -F "$fn" >/dev/null; then
		log "unknown service $s (known: ${SERVICES[*]})"
		exit 2
	fi
	if [ "$defer_slow" = 1 ] && [[ " ${DEFERRED[*]} " == *" $s "* ]]; then
		deferred+=("$s")
		continue
	fi
	"$fn"
done
# $state/<name>.ready holds when (Unix seconds) a deferred service was up (scripts/test.sh's
# timing summary).
for s in "${deferred[@]}"; do
	log "$s: starting in the background (log $state/$s.log); the tests that need it wait for it"
	rm -f "$state/$s.ready"
	("service_${s//-/_}" && date +%s >"$state/$s.ready") >"$state/$s.log" 2>&1 </dev/null &
done
log "ready in ${SECONDS}s"
