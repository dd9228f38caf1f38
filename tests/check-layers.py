#!/usr/bin/env python3
"""check-layers.py - the module graph of a C source tree, and its cycles.

    python3 tests/check-layers.py [--graph] [--layers] DIR...

(tests/check-layers.sh runs it on libasp/ and tools/asf-provision/.)

A module is a .c/.h pair of one name (conn.c + conn.h). A header
without a .c of its name and a .c without a header of its name are one
module when the .c defines most of what the header declares (ssh.h and
session.c: module ssh); else each is a module of its own (a header that
several .c files share, tools/asf-provision/asf.h).

Module A depends on module B when a file of A includes B's header
(`#include "b.h"`, resolved beside the file, then at the top of DIR, then
by its file name when one file of the tree has it), or
when A's .c names a function that B's .c defines (a call, or a pointer
to it). Names are matched by where they are defined, not by their
prefix, so a tree whose functions do not follow asp__<module>_<verb>
(tools/asf-provision) is checked the same way.

A DIR with a file LAYERS (libasp/LAYERS) is cut into folders: LAYERS names
them one a line, lowest first ("." is DIR itself; # starts a comment).
A module may then depend only on modules of its own folder or of a folder
named before it: an edge into a folder named after its own fails, and so
does a folder of .c/.h files that LAYERS does not name.

Exit 0 when the graph has no cycle and no edge goes up; else 1, naming
each cycle with the line that makes each of its edges, and each upward
edge with its line. --graph prints the edges, --layers the
modules by layer (a module's layer is one more than the highest of what it
depends on; the modules of a cycle share one, shown in braces).
"""
import os
import re
import sys

IDENT = re.compile(r'[A-Za-z_]\w*')
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
KEYWORDS = {'if', 'for', 'while', 'switch', 'return', 'sizeof', 'do', 'else', 'case',
            '_Alignas', '_Static_assert', '__attribute__', 'defined', '_Atomic', 'typeof',
            'void', 'char', 'short', 'int', 'long', 'unsigned', 'signed', 'float', 'double',
            'const', 'volatile', 'struct', 'union', 'enum'}


def strip(text):
    """Comments and string/char literals blanked, line structure kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r'[^\n]', ' ', text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def blank_directives(code):
    """Preprocessor lines (with their continuations) blanked: includes are read apart."""
    lines = code.split('\n')
    cont = False
    for k, line in enumerate(lines):
        if cont or line.lstrip().startswith('#'):
            cont = line.endswith('\\')
            lines[k] = ''
    return '\n'.join(lines)


def scan(code):
    """(definitions, declarations, references) of a file's stripped code.

    definitions: top-level functions with a body, name -> line (static ones
    included: a static name is never looked up from another file, see below).
    declarations: top-level prototypes, name -> line.
    references: (name, line) of every identifier inside a body or initializer.
    """
    code = blank_directives(code)
    defs, decls, refs, statics = {}, {}, [], set()
    depth = 0
    line = 1
    pend = None  # top-level "name(" seen, waiting for its ";" or "{"
    stmt_static = False
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == '\n':
            line += 1
            i += 1
            continue
        if c == '{':
            if depth == 0 and pend:
                defs[pend[0]] = pend[1]
                if stmt_static:
                    statics.add(pend[0])
                pend = None
            depth += 1
            i += 1
            continue
        if c == '}':
            depth = max(0, depth - 1)
            if depth == 0:
                stmt_static = False  # a function's body ended
            i += 1
            continue
        if c == ';' and depth == 0:
            if pend:
                decls.setdefault(pend[0], pend[1])
            pend = None
            stmt_static = False
            i += 1
            continue
        if c == '=' and depth == 0:
            pend = None  # an initializer follows: what it names is referenced
            i += 1
            # up to the statement's end, as references
            k = i
            d = 0
            while k < n and not (code[k] == ';' and d == 0):
                if code[k] in '({[':
                    d += 1
                elif code[k] in ')}]':
                    d -= 1
                k += 1
            for m in IDENT.finditer(code, i, k):
                refs.append((m.group(0), line + code.count('\n', i, m.start())))
            line += code.count('\n', i, k)
            i = k
            continue
        m = IDENT.match(code, i) if (c.isalpha() or c == '_') else None
        if m:
            name = m.group(0)
            i = m.end()
            if depth > 0:
                refs.append((name, line))
                continue
            if name == 'static':
                stmt_static = True
            j = i
            while j < n and code[j] in ' \t':
                j += 1
            if j < n and code[j] == '(' and name not in KEYWORDS and pend is None:
                pend = (name, line)
                # skip the parameter list
                d, k = 0, j
                while k < n:
                    if code[k] == '(':
                        d += 1
                    elif code[k] == ')':
                        d -= 1
                        if d == 0:
                            break
                    k += 1
                line += code.count('\n', i, k)
                i = k + 1
            continue
        i += 1
    return defs, decls, refs, statics


class Tree:
    def __init__(self, roots):
        self.files = []  # (root, relpath)
        for root in roots:
            root = os.path.normpath(root)
            for dp, dn, fn in os.walk(root):
                dn.sort()
                for f in sorted(fn):
                    if f.endswith(('.c', '.h')):
                        self.files.append((root, os.path.relpath(os.path.join(dp, f), root)))
        self.info = {}
        for root, rel in self.files:
            path = os.path.join(root, rel)
            with open(path, encoding='utf-8', errors='replace') as fh:
                text = fh.read()
            code = strip(text)
            incs = []
            for m in INCLUDE.finditer(text):
                incs.append((m.group(1), text.count('\n', 0, m.start()) + 1))
            self.info[path] = (root, rel, incs) + scan(code)
        self.module = {}
        self.assign_modules()

    def stem(self, path):
        root, rel = self.info[path][0], self.info[path][1]
        return os.path.join(root, os.path.splitext(rel)[0])

    def show(self, path):
        return path

    def assign_modules(self):
        stems = {}
        for path in self.info:
            stems.setdefault(self.stem(path), []).append(path)
        declared = {}  # name -> headers that declare it
        for path, inf in self.info.items():
            if path.endswith('.h'):
                for name in inf[4]:
                    declared.setdefault(name, set()).add(path)
        for st, paths in stems.items():
            for p in paths:
                self.module[p] = st
        defined = {}  # name -> the .c files that define it (not static)
        for path, inf in self.info.items():
            if path.endswith('.c'):
                for name in inf[3]:
                    if name not in inf[6]:
                        defined.setdefault(name, set()).add(path)
        for st, paths in stems.items():
            if len(paths) != 1 or not paths[0].endswith('.h'):
                continue
            # A header without a .c: the .c that defines most of what it declares, if one does.
            h = paths[0]
            names = [nm for nm in self.info[h][4] if nm in defined]
            votes = {}
            for nm in names:
                for p in defined[nm]:
                    if len(stems[self.stem(p)]) == 1:
                        votes[p] = votes.get(p, 0) + 1
            for p, v in sorted(votes.items()):
                if 2 * v > len(names):
                    self.module[p] = st

    def name(self, st):
        return st

    def edges(self):
        """{(A, B): why} for modules A != B."""
        definer = {}
        for path, inf in self.info.items():
            if path.endswith('.c'):
                for name, ln in inf[3].items():
                    if name not in inf[6]:
                        definer.setdefault(name, (path, ln))
        out = {}
        for path, inf in self.info.items():
            root, incs = inf[0], inf[2]
            a = self.module[path]
            for inc, ln in incs:
                base = [p for p in self.info if os.path.basename(p) == os.path.basename(inc)]
                for cand in (os.path.join(os.path.dirname(path), inc), os.path.join(root, inc),
                             base[0] if len(base) == 1 else ''):
                    cand = os.path.normpath(cand) if cand else cand
                    if cand in self.info:
                        b = self.module[cand]
                        if b != a:
                            out.setdefault((a, b), '%s:%d includes "%s"' % (self.show(path), ln, inc))
                        break
            if not path.endswith('.c'):
                continue
            local = set(inf[3]) | set(inf[6])
            for name, ln in inf[5]:
                if name in local and name in inf[6]:
                    continue  # its own static
                d = definer.get(name)
                if not d or d[0] == path:
                    continue
                b = self.module[d[0]]
                if b != a:
                    out.setdefault((a, b), '%s:%d names %s (%s:%d)' % (self.show(path), ln, name,
                                                                        self.show(d[0]), d[1]))
        return out


def sccs(nodes, adj):
    index, low, stack, on, res = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(adj.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            res.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return res


def a_cycle(comp, adj):
    """One cycle through comp's first module, staying inside comp (breadth first: the shortest)."""
    inside = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(adj.get(v, ())):
            if w not in inside:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return [start, start]


def folder_order(root):
    """The folders of root/LAYERS, lowest first, or None when root has none."""
    path = os.path.join(root, 'LAYERS')
    if not os.path.isfile(path):
        return None
    order = []
    with open(path, encoding='utf-8') as fh:
        for line in fh:
            line = line.split('#', 1)[0].strip()
            if line:
                order.append(os.path.normpath(line))
    return order


def upward(t, roots, e):
    """(problems, orders): each upward edge and each folder LAYERS does not name."""
    bad, orders = [], {}
    for root in roots:
        root = os.path.normpath(root)
        order = folder_order(root)
        if order is not None:
            orders[root] = order
    folder = {}  # module -> (root, its folder)
    for path, inf in t.info.items():
        root = inf[0]
        if root in orders:
            # The module's folder is its name's (ssh.h's for session.c).
            d = os.path.dirname(os.path.relpath(t.module[path], root))
            folder[t.module[path]] = (root, d.split(os.sep)[0] if d else '.')
    seen = set()
    for m, (root, f) in sorted(folder.items()):
        if f not in orders[root] and (root, f) not in seen:
            seen.add((root, f))
            bad.append('%s: folder %s is not in %s' % (m, f, os.path.join(root, 'LAYERS')))
    for (a, b), why in sorted(e.items()):
        if a not in folder or b not in folder or folder[a][0] != folder[b][0]:
            continue
        root, fa = folder[a]
        fb = folder[b][1]
        order = orders[root]
        if fa in order and fb in order and order.index(fb) > order.index(fa):
            bad.append('upward: %s -> %s (folder %s is above %s in %s): %s'
                       % (t.name(a), t.name(b), fb, fa, os.path.join(root, 'LAYERS'), why))
    return bad, orders


def main(argv):
    show_graph = '--graph' in argv
    show_layers = '--layers' in argv
    roots = [a for a in argv if not a.startswith('--')]
    if not roots:
        print('usage: check-layers.py [--graph] [--layers] DIR...', file=sys.stderr)
        return 2
    for r in roots:
        if not os.path.isdir(r):
            print('check-layers: %s: not a directory' % r, file=sys.stderr)
            return 2
    t = Tree(roots)
    if not t.info:
        print('check-layers: no .c or .h file under %s' % ' '.join(roots), file=sys.stderr)
        return 2
    e = t.edges()
    nodes = set(t.module.values())
    adj = {}
    for a, b in e:
        adj.setdefault(a, set()).add(b)
    if show_graph:
        for (a, b), why in sorted(e.items()):
            print('%s -> %s\t%s' % (t.name(a), t.name(b), why))
    comps = sccs(nodes, adj)
    bad = [c for c in comps if len(c) > 1]
    if show_layers:
        # Over the cycles collapsed: a cycle's modules share one layer, shown as {a b}.
        comp_of = {v: k for k, c in enumerate(comps) for v in c}
        layer = {}

        def lay(k):
            if k not in layer:
                layer[k] = 1 + max([lay(comp_of[w]) for v in comps[k] for w in adj.get(v, ())
                                    if comp_of[w] != k], default=-1)
            return layer[k]
        for k in range(len(comps)):
            lay(k)
        for d in range(max(layer.values()) + 1):
            names = []
            for k in sorted((k for k in layer if layer[k] == d), key=lambda k: comps[k][0]):
                c = [t.name(v) for v in comps[k]]
                names.append(c[0] if len(c) == 1 else '{%s}' % ' '.join(c))
            print('layer %d: %s' % (d, ' '.join(names)))
    for comp in bad:
        cyc = a_cycle(comp, adj)
        print('check-layers: cycle: %s' % ' -> '.join(t.name(v) for v in cyc), file=sys.stderr)
        for a, b in zip(cyc, cyc[1:]):
            print('    %s -> %s: %s' % (t.name(a), t.name(b), e[(a, b)]), file=sys.stderr)
        if len(comp) > len(cyc) - 1:
            print('    (tangled with it: %s)' % ' '.join(t.name(v) for v in comp if v not in cyc),
                  file=sys.stderr)
    up, orders = upward(t, roots, e)
    for u in up:
        print('check-layers: %s' % u, file=sys.stderr)
    if bad:
        print('check-layers: %d cycle(s) among the modules of %s' % (len(bad), ' '.join(roots)),
              file=sys.stderr)
    if up:
        print('check-layers: %d edge(s) against the folder order of %s'
              % (len(up), ' '.join(os.path.join(r, 'LAYERS') for r in sorted(orders))), file=sys.stderr)
    if bad or up:
        return 1
    folders = ''.join('; folders %s' % ' < '.join(o) for r, o in sorted(orders.items()))
    print('check-layers: %s: %d modules, %d edges, no cycle%s'
          % (' '.join(roots), len(nodes), len(e), folders))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
