#!/bin/sh
# bench.sh - per-call wall time of asp-exec against OpenSSH, side by side:
# asp-exec with its master, asp-exec --no-master (a full SSH handshake per
# call), ssh fresh, and ssh with ControlMaster/ControlPersist, all running
# `true` on the same loopback sshd (fresh keys, its own port). Calls are
# interleaved round-robin so that machine noise hits every variant alike.
# Prints median and p99 (nearest rank) per variant, and the ratios.
#
#   sh tools/asp-exec/bench.sh [N]        (N calls per variant, default 50)
#
# Needs: a built build/bin/asp-exec (make tools), sshd, ssh, python3, and
# root (the sshd login user is asp-test, see tools/setup-deps.sh) or any
# user (then the login user is yourself).
set -eu

n=${1:-50}
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${ASP_EXEC:-$top/build/bin/asp-exec}
[ -x "$bin" ] || { echo "bench: $bin not built (make tools)" >&2; exit 1; }

tmp=$(mktemp -d /tmp/asp-bench.XXXXXX)
sshd_pid=
cleanup() {
	XDG_RUNTIME_DIR=$tmp/run "$bin" --config "$tmp/asp.json" --stop >/dev/null 2>&1 || true
	ssh -F /dev/null -o ControlPath="$tmp/cm" -O exit x >/dev/null 2>&1 || true
	[ -n "$sshd_pid" ] && kill "$sshd_pid" 2>/dev/null && wait "$sshd_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
chmod 755 "$tmp"
mkdir -m 700 "$tmp/run"

if [ "$(id -u)" -eq 0 ]; then user=asp-test; else user=$(id -un); fi
ssh-keygen -q -t ed25519 -N '' -f "$tmp/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/client_key"
cp "$tmp/client_key.pub" "$tmp/authorized_keys"
chmod 644 "$tmp/authorized_keys"
mkdir "$tmp/ws"
[ "$(id -u)" -eq 0 ] && chown "$user" "$tmp/ws"
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
MaxStartups 100:30:200
Subsystem sftp /usr/lib/openssh/sftp-server
EOC
/usr/sbin/sshd -D -e -f "$tmp/sshd_config" -E "$tmp/sshd.log" -o PerSourcePenalties=no 2>/dev/null &
sshd_pid=$!
i=0
until grep -q "Server listening" "$tmp/sshd.log" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -ge 100 ]; then
		# OpenSSH < 9.8 has no PerSourcePenalties: start without it.
		kill "$sshd_pid" 2>/dev/null || true
		/usr/sbin/sshd -D -e -f "$tmp/sshd_config" -E "$tmp/sshd.log" &
		sshd_pid=$!
		sleep 0.5
		break
	fi
	sleep 0.05
done

cat > "$tmp/asp.json" <<EOC
{"version": "0", "transport": "ssh",
 "connection": {"host": "127.0.0.1", "port": $port, "user": "$user",
                "identity": "$tmp/client_key", "host_key": "$(cut -d' ' -f1,2 "$tmp/host_key.pub")"},
 "workspace": "$tmp/ws"}
EOC

ssh_opts="-F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o UserKnownHostsFile=/dev/null \
-o StrictHostKeyChecking=no -o LogLevel=ERROR -i $tmp/client_key -p $port"
# Warm both masters up (not timed).
XDG_RUNTIME_DIR=$tmp/run "$bin" --config "$tmp/asp.json" --persist 600 true
# shellcheck disable=SC2086 # ssh_opts is a list of options
ssh $ssh_opts -o ControlMaster=yes -o ControlPath="$tmp/cm" -o ControlPersist=600 "$user@127.0.0.1" true

XDG_RUNTIME_DIR=$tmp/run N=$n BIN=$bin CFG=$tmp/asp.json SSH_OPTS=$ssh_opts \
	DEST=$user@127.0.0.1 CM=$tmp/cm python3 - <<'EOPY'
import os, shlex, subprocess, time

n = int(os.environ["N"])
ssh = ["ssh"] + shlex.split(os.environ["SSH_OPTS"])
# Two groups, each interleaved: shared connections, then fresh ones (a fresh
# connection leaves sshd busy for a while, which would tax the next call).
warm = [
    ("local /bin/true (spawn floor)", ["/bin/true"]),
    ("asp-exec, master", [os.environ["BIN"], "--config", os.environ["CFG"], "true"]),
    ("ssh, ControlMaster", ssh + ["-o", "ControlPath=" + os.environ["CM"], os.environ["DEST"], "true"]),
]
fresh = [
    ("asp-exec --no-master", [os.environ["BIN"], "--config", os.environ["CFG"], "--no-master", "true"]),
    ("ssh, fresh", ssh + [os.environ["DEST"], "true"]),
]
variants = warm + fresh
times = {name: [] for name, _ in variants}
for group in (warm, fresh):
    for _ in range(n):
        for name, argv in group:
            t = time.perf_counter()
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            times[name].append((time.perf_counter() - t) * 1000)
            if r.returncode != 0:
                raise SystemExit("bench: %s exited %d" % (name, r.returncode))

def median(v):
    v = sorted(v)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2

def p99(v):
    v = sorted(v)
    return v[max(0, -(-99 * len(v) // 100) - 1)]

print("per-call wall time of `true`, N=%d each, interleaved in two groups (ms)" % n)
print("%-32s %9s %9s" % ("variant", "median", "p99"))
for name, _ in variants:
    print("%-32s %9.2f %9.2f" % (name, median(times[name]), p99(times[name])))
m = {name: median(v) for name, v in times.items()}
floor = m["local /bin/true (spawn floor)"]
print("ratios of medians (and of medians less the spawn floor):")
for a, b in (("asp-exec, master", "ssh, ControlMaster"), ("asp-exec --no-master", "ssh, fresh"),
             ("asp-exec, master", "asp-exec --no-master")):
    print("  %-22s / %-22s %5.2f  (%.2f)" % (a, b, m[a] / m[b], (m[a] - floor) / (m[b] - floor)))
EOPY
