#!/usr/bin/env bash
# Installs and starts what the tests need on a fresh Debian machine, and does
# nothing for what is already there. Safe to run many times.
#
# Needed today: nothing beyond Go itself (the sort tests build and run the
# gantry binary; the gRPC code is generated and committed). protoc is only
# needed for `make generate`, and is installed here when missing so the
# generated-code check can run.
set -euo pipefail

need_apt=()
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)

if [ ${#need_apt[@]} -gt 0 ]; then
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "services.sh: installing ${need_apt[*]}" >&2
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
	else
		echo "services.sh: missing ${need_apt[*]} (install them with your package manager)" >&2
	fi
fi
