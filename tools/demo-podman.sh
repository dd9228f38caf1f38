#!/bin/sh
# demo-podman.sh - `make demo` with a real sandbox: asf-provision makes a
# hardened Podman container running sshd with no egress (offline root
# filesystem built from this host's binaries, no registry), writes the
# .asp.json that pins its host key, the example harness runs through it,
# `verify` collects the evidence, `down` removes everything.
#
#   sh tools/demo-podman.sh          run the demo
#   sh tools/demo-podman.sh --check  exit 0 when Podman is usable here (tools/demo.sh asks)
#
# ASF_RUNTIME picks the OCI runtime (default: runc when installed).
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
runtime=${ASF_RUNTIME:-}
if [ -z "$runtime" ] && command -v runc >/dev/null 2>&1; then runtime=runc; fi

podman_usable() {
	[ "$(id -u)" -eq 0 ] || return 1 # rootful Podman, nsenter and nft
	command -v podman >/dev/null 2>&1 || return 1
	command -v nsenter >/dev/null 2>&1 && command -v nft >/dev/null 2>&1 || return 1
	podman version >/dev/null 2>&1 || return 1
	[ -n "$runtime" ] || return 1
}

if [ "${1:-}" = "--check" ]; then
	podman_usable
	exit $?
fi

sh "$top/tools/setup-deps.sh"
podman_usable || { echo "demo-podman: Podman is not usable here (root, podman, runc, nsenter, nft)" >&2; exit 1; }
make -C "$top" -s lib tools

tmp=$(mktemp -d /tmp/asf-demo.XXXXXX)
asf="$top/build/bin/asf-provision --state-dir $tmp/state"
name="demo$$"
cleanup() {
	$asf down "$name" >/dev/null 2>&1 || $asf down "$name" >&2 || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
chmod 755 "$tmp"

say() { printf '\033[1m== %s\033[0m\n' "$*"; }

say "installing libasp into $tmp/prefix and building examples/c with pkg-config"
make -C "$top" -s install PREFIX="$tmp/prefix" >/dev/null
PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
export PKG_CONFIG_PATH
# shellcheck disable=SC2046 # pkg-config output is meant to be split
cc -o "$tmp/tool_loop" "$top/examples/c/tool_loop.c" $(pkg-config --cflags --libs libasp) \
	-Wl,-rpath,"$tmp/prefix/lib"

say "building an offline root filesystem from this host's sshd, bash and coreutils"
sh "$top/tools/asf-provision/mkrootfs.sh" "$tmp/rootfs"

say "asf-provision up: a Podman sandbox ($runtime) with no egress"
mkdir -p "$tmp/sandbox" "$tmp/project/deep/inside"
$asf up --name "$name" --workspace "$tmp/sandbox" --rootfs "$tmp/rootfs" --runtime "$runtime" \
	--memory 512m --cpus 1 --pids 256 --out "$tmp/project/.asp.json"
cat "$tmp/project/.asp.json"
echo

say "running examples/c/tool_loop from $tmp/project/deep/inside (discovery walks up)"
(cd "$tmp/project/deep/inside" && "$tmp/tool_loop")

say "running examples/python/agent.py (the Python binding; the sandbox has no python3 of its own)"
(cd "$tmp/project/deep/inside" && /usr/bin/python3 "$top/examples/python/agent.py" --scripted) || true

say "running examples/shell/agent.sh (asp-exec with its connection-sharing master)"
(cd "$tmp/project" && ASP_EXEC="$top/build/bin/asp-exec" sh "$top/examples/shell/agent.sh")
(cd "$tmp/project" && "$top/build/bin/asp-exec" --stop >/dev/null 2>&1 || true)

say "the sandbox's workspace, seen from the host:"
ls -la "$tmp/sandbox"

say "asf-provision verify: evidence from inside the sandbox"
# The evidence file goes with the rest of the demo (the table above is what it holds).
$asf verify "$name" --report "$tmp/evidence.json" || status=$?
say "asf-provision down"
$asf down "$name"
exit "${status:-0}"
