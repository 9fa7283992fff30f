# shellcheck shell=bash
# python3 for the workspace proxy tests, which serve HTTP (python3 -m
# http.server) and a WebSocket echo inside their workspaces. Sourced by
# scripts/services.sh.

packages_python3() { command -v python3 >/dev/null 2>&1 || echo python3; }

service_python3() {
	command -v python3 >/dev/null 2>&1 || apt_install python3
}

SERVICES+=(python3)
