# shellcheck shell=bash
# Debian's Jupyter Notebook (6.x, classic; python3-ipykernel comes with it)
# for the workspace app browser test, which runs jupyter-notebook inside a
# process-provider workspace and drives a notebook (its kernel over a
# WebSocket) through the app's own origin. Sourced by scripts/services.sh.

# Its install (about 80 Python packages) is slow, so make test runs it in the
# background (DEFERRED in services.sh) and the Jupyter test asks for it again
# (scripts/services.sh jupyter): one install at a time, under a lock of its own,
# and the second caller waits for the first and finds it installed.
service_jupyter() {
	command -v jupyter-notebook >/dev/null 2>&1 && return 0
	(
		flock 8
		command -v jupyter-notebook >/dev/null 2>&1 || apt_install jupyter-notebook
	) 8>"$state/jupyter.lock"
}

SERVICES+=(jupyter)
