#!/usr/bin/env bash
# run-jobs.sh - run test jobs in parallel, each into its own log, and say how each went.
#
#   tests/run-jobs.sh [-j N] [-w W] [-l LOGDIR] [-n TITLE] < JOBS
#
# JOBS has one job a line: a name, a tab, a weight, a tab, a shell command
# (run by bash, in the current directory, stdin from /dev/null). The weight
# says how much of the machine the job keeps busy: most tests wait on
# timers and sshd (1), a job under valgrind or a fuzzer keeps a core busy
# (5 or so). At most N jobs run at once, and their weights add up to at
# most W (default 12; a job heavier than W runs alone). Jobs start in the
# order given, the first that fits first: put the longest first. Each job's output goes
# to LOGDIR/NAME.log. As each ends, one line says ok or FAIL, its time,
# the test runner's own count when the log has one (check's "Checks: ..."),
# and the processor time it and the children it waited for used (user +
# system; a container engine's daemons are not its children). The logs of
# failed jobs are printed last, where a CI log's tail shows them; then the
# wall and the summed processor time ("TITLE: wall W s, cpu C s": on a
# machine whose cores are all busy, C is what a change must cut) and
# "TITLE: N passed, N failed". The exit status is 0 only when every job
# passed and at least one ran.
#
# A job that runs longer than ASP_JOB_LIMIT seconds (default 1800) is
# stopped, with its process group, and fails: a hung test must not eat the
# whole CI budget.
set -u

jobs_max=4
weight_max=12
logdir=build/logs
title=jobs
while getopts 'j:w:l:n:' o; do
	case $o in
	j) jobs_max=$OPTARG ;;
	w) weight_max=$OPTARG ;;
	l) logdir=$OPTARG ;;
	n) title=$OPTARG ;;
	*) echo "usage: $0 [-j N] [-w W] [-l LOGDIR] [-n TITLE] < JOBS" >&2; exit 2 ;;
	esac
done
limit=${ASP_JOB_LIMIT:-1800}
mkdir -p "$logdir"

names=() weights=() cmds=()
while IFS=$'\t' read -r name weight cmd; do
	[ -n "$name" ] || continue
	case $name in \#*) continue ;; esac
	if [ -z "$cmd" ] || [[ $name == */* ]] || ! [[ $weight =~ ^[1-9][0-9]*$ ]]; then
		echo "$title: bad job line: $name" >&2
		exit 2
	fi
	names+=("$name")
	weights+=("$weight")
	cmds+=("$cmd")
done

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%6.1f", b - a }'; }

declare -A pid_of=() start_of=() index_of=() pending=()
passed=0 failed=0 failed_names=() busy=0 cpu_all=0
t0=$(now)

# One job. timeout(1) runs it in a process group of its own and signals the
# whole group at the limit, so a hung test's children go too.
start_job() {
	local i=$1
	timeout -k 10 "$limit" bash -c 'TIMEFORMAT="%U %S"; { time bash -c "$1" </dev/null >"$2" 2>&1; } 2>"$3"' \
		_ "${cmds[$i]}" "$logdir/${names[$i]}.log" "$logdir/${names[$i]}.cpu" &
	pid_of[$i]=$!
	index_of[$!]=$i
	start_of[$i]=$(now)
	busy=$((busy + weights[i]))
	unset "pending[$i]"
}

# The first pending jobs, in order, that fit beside those running.
start_what_fits() {
	local i
	for ((i = 0; i < ${#names[@]}; i++)); do
		[ ${#pid_of[@]} -lt "$jobs_max" ] || return 0
		[ -n "${pending[$i]:-}" ] || continue
		if [ $((busy + weights[i])) -le "$weight_max" ] || [ ${#pid_of[@]} -eq 0 ]; then
			start_job "$i"
		fi
	done
}

finish_job() {
	local i=$1 rc=$2 log="$logdir/${names[$1]}.log" what count cpu
	count=$(grep -a -o '[0-9]*%: Checks: [0-9]*, Failures: [0-9]*, Errors: [0-9]*' "$log" |
		awk -F'[:,] *' '{ c += $3; f += $5; e += $7 } END { if (NR) printf "checks %d, failures %d, errors %d", c, f, e }')
	if [ "$rc" -eq 0 ]; then
		what=ok
		passed=$((passed + 1))
	else
		what=FAIL
		[ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && count="stopped at ${limit} s${count:+; }$count"
		failed=$((failed + 1))
		failed_names+=("$i")
	fi
	cpu=$(awk 'NF == 2 { printf "%.0f", $1 + $2 }' "$logdir/${names[$i]}.cpu" 2>/dev/null)
	cpu_all=$((cpu_all + ${cpu:-0}))
	printf '%-4s %s s  %s%s\n' "$what" "$(secs "${start_of[$i]}" "$(now)")" "${names[$i]}" \
		"${count:+  ($count)}${cpu:+  cpu $cpu s}"
	unset "pid_of[$i]"
	busy=$((busy - weights[i]))
}

trap 'kill -TERM "${pid_of[@]}" 2>/dev/null; exit 130' INT TERM

echo "$title: ${#names[@]} jobs, at most $jobs_max at a time and weight $weight_max, logs in $logdir/"
for ((i = 0; i < ${#names[@]}; i++)); do pending[$i]=1; done
while [ ${#pending[@]} -gt 0 ] || [ ${#pid_of[@]} -gt 0 ]; do
	start_what_fits
	done_pid=
	wait -n -p done_pid
	rc=$?
	[ -n "$done_pid" ] && finish_job "${index_of[$done_pid]}" $rc
done

for i in "${failed_names[@]}"; do
	echo "==== ${names[$i]} failed: ${cmds[$i]}"
	echo "==== last 150 lines of $logdir/${names[$i]}.log"
	tail -n 150 "$logdir/${names[$i]}.log"
done
echo "$title: wall $(secs "$t0" "$(now)") s, cpu $cpu_all s"
echo "$title: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
