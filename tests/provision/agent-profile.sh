#!/bin/sh
# agent-profile.sh - the agent profile of mkrootfs.sh, end to end: build the
# tree, provision a Podman sandbox from it, and run through asp-exec what an
# agent runs there (ps, nohup, setsid, python3, git, tmux driven by keys,
# ripgrep, curl, less), then terminus-slim (examples/python/terminus_slim)
# on a scripted model doing a small task in tmux. Each check compares real
# output; the run ends with `down`. Run from the top of the tree as root
# (Podman rootful, runc).
#
#   ASF_PROVISION  the asf-provision binary (default build/bin/asf-provision)
#   ASP_EXEC       the asp-exec binary (default build/bin/asp-exec)
#   PYTHON         the Python that runs terminus-slim (default python3)
set -eu

top=$(pwd)
asf_bin=${ASF_PROVISION:-$top/build/bin/asf-provision}
asp_exec=${ASP_EXEC:-$top/build/bin/asp-exec}
[ -x "$asf_bin" ] && [ -x "$asp_exec" ] || { echo "agent-profile: build first (make tools)" >&2; exit 1; }
runtime=${ASF_RUNTIME:-runc}

tmp=$(mktemp -d /tmp/asf-agent-profile.XXXXXX)
chmod 755 "$tmp"
asf="$asf_bin --state-dir $tmp/state"
name="agentprof$$"
cleanup() {
	$asf down "$name" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

failed=0
passed=0
check() { # NAME EXPECTED COMMAND: the command's stdout must contain EXPECTED
	out=$(cd "$tmp/project" && "$asp_exec" -- "$3" 2>"$tmp/err") || true
	case $out in
	*"$2"*) passed=$((passed + 1)); echo "ok   $1" ;;
	*) failed=$((failed + 1)); echo "FAIL $1: expected '$2' in the output of: $3"
	   printf '  stdout: %s\n  stderr: %s\n' "$out" "$(cat "$tmp/err")" ;;
	esac
}

# The tree is kept in build/agent-rootfs/KEY, KEY a hash of mkrootfs.sh and
# of every installed package's version (what the tree is copied from): a
# run after a package upgrade or a change of the script builds it again.
# The sandbox's root is read-only, so runs can share it.
t0=$(date +%s)
cache=$top/${BUILD:-build}/agent-rootfs
key=$( (cat "$top/tools/asf-provision/mkrootfs.sh"; dpkg-query -W -f='${Package}:${Architecture} ${Version}\n') |
	sha256sum | cut -c1-16)
rootfs=$cache/$key
mkdir -p "$cache"
(
	flock 9
	if [ ! -e "$rootfs/.complete" ]; then
		rm -rf "$cache"/*/ "$cache/make"
		sh "$top/tools/asf-provision/mkrootfs.sh" --profile agent "$cache/make"
		: > "$cache/make/.complete"
		mv "$cache/make" "$rootfs"
	else
		echo "agent-profile: the agent rootfs from $rootfs (cached)"
	fi
) 9>"$cache/lock"
t1=$(date +%s)
mkdir -p "$tmp/ws" "$tmp/project"
flock /run/lock/asp-test-podman.lock $asf up --name "$name" --workspace "$tmp/ws" --rootfs "$rootfs" \
	--runtime "$runtime" --memory 512m --cpus 1 --pids 256 --out "$tmp/project/.asp.json" >/dev/null

t2=$(date +%s)
check ps "PID" 'ps -o pid,comm'
check nohup "nohup-ok" 'nohup sh -c "echo nohup-ok" >nohup.out 2>&1; cat nohup.out'
check setsid "setsid-ok" 'setsid sh -c "echo setsid-ok"'
check python3 "py-ok 42" 'python3 -c "import json, ssl, sqlite3, subprocess; print(\"py-ok\", 6 * 7)"'
check git "1 commit" 'git init -q repo && cd repo && git -c user.email=a@example.invalid -c user.name=a \
	commit -q --allow-empty -m first && echo "$(git rev-list --count HEAD) commit"'
# tmux in the background: keys in, screen out (what a terminal-driving agent does).
check tmux "tmux-42" 'tmux new-session -d -s t -x 80 -y 24 && tmux send-keys -t t "echo tmux-\$((6*7))" Enter &&
	i=0; while [ $i -lt 100 ] && ! tmux capture-pane -p -t t | grep -q "^tmux-42"; do sleep 0.1; i=$((i+1)); done;
	tmux capture-pane -p -t t | grep "^tmux-42"; tmux kill-server'
check ripgrep "needle.txt:1:a needle" 'echo "a needle" > needle.txt && rg -n --with-filename needle needle.txt'
check curl "curl " 'curl --version'
check less "less " 'less --version'
check locale "UTF-8" 'LC_ALL=C.UTF-8 locale charmap 2>/dev/null || LC_ALL=C.UTF-8 python3 -c "import locale; print(locale.getpreferredencoding())"'

# terminus-slim in this sandbox: a scripted model (on 127.0.0.1) creates a project, sees its
# test fail on the screen, fixes it, sees it pass; the model is never told of the transport.
if ${PYTHON:-python3} "$top/bindings/python/tests/test_terminus_slim.py" \
	--against "$tmp/project/.asp.json" >"$tmp/terminus.out" 2>&1; then
	passed=$((passed + 1)); echo "ok   terminus-slim"
else
	failed=$((failed + 1)); echo "FAIL terminus-slim"; tail -n 60 "$tmp/terminus.out"
fi

t3=$(date +%s)
$asf down "$name" >/dev/null
echo "agent-profile: $passed passed, $failed failed (rootfs $((t1 - t0)) s, up $((t2 - t1)) s," \
	"checks $((t3 - t2)) s, down $(($(date +%s) - t3)) s)"
[ "$failed" -eq 0 ]
