# shellcheck shell=bash
# Debian's Jupyter Notebook (6.x, classic; python3-ipykernel comes with it)
# for the workspace app browser test, which runs jupyter-notebook inside a
# process-provider workspace and drives a notebook (its kernel over a
# WebSocket) through the app's own origin. Sourced by scripts/services.sh.

service_jupyter() {
	command -v jupyter-notebook >/dev/null 2>&1 || apt_install jupyter-notebook
}

SERVICES+=(jupyter)
