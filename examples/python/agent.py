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
locally in the current directory. The harness is an asyncio program: the
sandbox is reached through asp.aio, and the calls of one model turn run
concurrently.

The tool calls come from a model when OPENAI_BASE_URL names an
OpenAI-compatible endpoint (chat completions with function tools; the model
is OPENAI_MODEL, the key OPENAI_API_KEY if the endpoint wants one), else from
a scripted plan, so it needs no LLM:

    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_MODEL=qwen2.5-coder \
        python3 examples/python/agent.py "add a --verbose flag to cli.py"
    python3 examples/python/agent.py                 # the built-in plan
    python3 examples/python/agent.py --plan plan.json   # [{"tool": "read", "args": {...}}, ...]
    python3 examples/python/agent.py --scripted      # the plan even when an endpoint is set
    python3 examples/python/agent.py --local DIR     # force local hands in DIR

The transcript (what the model sees) goes to stdout; where the tools ran goes
to stderr. The model is told of a project directory and four tools, nothing
of where they run.
"""

import argparse
import asyncio
import json
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import typing
import urllib.error
import urllib.request
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
BASH_MAX_TIMEOUT = 3600        # seconds, the most a call may ask for
BASH_MAX_CHARS = 20000         # per stream, shown to the model (head + tail)
BASH_CAPTURE_BYTES = 1 << 20   # per stream, kept by the hands (head + tail)
KILL_GRACE = 2.0               # SIGTERM, then SIGKILL after this long
MAX_TURNS = 50                 # model turns before the harness gives up


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


# What a file call can fail with that belongs to the file, not to the way it is reached.
FILE_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, FileExistsError,
               PermissionError)


class SandboxHands:
    """Raw I/O in the ASP sandbox, through libasp (asp.aio: the event loop never blocks)."""

    def __init__(self, sandbox):
        self.sb = sandbox  # an asp.aio.AsyncSandbox
        self.where = (f"in the sandbox (config {sandbox.config_path}, "
                      f"workspace {sandbox.workspace})")

    @staticmethod
    async def _call(what, coro):
        """libasp's own messages name the connection (host, port, SSH): they go to the
        operator on stderr, and the model gets a neutral ToolError instead."""
        try:
            return await coro
        except asp.AspError as e:
            if isinstance(e, FILE_ERRORS):
                raise
            print(f"agent: {what} failed in the sandbox: {e.name}: {e}", file=sys.stderr)
            if isinstance(e, asp.LimitExceeded):
                raise ToolError("Error: the file is too large to read whole") from None
            raise ToolError(f"Error: the {what} did not complete: the environment stopped "
                            "responding" + ("; the command may have run in part"
                                            if what == "command" else "") +
                            ". Try again later.") from None

    async def read_bytes(self, path):
        return await self._call("read", self.sb.read(path))

    async def exists(self, path):
        return await self._call("write", self.sb.exists(path))  # only write asks

    async def write_bytes(self, path, data):
        # atomic; an existing file keeps its mode
        await self._call("write", self.sb.write(path, data, parents=True))

    async def run(self, command, timeout, capture_bytes):
        r = await self._call("command", self.sb.exec(command, timeout=timeout,
                                                     max_output=capture_bytes,
                                                     kill_grace=KILL_GRACE))
        return Run(r.exit_code, r.signal, r.stdout, r.stderr, r.stdout_total, r.stderr_total,
                   r.timed_out)

    async def close(self):
        await self.sb.close()


class LocalHands:
    """The same raw I/O on this machine, rooted at a directory (blocking work in threads)."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.where = f"locally in {self.root}"
        self.shell = pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"

    def _abs(self, path):
        return os.path.join(self.root, path)  # an absolute path stays as given

    async def read_bytes(self, path):
        return await asyncio.to_thread(self._read, path)

    async def exists(self, path):
        return os.path.exists(self._abs(path))

    async def write_bytes(self, path, data):
        await asyncio.to_thread(self._write, path, data)

    async def run(self, command, timeout, capture_bytes):
        return await asyncio.to_thread(self._run, command, timeout, capture_bytes)

    async def close(self):
        pass

    def _read(self, path):
        with open(self._abs(path), "rb") as f:
            return f.read()

    def _write(self, path, data):
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

    def _run(self, command, timeout, capture_bytes):
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

    async def _load(self, path):
        try:
            return await self.hands.read_bytes(path)
        except FileNotFoundError:
            raise ToolError(f"Error: file not found: {path}") from None
        except IsADirectoryError:
            raise ToolError(f"Error: {path} is a directory, not a file "
                            "(use bash with ls to list it)") from None
        except PermissionError:
            raise ToolError(f"Error: permission denied reading {path}") from None
        except OSError as e:
            raise ToolError(f"Error: cannot read {path}: {e.strerror or e}") from None

    async def _store(self, path, data):
        try:
            await self.hands.write_bytes(path, data)
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

    async def read(self, path, offset=1, limit=READ_DEFAULT_LIMIT):
        """Lines offset..offset+limit-1 (1-based) of a text file, numbered like cat -n."""
        if offset < 1 or limit < 1:
            raise ToolError("Error: offset and limit must be positive line counts")
        lines = split_lines(self._text(path, await self._load(path)))
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

    async def write(self, path, content):
        """Create or replace a file (parents are created)."""
        existed = await self.hands.exists(path)
        data = content.encode("utf-8")
        await self._store(path, data)
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {path} ({len(data)} bytes, {len(split_lines(content))} lines)"

    # -- edit --------------------------------------------------------------

    async def edit(self, path, old_string, new_string, replace_all=False):
        """Replace old_string (which must occur exactly once, unless replace_all) by new_string."""
        if not old_string:
            raise ToolError("Error: old_string is empty; use write to create a file")
        if old_string == new_string:
            raise ToolError("Error: old_string and new_string are identical; nothing to change")
        text = self._text(path, await self._load(path))
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
        await self._store(path, updated.encode("utf-8"))
        lines = split_lines(updated)
        start = updated.count("\n", 0, first) + 1
        end = start + new_string.count("\n")
        lo, hi = max(1, start - 2), min(len(lines), end + 2)
        what = f"{count} occurrences" if replace_all and count > 1 else "1 occurrence"
        return (f"Edited {path}: replaced {what}. Lines {lo}-{hi} now read:\n" +
                numbered(lines[lo - 1:hi], lo))

    # -- bash --------------------------------------------------------------

    async def bash(self, command, timeout=BASH_DEFAULT_TIMEOUT):
        """Run a shell command in the workspace; output cut to a budget, status spelled out."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
                not 0 < timeout <= BASH_MAX_TIMEOUT:
            raise ToolError(f"Error: timeout must be a number of seconds in 1..{BASH_MAX_TIMEOUT}")
        try:
            r = await self.hands.run(command, timeout, BASH_CAPTURE_BYTES)
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

    async def call(self, tool, args):
        fn = {"read": self.read, "write": self.write, "edit": self.edit,
              "bash": self.bash}.get(tool)
        if fn is None:
            return f"Error: unknown tool {tool!r}"
        if not isinstance(args, dict):
            return f"Error: the arguments of {tool} must be a JSON object"
        try:
            return await fn(**args)
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


async def run_plan(tools, plan):
    """The transcript: each call and what the model reads back."""
    out = []
    for i, (tool, args) in enumerate(plan, 1):
        out.append(f"=== [{i}] {tool} {json.dumps(args, sort_keys=True, ensure_ascii=False)}")
        out.append(await tools.call(tool, args))
        out.append("")
    return "\n".join(out)


# ================================================================ the model

SYSTEM_PROMPT = (
    "You are a coding agent working in a project directory. Use the tools to read, write "
    "and edit files and to run shell commands there; relative paths start at the project "
    "root. Read a file before you edit it. When the task is done, reply with a short "
    "summary and no tool call.")


def _function(name, description, properties, required):
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False}}}


_PATH = {"type": "string", "description": "File path, relative to the project root."}

TOOL_SPECS = [
    _function("read", "Read a text file. Lines come back numbered like cat -n; long files "
              "are cut, and a note says how to read on.",
              {"path": _PATH,
               "offset": {"type": "integer", "minimum": 1,
                          "description": "First line to show (1-based; default 1)."},
               "limit": {"type": "integer", "minimum": 1,
                         "description": f"Lines to show (default {READ_DEFAULT_LIMIT})."}},
              ["path"]),
    _function("write", "Create or replace a file with the given content; missing parent "
              "directories are created.",
              {"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
    _function("edit", "Replace old_string by new_string in a file. old_string must match "
              "the file exactly and occur once, unless replace_all is true.",
              {"path": _PATH, "old_string": {"type": "string"},
               "new_string": {"type": "string"},
               "replace_all": {"type": "boolean", "description": "Replace every occurrence."}},
              ["path", "old_string", "new_string"]),
    _function("bash", "Run a shell command in the project root. Output is cut to a budget "
              "keeping its head and tail; the exit code is reported.",
              {"command": {"type": "string"},
               "timeout": {"type": "number", "minimum": 1, "maximum": BASH_MAX_TIMEOUT,
                           "description": f"Seconds (default {BASH_DEFAULT_TIMEOUT}); the "
                                          "command is killed when they pass."}},
              ["command"]),
]


class ModelError(Exception):
    """The endpoint failed or answered something that is not a chat completion."""


class ChatClient:
    """POST {base_url}/chat/completions, standard library only (urllib)."""

    def __init__(self, base_url, model, api_key=None, timeout=600):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key, self.timeout = model, api_key, timeout

    def _post(self, body):
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:500].decode("utf-8", "replace")
            raise ModelError(f"{self.url}: HTTP {e.code} {e.reason}: {detail}") from None
        except (urllib.error.URLError, OSError) as e:
            raise ModelError(f"{self.url}: {getattr(e, 'reason', e)}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise ModelError(f"{self.url}: the reply is not JSON: {raw[:200]!r}") from None

    async def complete(self, messages, tools):
        """One chat completion -> the assistant message (a dict)."""
        body = {"model": self.model, "messages": messages, "tools": tools,
                "tool_choice": "auto"}
        reply = await asyncio.to_thread(self._post, body)
        try:
            message = reply["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise ModelError(f"{self.url}: no choices[0].message in the reply: "
                             f"{json.dumps(reply)[:300]}") from None
        if not isinstance(message, dict):
            raise ModelError(f"{self.url}: choices[0].message is not an object")
        return message


async def run_tool_call(tools, call):
    """One tool call of the model -> (transcript label, the text the model gets back)."""
    fn = call.get("function") or {}
    name = fn.get("name") or "?"
    raw = fn.get("arguments") or "{}"
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as e:
        return f"{name} {raw}", f"Error: the arguments of {name} are not valid JSON: {e}"
    label = f"{name} {json.dumps(args, sort_keys=True, ensure_ascii=False)}"
    return label, await tools.call(name, args)


async def run_model(tools, client, task, max_turns=MAX_TURNS, out=print):
    """The agent loop: the model's tool calls run (those of one turn concurrently) and
    go back as tool messages until it answers without one. -> True when it finished."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": task}]
    for turn in range(1, max_turns + 1):
        message = await client.complete(messages, TOOL_SPECS)
        calls = message.get("tool_calls") or []
        kept = {"role": "assistant", "content": message.get("content")}
        if calls:
            kept["tool_calls"] = calls
        messages.append(kept)
        if message.get("content"):
            out(f"=== [{turn}] assistant\n{message['content']}\n")
        if not calls:
            return True
        results = await asyncio.gather(*(run_tool_call(tools, c) for c in calls))
        for call, (label, text) in zip(calls, results):
            out(f"=== [{turn}] {label}\n{text}\n")
            messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": text})
    out(f"=== stopped: no answer after {max_turns} model turns")
    return False


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


async def choose_hands(local_dir=None):
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
        return SandboxHands(await asp.aio.open(config))
    except asp.AspError as e:
        raise SystemExit(f"agent: cannot open the sandbox: {e} ({e.name})")


async def amain(args, plan, client):
    hands = await choose_hands(args.local)
    print(f"agent: tools run {hands.where}", file=sys.stderr)
    try:
        if client is None:
            sys.stdout.write(await run_plan(Tools(hands), plan))
            return 0
        print(f"agent: model {client.model} at {client.url}", file=sys.stderr)
        done = await run_model(Tools(hands), client, args.task, args.max_turns,
                               out=lambda text: print(text, flush=True))
        return 0 if done else 3
    except ModelError as e:
        raise SystemExit(f"agent: the model endpoint failed: {e}")
    finally:
        await hands.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task", nargs="?", help="what the model should do (model mode)")
    ap.add_argument("--plan", help="JSON list of {\"tool\": ..., \"args\": {...}} (scripted)")
    ap.add_argument("--scripted", action="store_true",
                    help="run the plan even when OPENAI_BASE_URL is set")
    ap.add_argument("--local", metavar="DIR", help="run the tools locally in DIR")
    ap.add_argument("--max-turns", type=int, default=MAX_TURNS, metavar="N",
                    help=f"model turns before giving up (default {MAX_TURNS})")
    args = ap.parse_args(argv)
    base_url = os.environ.get("OPENAI_BASE_URL")
    client = None
    if base_url and not (args.scripted or args.plan):
        if not args.task:
            ap.error("OPENAI_BASE_URL is set: give the task for the model "
                     "(or --scripted for the built-in plan)")
        model = os.environ.get("OPENAI_MODEL")
        if not model:
            ap.error("OPENAI_BASE_URL is set but OPENAI_MODEL is not: name the model")
        client = ChatClient(base_url, model, os.environ.get("OPENAI_API_KEY"))
    elif args.task:
        ap.error("a task needs a model: set OPENAI_BASE_URL and OPENAI_MODEL "
                 "(without them the agent runs its scripted plan)")
    plan = load_plan(args.plan) if args.plan else DEMO_PLAN
    return asyncio.run(amain(args, plan, client))


if __name__ == "__main__":
    sys.exit(main())
