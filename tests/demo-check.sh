#!/bin/sh
# demo-check.sh - `make demo`'s Podman path (tools/demo-podman.sh) as a test:
# it succeeds, its sandbox user is an id no host account has (verify's
# workspace check says "which is no account"), and it leaves nothing in /tmp.
# Needs root and Podman: without them it prints SKIP and passes, unless
# ASF_REQUIRE_PODMAN=1. Holds the Podman lock of tests/tiers.sh's engine runs.
set -u
cd "$(dirname "$0")/.."
if ! sh tools/demo-podman.sh --check; then
	[ "${ASF_REQUIRE_PODMAN:-}" = 1 ] && { echo "demo-check: FAIL: Podman is not usable here"; exit 1; }
	echo "demo-check: SKIP: Podman is not usable here (root, podman, runc, nsenter, nft)"
	exit 0
fi
log=$(mktemp /tmp/asp-demo-check.XXXXXX)
trap 'rm -f "$log" "$log.before" "$log.after"' EXIT
ls -d /tmp/asf-demo* 2>/dev/null | sort >"$log.before"
flock /run/lock/asp-test-podman.lock sh tools/demo-podman.sh >"$log" 2>&1
rc=$?
fail=0
[ $rc -eq 0 ] || { echo "demo-check: FAIL: the demo exited $rc"; fail=1; }
grep -q '^pass  workspace .*owned by uid [0-9]*, which is no account' "$log" ||
	{ echo "demo-check: FAIL: verify did not find the sandbox user to be no host account"; fail=1; }
ls -d /tmp/asf-demo* 2>/dev/null | sort >"$log.after"
left=$(comm -13 "$log.before" "$log.after")
[ -z "$left" ] || { echo "demo-check: FAIL: left behind: $left"; fail=1; }
[ $fail -eq 0 ] || { tail -40 "$log"; exit 1; }
echo "demo-check: passed (the demo ran, its sandbox user is no account, nothing left in /tmp)"
