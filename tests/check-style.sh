#!/bin/sh
# check-style.sh - the house style that a machine can check (HACKING.md):
# C sources indent with tabs, lines end without spaces, no line is wider
# than 120 columns (tabs at 8), and libasp never calls strerror() (not
# thread-safe: errtext.h has the helper). Prints each offending line as
# FILE:LINE: WHY and a "style: N passed, N failed" line; exit 1 on any.
set -u
cd "$(dirname "$0")/.."

files=$(git ls-files 'libasp/*.[ch]' 'include/*.h' 'tools/*.[ch]' 'tests/*.[ch]' 'bench/*.[ch]' \
	'tests/**/*.[ch]' 'tools/**/*.[ch]' 'examples/*.[ch]' 'examples/**/*.[ch]' 2>/dev/null | sort -u)
[ -n "$files" ] || { echo "style: no C files found (not a git checkout?)"; exit 1; }

out=$(for f in $files; do
	awk -v f="$f" '
	/[ \t]$/            { printf "%s:%d: trailing white space\n", f, NR }
	/^ +[^ *]/ && !/^ +\*/ { printf "%s:%d: indented with spaces, not tabs\n", f, NR }
	{
		w = 0
		for (i = 1; i <= length($0); i++) {
			c = substr($0, i, 1)
			w = c == "\t" ? w + 8 - w % 8 : w + 1
		}
		if (w > 120)
			printf "%s:%d: %d columns, more than 120\n", f, NR, w
	}' "$f"
done
grep -n '\(^\|[^_a-z]\)strerror(' libasp/*.c libasp/*/*.c /dev/null |
	sed 's/^\([^:]*:[0-9]*\):.*/\1: strerror() in libasp: use ASP_ERRNO_TEXT (errtext.h), it is thread-safe/')

n=$(printf '%s\n' $files | wc -l)
bad=$(printf '%s' "$out" | grep -c . || true)
[ -z "$out" ] || printf '%s\n' "$out"
echo "style: $((n)) files, $bad offending lines"
echo "style: $(( bad ? 0 : 1 )) passed, $(( bad ? 1 : 0 )) failed"
[ "$bad" -eq 0 ]
