# shellcheck shell=bash
# MinIO (S3-compatible object store) on 127.0.0.1:9000 for the workspace s3
# provider tests. Sourced by scripts/services.sh; also runnable by itself.
#
# MinIO is not packaged in Debian, so it is built from the Go module proxy
# (`go install github.com/minio/minio@<the version pinned below>`) into a cache directory once.
# Credentials are the test ones below; the data directory lives in the cache,
# so re-runs keep it and nothing outside the cache is touched.
#
#   GANTRY_MINIO_ADDR   listen address (default 127.0.0.1:9000)
#   GANTRY_CACHE        cache root     (default ${XDG_CACHE_HOME:-$HOME/.cache}/gantry)

minio_cache() { echo "${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}"; }

# build_minio installs the pinned MinIO into the cache unless it is there. It
# holds the cache's build lock, so a background build (prepare_minio) and
# service_minio never build twice: the second waits and finds the binary.
build_minio() {
	local cache bin
	cache=$(minio_cache)
	bin="$cache/bin/minio"
	mkdir -p "$cache/bin"
	(
		flock 9
		[ -x "$bin" ] && exit 0
		echo "services.sh: building minio into $bin (go install, a few minutes)" >&2
		GOBIN="$cache/bin" go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c || {
			echo "services.sh: go install github.com/minio/minio failed" >&2
			exit 1
		}
	) 9>"$cache/minio.build.lock"
}

# prepare_minio starts the build early (scripts/services.sh runs it in the
# background) when MinIO is neither running nor built.
prepare_minio() {
	local addr="${GANTRY_MINIO_ADDR:-127.0.0.1:9000}"
	[ -x "$(minio_cache)/bin/minio" ] && return 0
	curl -fsS -m 2 "http://$addr/minio/health/live" >/dev/null 2>&1 && return 0
	build_minio >/dev/null 2>&1 || true
}

service_minio() {
	local cache addr bin
	cache=$(minio_cache)
	addr="${GANTRY_MINIO_ADDR:-127.0.0.1:9000}"
	bin="$cache/bin/minio"
	if minio_up "$addr"; then
		return 0
	fi
	mkdir -p "$cache/bin" "$cache/minio-data"
	[ -x "$bin" ] || echo "services.sh: minio is being built (go install, a few minutes)" >&2
	build_minio || return 1
	# One start at a time: make test starts MinIO in the background after services.sh's own
	# lock is gone, and a test may ask for it meanwhile (scripts/services.sh minio). Two
	# servers on one data directory each format it, and the loser's drive is then
	# "inconsistent" to the winner (500s on every request); the second caller waits here and
	# finds the first one's server up.
	(
		flock 8
		minio_up "$addr" && exit 0
		echo "services.sh: starting minio on $addr (data $cache/minio-data)" >&2
		MINIO_ROOT_USER=gantry MINIO_ROOT_PASSWORD=gantry-secret \
			MINIO_BROWSER=off MINIO_UPDATE=off \
			setsid nohup "$bin" server --quiet --address "$addr" "$cache/minio-data" \
			>"$cache/minio.log" 2>&1 </dev/null 8>&- &
		local i
		for i in $(seq 1 60); do
			minio_up "$addr" && exit 0
			sleep 0.5
		done
		echo "services.sh: minio did not come up on $addr; see $cache/minio.log" >&2
		exit 1
	) 8>"$cache/minio.start.lock"
}

# minio_up ADDR: MinIO answers its liveness check there.
minio_up() { curl -fsS -m 2 "http://$1/minio/health/live" >/dev/null 2>&1; }

SERVICES+=(minio)

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	service_minio
fi
