#!/bin/sh
# meta.sh - keeps code and docs in sync (curl-style meta tests):
#  - every symbol libasp.so exports starts with asp_, carries the LIBASP_0 version
#    (libasp/libasp.map) and is documented in docs/api.md;
#  - every error code in asp.h is in docs/api.md's table;
#  - asp.h compiles as C99, C11 and C++ with warnings as errors;
#  - the README's C example compiles and links (tests/docs_run.py runs it);
#  - no test hook (libasp/core/common.h) is in the release library, and no function
#    only the tests call is outside the hooks.
set -u
BUILD=${BUILD:-build}
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); printf 'meta: FAIL: %s\n' "$*"; }

versioned=$(nm -D --defined-only "$BUILD/libasp.so" | awk '$2 ~ /^[TDBR]$/ {print $3}')
syms=$(printf '%s\n' $versioned | sed 's/@.*//')
[ -n "$syms" ] || bad "no exported symbols found in $BUILD/libasp.so"
for v in $versioned; do
	case $v in
	*@@LIBASP_0) ok ;;
	*) bad "exported symbol without the LIBASP_0 version (libasp/libasp.map): $v" ;;
	esac
done
for s in $syms; do
	case $s in
	asp_*) ok ;;
	*) bad "exported symbol without the asp_ prefix: $s" ;;
	esac
	if grep -q "\`[^\`]*\b$s\b" docs/api.md; then ok; else bad "$s is not documented in docs/api.md"; fi
	if grep -q "\b$s(" include/asp.h; then ok; else bad "$s is not declared in include/asp.h"; fi
done

for code in $(sed -n 's/^\t\(ASP_E[A-Z]*\|ASP_OK\|ASP_ERROR\) = .*/\1/p' include/asp.h); do
	if grep -q "^| \`$code\` |" docs/api.md; then ok; else bad "error code $code is not in docs/api.md"; fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include <asp.h>\nint main(void) { return asp_version() == 0; }\n' > "$tmp/h.c"
cp "$tmp/h.c" "$tmp/h.cc"
for std in c99 c11; do
	if cc -std=$std -Wall -Wextra -Wpedantic -Werror -Iinclude -c "$tmp/h.c" -o "$tmp/h.o"; then ok
	else bad "asp.h does not compile as $std"; fi
done
if c++ -std=c++11 -Wall -Wextra -Wpedantic -Werror -Iinclude -c "$tmp/h.cc" -o "$tmp/hpp.o"; then ok
else bad "asp.h does not compile as C++"; fi

# The README's example, verbatim.
sed -n '/^## Ten lines of C/,/^```$/p' README.md | sed -n '/^```c$/,/^```$/p' | sed '1d;$d' > "$tmp/readme.c"
if [ -s "$tmp/readme.c" ] && cc -std=c11 -Wall -Wextra -Werror -Iinclude "$tmp/readme.c" -L"$BUILD" -lasp \
	-o "$tmp/readme"; then ok
else bad "the README's C example does not build"; fi

# Test hooks: what libasp's .c files define between `#ifdef ASP_TEST_HOOKS` and its #endif is in the
# tests' library and in neither release library (the .so's local symbols included).
hooks=$(awk '/^#ifdef ASP_TEST_HOOKS/ { h = 1; next } /^#(endif|else)/ { h = 0 } h && /^[a-z]/' libasp/*.c libasp/*/*.c |
	grep -oE 'asp__[a-z0-9_]+\(' | tr -d '(' | sort -u)
[ -n "$hooks" ] || bad "no test hook found in libasp/*.c libasp/*/*.c (#ifdef ASP_TEST_HOOKS)"
release=$( (nm "$BUILD/libasp.a" 2>/dev/null; nm "$BUILD/libasp.so") | awk 'NF >= 2 { print $NF }' | sort -u)
[ -n "$release" ] || bad "no symbol found in $BUILD/libasp.a and $BUILD/libasp.so"
testlib=$(nm --defined-only "$BUILD/tests/libasp-hooks.a" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u)
for h in $hooks; do
	if printf '%s\n' "$release" | grep -qx "$h"; then
		bad "test hook $h is in the release library ($BUILD/libasp.a or .so): build it without -DASP_TEST_HOOKS"
	else ok; fi
	if printf '%s\n' "$testlib" | grep -qx "$h"; then ok
	else bad "test hook $h is not in $BUILD/tests/libasp-hooks.a"; fi
done
# An internal function the tests call must be used by libasp or its tools too (outside comments
# and its own definition line); one that only tests use is a hook and goes behind ASP_TEST_HOOKS.
sed -e 's|/\*.*\*/||g' -e 's|/\*.*||' -e 's|^[[:space:]]*\*.*||' libasp/*.c libasp/*/*.c tools/*/*.c |
	grep -vE '^[a-z]' > "$tmp/uses"
called=$(grep -rhoE '\basp__[a-z0-9_]+' tests/ | sort -u)
for f in $called; do
	printf '%s\n' "$release" | grep -qx "$f" || continue
	if grep -qw "$f" "$tmp/uses"; then ok
	else bad "$f is called only by tests: put it behind #ifdef ASP_TEST_HOOKS (libasp/core/common.h)"; fi
done

printf 'meta: %d passed, %d failed\n' "$pass" "$fail"
[ "$fail" -eq 0 ]
