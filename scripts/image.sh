#!/usr/bin/env bash
# Builds gantry's container image with the local Docker engine (no registry, nothing pulled):
# FROM scratch, the static binary at /usr/local/bin/gantry, the CA certificates of this machine
# (for S3 and TLS servers), /etc/passwd and /etc/group naming an unprivileged user gantry
# (65532:65532) the image runs as, its home /home/gantry (the working directory, also where
# `ws serve` keeps its data by default) and a /tmp.
#
#   scripts/image.sh                               # tag gantry:dev (make image)
#   scripts/image.sh --tag gantry:v1 --binary bin/gantry-static
#
# --binary uses an already built static (CGO_ENABLED=0) linux binary instead of building one.
# Prints the tag on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=gantry:dev
bin=
while [ $# -gt 0 ]; do
	case $1 in
	--tag) tag=$2; shift 2 ;;
	--binary) bin=$2; shift 2 ;;
	*) echo "image.sh: unknown argument $1 (want --tag T, --binary PATH)" >&2; exit 2 ;;
	esac
done
command -v docker >/dev/null || { echo "image.sh: needs the docker command and a Docker engine" >&2; exit 1; }
certs=/etc/ssl/certs/ca-certificates.crt
[ -s "$certs" ] || { echo "image.sh: $certs is missing (apt-get install ca-certificates)" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/root/usr/local/bin" "$ctx/root/etc/ssl/certs" "$ctx/home/gantry" "$ctx/tmp"
if [ -n "$bin" ]; then
	cp "$bin" "$ctx/root/usr/local/bin/gantry"
else
	version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
	CGO_ENABLED=0 GOOS=linux go build -trimpath \
		-ldflags "-s -w -X github.com/gantryhq/gantry/cmd/gantry/internal/cli.Version=$version" \
		-o "$ctx/root/usr/local/bin/gantry" ./cmd/gantry
fi
cp "$certs" "$ctx/root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\ngantry:x:65532:65532:gantry:/home/gantry:/sbin/nologin\n' >"$ctx/root/etc/passwd"
printf 'root:x:0:\ngantry:x:65532:\n' >"$ctx/root/etc/group"
chmod 1777 "$ctx/tmp"
cat >"$ctx/Dockerfile" <<'EOF'
FROM scratch
COPY root/ /
COPY tmp/ /tmp/
COPY --chown=65532:65532 home/ /home/
USER 65532:65532
WORKDIR /home/gantry
ENV HOME=/home/gantry
LABEL org.opencontainers.image.title="gantry" \
      org.opencontainers.image.description="distributed sort, task queue and workspace reconciler in one binary"
ENTRYPOINT ["/usr/local/bin/gantry"]
EOF
DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$ctx" >/dev/null 2>"$ctx/build.err" || { cat "$ctx/build.err" >&2; exit 1; }
echo "$tag"
