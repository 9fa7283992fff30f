# shellcheck shell=bash
# OpenSSH's client (ssh, scp, sftp) for the workspace SSH tests, which
# connect through `gantry ws ssh --stdio` as ProxyCommand, the sftp server
# they run in the workspace (for sftp and modern scp), and rsync (both
# ends: the workspace's is run by ssh). Sourced by scripts/services.sh.

packages_openssh() {
	command -v ssh >/dev/null 2>&1 && command -v scp >/dev/null 2>&1 && command -v sftp >/dev/null 2>&1 || echo openssh-client
	[ -x /usr/lib/openssh/sftp-server ] || [ -x /usr/libexec/openssh/sftp-server ] || echo openssh-sftp-server
	command -v rsync >/dev/null 2>&1 || echo rsync
}

# shellcheck disable=SC2046 # package names have no spaces
service_openssh() { apt_install $(packages_openssh); }

SERVICES+=(openssh)
