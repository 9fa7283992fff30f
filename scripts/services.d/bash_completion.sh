# shellcheck shell=bash
# bash-completion (the package every interactive bash on Debian loads) for the
# test of `gantry completion bash`, whose script calls its functions. Sourced by
# scripts/services.sh.

packages_bash_completion() { [ -e /usr/share/bash-completion/bash_completion ] || echo bash-completion; }

# shellcheck disable=SC2046 # package names have no spaces
service_bash_completion() { apt_install $(packages_bash_completion); }

SERVICES+=(bash_completion)
