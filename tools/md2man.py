#!/usr/bin/env python3
"""md2man.py - the Markdown of docs/*.N.md as a man page (roff), standard library only.

    python3 tools/md2man.py docs/asp-exec.1.md > asp-exec.1

Knows what those pages use: "# name(N)" as the title, "## SECTION", "### Sub",
paragraphs, 4-space indented code, "- " and "1. " lists, definition lists
("term" then ": text", continued by 2-space indented lines), pipe tables (tbl),
`code`, **bold**, *italic*, [text](link). Anything else is kept as text.
"""

import re
import sys


def esc(text):
    """Text for roff: backslashes, and a line start that roff would read as a request."""
    text = text.replace("\\", "\\e")
    return "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in text)


def guard(line):
    return "\\&" + line if line.startswith((".", "'")) else line


def inline(text):
    out = []
    pos = 0
    for m in re.finditer(r"`([^`]+)`|\*\*(.+?)\*\*|(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])|\[([^\]]+)\]\(([^)]+)\)", text):
        out.append(esc(text[pos:m.start()]))
        if m.group(1) is not None:
            out.append("\\fB" + esc(m.group(1)).replace("-", "\\-") + "\\fR")
        elif m.group(2) is not None:
            out.append("\\fB" + inline(m.group(2)) + "\\fR")
        elif m.group(3) is not None:
            out.append("\\fI" + inline(m.group(3)) + "\\fR")
        else:
            out.append(inline(m.group(4)))
        pos = m.end()
    out.append(esc(text[pos:]))
    return "".join(out)


def para(lines):
    return [guard(inline(l.strip())) for l in lines if l.strip()]


def table(rows):
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    cells = [r for r in cells if not all(re.fullmatch(r":?-+:?", c) for c in r)]
    n = max(len(r) for r in cells)
    out = [".TS", "tab(\t);", " ".join(["lB"] * n), " ".join(["lx"] * n) + "."]
    for k, r in enumerate(cells):
        r = r + [""] * (n - len(r))
        out.append("\t".join("T{\n" + guard(inline(c)) + "\nT}" for c in r))
        if k == 0:
            out.append("_")
    out.append(".TE")
    return out


def convert(md):
    lines = md.split("\n")
    out = []
    m = re.match(r"#\s+([\w.-]+)\((\d)\)\s*$", lines[0])
    if not m:
        raise SystemExit("md2man: the first line must be '# name(N)', got " + repr(lines[0]))
    name, section = m.group(1), m.group(2)
    out.append("'\\\" t")
    out.append(f'.TH "{name.upper()}" "{section}" "" "libasp" "libasp manual"')
    out.append(".nh")  # no hyphenation: names such as asp_exec_result_output stay whole
    i = 1
    n = len(lines)

    def block(start, pred):
        j = start
        while j < n and pred(lines[j]):
            j += 1
        return lines[start:j], j

    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.startswith("### "):
            out.append(".SS " + inline(line[4:].strip()))
            i += 1
        elif line.startswith("## "):
            out.append(".SH " + inline(line[3:].strip().upper()))
            i += 1
        elif line.startswith("    "):
            code, i = block(i, lambda l: l.startswith("    ") or not l.strip())
            while code and not code[-1].strip():
                code.pop()
            out += [".PP", ".RS 4", ".nf"] + [guard(esc(l[4:])) for l in code] + [".fi", ".RE"]
        elif line.startswith("|"):
            rows, i = block(i, lambda l: l.startswith("|"))
            out += [".PP"] + table(rows)
        elif re.match(r"(- |\d+\. )", line):
            mark = re.match(r"(- |\d+\. )", line).group(1)
            item = [line[len(mark):]]
            i += 1
            while i < n and lines[i].startswith("  ") and lines[i].strip():
                item.append(lines[i])
                i += 1
            out += [".IP " + ("\\(bu 2" if mark == "- " else mark.strip() + " 4")] + para(item)
        elif i + 1 < n and lines[i + 1].startswith(": "):
            out += [".TP", guard(inline(line.strip()))]
            desc = [lines[i + 1][2:]]
            i += 2
            while i < n:
                if lines[i].startswith("  ") and lines[i].strip():
                    desc.append(lines[i])
                    i += 1
                elif (not lines[i].strip() and i + 1 < n and lines[i + 1].startswith("  ")
                      and lines[i + 1].strip() and not lines[i + 1].startswith("    ")):
                    desc.append(None)  # a second paragraph of the same item
                    i += 1
                else:
                    break
            first = True
            chunk = []
            for d in desc + [None]:
                if d is None:
                    if not first:
                        out.append(".IP")
                    out += para(chunk)
                    chunk, first = [], False
                else:
                    chunk.append(d)
        else:
            text, i = block(i, lambda l: l.strip() and not l.startswith(("#", "|", "    ")))
            if out and out[-1] == ".SH NAME":
                # whatis/apropos (and lintian) read "name \- description", no .PP before it.
                out += [p.replace(" \\[u2014] ", " \\- ", 1) for p in para(text)]
            else:
                out += [".PP"] + para(text)
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: md2man.py FILE.md")
    with open(argv[1], encoding="utf-8") as f:
        sys.stdout.write(convert(f.read()))


if __name__ == "__main__":
    main(sys.argv)
