#!/usr/bin/env bash
# tiers.sh - what `make check` and `make check-deep` run, as parallel jobs.
#
#   bash tests/tiers.sh [-j N] GROUP...
#
# Each group below prints job lines ("name<TAB>weight<TAB>command");
# tests/run-jobs.sh runs them, N at a time (default 6: most of a test's
# time is spent waiting on a timer or on sshd) within a weight budget (a
# job that keeps a core busy weighs more), longest first, and prints each
# job's time and a "N passed, N failed" line. The Makefile builds first: this script
# only runs what is built.
#
#   check   = unit python node integration static fuzz-replay
#   deep    = provision valgrind san tsan routes fuzz slow shfs alloc soak wipe pi bench-smoke demo deb
#
# Every test of the integration binary runs in exactly one of the two
# plain runs: `integration` leaves out the test cases tagged slow
# (tests/tiers.h), `slow` runs only those. The other deep groups rerun the
# suites in other conditions (shell transport, far-link routes, ASan+UBSan,
# valgrind) and run everything, slow cases included, as before the split.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=6
while getopts 'j:' o; do
	case $o in
	j) jobs=$OPTARG ;;
	*) echo "usage: $0 [-j N] GROUP..." >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-j N] GROUP..." >&2; exit 2; }

BUILD=${BUILD:-build}
SAN_BUILD=build-san
PYTHON=${PYTHON:-/usr/bin/python3}
MAKE_QUIET="make --no-print-directory"

integ=$(ls tests/integration/test_*.c | sed 's|.*/test_\(.*\)\.c|\1|')
# Suites that have a test case tagged slow (tests/tiers.h).
slow_suites=$(grep -l 'slow_case(\|SLOW_TAG' tests/integration/test_*.c | sed 's|.*/test_\(.*\)\.c|\1|')
# Longest first (measured): a long suite started last would set the wall time alone.
long_first="discover_race deadline pool bulk limits faults interop warm security cli hostile debris shfs"
order() { # the words of $1 in long_first's order, then the rest
	local w
	for w in $long_first; do [[ " $(echo $1) " == *" $w "* ]] && echo "$w"; done
	for w in $1; do [[ " $long_first " == *" $w "* ]] || echo "$w"; done
}

# The file-call suites over the shell-command transport (no SFTP); tests
# that are SFTP by nature skip themselves, one "SKIP file_transport=exec:"
# line each: more than SHFS_SKIPS_MAX of them fails (a new skip must be looked at).
SHFS_SUITES="limits hostile debris rw fs args"
SHFS_SKIPS_MAX=3
# check-routes: the suites that make file calls or send stdin, whose routes
# the far link changes; not warm, which tests the route choice itself, nor
# those that do neither (discovery, host keys and identities, the banner,
# logging, the fixture, asp-exec's run directory and usage): run again
# there they only added time (routes-discover_race alone took 221 s).
ROUTES_SKIP="warm discover_race trust identity fixture banner log rundir cli_usage provision_usage"
# valgrind (~30x slower) runs every suite except those that measure deadlines and timeouts,
# which run plain and under ASan instead:
#   pool       waits for a free connection, connect and keepalive deadlines
#   faults     fault injection through a delaying proxy, per-call deadlines
#   cli        asp-exec's timeouts and signals
#   cli_files  asp-exec --read cancelled by a signal
#   cli_master the master's idle exit, --persist, a killed client's command
#   deadline   per-call deadlines and cancel
#   calloptions exec's call deadline (1 s, the start included) beside its kill timer
#   limits     output caps reached under timeouts
#   interop    an exec timeout against each server and login shell
#   shfs       cancel and deadlines of file calls over exec, a silent SFTP subsystem
#   bulk       hundreds of MiB through AES-CTR (hours under valgrind), kills and cancels
#              timed by what the server has written
# nor those whose subject runs in a child process (asp-exec, asf-provision), which valgrind
# does not follow: cli_usage cli_tty cli_bg provision_usage (ASan, built in, does).
VALGRIND_SKIP="pool faults cli cli_files cli_master deadline calloptions limits interop shfs bulk"
VALGRIND_SKIP="$VALGRIND_SKIP cli_usage cli_tty cli_bg provision_usage"
VALGRIND="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite"
FUZZ_TARGETS="config hostkey kexinit quote sftp"
# ThreadSanitizer (the TSAN=1 build): the suites where the library's threads meet (one handle
# from many threads, the pool's maintenance thread, bulk transfers' helper threads, cancel
# tokens triggered from another thread, proc waits), slow cases included, and the soak; args
# too, whose suite-wide sandbox is open when check forks each test (the pool's fork handlers,
# 1 s); and asp-exec's suites, whose master, pump and terminal threads are instrumented too
# (about a minute in all), but not cli: its closed-stdout test floods the client with output,
# which the instrumented client read at 0.3 MB/s on a loaded machine, so the kill queued behind
# it came 25 to 112 s late against the test's 8 s bound (0.1 s in the plain build). A test
# whose subject the sanitizer changes skips itself ("SKIP tsan:", tests/helpers.h): more than
# TSAN_SKIPS_MAX of those fails the run.
TSAN_BUILD=build-tsan
TSAN_SUITES="deadline bulk pool proc calloptions bg exec warm faults lifecycle args"
TSAN_SUITES="$TSAN_SUITES cli_bg cli_files cli_master cli_tty"
TSAN_SKIPS_MAX=3
# Harness timeouts (check's test case timeouts and fx_slowdown()) under ASan, TSan and valgrind.
SAN_SLOWDOWN=3
TSAN_SLOWDOWN=8
VALGRIND_SLOWDOWN=6

# Each name in a skip list must still be a suite: a renamed suite fails the run.
for s in $ROUTES_SKIP $VALGRIND_SKIP $SHFS_SUITES $TSAN_SUITES $long_first; do
	[ -f "tests/integration/test_$s.c" ] ||
		{ echo "tiers.sh: '$s' is named here, but tests/integration/test_$s.c is gone" >&2; exit 1; }
done

# One sanitizer report file per process, per job (SAN_LOG.<job>.<pid>): read after the run.
SAN_LOG=$PWD/$SAN_BUILD/sanitizer
san_env() {
	echo "CK_TIMEOUT_MULTIPLIER=$SAN_SLOWDOWN" \
	     "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:log_path=$SAN_LOG.$1" \
	     "UBSAN_OPTIONS=print_stacktrace=1:log_path=$SAN_LOG.$1"
}

# ThreadSanitizer's reports: the same directory scheme, read after the run with ASan's. A report
# also makes the process exit 66, so the test that raced fails where it ran.
TSAN_LOG=$PWD/$TSAN_BUILD/sanitizer
tsan_env() {
	echo "CK_TIMEOUT_MULTIPLIER=$TSAN_SLOWDOWN" \
	     "TSAN_OPTIONS=halt_on_error=0:die_after_fork=0:second_deadlock_stack=1:log_path=$TSAN_LOG.$1"
}

# How much of this 2-core budget (12) a job takes: tests that mostly wait
# on timers and sshd; ASan's or a busy test's; one that keeps a core busy
# all along (valgrind, a fuzzer, the allocation torture). W_CORE is half
# the budget: two such run at once only with nothing beside them, so the
# timing-bound tests beside one still get the other core. (At 7, more than
# half, they never paired: their 2,300 s ran one after another, and the
# tier's last 9 minutes were fuzzers, alloc and deb, one at a time.)
W_WAIT=1 W_SAN=2 W_BUSY=3 W_CORE=6
# job NAME WEIGHT COMMAND
job() { printf '%s\t%s\t%s\n' "$1" "$2" "$3"; }

group_unit() { job unit $W_BUSY "./$BUILD/tests/test-unit"; }

group_integration() {
	local s
	for s in $(order "$integ"); do
		job "integration-$s" $W_WAIT "CK_EXCLUDE_TAGS=slow ASP_TEST_SUITE=$s ./$BUILD/tests/test-integration"
	done
}

group_static() {
	job makefile $W_WAIT "$MAKE_QUIET check-makefile"
	job meta $W_BUSY "BUILD=$BUILD sh tests/meta.sh"
	job schema $W_WAIT "$PYTHON tests/schema_agree.py"
	# bench/run.py's goal verdicts and busy warning, from fixed results (no benchmark runs).
	job bench-report $W_WAIT "$PYTHON tests/bench_report.py"
	job style $W_WAIT "sh tests/check-style.sh"
	job layers-selftest $W_WAIT "sh tests/check-layers-selftest.sh"
	job layers $W_WAIT "sh tests/check-layers.sh"
	# Every code block of the docs, run against the sshd fixture (tests/docs_run.py).
	job docs $W_WAIT "BUILD=$BUILD $PYTHON tests/docs_run.py"
	job man $W_WAIT "BUILD=$BUILD sh tests/man.sh"
	# asf-provision's Kubernetes manifests, every mode: the API schema and the Pod Security Standards.
	job kube-manifests $W_WAIT "BUILD=$BUILD node tests/kube/check.mjs"
}

group_fuzz_replay() { job fuzz-replay $W_WAIT "$MAKE_QUIET check-fuzz-replay"; }
group_python() { job python $W_BUSY "$MAKE_QUIET check-python"; }
group_node() { job node $W_BUSY "$MAKE_QUIET check-node-binding"; }

group_slow() {
	local s
	for s in $(order "$slow_suites"); do
		job "slow-$s" $W_WAIT "CK_INCLUDE_TAGS=slow ASP_TEST_SUITE=$s ./$BUILD/tests/test-integration"
	done
}

group_shfs() {
	local s
	for s in $(order "$SHFS_SUITES"); do
		job "shfs-$s" $W_WAIT "ASP_TEST_FILE_TRANSPORT=exec ASP_TEST_SUITE=$s ./$BUILD/tests/test-integration"
	done
}

group_routes() {
	local s
	for s in $(order "$integ"); do
		[[ " $ROUTES_SKIP " == *" $s "* ]] && continue
		job "routes-$s" $W_WAIT "ASP_TEST_ROUTES=far ASP_TEST_SUITE=$s ./$BUILD/tests/test-integration"
	done
}

group_san() {
	local s
	for s in $(order "$integ"); do
		job "san-$s" $W_SAN "$(san_env "san-$s") ASP_TEST_SUITE=$s ./$SAN_BUILD/tests/test-integration"
	done
	# The slow cases (the default caps reached: 256 MiB read, a million names) run over exec
	# in shfs and under ASan over SFTP: both at once added 3 to 4 minutes of a busy core.
	for s in $(order "$SHFS_SUITES"); do
		job "san-shfs-$s" $W_SAN "$(san_env "san-shfs-$s") CK_EXCLUDE_TAGS=slow ASP_TEST_FILE_TRANSPORT=exec ASP_TEST_SUITE=$s ./$SAN_BUILD/tests/test-integration"
	done
	job san-unit $W_SAN "$(san_env san-unit) ./$SAN_BUILD/tests/test-unit"
	job san-fuzz-replay $W_SAN "$(san_env san-fuzz-replay) $MAKE_QUIET SAN=1 check-fuzz-replay"
	# Its RSS and heap checks skip themselves under ASan: LeakSanitizer speaks instead.
	job san-soak $W_BUSY "$(san_env san-soak) $MAKE_QUIET SAN=1 soak SOAK_OPS=1000 SOAK_THREADS=4"
}

group_tsan() {
	local s
	for s in $(order "$TSAN_SUITES"); do
		job "tsan-$s" $W_SAN "$(tsan_env "tsan-$s") ASP_TEST_SUITE=$s ./$TSAN_BUILD/tests/test-integration"
	done
	job tsan-soak $W_BUSY "$(tsan_env tsan-soak) SOAK_OPS=3000 SOAK_THREADS=16 ./$TSAN_BUILD/tests/soak"
}

group_valgrind() {
	local s only
	for s in $(order "$integ"); do
		[[ " $VALGRIND_SKIP " == *" $s "* ]] && continue
		# discover_race's race_cli case races asp-exec processes, which valgrind does not
		# follow (plain and ASan run it): here it spun the racer for nothing.
		only=
		[ "$s" = discover_race ] && only="CK_RUN_CASE=race "
		job "valgrind-$s" $W_CORE "${only}CK_TIMEOUT_MULTIPLIER=$VALGRIND_SLOWDOWN ASP_TEST_SUITE=$s $VALGRIND ./$BUILD/tests/test-integration"
	done
	job valgrind-unit $W_CORE "CK_FORK=no $VALGRIND ./$BUILD/tests/test-unit"
	job valgrind-fuzz-replay $W_CORE "$MAKE_QUIET check-fuzz-replay FUZZ_RUNNER='$VALGRIND'"
	job valgrind-soak $W_CORE "SOAK_OPS=300 SOAK_THREADS=4 SOAK_NO_RSS_CHECK=1 $VALGRIND ./$BUILD/tests/soak"
}

# Podman (with the kubernetes Pod and the isolation probes) and Docker end
# to end, each once, with the ASan+UBSan build (the same code as the plain
# one, instrumented). An engine never serves two runs at once: each run
# holds its engine's lock (flock). All Podman work shares one lock, so it
# sets the tier's floor. A plain Podman run and a second run of the probes
# held that lock 7 to 12 minutes more on a loaded machine; a plain Docker
# run was the same 19 tests again, starting containers on the tier's two
# busy cores, where every other job waits for processor time.
engine_run() { # ENGINE BUILD [ENV...]: the provisioning tests of one engine, under its lock
	local engine=$1 build=$2 probes=
	shift 2
	[ "$engine" = podman ] && probes=" && ASF_PROVISION=$build/bin/asf-provision ./$build/tests/test-probes"
	echo "flock /run/lock/asp-test-$engine.lock sh -c '${*:+export $*; }ASF_TEST_ENGINES=$engine" \
	     "ASF_PROVISION=$build/bin/asf-provision ./$build/tests/test-provision$probes'"
}
group_provision() {
	job provision-podman $W_SAN "$(engine_run podman "$SAN_BUILD" "$(san_env provision-podman)")"
	# Then mkrootfs.sh's agent profile in a Podman sandbox (it takes the Podman lock itself, for
	# up only): as a job of its own it held one of the tier's job slots for 7 to 9 minutes
	# while it waited for that lock.
	job provision-docker $W_SAN \
		"$(engine_run docker "$SAN_BUILD" "$(san_env provision-docker)") && sh tests/provision/agent-profile.sh"
}

group_fuzz() {
	local t
	for t in $FUZZ_TARGETS; do
		job "fuzz-$t" $W_CORE "$MAKE_QUIET fuzz FUZZ_TARGETS=$t FUZZ_SECONDS=30"
	done
}

group_alloc() { job alloc $W_CORE "$MAKE_QUIET check-alloc"; }
group_soak() { job soak $W_BUSY "$MAKE_QUIET soak SOAK_OPS=3000"; }
group_wipe() { job wipe $W_WAIT "$MAKE_QUIET check-wipe"; }
group_pi() { job pi $W_BUSY "$MAKE_QUIET check-node-pi"; }
group_bench_smoke() { job bench-smoke $W_BUSY "$PYTHON bench/run.py --scale smoke"; }
# make demo's Podman sandbox: it runs, its user is no host account, /tmp is left clean.
group_demo() { job demo $W_BUSY "sh tests/demo-check.sh"; }
# make deb, then the packages installed into a fresh Debian 12 root (tests/deb/test-deb.sh).
group_deb() { job deb $W_CORE "BUILD=$BUILD sh tests/deb/test-deb.sh"; }

expand() {
	case $1 in
	check) echo unit python node integration static fuzz-replay ;;
	deep) echo provision valgrind san tsan routes fuzz slow shfs alloc soak wipe pi bench-smoke demo deb ;;
	*) echo "$1" ;;
	esac
}

groups=()
for g in "$@"; do
	for x in $(expand "$g"); do
		declare -F "group_${x//-/_}" >/dev/null ||
			{ echo "tiers.sh: no group '$x' (see the head of $0)" >&2; exit 2; }
		groups+=("$x")
	done
done

logdir=$BUILD/logs/$(IFS=-; echo "$*")
rm -rf "$logdir"
rm -f "$SAN_LOG".* "$TSAN_LOG".*
rc=0
for g in "${groups[@]}"; do "group_${g//-/_}"; done |
	bash tests/run-jobs.sh -j "$jobs" -w 12 -l "$logdir" -n "$*" || rc=$?

# After the run: what no single job can judge.
# count_skips GROUP PREFIX MAX WHAT: the group's "PREFIX" lines, listed; more than MAX fail the run.
count_skips() {
	local skips
	[[ " ${groups[*]} " == *" $1 "* ]] || return 0
	skips=$(cat "$logdir"/"$1"-*.log | grep -c "^$2" || true)
	echo "$1: $skips $4 (at most $3)"
	grep -h "^$2" "$logdir"/"$1"-*.log || true
	[ "$skips" -le "$3" ] || { echo "$1: more skips than $3"; rc=1; }
}
count_skips shfs 'SKIP file_transport=exec:' "$SHFS_SKIPS_MAX" "SFTP-only tests skipped over exec channels"
count_skips tsan 'SKIP tsan:' "$TSAN_SKIPS_MAX" "tests skipped under ThreadSanitizer"
# A sanitizer report fails the run even when the process that wrote it passed.
for f in "$SAN_LOG".* "$TSAN_LOG".*; do
	[ -f "$f" ] || continue
	echo "==== sanitizer report $f"
	head -c 8000 "$f"
	rc=1
done
exit $rc
