# shellcheck shell=bash
# MinIO (S3-compatible object store) on 127.0.0.1:9000 for the workspace s3
# provider tests. Sourced by scripts/services.sh; also runnable by itself.
#
# MinIO is not packaged in Debian, so it is built from the Go module proxy
# (`go install github.com/minio/minio@latest`) into a cache directory once.
# Credentials are the test ones below; the data directory lives in the cache,
# so re-runs keep it and nothing outside the cache is touched.
#
#   GANTRY_MINIO_ADDR   listen address (default 127.0.0.1:9000)
#   GANTRY_CACHE        cache root     (default ${XDG_CACHE_HOME:-$HOME/.cache}/gantry)

service_minio() {
	local cache="${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}"
	local addr="${GANTRY_MINIO_ADDR:-127.0.0.1:9000}"
	local bin="$cache/bin/minio"
	if curl -fsS -m 2 "http://$addr/minio/health/live" >/dev/null 2>&1; then
		return 0
	fi
	mkdir -p "$cache/bin" "$cache/minio-data"
	if [ ! -x "$bin" ]; then
		echo "services.sh: building minio into $bin (go install, a few minutes)" >&2
		GOBIN="$cache/bin" go install github.com/minio/minio@latest || {
			echo "services.sh: go install github.com/minio/minio failed" >&2
			return 1
		}
	fi
	echo "services.sh: starting minio on $addr (data $cache/minio-data)" >&2
	MINIO_ROOT_USER=gantry MINIO_ROOT_PASSWORD=gantry-secret \
		MINIO_BROWSER=off MINIO_UPDATE=off \
		setsid nohup "$bin" server --quiet --address "$addr" "$cache/minio-data" \
		>"$cache/minio.log" 2>&1 </dev/null &
	local i
	for i in $(seq 1 60); do
		if curl -fsS -m 2 "http://$addr/minio/health/live" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.5
	done
	echo "services.sh: minio did not come up on $addr; see $cache/minio.log" >&2
	return 1
}

SERVICES+=(minio)

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	service_minio
fi
