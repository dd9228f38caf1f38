#!/usr/bin/env python3
"""terminus_slim.py - a terminal-driving agent (after Terminus) whose terminal is a tmux
session in an ASP sandbox.

The model sees a terminal screen and answers with keystrokes: each turn it
returns one JSON object

    {"analysis": "...", "plan": "...",
     "commands": [{"keystrokes": "python3 -m unittest\\n", "duration": 2}],
     "task_complete": false}

The harness types each command's keystrokes into the tmux session (a newline
is Enter; a command that is only a key name such as "C-c" or "Up" sends that
key), waits its duration (seconds, bounded), then captures the pane and sends
the model the tail of it (bounded in lines and bytes). It stops when the model
says the task is complete, or after --max-turns turns.

The sandbox is the one discovery finds (a .asp.json from $ASP_CONFIG or the
current directory upwards, or --config); every tmux command runs there through
asp.aio (libasp's Python binding for asyncio). The model is told of a terminal
and nothing of where it is. Ctrl-C (SIGINT) ends the run: the tmux session and
what runs in it are killed in the sandbox before the harness exits.

    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 TERMINUS_MODEL=qwen2.5-coder \\
        python3 terminus_slim.py "make the tests in ./calc pass"

Standard library only (urllib for the model, shlex.quote for the tmux command lines).
"""

import argparse
import asyncio
import json
import os
import re
import secrets
import shlex
import signal
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

# Use the checkout's bindings when `asp` is not installed.
try:
    import asp.aio
except ImportError:
    _checkout = Path(__file__).resolve().parents[3] / "bindings" / "python"
    if (_checkout / "asp").is_dir():
        sys.path.insert(0, str(_checkout))
    import asp.aio

# ---------------------------------------------------------------- limits

COLS, ROWS = 160, 40           # the terminal's size
PANE_LINES = 300               # the most lines of screen + scrollback the model is shown
PANE_BYTES = 16000             # ... and the most bytes (the tail is kept)
MAX_DURATION = 60.0            # seconds one command may ask the harness to wait
MAX_TURN_WAIT = 180.0          # seconds of waiting one turn may ask for in all
MAX_COMMANDS = 50              # commands in one turn
MAX_KEYSTROKES = 64 * 1024     # characters of one command's keystrokes
MAX_TURNS = 50                 # model turns before the harness gives up
TMUX_TIMEOUT = 30              # seconds a tmux command may take in the sandbox

# A command whose keystrokes are only one of these is sent as that key, not as text.
NAMED_KEYS = {"Enter", "Escape", "Tab", "BTab", "BSpace", "Space", "Up", "Down", "Left", "Right",
              "Home", "End", "PageUp", "PageDown", "PPage", "NPage", "IC", "DC"}
KEY_NAME = re.compile(r"(?:[CM]-[A-Za-z0-9\[\]\\^_@ ]|C-M-[A-Za-z0-9]|F(?:[1-9]|1[0-2]))")

SYSTEM_PROMPT = """\
You are an expert engineer working in a Linux terminal to solve a task. You see the \
terminal's screen and you act by typing into it.

Answer every turn with exactly one JSON object and nothing else:
{
  "analysis": "what the screen shows and what it means",
  "plan": "what you do next and why",
  "commands": [{"keystrokes": "ls -la\\n", "duration": 0.5}],
  "task_complete": false
}

- "keystrokes" is typed as is: end a shell command with "\\n" to run it. A command whose \
keystrokes are only one of these names presses that button: "C-c" (Ctrl-C), "C-d", "C-z", \
"Escape", "Tab", "Up", "Down", "Left", "Right", "BSpace".
- "duration" is how many seconds to wait after that command before the next one \
(0 to %(max_duration)g; about 0.1 for a keypress, 1 for a quick command, more for a build or a \
test run). If the screen shows the command is still running, wait again with an empty \
"commands" list and a "duration".
- You then see the screen again: its last lines, the scrollback included.
- Set "task_complete" to true only when the task is done and checked; the commands of that \
turn still run first.
- Do not start an interactive editor: write files with shell commands (cat <<'EOF', printf).
"""

USER_FIRST = "Task:\n%(task)s\n\nThe terminal now:\n%(screen)s"
USER_NEXT = "The terminal now:\n%(screen)s"
USER_BAD_REPLY = ("Your reply could not be used: %(why)s. Answer with one JSON object as "
                  "described, nothing else.\n\nThe terminal now:\n%(screen)s")


# ================================================================ the model's reply

class BadReply(ValueError):
    """The model's reply is not a usable turn (the message tells the model why)."""


def parse_reply(text):
    """The model's message content -> (commands [(keystrokes, duration)], task_complete).

    The first JSON object of the text counts (code fences and prose around it are
    ignored). Durations are clipped to 0..MAX_DURATION, their sum to MAX_TURN_WAIT."""
    if not isinstance(text, str) or "{" not in text:
        raise BadReply("it has no JSON object")
    decoder = json.JSONDecoder()
    start = text.index("{")
    while True:
        try:
            obj, _ = decoder.raw_decode(text, start)
            break
        except ValueError as e:
            start = text.find("{", start + 1)
            if start < 0:
                raise BadReply(f"its JSON does not parse ({e})") from None
    if not isinstance(obj, dict):
        raise BadReply("it is not a JSON object")
    done = obj.get("task_complete", False)
    if not isinstance(done, bool):
        raise BadReply('"task_complete" must be true or false')
    raw = obj.get("commands", [])
    if not isinstance(raw, list):
        raise BadReply('"commands" must be a list')
    if len(raw) > MAX_COMMANDS:
        raise BadReply(f'"commands" has {len(raw)} entries, at most {MAX_COMMANDS} are allowed')
    commands, waited = [], 0.0
    for i, c in enumerate(raw):
        if not isinstance(c, dict):
            raise BadReply(f"commands[{i}] must be an object")
        keys = c.get("keystrokes", "")
        if not isinstance(keys, str):
            raise BadReply(f'commands[{i}].keystrokes must be a string')
        if len(keys) > MAX_KEYSTROKES:
            raise BadReply(f"commands[{i}].keystrokes is longer than {MAX_KEYSTROKES} characters")
        duration = c.get("duration", 1.0)
        if isinstance(duration, bool) or not isinstance(duration, (int, float)) \
                or duration != duration:
            raise BadReply(f'commands[{i}].duration must be a number of seconds')
        duration = min(max(float(duration), 0.0), MAX_DURATION, MAX_TURN_WAIT - waited)
        waited += duration
        commands.append((keys, duration))
    if not raw and "duration" in obj:  # "just wait"
        d = obj["duration"]
        if isinstance(d, (int, float)) and not isinstance(d, bool) and d == d:
            commands.append(("", min(max(float(d), 0.0), MAX_DURATION)))
    return commands, done


def send_keys_argv(target, keystrokes):
    """The tmux commands (each an argv list) that type `keystrokes` into pane `target`:
    text literally (send-keys -l), each newline as Enter, a lone key name as that key.
    tmux_line() makes them one shell line."""
    if keystrokes in NAMED_KEYS or KEY_NAME.fullmatch(keystrokes):
        return [["send-keys", "-t", target, keystrokes]]
    out = []
    for i, piece in enumerate(keystrokes.split("\n")):
        if i:
            out.append(["send-keys", "-t", target, "Enter"])
        if piece.endswith(";"):
            # tmux reads an argument's last ';' as a command separator, and a '\;' there as
            # ';': one more backslash keeps what was typed (`a;` -> `a\;`, `\;` -> `\\;`).
            piece = piece[:-1] + "\\;"
        if piece:
            out.append(["send-keys", "-t", target, "-l", "--", piece])
    return out


def bound_screen(text, max_lines=PANE_LINES, max_bytes=PANE_BYTES):
    """What the model is shown of a capture: trailing blank lines dropped, then the last
    max_lines lines, then the last max_bytes bytes (cut at a line start), a note when cut."""
    lines = text.replace("\r", "").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    cut = len(lines) > max_lines
    lines = lines[-max_lines:]
    out = "\n".join(lines)
    data = out.encode("utf-8", "replace")
    if len(data) > max_bytes:
        cut = True
        tail = data[-max_bytes:]
        nl = tail.find(b"\n")
        if 0 <= nl < len(tail) - 1:
            tail = tail[nl + 1:]
        out = tail.decode("utf-8", "ignore")
    if cut:
        out = "[earlier lines not shown]\n" + out
    return out


# ================================================================ the terminal: tmux in the sandbox

class SandboxFailure(Exception):
    """A call to the sandbox failed: the operator is told why (stderr), never the model."""


# Kills the session's server, then whatever is left of it and of the pane's terminal
# session (a process that ignored the hangup): the server's pid and the processes whose
# session id is the pane's shell, found in /proc (no ps needed). $1 is the tmux socket
# name, $2 the server's pid, $3 the pane's pid.
KILL_SCRIPT = r"""
sock=$1 server=$2 sid=$3
tmux -L "$sock" kill-server 2>/dev/null
[ -n "$server$sid" ] || exit 0
left() {
	for f in /proc/[0-9]*/stat; do
		read -r st 2>/dev/null <"$f" || continue
		p=${f#/proc/}; p=${p%/stat}
		set -- ${st##*") "}
		[ "$1" != Z ] || continue
		[ "$p" = "$server" ] || [ "$4" = "$sid" ] && echo "$p"
	done
}
i=0
while [ $i -lt 20 ] && [ -n "$(left)" ]; do sleep 0.1; i=$((i + 1)); done
p=$(left)
[ -z "$p" ] || kill -KILL $p 2>/dev/null
exit 0
"""


def tmux_line(socket, *commands):
    """One shell line running the tmux commands (argv lists) in order on the private server
    `socket`; every word is quoted with shlex.quote (the Python binding has no quoting helper)."""
    words = ["tmux", "-L", socket]
    for i, argv in enumerate(commands):
        if i:
            words.append(";")
        words.extend(argv)
    return " ".join(shlex.quote(w) for w in words)


class Terminal:
    """One tmux session, on a tmux server of its own, in the sandbox."""

    def __init__(self, sb, name, cols=COLS, rows=ROWS, pane_lines=PANE_LINES,
                 pane_bytes=PANE_BYTES, cwd=None):
        self.sb, self.name, self.cwd = sb, name, cwd
        self.socket = name
        self.cols, self.rows = cols, rows
        self.pane_lines, self.pane_bytes = pane_lines, pane_bytes
        self.server_pid = self.pane_pid = None
        self.started = False

    async def _tmux(self, what, line, check=True, cwd=None):
        try:
            r = await self.sb.exec(line, cwd=cwd, timeout=TMUX_TIMEOUT, max_output=4 << 20)
        except asp.AspError as e:
            raise SandboxFailure(f"{what}: {e.name}: {e}") from None
        if check and (r.exit_code != 0 or r.timed_out):
            why = "timed out" if r.timed_out else f"exit {r.exit_code}"
            raise SandboxFailure(f"{what}: {why}: {r.stderr.decode('utf-8', 'replace').strip()}")
        return r

    async def start(self):
        # A plain shell with a neutral prompt: no rc file puts the user, the machine or
        # the directory on the screen.
        shell = ("PS1='$ ' PS2='> '; export PS1 PS2; if command -v bash >/dev/null 2>&1; "
                 "then exec bash --norc --noprofile; else exec sh; fi")
        self.started = True  # from here on, close() has something to kill
        line = ("command -v tmux >/dev/null 2>&1 || "
                "{ echo 'tmux is not installed' >&2; exit 127; }; "
                "TERM=xterm-256color " +
                tmux_line(self.socket,
                          ["start-server"],
                          ["set-option", "-g", "history-limit", str(max(2000, self.pane_lines))],
                          ["new-session", "-d", "-s", self.name, "-x", str(self.cols),
                           "-y", str(self.rows), shell],
                          ["display-message", "-p", "-t", self.name, "#{pid} #{pane_pid}"]))
        r = await self._tmux("starting the tmux session", line, cwd=self.cwd)
        pids = r.stdout.decode().split()
        if len(pids) != 2 or not all(p.isdigit() for p in pids):
            raise SandboxFailure(f"starting the tmux session: tmux printed {r.stdout[:200]!r}, "
                                 "not its pids")
        self.server_pid, self.pane_pid = pids

    async def send(self, keystrokes):
        commands = send_keys_argv(self.name, keystrokes)
        if commands:
            await self._tmux("sending keys", tmux_line(self.socket, *commands))

    async def screen(self):
        r = await self._tmux("capturing the pane", tmux_line(
            self.socket,
            ["capture-pane", "-p", "-J", "-t", self.name, "-S", f"-{self.pane_lines}"]))
        return bound_screen(r.stdout.decode("utf-8", "replace"), self.pane_lines, self.pane_bytes)

    async def close(self):
        """Kill the session, its server and every process of the pane's terminal."""
        if not self.started:
            return
        self.started = False
        args = " ".join(shlex.quote(a) for a in (self.socket, self.server_pid or "",
                                                 self.pane_pid or ""))
        await self._tmux("killing the tmux session",
                         f"sh -c {shlex.quote(KILL_SCRIPT)} kill-session {args}", check=False)


# ================================================================ the model

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
            reply = json.loads(raw)
            content = reply["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise ModelError(f"{self.url}: not a chat completion: {raw[:300]!r}") from None
        return content if isinstance(content, str) else ""

    async def complete(self, messages):
        """One chat completion -> the assistant's text. The request runs on a daemon
        thread: Ctrl-C does not wait for a slow endpoint."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        body = {"model": self.model, "messages": messages}

        def work():
            try:
                result, exc = self._post(body), None
            except BaseException as e:  # handed to the loop
                result, exc = None, e
            def settle():
                if fut.done():
                    return
                if exc is None:
                    fut.set_result(result)
                else:
                    fut.set_exception(exc)
            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the loop is gone (Ctrl-C): nobody waits
                pass

        threading.Thread(target=work, name="terminus-model", daemon=True).start()
        return await fut


# ================================================================ the loop

async def run_agent(term, client, task, max_turns=MAX_TURNS, out=print):
    """-> True when the model said the task is complete, False when the turns ran out."""
    screen = await term.screen()
    for _ in range(20):  # the shell's first prompt
        if screen.strip():
            break
        await asyncio.sleep(0.1)
        screen = await term.screen()
    messages = [{"role": "system", "content": SYSTEM_PROMPT % {"max_duration": MAX_DURATION}},
                {"role": "user", "content": USER_FIRST % {"task": task, "screen": screen}}]
    for turn in range(1, max_turns + 1):
        reply = await client.complete(messages)
        messages.append({"role": "assistant", "content": reply})
        out(f"=== [{turn}] model\n{reply}\n")
        try:
            commands, done = parse_reply(reply)
        except BadReply as e:
            out(f"=== [{turn}] unusable reply: {e}\n")
            messages.append({"role": "user", "content": USER_BAD_REPLY % {
                "why": e, "screen": await term.screen()}})
            continue
        for keystrokes, duration in commands:
            await term.send(keystrokes)
            if duration:
                await asyncio.sleep(duration)
        screen = await term.screen()
        out(f"=== [{turn}] terminal\n{screen}\n")
        if done:
            return True
        messages.append({"role": "user", "content": USER_NEXT % {"screen": screen}})
    out(f"=== stopped: the task is not complete after {max_turns} model turns")
    return False


async def amain(args, client):
    # SIGTERM ends the run as Ctrl-C does (asyncio.run turns SIGINT into a cancel).
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    try:
        sb = await asp.aio.open(args.config)
    except asp.AspError as e:
        raise SystemExit(f"terminus-slim: cannot open the sandbox: {e} ({e.name})")
    print(f"terminus-slim: sandbox {sb.config_path}, workspace {sb.workspace}", file=sys.stderr)
    print(f"terminus-slim: model {client.model} at {client.url}", file=sys.stderr)
    term = Terminal(sb, args.session or "terminus-" + secrets.token_hex(4),
                    args.cols, args.rows, args.pane_lines, args.pane_bytes, args.cwd)
    try:
        await term.start()
        print(f"terminus-slim: tmux session {term.name} (pane pid {term.pane_pid})",
              file=sys.stderr, flush=True)
        done = await run_agent(term, client, args.task, args.max_turns,
                               out=lambda text: print(text, flush=True))
        return 0 if done else 3
    except SandboxFailure as e:
        raise SystemExit(f"terminus-slim: the sandbox failed: {e}")
    except ModelError as e:
        raise SystemExit(f"terminus-slim: the model endpoint failed: {e}")
    finally:
        # Also on Ctrl-C (asyncio.run cancels this task): the session dies with the run.
        try:
            if term.started:
                await term.close()
                print(f"terminus-slim: tmux session {term.name} killed", file=sys.stderr)
        except SandboxFailure as e:
            print(f"terminus-slim: {e}", file=sys.stderr)
        await sb.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task", help="what the model should do in the terminal")
    ap.add_argument("--config", help="the .asp.json (default: discovery)")
    ap.add_argument("--cwd", metavar="DIR",
                    help="the terminal's starting directory (relative to the workspace; "
                         "default the workspace)")
    ap.add_argument("--session", help="the tmux session's name (default terminus-RANDOM)")
    ap.add_argument("--max-turns", type=int, default=MAX_TURNS, metavar="N",
                    help=f"model turns before giving up (default {MAX_TURNS})")
    ap.add_argument("--cols", type=int, default=COLS, help=f"terminal width (default {COLS})")
    ap.add_argument("--rows", type=int, default=ROWS, help=f"terminal height (default {ROWS})")
    ap.add_argument("--pane-lines", type=int, default=PANE_LINES, metavar="N",
                    help=f"lines of screen and scrollback shown (default {PANE_LINES})")
    ap.add_argument("--pane-bytes", type=int, default=PANE_BYTES, metavar="N",
                    help=f"bytes of them shown, the tail kept (default {PANE_BYTES})")
    args = ap.parse_args(argv)
    for name, lo, hi in (("cols", 20, 1000), ("rows", 5, 1000), ("pane_lines", 1, 100000),
                         ("pane_bytes", 256, 1 << 24), ("max_turns", 1, 100000)):
        if not lo <= getattr(args, name) <= hi:
            ap.error(f"--{name.replace('_', '-')} must be in {lo}..{hi}")
    if args.session is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", args.session):
        ap.error("--session: letters, digits, '-' and '_' only (at most 64)")
    base_url = os.environ.get("OPENAI_BASE_URL")
    model = os.environ.get("TERMINUS_MODEL") or os.environ.get("OPENAI_MODEL")
    if not base_url or not model:
        ap.error("set OPENAI_BASE_URL (the endpoint, e.g. http://127.0.0.1:8080/v1) and "
                 "TERMINUS_MODEL (the model's name; OPENAI_MODEL also works)")
    client = ChatClient(base_url, model, os.environ.get("OPENAI_API_KEY"))
    try:
        return asyncio.run(amain(args, client))
    except KeyboardInterrupt:
        print("terminus-slim: interrupted", file=sys.stderr)
        return 130
    except asyncio.CancelledError:
        print("terminus-slim: terminated", file=sys.stderr)
        return 143


if __name__ == "__main__":
    sys.exit(main())
