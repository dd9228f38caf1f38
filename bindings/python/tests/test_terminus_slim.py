"""examples/python/terminus_slim: a terminal agent driving tmux in the sandbox, end to end.

A scripted model (an OpenAI-compatible chat-completions server on 127.0.0.1,
started here) reads the screen it is sent and decides what to type: create a
small Python project and its unittest test, run the tests, see the failure on
the screen, fix it, run them again, see them pass, say the task is complete.
The harness runs where discovery finds the sshd fixture's .asp.json, so the tmux
session is in the sandbox. Checked: the run succeeds and leaves the fixed files;
no text the model is sent names the transport (host, port, key, user, paths, "asp",
"ssh"); Ctrl-C of the harness mid-task leaves no process of the session alive.

    python3 bindings/python/tests/test_terminus_slim.py --against CONFIG [--cwd DIR]

runs the same task against any sandbox (tests/provision/agent-profile.sh runs it in
a provisioned Podman sandbox) and exits non-zero when a check fails.
"""

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import PKG_ROOT, REPO, SshdFixture, asp, proc_alive, wait_dead  # noqa: E402

HARNESS = os.path.join(REPO, "examples", "python", "terminus_slim", "terminus_slim.py")
MODEL = "test-model"
API_KEY = "sk-test-key"
TASK = ("Create a Python module calc.py with add(a, b) in a new directory calc, and a "
        "unittest test for it. Run the tests with python3 -m unittest, fix any failure, "
        "and finish when they pass.")
EXIT_LINE = re.compile(r"^tests-exit-(\d+)\s*$", re.M)
RUN_TESTS = "python3 -m unittest 2>&1; echo tests-exit-$?\n"


def turn(commands, done=False, analysis="", fenced=False):
    text = json.dumps({"analysis": analysis, "plan": "", "task_complete": done,
                       "commands": [{"keystrokes": k, "duration": d} for k, d in commands]},
                      indent=1)
    return f"Here is my next step.\n```json\n{text}\n```\n" if fenced else text


def screen_of(body):
    """The screen the harness sent in its last user message."""
    text = body["messages"][-1]["content"]
    return text.split("The terminal now:\n", 1)[-1]


class CalcScript:
    """The model's side of the task: what it types depends on what the screen shows."""

    def __init__(self):
        self.phase = "start"
        self.seen = []  # the phases' evidence, for the test's assertions

    def __call__(self, body):
        screen = screen_of(body)
        exits = EXIT_LINE.findall(screen)
        if self.phase == "start":
            self.phase = "first-run"
            return turn([
                ("mkdir -p calc && cd calc\n", 0.2),
                ("cat > calc.py <<'EOF'\ndef add(a, b):\n    return a - b\nEOF\n", 0.2),
                ("cat > test_calc.py <<'EOF'\nimport unittest\n\nfrom calc import add\n\n\n"
                 "class TestAdd(unittest.TestCase):\n    def test_add(self):\n"
                 "        self.assertEqual(add(2, 3), 5)\nEOF\n", 0.2),
                (RUN_TESTS, 1.0)], analysis="An empty shell.", fenced=True)
        if self.phase == "first-run":
            if not exits:
                return turn([("", 1.0)], analysis="The tests are still running.")
            if exits[-1] != "1" or "FAILED (failures=1)" not in screen or \
                    "AssertionError: -1 != 5" not in screen:
                return turn([], analysis=f"unexpected screen:\n{screen}")  # the test fails
            self.seen.append("failure")
            self.phase = "second-run"
            return turn([("sed -i 's/a - b/a + b/' calc.py\n", 0.2), (RUN_TESTS, 1.0)],
                        analysis="add() subtracts: fix it and run the tests again.")
        if self.phase == "second-run":
            if len(exits) < 2:
                return turn([("", 1.0)], analysis="The tests are still running.")
            if exits[-1] != "0" or not re.search(r"^OK\s*$", screen, re.M):
                return turn([], analysis=f"unexpected screen:\n{screen}")
            self.seen.append("pass")
            self.phase = "done"
            return turn([("cat calc.py\n", 0.3)], done=True, analysis="The tests pass.")
        return turn([], analysis="nothing to do")


class ScriptedModel:
    """An OpenAI-compatible /chat/completions endpoint; `script(body)` -> the assistant's text.
    Every request is recorded (path, headers, raw body)."""

    def __init__(self, script):
        self.script = script
        self.requests = []
        model = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                model.requests.append((self.path, dict(self.headers), raw))
                try:
                    content = model.script(json.loads(raw))
                except Exception as e:  # the harness sees a 500 and stops
                    return self._send(500, {"error": {"message": f"script: {e!r}"}})
                self._send(200, {"id": f"chatcmpl-{len(model.requests)}",
                                 "object": "chat.completion", "created": 0, "model": MODEL,
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant",
                                                          "content": content}}]})

            def _send(self, status, obj):
                data = json.dumps(obj).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the harness is gone (Ctrl-C)
                    pass

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def bodies(self):
        return [json.loads(raw) for _, _, raw in self.requests]


def harness_env(url, config):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/"),
           "PYTHONPATH": PKG_ROOT, "PYTHONDONTWRITEBYTECODE": "1", "ASP_CONFIG": config,
           "OPENAI_BASE_URL": url, "TERMINUS_MODEL": MODEL, "OPENAI_API_KEY": API_KEY,
           "no_proxy": "127.0.0.1"}
    if "ASP_LIBRARY" in os.environ:
        env["ASP_LIBRARY"] = os.environ["ASP_LIBRARY"]
    return env


def default_sigint():
    # A job started in the background by a non-interactive shell (make check) has SIGINT
    # ignored, and Python keeps it so: the harness must get the default, as from a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_harness(url, config, *args):
    return subprocess.Popen([sys.executable, HARNESS, *args, TASK], cwd=REPO,
                            env=harness_env(url, config), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=default_sigint)


def transport_words(config_path):
    """What would tell the model where its terminal is: from the .asp.json in use."""
    with open(config_path) as f:
        cfg = json.load(f)
    conn = cfg.get("connection", cfg)
    words = ["asp", "ssh", "remote", config_path, os.path.dirname(config_path)]
    for field in ("host", "identity", "host_key"):
        value = conn.get(field)
        if isinstance(value, str) and value:
            words.append(value)
            if field == "host_key":
                words.extend(p for p in value.split() if len(p) > 8)
    if conn.get("port"):
        words.append(str(conn["port"]))
    return [w for w in words if w]


def leaks(words, text):
    low = text.lower()
    return [w for w in words if w.lower() in low]


def run_calc_task(url_model, config, cwd=None, timeout=300):
    """Run the harness on the calc task -> (CompletedProcess-like (rc, out, err), script)."""
    args = ["--max-turns", "16"] + (["--cwd", cwd] if cwd else [])
    p = start_harness(url_model, config, *args)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out.decode(), err.decode()


def check_calc_run(tc, model, script, rc, out, err, words):
    """The checks of one calc run (tc: a TestCase, or anything with its assert methods)."""
    tc.assertEqual(rc, 0, f"stdout:\n{out[-4000:]}\nstderr:\n{err[-4000:]}")
    tc.assertEqual(script.seen, ["failure", "pass"])
    tc.assertEqual(script.phase, "done")
    tc.assertRegex(err, r"terminus-slim: tmux session (terminus-[0-9a-f]+) \(pane pid \d+\)\n"
                        r"(?:.*\n)*terminus-slim: tmux session \1 killed\n")
    bodies = model.bodies()
    tc.assertGreaterEqual(len(bodies), 3)
    for path, headers, _ in model.requests:
        tc.assertEqual(path, "/v1/chat/completions")
        tc.assertEqual(headers.get("Authorization"), "Bearer " + API_KEY)
    for i, body in enumerate(bodies):
        tc.assertEqual(body["model"], MODEL)
        roles = [m["role"] for m in body["messages"]]
        tc.assertEqual(roles[:2], ["system", "user"])
        tc.assertEqual(roles[2:], ["assistant", "user"] * i)
        if i:
            tc.assertEqual(body["messages"][:-2], bodies[i - 1]["messages"])  # it only grows
    tc.assertIn(TASK, bodies[0]["messages"][1]["content"])
    # The last screen the model saw shows the passing run; the transcript shows the end.
    tc.assertIn("FAILED (failures=1)", out)
    tc.assertIn("    return a + b", out.rsplit("=== [", 1)[1])
    # The check can see the words (stderr names the sandbox), and the model never does.
    tc.assertTrue(leaks(words, err), "the leak check cannot see the transport words")
    for i, (_, _, raw) in enumerate(model.requests):
        text = json.dumps(json.loads(raw), ensure_ascii=False)
        tc.assertEqual(leaks(words, text), [], f"request {i + 1}")


class TestTerminusSlim(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.fx = SshdFixture().start()
        cls.words = transport_words(cls.fx.config) + [
            str(cls.fx.port), cls.fx.client_key, cls.fx.workspace, cls.fx.dir, cls.fx.user,
            cls.fx.host_fingerprint(), cls.fx.host_fingerprint().split(":", 1)[1],
            cls.fx.host_key_line.split()[1]]

    @classmethod
    def tearDownClass(cls):
        cls.fx.stop()

    def project_dir(self):
        """A directory for the project outside the fixture's workspace, whose path names the
        fixture (a traceback on the screen shows its path: a sandbox's own workspace)."""
        d = tempfile.mkdtemp(prefix="calc-", dir="/tmp")
        self.addCleanup(subprocess.run, ["rm", "-rf", d])
        self.assertEqual(leaks(self.words, d), [])
        os.chmod(d, 0o755)
        self.fx.chown_to_user(d)
        return d

    def test_calc_task(self):
        script = CalcScript()
        model = ScriptedModel(script)
        self.addCleanup(model.close)
        d = self.project_dir()
        rc, out, err = run_calc_task(model.url, self.fx.config, cwd=d)
        check_calc_run(self, model, script, rc, out, err, self.words)
        with open(os.path.join(d, "calc", "calc.py")) as f:
            self.assertEqual(f.read(), "def add(a, b):\n    return a + b\n")
        self.assertTrue(os.path.isfile(os.path.join(d, "calc", "test_calc.py")))
        # The session is gone with the run.
        name = re.search(r"tmux session (terminus-[0-9a-f]+) \(pane pid (\d+)\)", err)
        self.assertIsNotNone(name, err)
        self.assertTrue(wait_dead(int(name.group(2))))
        self.assertEqual(tmux_servers(name.group(1)), [])

    def test_named_keys_quoting_and_a_bad_reply(self):
        """An unusable reply is answered with why; C-c interrupts; shell text arrives as typed."""
        typed = "echo 'semi;colon $HOME `x` \\\"q\\\" -l' | tr a-z A-Z\n"

        def script(body):
            n = len(body["messages"])
            if n == 2:
                return "Let me look around first."
            if n == 4:
                return turn([("sleep 300\n", 0.3), ("C-c", 0.3), (typed, 0.3),
                             ("echo semi-a; echo semi-b;", 0.1), ("\n", 0.3),
                             ("find /dev/null -exec echo found-{} \\;", 0.1), ("\n", 0.3),
                             ("echo after-$((6*7))\n", 0.5)], done=True)
            raise AssertionError(f"unexpected request with {n} messages")

        model = ScriptedModel(script)
        self.addCleanup(model.close)
        p = start_harness(model.url, self.fx.config, "--max-turns", "3")
        out, err = p.communicate(timeout=120)
        out, err = out.decode(), err.decode()
        self.assertEqual(p.returncode, 0, err)
        bodies = model.bodies()
        self.assertEqual(len(bodies), 2)
        self.assertTrue(bodies[1]["messages"][-1]["content"].startswith(
            "Your reply could not be used: it has no JSON object."))
        screen = out.rsplit("=== [2] terminal\n", 1)[1]
        self.assertRegex(screen, r"\$ sleep 300\n\^C\n\$ ")
        self.assertIn("SEMI;COLON $HOME `X` \\\"Q\\\" -L\n", screen)
        self.assertRegex(screen, r"\nafter-42\n")
        self.assertIn("$ echo semi-a; echo semi-b;\nsemi-a\nsemi-b\n", screen)
        self.assertIn("$ find /dev/null -exec echo found-{} \\;\nfound-/dev/null\n", screen)
        for i, (_, _, raw) in enumerate(model.requests):
            self.assertEqual(leaks(self.words, raw.decode()), [], f"request {i + 1}")

    def test_a_failing_endpoint_ends_the_run_and_the_session(self):
        def script(body):
            raise RuntimeError("the script is over")

        model = ScriptedModel(script)
        self.addCleanup(model.close)
        p = start_harness(model.url, self.fx.config)
        out, err = p.communicate(timeout=120)
        err = err.decode()
        self.assertEqual(p.returncode, 1, err)
        self.assertIn(f"the model endpoint failed: {model.url}/chat/completions: HTTP 500", err)
        self.assertIn("the script is over", err)
        self.assertNotIn(API_KEY, err)
        name = re.search(r"tmux session (terminus-[0-9a-f]+) \(pane pid (\d+)\)", err)
        self.assertIsNotNone(name, err)
        self.assertIn(f"tmux session {name.group(1)} killed", err)
        self.assertTrue(wait_dead(int(name.group(2))))
        self.assertEqual(tmux_servers(name.group(1)), [])

    def test_ctrl_c_leaves_no_process(self):
        """SIGINT to the harness while its terminal runs a long command: the tmux server, the
        shell and the command are all gone when the harness has exited."""
        self.interrupt(signal.SIGINT, 130, "interrupted")

    def test_sigterm_leaves_no_process(self):
        self.interrupt(signal.SIGTERM, 143, "terminated")

    def interrupt(self, sig, status, said):
        started = threading.Event()
        release = threading.Event()
        self.addCleanup(release.set)
        marker = "sleep-for-ctrl-c"

        def script(body):
            if len(body["messages"]) == 2:
                return turn([(f"sh -c 'sleep 600; echo {marker}'\n", 0.5)])
            started.set()
            release.wait(120)  # the harness is waiting for the model when Ctrl-C comes
            return turn([], done=True)

        model = ScriptedModel(script)
        self.addCleanup(model.close)
        p = start_harness(model.url, self.fx.config)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        self.assertTrue(started.wait(120), "the harness never got to turn 2")
        # The sandbox is this machine: the session's processes are visible here.
        name, pane_pid = None, None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not pane_pid:
            line = p.stderr.readline().decode()
            if not line:
                break
            m = re.search(r"tmux session (terminus-[0-9a-f]+) \(pane pid (\d+)\)", line)
            if m:
                name, pane_pid = m.group(1), int(m.group(2))
        self.assertIsNotNone(pane_pid, "the harness did not name its session")
        servers = tmux_servers(name)
        members = session_members(pane_pid)
        self.assertEqual(len(servers), 1, servers)
        self.assertTrue(any(marker in cmdline(pid) for pid in members), members)
        self.assertTrue(all(proc_alive(pid) for pid in servers + members))
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
        err = err.decode()
        self.assertEqual(p.returncode, status, err)
        self.assertIn(f"terminus-slim: tmux session {name} killed\nterminus-slim: {said}\n", err)
        for pid in servers + members:
            self.assertTrue(wait_dead(pid), f"pid {pid} ({cmdline(pid)}) is still alive")
        self.assertEqual(session_members(pane_pid), [])
        self.assertEqual(tmux_servers(name), [])


class TestPolicy(unittest.TestCase):
    """The harness's pure parts: replies, keystrokes, the screen's bounds (no sandbox)."""

    @classmethod
    def setUpClass(cls):
        import importlib.util
        spec = importlib.util.spec_from_file_location("terminus_slim", HARNESS)
        cls.t = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.t)

    def test_replies(self):
        parse, Bad = self.t.parse_reply, self.t.BadReply
        self.assertEqual(parse('{"commands": [{"keystrokes": "ls\\n", "duration": 0.5}]}'),
                         ([("ls\n", 0.5)], False))
        self.assertEqual(parse('ok:\n```json\n{"task_complete": true}\n```'), ([], True))
        self.assertEqual(parse('{"commands": [{"keystrokes": "x"}]}'), ([("x", 1.0)], False))
        self.assertEqual(parse('{"commands": [], "duration": 5}'), ([("", 5.0)], False))
        self.assertEqual(parse('{"commands": [{"keystrokes": "a", "duration": 1e9}, '
                               '{"keystrokes": "b", "duration": -3}]}'),
                         ([("a", self.t.MAX_DURATION), ("b", 0.0)], False))
        many = json.dumps({"commands": [{"keystrokes": "", "duration": 60}] * 5})
        self.assertEqual(sum(d for _, d in parse(many)[0]), self.t.MAX_TURN_WAIT)
        self.assertEqual(parse('{"x": {bad} {"commands": []}'), ([], False))
        for text, why in (("no json", "no JSON object"), ("{nope", "does not parse"),
                          ('{"task_complete": "yes"}', "task_complete"),
                          ('{"commands": {}}', '"commands" must be a list'),
                          ('{"commands": [1]}', "commands[0] must be an object"),
                          ('{"commands": [{"keystrokes": 5}]}', "keystrokes must be a string"),
                          ('{"commands": [{"duration": "1"}]}', "duration must be a number"),
                          ('{"commands": [{"duration": true}]}', "duration must be a number")):
            with self.assertRaises(Bad, msg=text) as cm:
                parse(text)
            self.assertIn(why, str(cm.exception))

    def test_keystrokes(self):
        argv = self.t.send_keys_argv
        self.assertEqual(argv("s", "C-c"), [["send-keys", "-t", "s", "C-c"]])
        self.assertEqual(argv("s", "Up"), [["send-keys", "-t", "s", "Up"]])
        self.assertEqual(argv("s", "ls -l\n"), [["send-keys", "-t", "s", "-l", "--", "ls -l"],
                                               ["send-keys", "-t", "s", "Enter"]])
        self.assertEqual(argv("s", "C-c\n"), [["send-keys", "-t", "s", "-l", "--", "C-c"],
                                             ["send-keys", "-t", "s", "Enter"]])
        self.assertEqual(argv("s", "\n\n"), [["send-keys", "-t", "s", "Enter"]] * 2)
        self.assertEqual(argv("s", ""), [])
        self.assertEqual(argv("s", "a;"), [["send-keys", "-t", "s", "-l", "--", "a\\;"]])
        self.assertEqual(argv("s", "x \\;\n"), [["send-keys", "-t", "s", "-l", "--", "x \\\\;"],
                                                ["send-keys", "-t", "s", "Enter"]])
        self.assertEqual(argv("s", "a;b"), [["send-keys", "-t", "s", "-l", "--", "a;b"]])
        line = self.t.tmux_line("sock", *argv("s", "a'b;c\n"))
        self.assertEqual(line, "tmux -L sock send-keys -t s -l -- 'a'\"'\"'b;c' ';' "
                               "send-keys -t s Enter")

    def test_screen_bounds(self):
        bound = self.t.bound_screen
        self.assertEqual(bound("a\nb\n\n  \n"), "a\nb")
        self.assertEqual(bound("1\n2\n3\n4", max_lines=2), "[earlier lines not shown]\n3\n4")
        text = "".join(f"line {i:03d}\n" for i in range(100))
        got = bound(text, max_lines=1000, max_bytes=30)
        self.assertEqual(got, "[earlier lines not shown]\nline 097\nline 098\nline 099")


# ------------------------------------------------------------------ processes (here)

def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _stat_fields(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def session_members(sid):
    """Live processes of the terminal session `sid` (the pane's shell and its jobs)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields and fields[3] == str(sid) and fields[0] not in ("Z", "X"):
                out.append(int(entry))
    return out


def tmux_servers(socket):
    """Live tmux processes on the private server `socket` (tmux -L socket)."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and proc_alive(int(e))
            and cmdline(e).startswith("tmux") and f"-L {socket} " in cmdline(e) + " "]


# ------------------------------------------------------------------ against any sandbox

def against(config, cwd=None):
    """The calc task against the sandbox of `config`; prints ok/FAIL, -> exit status."""
    class Checks(unittest.TestCase):
        def runTest(self):
            pass
    tc = Checks()
    script = CalcScript()
    model = ScriptedModel(script)
    try:
        rc, out, err = run_calc_task(model.url, config, cwd=cwd)
        check_calc_run(tc, model, script, rc, out, err, transport_words(config))
        # What the sandbox holds now: the fixed module, and no process naming the session.
        name = re.search(r"tmux session (terminus-[0-9a-f]+) ", err).group(1)
        with asp.open(config) as sb:
            where = f"{cwd}/calc/calc.py" if cwd else "calc/calc.py"
            tc.assertEqual(sb.read_text(where), "def add(a, b):\n    return a + b\n")
            # The watchdog of a command that named the session (a send-keys) leaves within its
            # half-second poll after the command: look again for a while before calling it left.
            scan = (f"for f in $(grep -l -a -- '[{name[0]}]{name[1:]}' /proc/[0-9]*/cmdline "
                    "2>/dev/null); do printf '%s: ' \"$f\"; tr '\\0' ' ' < \"$f\"; echo; done; "
                    "echo scanned")
            until = time.monotonic() + 20
            while True:
                r = sb.exec(scan, timeout=60)
                if r.stdout.decode() == "scanned\n" or time.monotonic() > until:
                    break
                time.sleep(0.5)
            tc.assertEqual(r.stdout.decode(), "scanned\n", "processes naming the session are left")
    except AssertionError as e:
        print(f"FAIL terminus-slim: {e}")
        return 1
    finally:
        model.close()
    print(f"ok   terminus-slim: calc task in {len(model.requests)} model turns, "
          "the model saw no transport word")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--against":
        import argparse
        ap = argparse.ArgumentParser()
        ap.add_argument("--against", required=True, metavar="CONFIG")
        ap.add_argument("--cwd")
        a = ap.parse_args()
        sys.exit(against(os.path.abspath(a.against), a.cwd))
    unittest.main()
