#!/bin/sh
# test-deb.sh - the Debian packages of `make deb`, installed into a fresh
# Debian 12 root (debootstrap, run through chroot as root), used against the
# sshd fixture on 127.0.0.1 (a chroot shares the host's network):
#
#   - a C program compiled against libasp-dev (pkg-config; and libasp.a),
#   - a Python program against python3-libasp (no $ASP_LIBRARY),
#   - asp-exec from its package, and asf-provision --help.
#
# The Debian root is made once and kept as a tarball under
# build/deb-root/ (a mirror is needed only then: $DEB_MIRROR, default
# deb.debian.org); each run unpacks a fresh copy. Needs root, debootstrap
# and the fixture program (build/tests/sshd-fixture). Not root, or no
# debootstrap: SKIPPED, loudly (a failure with ASP_REQUIRE_DEB=1).
#
#   sh tests/deb/test-deb.sh
set -eu
cd "$(dirname "$0")/../.."

BUILD=${BUILD:-build}
FIXTURE=${ASP_SSHD_FIXTURE:-$BUILD/tests/sshd-fixture}
MIRROR=${DEB_MIRROR:-http://deb.debian.org/debian}
CACHE=$BUILD/deb-root
ROOT_TAR=$CACHE/bookworm.tar
# Only what the packages depend on, plus the compiler of the C test: the
# packages then install with dpkg alone, offline.
INCLUDE=python3,libssh2-1,libcjson1,libssl3,gcc,libc6-dev,pkg-config,libssh2-1-dev,libcjson-dev,libssl-dev

skip() {
	echo "test-deb: SKIPPED: $*" >&2
	[ "${ASP_REQUIRE_DEB:-0}" != 1 ] || { echo "test-deb: ASP_REQUIRE_DEB=1: failing" >&2; exit 1; }
	exit 0
}
fail() {
	echo "test-deb: FAIL: $*" >&2
	exit 1
}

[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null || skip "debootstrap is missing (make deps installs it)"

# One run at a time (they share the root's tarball and build/deb).
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock 9

mounted_under() { grep -q " $(realpath "$1")/" /proc/mounts; }
# rm -rf of a tree that nothing is mounted in (a debootstrap that died leaves its /proc mounted).
remove_tree() {
	[ -e "$1" ] || return 0
	! mounted_under "$1" || fail "$1 has something mounted in it: not removing it"
	rm -rf "$1"
}

if [ ! -s "$ROOT_TAR" ]; then
	echo "test-deb: making the Debian 12 root (once; kept in $ROOT_TAR)"
	remove_tree "$CACHE/make"
	debootstrap --variant=minbase --include="$INCLUDE" bookworm "$CACHE/make" "$MIRROR" \
		>"$CACHE/debootstrap.log" 2>&1 || { tail -20 "$CACHE/debootstrap.log" >&2; fail "debootstrap failed"; }
	tar -C "$CACHE/make" -cf "$ROOT_TAR.part" . && mv "$ROOT_TAR.part" "$ROOT_TAR"
	remove_tree "$CACHE/make"
fi
[ "${1:-}" != --root-only ] || exit 0

[ -x "$FIXTURE" ] || fail "the sshd fixture program $FIXTURE is missing (make tests)"
make --no-print-directory -s deb BUILD="$BUILD" >"$CACHE/make-deb.log" 2>&1 ||
	{ tail -30 "$CACHE/make-deb.log" >&2; fail "make deb failed (log: $CACHE/make-deb.log)"; }
debs=$(ls "$BUILD"/deb/*.deb | grep -v -- -dbgsym_)
for p in libasp0 libasp-dev asp-exec asf-provision python3-libasp; do
	echo "$debs" | grep -q "/${p}_" || fail "make deb made no $p package"
done

run=$(mktemp -d "$PWD/$CACHE/run.XXXXXX")
root=$run/root
mounts=""
fx_pid=""
cleanup() {
	set +e
	[ -z "$fx_pid" ] || { exec 3>&-; wait "$fx_pid"; }
	for m in $mounts; do umount "$m"; done
	# Never remove a tree with something still mounted in it.
	if mounted_under "$run"; then
		echo "test-deb: $run still has mounts: left in place" >&2
	else
		rm -rf "$run"
	fi
}
trap cleanup EXIT INT TERM
bind() { # bind FILE-OR-DIR: the host's, at the same path in the root
	if [ -d "$1" ]; then mkdir -p "$root$1"; else touch "$root$1"; fi
	mount --bind "$1" "$root$1"
	mounts="$root$1 $mounts"
}

mkdir "$root"
tar -C "$root" -xf "$ROOT_TAR"
mount -t proc proc "$root/proc"
mounts="$root/proc"
for d in null zero random urandom; do
	[ -c "$root/dev/$d" ] || bind "/dev/$d"
done

# The packages, with dpkg alone: their dependencies are in the root already.
mkdir "$root/debs"
cp $debs "$root/debs/"
chroot "$root" sh -c 'dpkg -i /debs/*.deb' >"$run/dpkg.log" 2>&1 ||
	{ cat "$run/dpkg.log" >&2; fail "dpkg -i of the packages failed"; }
for p in libasp0 libasp-dev asp-exec asf-provision python3-libasp; do
	chroot "$root" dpkg-query -W -f '${Status}\n' "$p" | grep -q 'install ok installed' ||
		fail "$p is not installed"
done

# The sshd fixture on the host; its directory (config, client key) at the same path in the root.
mkfifo "$run/fx.in" "$run/fx.out"
"$FIXTURE" <"$run/fx.in" >"$run/fx.out" &
fx_pid=$!
exec 3>"$run/fx.in"
read -r facts <"$run/fx.out"
fact() { printf '%s' "$facts" | python3 -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }
config=$(fact config)
bind "$(fact dir)"

in_root() { chroot "$root" env -u ASP_LIBRARY -u LD_LIBRARY_PATH -u PYTHONPATH HOME=/root "$@"; }
expect() { # expect WHAT WANT GOT
	[ "$2" = "$3" ] || fail "$1: expected '$2', got '$3'"
	echo "test-deb: ok: $1"
}

# C, against libasp-dev: shared (pkg-config), and with libasp.a.
cp tests/deb/use.c "$root/tmp/use.c"
in_root sh -c 'cc -Wall -Werror -o /tmp/use /tmp/use.c $(pkg-config --cflags --libs libasp)' ||
	fail "use.c did not build against libasp-dev"
got=$(in_root /tmp/use "$config" 'echo from-c')
expect "C program (shared)" "libasp 0.1.0: from-c" "$got"
in_root sh -c 'ldd /tmp/use' | grep -Eq "libasp.so.0 => (/usr)?/lib/[^ ]*-linux-gnu/libasp.so.0" ||
	fail "the C program does not use the packaged libasp.so.0: $(in_root ldd /tmp/use)"
# libasp.a linked in, its dependencies shared (their own static closure is not installed).
in_root sh -c 'cc -Wall -Werror -o /tmp/use-static /tmp/use.c \
	$(pkg-config --cflags libasp) -Wl,-Bstatic -lasp -Wl,-Bdynamic $(pkg-config --libs libssh2 libcjson openssl) -lpthread' ||
	fail "use.c did not link the static libasp.a"
! in_root ldd /tmp/use-static | grep -q libasp || fail "the static build still loads libasp.so"
got=$(in_root /tmp/use-static "$config" 'echo from-static')
expect "C program (static)" "libasp 0.1.0: from-static" "$got"

# Python, with python3-libasp: no $ASP_LIBRARY, the system's libasp, through the loader
# (find_library gives libasp.so.0, or libasp.so with libasp-dev installed), not a path.
got=$(in_root python3 -c '
import sys, asp
with asp.open(sys.argv[1]) as sb:
    r = sb.exec("echo from-python")
lib = {"libasp.so": "libasp.so.0"}.get(asp.library_path, asp.library_path)
print(asp.__file__, lib, r.stdout.decode().strip())' "$config")
expect "Python program" "/usr/lib/python3/dist-packages/asp/__init__.py libasp.so.0 from-python" "$got"

# asp-exec from its package (its core beside it), then its master stopped.
got=$(in_root sh -c 'cd /tmp && asp-exec --config "$1" -- echo from-asp-exec' sh "$config")
expect "asp-exec" "from-asp-exec" "$got"
in_root asp-exec --config "$config" --stop >/dev/null 2>&1 || true
[ "$(in_root sh -c 'command -v asp-exec')" = /usr/bin/asp-exec ] || fail "asp-exec is not /usr/bin/asp-exec"

# asf-provision: it runs; mkrootfs.sh is where its package description says.
in_root asf-provision --help >/dev/null 2>&1 || fail "asf-provision --help failed"
[ -x "$root/usr/libexec/asf-provision/mkrootfs.sh" ] || fail "mkrootfs.sh is not in asf-provision's package"
echo "test-deb: ok: asf-provision"

# The manual pages make install makes are in the packages (asp-exec, asf-provision, libasp-dev).
for m in man1/asp-exec.1.gz man1/asf-provision.1.gz man3/libasp.3.gz; do
	[ -e "$root/usr/share/man/$m" ] || fail "usr/share/man/$m is in no package"
done
echo "test-deb: ok: manual pages"

echo "test-deb: passed"
