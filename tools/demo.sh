#!/bin/sh
# demo.sh - `make demo`: a local sandbox, a `.asp.json` that pins its host
# key, and the example harnesses run against it through discovery. The
# sandbox is a hardened Podman container made by asf-provision when Podman
# is usable here (tools/demo-podman.sh), else an OpenSSH sshd on 127.0.0.1
# with its own keys and workspace (ASP_DEMO_LOOPBACK=1 forces that).
# Cleans up after itself.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
sh "$top/tools/setup-deps.sh"
# A hardened Podman sandbox (asf-provision) when this machine can run one.
if [ -z "${ASP_DEMO_LOOPBACK:-}" ] && sh "$top/tools/demo-podman.sh" --check 2>/dev/null; then
	exec sh "$top/tools/demo-podman.sh"
fi
make -C "$top" -s lib tools

tmp=$(mktemp -d /tmp/asp-demo.XXXXXX)
sshd_pid=
cleanup() {
	[ -n "$sshd_pid" ] && kill "$sshd_pid" 2>/dev/null && wait "$sshd_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
chmod 755 "$tmp"

say() { printf '\033[1m== %s\033[0m\n' "$*"; }

# The sandbox's login user: unprivileged when we can (root runs sshd), else ourselves.
if [ "$(id -u)" -eq 0 ]; then user=asp-test; else user=$(id -un); fi

say "installing libasp into $tmp/prefix and building examples/c with pkg-config"
make -C "$top" -s install PREFIX="$tmp/prefix" >/dev/null
PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
export PKG_CONFIG_PATH
# shellcheck disable=SC2046 # pkg-config output is meant to be split
cc -o "$tmp/tool_loop" "$top/examples/c/tool_loop.c" $(pkg-config --cflags --libs libasp) \
	-Wl,-rpath,"$tmp/prefix/lib"

say "starting a sandbox: sshd on 127.0.0.1 as user $user"
ssh-keygen -q -t ed25519 -N '' -C demo-host -f "$tmp/host_key"
ssh-keygen -q -t ed25519 -N '' -C demo-client -f "$tmp/client_key"
cp "$tmp/client_key.pub" "$tmp/authorized_keys"
chmod 644 "$tmp/authorized_keys"
mkdir -p "$tmp/sandbox"
[ "$(id -u)" -eq 0 ] && chown "$user" "$tmp/sandbox"
mkdir -p /run/sshd 2>/dev/null || true
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$tmp/sshd_config" <<EOC
ListenAddress 127.0.0.1
Port $port
HostKey $tmp/host_key
PidFile none
AuthorizedKeysFile $tmp/authorized_keys
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowUsers $user
Subsystem sftp /usr/lib/openssh/sftp-server
EOC
/usr/sbin/sshd -D -e -f "$tmp/sshd_config" -E "$tmp/sshd.log" &
sshd_pid=$!
i=0
until grep -q "Server listening" "$tmp/sshd.log" 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 100 ] || { echo "sshd did not start:" >&2; cat "$tmp/sshd.log" >&2; exit 1; }
	sleep 0.05
done

say "writing $tmp/project/.asp.json (host key pinned)"
mkdir -p "$tmp/project/deep/inside"
cat > "$tmp/project/.asp.json" <<EOC
{
  "version": "0",
  "transport": "ssh",
  "connection": {
    "host": "127.0.0.1",
    "port": $port,
    "user": "$user",
    "identity": "$tmp/client_key",
    "host_key": "$(cut -d' ' -f1,2 "$tmp/host_key.pub")"
  },
  "workspace": "$tmp/sandbox"
}
EOC
cat "$tmp/project/.asp.json"

say "running examples/c/tool_loop from $tmp/project/deep/inside (discovery walks up)"
(cd "$tmp/project/deep/inside" && "$tmp/tool_loop")

say "running examples/python/agent.py (the Python binding; read/write/edit/bash tools)"
(cd "$tmp/project/deep/inside" && /usr/bin/python3 "$top/examples/python/agent.py" --scripted)

say "running examples/shell/agent.sh (asp-exec with its connection-sharing master)"
(cd "$tmp/project" && ASP_EXEC="$top/build/bin/asp-exec" sh "$top/examples/shell/agent.sh")
(cd "$tmp/project" && "$top/build/bin/asp-exec" --stop >/dev/null 2>&1 || true)

say "the sandbox's workspace now holds:"
ls -la "$tmp/sandbox"
say "done; cleaning up"
