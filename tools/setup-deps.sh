#!/bin/sh
# setup-deps.sh - install what libasp's build, tests and demo need on Debian 12,
# and nothing else. Run by `make deps`, `make check` and `make demo`, as root
# (or through sudo). Idempotent: quiet when there is nothing to do, one line
# per action otherwise.
set -eu

# Debian packages. Append here (one place) when a later part needs more.
PACKAGES="build-essential pkg-config libssh2-1-dev libcjson-dev libssl-dev check
openssh-server openssh-client python3 python3-jsonschema python3-asyncssh
python3-paramiko nftables iproute2 valgrind procps util-linux
podman runc ripgrep clang libclang-rt-dev
dropbear-bin tinysshd ucspi-tcp busybox dash zsh fish
docker.io tinyproxy squid uidmap slirp4netns passt fuse-overlayfs catatonit
gnuplot-nox tmux bsdutils"

# The unprivileged login user of the integration tests' sshd.
TEST_USER=asp-test
TEST_HOME=/home/$TEST_USER

# Login users of the interoperability suite (tests/integration/test_interop.c),
# keys only like asp-test, one login shell each ("user:shell"). BusyBox picks
# its applet by the name it is run as, and sshd runs a login shell as its
# base name: BusyBox's sh is a link named sh to it.
BUSYBOX_SH=/usr/local/libexec/asp-busybox/sh
SHELL_USERS="asp-sh-dash:/usr/bin/dash asp-sh-busybox:$BUSYBOX_SH asp-sh-zsh:/usr/bin/zsh
asp-sh-fish:/usr/bin/fish"

# sshd's privilege-separation directory.
SSHD_PRIVSEP_DIR=/run/sshd

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
fi

say() {
	printf 'setup-deps: %s\n' "$*"
}

as_root() {
	if [ -n "$SUDO" ] && ! command -v sudo >/dev/null 2>&1; then
		say "need root (or sudo) to run: $*" >&2
		exit 1
	fi
	$SUDO "$@"
}

is_installed() {
	[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

missing_packages() {
	for p in $PACKAGES; do
		is_installed "$p" || printf '%s ' "$p"
	done
	# Node (bindings/node, examples/node): any node >= 18 with npm will do;
	# take Debian's only when the machine has none.
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || printf 'nodejs npm '
	# kubectl: Debian's kubernetes-client, unless a kubectl is already there
	# (another package providing /usr/bin/kubectl would conflict with it).
	command -v kubectl >/dev/null 2>&1 || printf 'kubernetes-client '
}

install_packages() {
	missing=$(missing_packages)
	[ -n "$missing" ] || return 0
	say "installing ${missing% }"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
	# shellcheck disable=SC2086 # word splitting is intended
	as_root env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# A locked password ("!") makes sshd refuse the account even for key auth
# (UsePAM no); "*" means no password can match while keys still work.
ensure_test_user() {
	if ! id "$TEST_USER" >/dev/null 2>&1; then
		say "creating user $TEST_USER"
		as_root useradd --create-home --home-dir "$TEST_HOME" --shell /bin/bash "$TEST_USER"
		as_root usermod -p '*' "$TEST_USER"
		return 0
	fi
	# Only root reads the shadow entry: without root, skip the check rather than prompt.
	[ -z "$SUDO" ] || return 0
	if [ "$(getent shadow "$TEST_USER" | cut -d: -f2)" != '*' ]; then
		say "setting a no-password ('*') entry for $TEST_USER"
		usermod -p '*' "$TEST_USER"
	fi
	if [ ! -d "$TEST_HOME" ]; then
		say "creating $TEST_HOME"
		mkdir -p "$TEST_HOME"
		chown "$TEST_USER:" "$TEST_HOME"
		chmod 0755 "$TEST_HOME"
	fi
}

ensure_busybox_sh() {
	[ "$(readlink "$BUSYBOX_SH" 2>/dev/null)" = /usr/bin/busybox ] && return 0
	say "linking $BUSYBOX_SH to /usr/bin/busybox"
	as_root mkdir -p "$(dirname "$BUSYBOX_SH")"
	as_root ln -sfn /usr/bin/busybox "$BUSYBOX_SH"
}

# Dropbear accepts only login shells listed in /etc/shells (OpenSSH does not ask).
ensure_shell_users() {
	for entry in $SHELL_USERS; do
		user=${entry%%:*} shell=${entry#*:}
		if ! grep -qx "$shell" /etc/shells; then
			say "adding $shell to /etc/shells"
			as_root add-shell "$shell"
		fi
		if ! id "$user" >/dev/null 2>&1; then
			say "creating user $user (login shell $shell)"
			as_root useradd --create-home --shell "$shell" "$user"
			as_root usermod -p '*' "$user"
		elif [ "$(getent passwd "$user" | cut -d: -f7)" != "$shell" ]; then
			say "setting the login shell of $user to $shell"
			as_root usermod --shell "$shell" "$user"
		fi
	done
}

ensure_privsep_dir() {
	[ -d "$SSHD_PRIVSEP_DIR" ] && return 0
	say "creating $SSHD_PRIVSEP_DIR"
	as_root mkdir -p "$SSHD_PRIVSEP_DIR"
	as_root chmod 0755 "$SSHD_PRIVSEP_DIR"
}

install_packages
ensure_test_user
ensure_busybox_sh
ensure_shell_users
ensure_privsep_dir
