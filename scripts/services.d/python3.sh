# shellcheck shell=bash
# python3 for the workspace proxy tests, which serve HTTP (python3 -m
# http.server) and a WebSocket echo inside their workspaces. Sourced by
# scripts/services.sh.

packages_python3() { command -v python3 >/dev/null 2>&1 || echo python3; }

# shellcheck disable=SC2046 # package names have no spaces
service_python3() { apt_install $(packages_python3); }

SERVICES+=(python3)
