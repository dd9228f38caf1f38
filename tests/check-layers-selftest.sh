#!/bin/sh
# check-layers-selftest.sh - the layer check (tests/check-layers.py) fails
# on a cycle and passes without one: on a small tree made here, then on
# copies of tools/asf-provision/ and libasp/ with a cycle planted in them;
# and it fails on an edge into a folder above its own (libasp/LAYERS) or
# a folder LAYERS does not name, planted in copies of libasp/.
# The real tree is never touched.
cd "$(dirname "$0")/.." || exit 2
PYTHON=${PYTHON:-python3}
CHECK="$PYTHON $(pwd)/tests/check-layers.py"
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0
n=0

ok() { n=$((n + 1)); echo "ok $n - $1"; }
bad() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; sed 's/^/    /' "$tmp/out"; }

# passes DIR WHAT: the check exits 0 on DIR
passes() {
	if $CHECK "$1" >"$tmp/out" 2>&1; then ok "$2"; else bad "$2 (the check failed)"; fi
}

# fails DIR WHAT TEXT...: the check exits 1 on DIR and its message has every TEXT
fails() {
	dir=$1 what=$2
	shift 2
	$CHECK "$dir" >"$tmp/out" 2>&1
	rc=$?
	if [ $rc -ne 1 ]; then
		bad "$what (exit $rc, expected 1)"
		return
	fi
	for text in "$@"; do
		if ! grep -qF -- "$text" "$tmp/out"; then
			bad "$what (no \"$text\" in the message)"
			return
		fi
	done
	ok "$what"
	sed 's/^/    # /' "$tmp/out"
}

# ---------------------------------------------------------------- a small tree

mk() {
	rm -rf "$tmp/t"
	mkdir "$tmp/t"
	cat >"$tmp/t/low.h" <<'EOF'
int low_get(void);
EOF
	cat >"$tmp/t/low.c" <<'EOF'
#include "low.h"

/* top_run() in a comment is no call */
static const char *say = "top_run()";

static int helper(void)
{
	return say[0];
}

int low_get(void)
{
	return helper();
}
EOF
	cat >"$tmp/t/mid.h" <<'EOF'
#include "low.h"
int mid_get(void);
EOF
	cat >"$tmp/t/mid.c" <<'EOF'
#include "mid.h"

static int helper(void)
{
	return low_get();
}

int mid_get(void)
{
	return helper() + 1;
}
EOF
	cat >"$tmp/t/top.c" <<'EOF'
#include "mid.h"

void top_run(void);

void top_run(void)
{
	mid_get();
}
EOF
}

mk
passes "$tmp/t" "a tree without a cycle passes (a name in a comment or string, statics of one name)"

mk
cat >>"$tmp/t/low.c" <<'EOF'

void top_run(void);

void low_back(void)
{
	top_run();
}
EOF
fails "$tmp/t" "a call from the bottom module to the top one fails" \
	"cycle: $tmp/t/low -> $tmp/t/top -> $tmp/t/mid -> $tmp/t/low" "t/low.c:20 names top_run (" \
	"t/top.c:1 includes \"mid.h\"" "1 cycle(s)"

mk
cat >>"$tmp/t/low.c" <<'EOF'

void top_run(void);
void (*low_hook)(void) = top_run;
EOF
fails "$tmp/t" "a pointer to a function of another module counts as a call" "names top_run ("

mk
printf '#include "mid.h"\n' >>"$tmp/t/low.c"
fails "$tmp/t" "an include that goes up fails" "cycle: $tmp/t/low -> $tmp/t/mid -> $tmp/t/low" \
	"t/low.c:15 includes \"mid.h\""

# ---------------------------------------------------------------- the real trees

cp -R tools/asf-provision "$tmp/asf"
passes "$tmp/asf" "a copy of tools/asf-provision passes"
cat >>"$tmp/asf/report.c" <<'EOF'

void planted_cycle(void);

void planted_cycle(void)
{
	kube_teardown("x", NULL, NULL);
}
EOF
fails "$tmp/asf" "tools/asf-provision with report.c calling kube.c fails" \
	"asf/report.c:" "names kube_teardown (" "asf/kube.c:" "names asf_note ("

cp -R libasp "$tmp/libasp"
$CHECK "$tmp/libasp" >"$tmp/out" 2>&1
if grep -q "cycle:.*libasp/core/common" "$tmp/out"; then
	bad "the copy of libasp already has a cycle through common"
else
	ok "the copy of libasp has no cycle through common (before planting)"
fi
cat >>"$tmp/libasp/core/common.c" <<'EOF'

void asp__common_planted(void);

void asp__common_planted(void)
{
	asp__exec_run(NULL, NULL, NULL, NULL, NULL, NULL, NULL);
}
EOF
fails "$tmp/libasp" "libasp with common.c calling asp__exec_run fails" \
	"libasp/core/common -> $tmp/libasp/exec/exec: $tmp/libasp/core/common.c:" \
	"names asp__exec_run (" "upward: $tmp/libasp/core/common -> $tmp/libasp/exec/exec (folder exec is above core"

# Upward edges that make no cycle: only the folder order catches them.
rm -rf "$tmp/libasp" && cp -R libasp "$tmp/libasp"
passes "$tmp/libasp" "a copy of libasp passes (its folders in the order of libasp/LAYERS)"
printf '#include "exec.h"\n' >>"$tmp/libasp/ssh/pool.c"
line=$(wc -l <"$tmp/libasp/ssh/pool.c")
fails "$tmp/libasp" "libasp with ssh/pool.c including exec.h (no cycle) fails" \
	"upward: $tmp/libasp/ssh/pool -> $tmp/libasp/exec/exec (folder exec is above ssh" \
	"libasp/ssh/pool.c:$line includes \"exec.h\"" "1 edge(s) against the folder order"
if grep -q "cycle" "$tmp/out"; then bad "the planted include made a cycle: the case tests nothing"; fi

rm -rf "$tmp/libasp" && cp -R libasp "$tmp/libasp"
mv "$tmp/libasp/fs/bulk.c" "$tmp/libasp/fs/bulk.h" "$tmp/libasp/core/"
fails "$tmp/libasp" "libasp with bulk.c moved down into core/ fails" \
	"upward: $tmp/libasp/core/bulk -> $tmp/libasp/ssh/pool (folder ssh is above core" \
	"libasp/core/bulk.c:"

rm -rf "$tmp/libasp" && cp -R libasp "$tmp/libasp"
mkdir "$tmp/libasp/extra" && printf 'int asp__extra(void);\n' >"$tmp/libasp/extra/extra.h"
fails "$tmp/libasp" "libasp with a folder LAYERS does not name fails" "folder extra is not in"

$CHECK "$tmp/nowhere" >"$tmp/out" 2>&1
if [ $? -eq 2 ]; then ok "a directory that does not exist is an error"; else bad "a missing directory"; fi

echo "check-layers-selftest: $((n - fails)) passed, $fails failed"
[ $fails -eq 0 ]
