#!/bin/sh
# agent.sh - the tool layer of a shell agent harness, on asp-exec.
#
# An agent loop calls tools; here a scripted plan stands in for the model.
# Every tool runs in the sandbox of the .asp.json found from the current
# directory upwards (or $ASP_CONFIG), so the plan cannot tell it is remote.
# The first call starts asp-exec's master; the others reuse its connection.
#
#   ASP_EXEC=/path/to/asp-exec sh examples/shell/agent.sh
#
# Exits 0 when the plan went as expected.
set -eu

ASP_EXEC=${ASP_EXEC:-asp-exec}

# ---------------------------------------------------------------- tools
# write_file PATH: the file's new content comes on stdin (binary-safe, atomic).
write_file() {
	"$ASP_EXEC" --write "$1" --mkdirs
}

# read_file PATH: the content with line numbers, as a model would be shown it.
read_file() {
	"$ASP_EXEC" --read "$1" | awk '{ printf "%6d\t%s\n", NR, $0 }'
}

# run SECONDS COMMAND [ARG...]: stdout and stderr as they come; returns the
# command's exit status (124 when it ran out of time and was killed).
run() {
	limit=$1
	shift
	"$ASP_EXEC" --timeout "$limit" -- "$@"
}

call() {
	printf '\n> %s\n' "$*"
}

# ---------------------------------------------------------------- the plan
call 'write_file src/greet.sh'
write_file src/greet.sh <<'EOS'
#!/bin/sh
# greet.sh - says hello from wherever it runs
name=${1:-world}
echo "hello, $name, from $(uname -s) in $(pwd)"
EOS
echo "ok"

call 'read_file src/greet.sh'
read_file src/greet.sh

call 'run 10 sh src/greet.sh "shell harness"'
run 10 sh src/greet.sh "shell harness"

call 'run 1 sleep 30   (a command that hangs)'
status=0
run 1 sleep 30 || status=$?
if [ "$status" -eq 124 ]; then
	echo "timed out after 1 s and was killed (exit 124)"
else
	echo "agent: expected exit 124 from the hanging command, got $status" >&2
	exit 1
fi

call 'run 10 sh -c "ls src; exit 3"   (a failing command)'
status=0
run 10 sh -c 'ls src; exit 3' || status=$?
echo "exit status $status"
[ "$status" -eq 3 ] || exit 1

echo
echo "agent: plan done"
