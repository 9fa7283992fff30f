# shellcheck shell=bash
# Debian's chromium for the workspace web page test (driven over the DevTools
# protocol by chromedp). Sourced by scripts/services.sh; also runnable by itself.

# In services.sh's one apt-get call (which skips Recommends: fonts-liberation, the one of
# chromium-common's that a page's text needs, is named).
packages_chromium() { command -v chromium >/dev/null 2>&1 || echo chromium fonts-liberation; }

service_chromium() {
	command -v chromium >/dev/null 2>&1 && return 0
	# shellcheck disable=SC2046 # package names have no spaces
	apt_install $(packages_chromium)
}

SERVICES+=(chromium)

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	# Run by itself (testutil's chromium lookup): services.sh's apt_install is not here.
	apt_install() {
		if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
			echo "services.sh: chromium missing (install Debian's chromium package)" >&2
			return 1
		fi
		echo "services.sh: installing $*" >&2
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
	}
	service_chromium
fi
