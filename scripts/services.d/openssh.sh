# shellcheck shell=bash
# OpenSSH's client (ssh, scp) for the workspace SSH test, which connects
# through `gantry ws ssh --stdio` as ProxyCommand. Sourced by
# scripts/services.sh.

service_openssh() {
	command -v ssh >/dev/null 2>&1 && command -v scp >/dev/null 2>&1 || apt_install openssh-client
}

SERVICES+=(openssh)
