#!/bin/sh
# check-layers.sh - no cycle among the modules of libasp/ and of
# tools/asf-provision/ (or of the directories given): a module is a .c/.h
# pair, an edge an #include or a call into another module's .c. Each
# cycle is named with the lines that make it (tests/check-layers.py).
# A directory with a LAYERS file (libasp/LAYERS: its folders, lowest
# first) also fails on an edge into a folder above its own.
# tests/check-layers-selftest.sh shows it failing on a planted cycle and
# on a planted upward edge.
cd "$(dirname "$0")/.." || exit 2
PYTHON=${PYTHON:-python3}
[ $# -gt 0 ] || set -- libasp tools/asf-provision
rc=0
for dir in "$@"; do
	"$PYTHON" tests/check-layers.py "$dir" || rc=1
done
exit $rc
