#!/usr/bin/env python3
"""agent.py - a vanilla agent harness whose tools run in an ASP sandbox when there is one.

An agent is a brain (the loop, the model, the credentials) and hands (a
filesystem and a shell). This harness has the usual four tools, split the
way ASP intends:

  * the policy layer (Tools): what the model sees - line-numbered reads with
    offset/limit and long-line truncation, exact unique-string edits with
    clear errors, shell output cut to a budget keeping head and tail, the exit
    code spelled out. It is the same code whichever hands are used;
  * the mechanism layer (hands): raw bytes in and out. SandboxHands sends
    them to the sandbox through libasp; LocalHands uses open() and
    subprocess on this machine.

If discovery finds a `.asp.json` ($ASP_CONFIG, else the current directory and
its parents) every tool runs in the sandbox; otherwise everything runs
locally in the current directory. A real harness gets its tool calls from a
model; this one runs a scripted plan, so it needs no LLM:

    python3 examples/python/agent.py                 # the built-in plan
    python3 examples/python/agent.py --plan plan.json   # [{"tool": "read", "args": {...}}, ...]
    python3 examples/python/agent.py --local DIR     # force local hands in DIR

The transcript (what the model would see) goes to stdout; where the tools
ran goes to stderr.
"""

import argparse
import json
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import typing
from pathlib import Path

# Use the checkout's bindings when `asp` is not installed.
try:
    import asp
except ImportError:
    _checkout = Path(__file__).resolve().parents[2] / "bindings" / "python"
    if (_checkout / "asp").is_dir():
        sys.path.insert(0, str(_checkout))
    try:
        import asp
    except ImportError as e:  # no package or no libasp.so: local hands only
        asp = None
        ASP_IMPORT_ERROR = e

# ---------------------------------------------------------------- policy knobs

READ_DEFAULT_LIMIT = 2000      # lines per read
READ_MAX_LINE_CHARS = 2000     # longer lines are cut
BASH_DEFAULT_TIMEOUT = 120     # seconds
BASH_MAX_CHARS = 20000         # per stream, shown to the model (head + tail)
BASH_CAPTURE_BYTES = 1 << 20   # per stream, kept by the hands (head + tail)
KILL_GRACE = 2.0               # SIGTERM, then SIGKILL after this long


# ================================================================ mechanism layer

class Run(typing.NamedTuple):
    exit_code: int        # 0..255, or -1 when killed by a signal
    signal: int
    stdout: bytes         # head + tail when more than capture_bytes came
    stderr: bytes
    stdout_total: int
    stderr_total: int
    timed_out: bool


def cap(data, max_bytes):
    """Keep max_bytes: (max+1)//2 from the head, the rest from the tail (libasp's rule)."""
    if not max_bytes or len(data) <= max_bytes:
        return data
    head = (max_bytes + 1) // 2
    return data[:head] + data[len(data) - (max_bytes - head):]


class SandboxHands:
    """Raw I/O in the ASP sandbox, through libasp."""

    def __init__(self, sandbox):
        self.sb = sandbox
        self.where = (f"in the sandbox (config {sandbox.config_path}, "
                      f"workspace {sandbox.workspace})")

    def read_bytes(self, path):
        return self.sb.read(path)

    def exists(self, path):
        return self.sb.exists(path)

    def write_bytes(self, path, data):
        self.sb.write(path, data, mkdirs=True)  # atomic; an existing file keeps its mode

    def run(self, command, timeout, capture_bytes):
        r = self.sb.exec(command, timeout=timeout, max_output=capture_bytes,
                         kill_grace=KILL_GRACE)
        return Run(r.exit_code, r.signal, r.stdout, r.stderr, r.stdout_total, r.stderr_total,
                   r.timed_out)

    def close(self):
        self.sb.close()


class LocalHands:
    """The same raw I/O on this machine, rooted at a directory."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.where = f"locally in {self.root}"
        self.shell = pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"

    def _abs(self, path):
        return os.path.join(self.root, path)  # an absolute path stays as given

    def read_bytes(self, path):
        with open(self._abs(path), "rb") as f:
            return f.read()

    def exists(self, path):
        return os.path.exists(self._abs(path))

    def write_bytes(self, path, data):
        target = self._abs(path)
        parent = os.path.dirname(target)
        os.makedirs(parent, exist_ok=True)
        try:
            mode = os.stat(target).st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        if os.path.isdir(target):
            raise IsADirectoryError(f"{path} is a directory")
        fd, tmp = tempfile.mkstemp(dir=parent, prefix="." + os.path.basename(target) + ".")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, target)  # atomic, like libasp's default
        except BaseException:
            os.unlink(tmp)
            raise

    def run(self, command, timeout, capture_bytes):
        p = subprocess.Popen([self.shell, "-c", command], cwd=self.root,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
        timed_out = False
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._kill_group(p)
            out, err = p.communicate()
        code = p.returncode
        return Run(code if code >= 0 else -1, -code if code < 0 else 0,
                   cap(out, capture_bytes), cap(err, capture_bytes), len(out), len(err),
                   timed_out)

    @staticmethod
    def _kill_group(p):
        """Like libasp: SIGTERM to the whole process group, SIGKILL after the grace."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                return
            try:
                p.wait(KILL_GRACE)
                return
            except subprocess.TimeoutExpired:
                continue

    def close(self):
        pass


# ================================================================ policy layer

class ToolError(Exception):
    """A failure the model should read (the message is model-facing)."""


def numbered(lines, first):
    """cat -n style: right-aligned line number, a tab, the line (cut when too long)."""
    out = []
    for n, line in enumerate(lines, first):
        if len(line) > READ_MAX_LINE_CHARS:
            line = (line[:READ_MAX_LINE_CHARS] +
                    f"... [line truncated: {len(line)} characters]")
        out.append(f"{n:6}\t{line}")
    return "\n".join(out)


def split_lines(text):
    """Lines as cat sees them: split on \\n only; a final newline ends the last line."""
    if not text:
        return []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def head_tail(text, limit):
    """Cut text to about `limit` characters, keeping its head and its tail."""
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return (text[:half] + f"\n... [{omitted} characters omitted] ...\n" +
            text[len(text) - half:])


class Tools:
    """The model-facing tools. Every method returns the text the model reads."""

    def __init__(self, hands):
        self.hands = hands

    # -- plumbing ------------------------------------------------------

    def _load(self, path):
        try:
            return self.hands.read_bytes(path)
        except FileNotFoundError:
            raise ToolError(f"Error: file not found: {path}") from None
        except IsADirectoryError:
            raise ToolError(f"Error: {path} is a directory, not a file "
                            "(use bash with ls to list it)") from None
        except PermissionError:
            raise ToolError(f"Error: permission denied reading {path}") from None
        except OSError as e:
            raise ToolError(f"Error: cannot read {path}: {e.strerror or e}") from None

    def _store(self, path, data):
        try:
            self.hands.write_bytes(path, data)
        except IsADirectoryError:
            raise ToolError(f"Error: {path} is a directory") from None
        except (NotADirectoryError, FileNotFoundError, FileExistsError):
            raise ToolError(f"Error: cannot create {path}: a parent is not a directory") from None
        except PermissionError:
            raise ToolError(f"Error: permission denied writing {path}") from None
        except OSError as e:
            raise ToolError(f"Error: cannot write {path}: {e.strerror or e}") from None

    @staticmethod
    def _text(path, data):
        if b"\0" in data[:8192]:
            raise ToolError(f"Error: {path} looks like a binary file ({len(data)} bytes); "
                            "not shown")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ToolError(f"Error: {path} is not valid UTF-8 (byte {e.start})") from None

    # -- read ------------------------------------------------------------

    def read(self, path, offset=1, limit=READ_DEFAULT_LIMIT):
        """Lines offset..offset+limit-1 (1-based) of a text file, numbered like cat -n."""
        if offset < 1 or limit < 1:
            raise ToolError("Error: offset and limit must be positive line counts")
        lines = split_lines(self._text(path, self._load(path)))
        if not lines:
            return f"[{path} is empty]"
        if offset > len(lines):
            raise ToolError(f"Error: offset {offset} is past the end of {path} "
                            f"({len(lines)} lines)")
        shown = lines[offset - 1:offset - 1 + limit]
        last = offset + len(shown) - 1
        out = numbered(shown, offset)
        if offset > 1 or last < len(lines):
            out += f"\n[lines {offset}-{last} of {len(lines)}"
            out += f"; use offset={last + 1} to read on]" if last < len(lines) else "]"
        return out

    # -- write -------------------------------------------------------------

    def write(self, path, content):
        """Create or replace a file (parents are created)."""
        existed = self.hands.exists(path)
        data = content.encode("utf-8")
        self._store(path, data)
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {path} ({len(data)} bytes, {len(split_lines(content))} lines)"

    # -- edit --------------------------------------------------------------

    def edit(self, path, old_string, new_string, replace_all=False):
        """Replace old_string (which must occur exactly once, unless replace_all) by new_string."""
        if not old_string:
            raise ToolError("Error: old_string is empty; use write to create a file")
        if old_string == new_string:
            raise ToolError("Error: old_string and new_string are identical; nothing to change")
        text = self._text(path, self._load(path))
        count = text.count(old_string)
        if count == 0:
            raise ToolError(f"Error: old_string was not found in {path}. It must match the "
                            "file exactly, including whitespace and indentation; read the "
                            "file first.")
        if count > 1 and not replace_all:
            starts, at = [], text.find(old_string)
            while at >= 0:
                starts.append(str(text.count("\n", 0, at) + 1))
                at = text.find(old_string, at + 1)
            raise ToolError(f"Error: old_string occurs {count} times in {path} (lines "
                            f"{', '.join(starts)}). Add surrounding context to make it unique, "
                            "or set replace_all to change every occurrence.")
        first = text.find(old_string)
        updated = text.replace(old_string, new_string) if replace_all else \
            text.replace(old_string, new_string, 1)
        self._store(path, updated.encode("utf-8"))
        lines = split_lines(updated)
        start = updated.count("\n", 0, first) + 1
        end = start + new_string.count("\n")
        lo, hi = max(1, start - 2), min(len(lines), end + 2)
        what = f"{count} occurrences" if replace_all and count > 1 else "1 occurrence"
        return (f"Edited {path}: replaced {what}. Lines {lo}-{hi} now read:\n" +
                numbered(lines[lo - 1:hi], lo))

    # -- bash --------------------------------------------------------------

    def bash(self, command, timeout=BASH_DEFAULT_TIMEOUT):
        """Run a shell command in the workspace; output cut to a budget, status spelled out."""
        try:
            r = self.hands.run(command, timeout, BASH_CAPTURE_BYTES)
        except OSError as e:
            raise ToolError(f"Error: cannot run the command: {e.strerror or e}") from None
        parts = []
        for label, data, total in (("stdout", r.stdout, r.stdout_total),
                                   ("stderr", r.stderr, r.stderr_total)):
            if not total:
                continue
            text = data.decode("utf-8", "replace")
            if total > len(data):
                head = (BASH_CAPTURE_BYTES + 1) // 2
                text = (data[:head].decode("utf-8", "replace") +
                        f"\n... [{total - len(data)} bytes not captured] ...\n" +
                        data[head:].decode("utf-8", "replace"))
            parts.append(f"[{label}]\n" + head_tail(text, BASH_MAX_CHARS).rstrip("\n"))
        if not parts:
            parts.append("(no output)")
        if r.timed_out:
            parts.append(f"[timed out after {timeout} s; the command was killed]")
        elif r.exit_code < 0:
            parts.append(f"[killed by signal {r.signal}]")
        else:
            parts.append(f"[exit code {r.exit_code}]")
        return "\n".join(parts)

    # -- dispatch ----------------------------------------------------------

    def call(self, tool, args):
        fn = {"read": self.read, "write": self.write, "edit": self.edit,
              "bash": self.bash}.get(tool)
        if fn is None:
            return f"Error: unknown tool {tool!r}"
        try:
            return fn(**args)
        except ToolError as e:
            return str(e)
        except TypeError as e:  # the model passed wrong arguments
            return f"Error: bad arguments for {tool}: {e}"


# ================================================================ the scripted "model"

DEMO_PLAN = [
    ("write", {"path": "src/calc.py", "content":
        "def add(a, b):\n"
        "    return a + b\n"
        "\n"
        "\n"
        "def mul(a, b):\n"
        "    return a * b\n"
        "\n"
        "\n"
        "if __name__ == \"__main__\":\n"
        "    print(\"add\", add(2, 3))\n"
        "    print(\"mul\", mul(2, 3))\n"}),
    ("read", {"path": "src/calc.py"}),
    ("read", {"path": "src/calc.py", "offset": 5, "limit": 2}),
    ("bash", {"command": "python3 src/calc.py"}),
    ("edit", {"path": "src/calc.py", "old_string": "return a + b",
              "new_string": "assert isinstance(a, int)\n    return a + b"}),
    ("edit", {"path": "src/calc.py", "old_string": "print(", "new_string": "print(\"=>\", "}),
    ("edit", {"path": "src/calc.py", "old_string": "print(", "new_string": "print(\"=>\", ",
              "replace_all": True}),
    ("edit", {"path": "src/calc.py", "old_string": "def sub(", "new_string": "def minus("}),
    ("edit", {"path": "src/calc.py", "old_string": "mul", "new_string": "mul"}),
    ("edit", {"path": "missing.py", "old_string": "x", "new_string": "y"}),
    ("bash", {"command": "python3 src/calc.py && grep -n assert src/calc.py"}),
    ("read", {"path": "missing.txt"}),
    ("read", {"path": "src"}),
    ("read", {"path": "src/calc.py", "offset": 99}),
    ("bash", {"command": "mkdir -p data && head -c 3000 /dev/zero | tr '\\0' x > data/long.txt"
                         " && printf 'short\\n' >> data/long.txt"}),
    ("read", {"path": "data/long.txt"}),
    ("bash", {"command": "printf 'bin\\0ary' > data/blob.bin && : > data/empty.txt"}),
    ("read", {"path": "data/blob.bin"}),
    ("read", {"path": "data/empty.txt"}),
    ("write", {"path": "notes/todo.md", "content": "# TODO\n\n- [ ] ship it\n"}),
    ("write", {"path": "notes/todo.md", "content": "# TODO\n\n- [x] ship it\n- [ ] café ✓\n"}),
    ("read", {"path": "notes/todo.md"}),
    ("write", {"path": "src", "content": "oops"}),
    ("bash", {"command": "seq 1 5 | sed 's/^/head /'; head -c 50000 /dev/zero | tr '\\0' .; "
                         "echo; seq 1 5 | sed 's/^/tail /'"}),
    ("bash", {"command": "echo to stdout; echo to stderr >&2; exit 3"}),
    ("bash", {"command": "true"}),
    ("bash", {"command": "echo started; sleep 30; echo never", "timeout": 1}),
    ("bash", {"command": "find . -type f | LC_ALL=C sort && wc -c notes/todo.md"}),
]


def load_plan(path):
    with open(path) as f:
        return [(step["tool"], step.get("args", {})) for step in json.load(f)]


def run_plan(tools, plan):
    """The transcript: each call and what the model reads back."""
    out = []
    for i, (tool, args) in enumerate(plan, 1):
        out.append(f"=== [{i}] {tool} {json.dumps(args, sort_keys=True, ensure_ascii=False)}")
        out.append(tools.call(tool, args))
        out.append("")
    return "\n".join(out)


# ================================================================ choosing the hands

def find_dot_asp_json(start):
    """Discovery without libasp (only to refuse to run locally when a sandbox is configured)."""
    if os.environ.get("ASP_CONFIG"):
        return os.environ["ASP_CONFIG"]
    d = os.path.abspath(start)
    while True:
        if os.path.isfile(os.path.join(d, ".asp.json")):
            return os.path.join(d, ".asp.json")
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def choose_hands(local_dir=None):
    if local_dir is not None:
        return LocalHands(local_dir)
    if asp is None:
        config = find_dot_asp_json(os.getcwd())
        if config:  # fail closed: the user asked for a sandbox
            raise SystemExit(f"agent: {config} asks for a sandbox but libasp cannot be "
                             f"loaded: {ASP_IMPORT_ERROR}")
        return LocalHands(os.getcwd())
    try:
        config = asp.find_config()
    except asp.NoConfigError:
        if os.environ.get("ASP_CONFIG"):
            raise SystemExit(f"agent: ASP_CONFIG={os.environ['ASP_CONFIG']} names no file")
        return LocalHands(os.getcwd())
    try:
        return SandboxHands(asp.open(config))
    except asp.AspError as e:
        raise SystemExit(f"agent: cannot open the sandbox: {e} ({e.name})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", help="JSON list of {\"tool\": ..., \"args\": {...}}")
    ap.add_argument("--local", metavar="DIR", help="run the tools locally in DIR")
    args = ap.parse_args(argv)
    plan = load_plan(args.plan) if args.plan else DEMO_PLAN
    hands = choose_hands(args.local)
    print(f"agent: tools run {hands.where}", file=sys.stderr)
    try:
        sys.stdout.write(run_plan(Tools(hands), plan))
    finally:
        hands.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
