#!/bin/sh
# man.sh - the man pages as a user gets them: `make install` into a DESTDIR,
# then man(1) finds each page through MANPATH and through -M, renders it, and
# groff reports no warning; libasp(3) names every function asp.h declares.
set -u
BUILD=${BUILD:-build}
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); printf 'man: FAIL: %s\n' "$*"; }

tmp=$(mktemp -d /tmp/asp-man.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
prefix=/usr/local
mandir=$tmp$prefix/share/man

if make --no-print-directory -s BUILD="$BUILD" install PREFIX=$prefix DESTDIR="$tmp" >"$tmp/install.log" 2>&1
then ok; else bad "make install DESTDIR=$tmp failed: $(cat "$tmp/install.log")"; fi

for page in asp-exec.1 asf-provision.1 libasp.3; do
	name=${page%.*} sec=${page##*.}
	file=$mandir/man$sec/$page
	[ -f "$file" ] && ok || { bad "$page is not installed at $file"; continue; }
	# man -w: where MANPATH leads (and nowhere else).
	found=$(MANPATH=$mandir man -w "$sec" "$name" 2>&1)
	[ "$found" = "$file" ] && ok || bad "MANPATH=$mandir man -w $sec $name: '$found', expected $file"
	# Rendered through -M, as a reader sees it: a NAME section naming the page.
	out=$(MANWIDTH=100 man -M "$mandir" "$sec" "$name" 2>"$tmp/err" | col -b)
	printf '%s\n' "$out" | grep -q '^NAME' && printf '%s\n' "$out" | grep -q "^ *$name " && ok ||
		bad "man -M $mandir $sec $name does not render a NAME section naming $name: $(head -c 400 "$tmp/err")"
	[ -s "$tmp/err" ] && bad "man -M ... $name wrote to stderr: $(head -c 400 "$tmp/err")" || ok
	# man -l on the installed file; groff with every warning on says nothing.
	MANWIDTH=100 man -l "$file" >/dev/null 2>"$tmp/err" && [ ! -s "$tmp/err" ] && ok ||
		bad "man -l $file: $(head -c 400 "$tmp/err")"
	warn=$(groff -man -t -ww -z "$file" 2>&1)
	[ -z "$warn" ] && ok || bad "groff warns about $page: $(printf '%s' "$warn" | head -5)"
	eval "rendered_$sec=\$out"
done

# Every function of the public header is in libasp(3).
for f in $(sed -n 's/^ASP_EXTERN([^)]*) *\(asp_[a-z0-9_]*\)(.*/\1/p' include/asp.h); do
	printf '%s\n' "${rendered_3:-}" | grep -q "\b$f\b" && ok || bad "libasp(3) does not name $f (include/asp.h)"
done
# And asf-provision(1)'s commands are the ones the program knows.
for c in up manifest verify status list down; do
	printf '%s\n' "${rendered_1:-}" | grep -q "asf-provision.* $c\b" && ok || bad "asf-provision(1) lacks $c"
done

printf 'man: %d passed, %d failed\n' "$pass" "$fail"
[ "$fail" -eq 0 ]
