# shellcheck shell=bash
# Debian's chromium for the workspace web page test (driven over the DevTools
# protocol by chromedp). Sourced by scripts/services.sh; also runnable by itself.

service_chromium() {
	if command -v chromium >/dev/null 2>&1; then
		return 0
	fi
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		echo "services.sh: chromium missing (install Debian's chromium package)" >&2
		return 1
	fi
	echo "services.sh: installing chromium" >&2
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
}

SERVICES+=(chromium)

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	service_chromium
fi
