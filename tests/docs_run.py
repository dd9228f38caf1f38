#!/usr/bin/env python3
"""docs_run.py - run every fenced code block of the user documentation.

    python3 tests/docs_run.py [FILE.md...]

Reads README.md, docs/*.md, bindings/*/README.md and examples/python/*/README.md (or
the files named), takes every fenced code block and runs it against a real sshd (the
tests' fixture, build/tests/sshd-fixture), with ASP_CONFIG naming the fixture's .asp.json:

  c            compiled with gcc and clang against include/ and build/libasp.so, each
               program run; both must print the same
  python       run by /usr/bin/python3 with bindings/python on PYTHONPATH
  js           run by node from the repository root
  sh           run by bash -e from the repository root, build/bin first in PATH
  json         a whole .asp.json: host, port, user and host_key become the fixture's,
               an identity that names a variable gets the fixture's key in it; the
               rest as written. It must validate and, unless it has a proxyCommand
               (which reaches a provider), connect and run a command. A fragment
               ("key": value) is validated inside the fixture's connection object.

What a block must show:
  - it exits 0;
  - an unlabelled block right after it with the marker <!-- output --> is its
    standard output: line by line, where "..." (or "…") in a line matches any text
    and a line of only "..." matches any number of lines;
  - in python and js, a print(...) / console.log(...) line's trailing comment
    (# ... / // ...) is a line that output shows (in order, same wildcards),
    unless the comment starts with "e.g." or the line is not reached.

A block that is deliberately not run carries <!-- not-run: REASON --> as the last
non-blank line before its fence; a block with no language of the list above and
no marker fails (every block is either run or says why not). The run ends with
"docs: N blocks run, N skipped (not-run), N failed".
"""

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
BUILD = os.environ.get("BUILD", "build")
sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "tests"))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

from sshd_fixture import SshdFixture  # noqa: E402

# A hang detector, not a timing: no block of the docs waits this long.
BLOCK_TIMEOUT = 300
LANGS = {"c": "c", "python": "python", "py": "python", "js": "javascript", "javascript": "javascript",
         "sh": "sh", "bash": "sh", "shell": "sh", "json": "json"}
MARKER = re.compile(r"^\s*<!--\s*(not-run|output)\s*(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+)\s*([A-Za-z0-9_.+-]*)\s*$")


class Block:
    pass


def default_files():
    files = (["README.md"] + sorted(glob.glob("docs/*.md")) + sorted(glob.glob("bindings/*/README.md"))
             + sorted(glob.glob("examples/python/*/README.md")))
    return [f for f in files if os.path.exists(os.path.join(ROOT, f))]


def parse(path):
    """The fenced blocks of a Markdown file, each with its language and marker."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        b = Block()
        b.file, b.line, b.lang = path, i + 1, lang
        b.marker, b.reason = None, None
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0:
            mm = MARKER.match(lines[j])
            if mm:
                b.marker, b.reason = mm.group(1), (mm.group(2) or "").strip()
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != fence:
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        b.text = "\n".join(body) + "\n"
        blocks.append(b)
        i += 1
    return blocks


def line_matches(pattern, line):
    parts = re.split(r"\.\.\.|…", pattern.strip())
    rx = ".*".join(re.escape(p) for p in parts)
    return re.fullmatch(rx, line.strip()) is not None


def output_matches(expected, actual):
    """expected (lines, "..." wildcards) against actual lines; "..." alone matches any lines."""
    exp = [l for l in expected.rstrip("\n").split("\n")]
    act = actual.rstrip("\n").split("\n") if actual.strip() else []

    def match(i, j):
        if i == len(exp):
            return j == len(act)
        if exp[i].strip() in ("...", "…"):
            return any(match(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and line_matches(exp[i], act[j]) and match(i + 1, j + 1)
    return match(0, 0)


def shown_in_comments(b):
    """print(...) / console.log(...) lines' trailing comments: lines the output shows."""
    if b.lang == "python":
        rx = re.compile(r"^\s*print\(.*\)\s+#\s?(.*)$")
    elif b.lang == "javascript":
        rx = re.compile(r"^\s*console\.log\(.*\);?\s+//\s?(.*)$")
    else:
        return []
    out = []
    for line in b.text.split("\n"):
        m = rx.match(line)
        if m and not m.group(1).startswith("e.g."):
            out.append(m.group(1))
    return out


def shows_in_order(lines, actual):
    act = actual.split("\n")
    j = 0
    for want in lines:
        while j < len(act) and not line_matches(want, act[j]):
            j += 1
        if j == len(act):
            return want
        j += 1
    return None


class Runner:
    def __init__(self, fx, tmp):
        self.fx = fx
        self.tmp = tmp
        self.n = 0
        lib = os.path.join(ROOT, BUILD)
        self.env = dict(os.environ)
        self.env.update({
            "ASP_CONFIG": fx.config,
            "XDG_CONFIG_HOME": os.path.join(tmp, "xdg"),
            "PYTHONPATH": os.path.join(ROOT, "bindings", "python"),
            "ASP_LIBRARY": os.path.join(lib, "libasp.so.0"),
            "PATH": os.path.join(lib, "bin") + os.pathsep + os.environ.get("PATH", ""),
        })

    def run(self, argv, cwd=None, env=None, stdin=subprocess.DEVNULL):
        """argv in a session of its own: on a timeout, or when this script is stopped, the
        whole session is killed, not only its first process."""
        p = subprocess.Popen(argv, cwd=cwd or ROOT, env=env or self.env, stdin=stdin,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, errs = p.communicate(timeout=BLOCK_TIMEOUT)
        except BaseException:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # what the block left running
            except ProcessLookupError:
                pass
        return p.returncode, out.decode("utf-8", "replace"), errs.decode("utf-8", "replace")

    def fresh(self, suffix):
        self.n += 1
        return os.path.join(self.tmp, f"block{self.n}{suffix}")

    def c(self, b):
        """Built and run with gcc and with clang (where installed): they evaluate a call's
        arguments in different orders, and the program must print the same under both."""
        src = self.fresh(".c")
        with open(src, "w") as f:
            f.write(b.text)
        lib = os.path.join(ROOT, BUILD)
        results = []
        for compiler in [c for c in ("gcc", "clang") if shutil.which(c)] or ["cc"]:
            exe = self.fresh("")
            rc, out, errs = self.run([compiler, "-std=c11", "-Wall", "-Wextra", "-Werror",
                                      "-I" + os.path.join(ROOT, "include"), src, "-L" + lib, "-lasp",
                                      "-Wl,-rpath," + lib, "-o", exe])
            if rc != 0:
                return rc, out, compiler + ": " + errs
            rc, out, errs = self.run([exe])
            if rc != 0:
                return rc, out, f"built by {compiler}: " + errs
            results.append((compiler, out, errs))
        for compiler, out, _ in results[1:]:
            if out != results[0][1]:
                return 1, out, (f"built by {compiler} it prints {out!r}, built by {results[0][0]} "
                                f"{results[0][1]!r}")
        return 0, results[0][1], results[0][2]

    def python(self, b):
        return self.run(["/usr/bin/python3", "-c", b.text])

    def javascript(self, b):
        return self.run(["node", "-e", b.text])

    def sh(self, b):
        return self.run(["bash", "-e", "-o", "pipefail", "-c", b.text])

    def json(self, b):
        text = b.text.strip()
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        env = dict(self.env)
        with open(self.fx.config) as f:
            fixture = json.load(f)
        if not isinstance(doc, dict) or "connection" not in doc:
            # A fragment of the connection object: validated inside the fixture's.
            try:
                frag = json.loads("{" + text + "}")
            except ValueError as e:
                return 1, "", f"neither a .asp.json nor a fragment of one: {e}"
            fixture["connection"].update(frag)
            doc, connect = fixture, False
        else:
            conn = doc["connection"]
            for k in ("host", "port", "user", "host_key"):
                if k in conn:
                    conn[k] = fixture["connection"][k]
            ident = conn.get("identity")
            if isinstance(ident, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ident):
                env[ident] = self.fx.client_key
            else:
                conn["identity"] = self.fx.client_key
            doc["workspace"] = self.fx.workspace
            connect = "proxyCommand" not in conn and "x-asp-proxy-command" not in conn
        path = self.fresh(".asp.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        os.chmod(path, 0o600)
        env["ASP_CONFIG"] = path
        rc, out, errs = self.run(["/usr/bin/python3", "-c",
                      "import asp, sys; asp.check_config(sys.argv[1])", path], env=env)
        if rc != 0 or not connect:
            return rc, out, errs
        return self.run(["/usr/bin/python3", "-c", "import asp, sys\n"
                         "with asp.open(sys.argv[1]) as sb:\n"
                         "    r = sb.exec('pwd')\n"
                         "    sys.exit(r.exit_code != 0)", path], env=env)


def stopped(signum, frame):
    raise SystemExit(f"docs: stopped by signal {signum}")  # the finally blocks clean up


def main(argv):
    signal.signal(signal.SIGTERM, stopped)
    signal.signal(signal.SIGHUP, stopped)
    files = argv[1:] or default_files()
    blocks = [b for f in files for b in parse(f)]
    ran = skipped = failed = 0
    problems = []
    tmp = tempfile.mkdtemp(prefix="asp-docs-")
    os.chmod(tmp, 0o755)
    fx = SshdFixture()
    fx.start()
    try:
        runner = Runner(fx, tmp)
        for k, b in enumerate(blocks):
            where = f"{b.file}:{b.line}"
            if b.marker == "not-run":
                if not b.reason:
                    failed += 1
                    problems.append(f"{where}: <!-- not-run --> without a reason")
                    continue
                skipped += 1
                print(f"SKIP {where} ({b.lang or 'text'}): not-run: {b.reason}")
                continue
            if b.marker == "output":
                continue  # checked with the block before it
            kind = LANGS.get(b.lang)
            if not kind:
                failed += 1
                problems.append(f"{where}: a ```{b.lang} block that is neither run nor marked "
                        "<!-- not-run: REASON --> or <!-- output -->")
                continue
            ran += 1
            try:
                rc, out, errs = getattr(runner, kind)(b)
            except subprocess.TimeoutExpired:
                rc, out, errs = -1, "", f"still running after {BLOCK_TIMEOUT} s"
            why = None
            if rc != 0:
                last = errs.strip().split("\n")[-1] if errs.strip() else ""
                why = f"exit status {rc}" + (f": {last[:300]}" if last else "")
            else:
                nxt = blocks[k + 1] if k + 1 < len(blocks) else None
                if nxt and nxt.file == b.file and nxt.marker == "output":
                    if not output_matches(nxt.text, out):
                        why = f"its output is not what {nxt.file}:{nxt.line} shows"
                missing = shows_in_order(shown_in_comments(b), out)
                if why is None and missing is not None:
                    why = f"its output lacks the line its comment shows: {missing!r}"
            if why:
                failed += 1
                problems.append(f"{where} ({kind}): {why}\n--- stdout\n{out}--- stderr\n{errs}---")
                print(f"FAIL {where} ({kind}): {why}")
            else:
                print(f"ok   {where} ({kind})")
    finally:
        fx.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    for p in problems:
        print("docs: FAIL: " + p)
    print(f"docs: {ran} blocks run, {skipped} skipped (not-run), {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
