"""examples/python/agent.py driven by a model: a chat-completions loop against a local server.

The server (http.server on 127.0.0.1, started here) speaks the OpenAI chat-completions
protocol and answers with scripted tool calls; it records every request. The agent runs
where discovery finds the sshd fixture's .asp.json, so its tools run in the sandbox
through asp.aio. The test checks the conversation the server saw, the transcript, the
files left in the sandbox, and that nothing the model is sent names the transport.
"""

import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import SshdFixture  # noqa: E402
from test_agent_example import run_agent  # noqa: E402

MODEL = "test-model"
KEY = "sk-test-key"
TASK = "Make greet() say hi instead of hello, then show the file."


def call(name, args, raw=None):
    return {"name": name, "arguments": raw if raw is not None else json.dumps(args)}


# One list of tool calls per model turn; a string is the final answer.
SCRIPT = [
    [call("write", {"path": "src/greet.py",
                    "content": "def greet(name):\n    return 'hello ' + name\n"}),
     call("write", {"path": "notes.md", "content": "# Notes\n"})],
    [call("read", {"path": "src/greet.py"}),
     call("bash", {"command": "python3 -B -c 'import sys; sys.path.insert(0, \"src\"); "
                              "import greet; print(greet.greet(\"world\"))'"})],
    [call("edit", {"path": "src/greet.py", "old_string": "'hello '", "new_string": "'hi '"}),
     call("edit", None, raw="{not json"),
     call("frobnicate", {}),
     call("bash", {"command": "echo oops >&2; exit 3", "timeout": 30}),
     call("bash", {"command": "true", "timeout": -5})],
    [call("bash", {"command": "cat src/greet.py; ls"})],
    "Done: greet() now says hi.",
]


class ScriptedModel:
    """An OpenAI-compatible /chat/completions endpoint that replays `script`.

    before_turn(turn), when given, runs before the answer to each request."""

    def __init__(self, script, before_turn=None):
        self.script = script
        self.requests = []  # (path, headers, raw body)
        model = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                model.requests.append((self.path, dict(self.headers), raw))
                turn = len(model.requests) - 1
                if before_turn:
                    before_turn(turn)
                if turn >= len(model.script):
                    return self._send(500, {"error": {"message": "the script is over"}})
                step = model.script[turn]
                if isinstance(step, str):
                    message, finish = {"role": "assistant", "content": step}, "stop"
                else:
                    message = {"role": "assistant", "content": None, "tool_calls": [
                        {"id": f"call_{turn}_{i}", "type": "function", "function": c}
                        for i, c in enumerate(step)]}
                    finish = "tool_calls"
                self._send(200, {"id": f"chatcmpl-{turn}", "object": "chat.completion",
                                 "created": 0, "model": MODEL,
                                 "choices": [{"index": 0, "message": message,
                                              "finish_reason": finish}]})

            def _send(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def bodies(self):
        return [json.loads(raw) for _, _, raw in self.requests]


def model_env(url, **extra):
    return dict(OPENAI_BASE_URL=url, OPENAI_MODEL=MODEL, OPENAI_API_KEY=KEY,
                no_proxy="127.0.0.1", **extra)


class TestModelLoop(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.fx = SshdFixture().start()

    @classmethod
    def tearDownClass(cls):
        cls.fx.stop()

    def transport_words(self):
        """What would tell the model where its tools run."""
        fx = self.fx
        return ["asp", "ssh", "SSH", "127.0.0.1", str(fx.port), fx.host_fingerprint(),
                fx.host_fingerprint().split(":", 1)[1], fx.host_key_line.split()[1],
                fx.client_key, fx.config, fx.dir, fx.workspace, fx.user]

    def leaks(self, text):
        low = text.lower()
        return [w for w in self.transport_words() if w in text or w.lower() in low]

    def test_conversation_transcript_and_files(self):
        model = ScriptedModel(SCRIPT)
        self.addCleanup(model.close)
        r = run_agent(self.fx.dir, TASK, **model_env(model.url))
        out, err = r.stdout.decode(), r.stderr.decode()
        self.assertEqual(r.returncode, 0, err)
        self.assertIn("agent: tools run in the sandbox", err)
        self.assertTrue(self.fx.log_contains(f"Accepted publickey for {self.fx.user}"))

        # The protocol: one POST per turn, the key, the model, the tools, the history.
        self.assertEqual(len(model.requests), len(SCRIPT))
        bodies = model.bodies()
        for path, headers, _ in model.requests:
            self.assertEqual(path, "/v1/chat/completions")
            self.assertEqual(headers.get("Authorization"), "Bearer " + KEY)
            self.assertEqual(headers.get("Content-Type"), "application/json")
        for body in bodies:
            self.assertEqual(body["model"], MODEL)
            self.assertEqual([t["function"]["name"] for t in body["tools"]],
                             ["read", "write", "edit", "bash"])
            for t in body["tools"]:
                self.assertEqual(t["type"], "function")
                params = t["function"]["parameters"]
                self.assertEqual(params["type"], "object")
                self.assertTrue(set(params["required"]) <= set(params["properties"]))
        first = bodies[0]["messages"]
        self.assertEqual([m["role"] for m in first], ["system", "user"])
        self.assertEqual(first[1]["content"], TASK)
        for turn in range(1, len(SCRIPT)):
            history = bodies[turn]["messages"]
            self.assertEqual(history[:len(bodies[turn - 1]["messages"])],
                             bodies[turn - 1]["messages"])  # it only grows
            calls = SCRIPT[turn - 1]
            asked = history[-len(calls) - 1]
            self.assertEqual(asked["role"], "assistant")
            self.assertEqual([c["function"] for c in asked["tool_calls"]], calls)
            answers = history[-len(calls):]
            self.assertEqual([m["role"] for m in answers], ["tool"] * len(calls))
            self.assertEqual([m["tool_call_id"] for m in answers],
                             [f"call_{turn - 1}_{i}" for i in range(len(calls))])
        results = [[m["content"] for m in body["messages"] if m["role"] == "tool"]
                   for body in bodies]
        final = results[-1]
        self.assertEqual(final[0], "Created src/greet.py (44 bytes, 2 lines)")
        self.assertEqual(final[1], "Created notes.md (8 bytes, 1 lines)")
        self.assertEqual(final[2], "     1\tdef greet(name):\n     2\t    return 'hello ' + name")
        self.assertEqual(final[3], "[stdout]\nhello world\n[exit code 0]")
        self.assertTrue(final[4].startswith("Edited src/greet.py: replaced 1 occurrence."))
        self.assertTrue(final[5].startswith("Error: the arguments of edit are not valid JSON"))
        self.assertEqual(final[6], "Error: unknown tool 'frobnicate'")
        self.assertEqual(final[7], "[stderr]\noops\n[exit code 3]")
        self.assertEqual(final[8], "Error: timeout must be a number of seconds in 1..3600")
        self.assertEqual(final[9], "[stdout]\ndef greet(name):\n    return 'hi ' + name\n"
                                   "notes.md\nsrc\n[exit code 0]")

        # The transcript: every call and result, then the answer.
        self.assertIn('=== [1] write {"content": "# Notes\\n", "path": "notes.md"}\n'
                      "Created notes.md (8 bytes, 1 lines)\n", out)
        self.assertIn("=== [3] frobnicate {}\nError: unknown tool 'frobnicate'\n", out)
        self.assertIn("=== [3] edit {not json\nError: the arguments of edit are not valid", out)
        self.assertTrue(out.rstrip().endswith("=== [5] assistant\nDone: greet() now says hi."))

        # The sandbox's files.
        with open(os.path.join(self.fx.workspace, "src", "greet.py")) as f:
            self.assertEqual(f.read(), "def greet(name):\n    return 'hi ' + name\n")
        with open(os.path.join(self.fx.workspace, "notes.md")) as f:
            self.assertEqual(f.read(), "# Notes\n")
        if os.geteuid() == 0:
            st = os.stat(os.path.join(self.fx.workspace, "notes.md"))
            self.assertEqual(st.st_uid, self.fx.uid)  # written as the sandbox user

        # The model never sees the transport (the check sees it where it is: stderr).
        self.assertTrue(self.leaks(err), "the check cannot see the transport words")
        for i, (_, _, raw) in enumerate(model.requests):
            self.assertEqual(self.leaks(raw.decode()), [], f"request {i + 1}")

    def test_a_dead_sandbox_is_not_described_to_the_model(self):
        """The sandbox's server dies mid-conversation: the tools fail with neutral text
        (libasp's messages, which name the connection, go to stderr only)."""
        fx = SshdFixture().start()
        self.addCleanup(fx.stop)
        script = [
            [call("write", {"path": "notes.md", "content": "# Notes\n"})],
            [call("read", {"path": "notes.md"}), call("bash", {"command": "echo hi"}),
             call("write", {"path": "more.md", "content": "x\n"})],
            "Gave up.",
        ]
        model = ScriptedModel(script, before_turn=lambda turn: turn == 1 and fx.stop_server())
        self.addCleanup(model.close)
        r = run_agent(fx.dir, TASK, **model_env(model.url))
        out, err = r.stdout.decode(), r.stderr.decode()
        self.assertEqual(r.returncode, 0, err)
        self.assertIn("Gave up.", out)  # the model's last word reaches the user
        bodies = model.bodies()
        self.assertEqual(len(bodies), 3)
        results = [m["content"] for m in bodies[2]["messages"] if m["role"] == "tool"]
        self.assertEqual(results[0], "Created notes.md (8 bytes, 1 lines)")  # before the stop
        self.assertEqual(results[1:], [
            "Error: the read did not complete: the environment stopped responding. "
            "Try again later.",
            "Error: the command did not complete: the environment stopped responding; "
            "the command may have run in part. Try again later.",
            "Error: the write did not complete: the environment stopped responding. "
            "Try again later."])
        # The operator sees libasp's own message (which names the connection); the model not.
        self.assertIn("agent: read failed in the sandbox: ASP_E", err)
        self.assertIn(f"127.0.0.1:{fx.port}", err)
        words = ["asp", "ssh", "SSH", "127.0.0.1", str(fx.port), fx.config, fx.dir, fx.user]
        for i, (_, _, raw) in enumerate(model.requests):
            text = raw.decode()
            self.assertEqual([w for w in words if w in text or w.lower() in text.lower()], [],
                             f"request {i + 1}")

    def test_gives_up_after_max_turns(self):
        model = ScriptedModel([[call("bash", {"command": "echo again"})]] * 3)
        self.addCleanup(model.close)
        r = run_agent(self.fx.dir, "loop", "--max-turns", "2", **model_env(model.url))
        self.assertEqual(r.returncode, 3, r.stderr.decode())
        self.assertEqual(len(model.requests), 2)
        self.assertIn(b"=== stopped: no answer after 2 model turns", r.stdout)

    def test_endpoint_errors_are_reported(self):
        model = ScriptedModel([])  # every request is a 500
        self.addCleanup(model.close)
        r = run_agent(self.fx.dir, "anything", **model_env(model.url))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"/v1/chat/completions: HTTP 500", r.stderr)
        self.assertIn(b"the script is over", r.stderr)
        self.assertNotIn(KEY.encode(), r.stderr)


class TestModes(unittest.TestCase):
    """Which mode runs (local hands: no sandbox needed)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="agent-modes.")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_no_endpoint_runs_the_plan(self):
        r = run_agent(self.dir, "--local", self.dir)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn(b"=== [1] write", r.stdout)

    def test_scripted_wins_over_an_endpoint(self):
        model = ScriptedModel([])
        self.addCleanup(model.close)
        r = run_agent(self.dir, "--scripted", "--local", self.dir, **model_env(model.url))
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn(b"=== [1] write", r.stdout)
        self.assertEqual(model.requests, [])

    def test_a_task_needs_an_endpoint_and_a_model(self):
        r = run_agent(self.dir, "do it", "--local", self.dir)
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"a task needs a model", r.stderr)
        r = run_agent(self.dir, "do it", "--local", self.dir, OPENAI_BASE_URL="http://x/v1")
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"OPENAI_MODEL is not", r.stderr)
        r = run_agent(self.dir, "--local", self.dir, OPENAI_BASE_URL="http://x/v1")
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"give the task", r.stderr)
        self.assertEqual(os.listdir(self.dir), [])  # nothing ran


if __name__ == "__main__":
    unittest.main()
