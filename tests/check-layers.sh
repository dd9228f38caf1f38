#!/bin/sh
# check-layers.sh - no cycle among the modules of libasp/ and of
# tools/asf-provision/ (or of the directories given): a module is a .c/.h
# pair, an edge an #include or a call into another module's .c. Each
# cycle is named with the lines that make it (tests/check-layers.py).
# tests/check-layers-selftest.sh shows it failing on a planted cycle.
cd "$(dirname "$0")/.." || exit 2
PYTHON=${PYTHON:-python3}
[ $# -gt 0 ] || set -- libasp tools/asf-provision
rc=0
for dir in "$@"; do
	"$PYTHON" tests/check-layers.py "$dir" || rc=1
done
exit $rc
