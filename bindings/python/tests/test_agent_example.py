"""examples/python/agent.py: the model-facing output is the same in the sandbox and locally.

The fixture's workspace is a real local directory, so the test seeds it, copies
it, runs the agent once where discovery finds the fixture's .asp.json (tools in
the sandbox, over SSH, as the sandbox user) and once in the copy (no .asp.json:
tools run locally), and compares the transcripts byte for byte, then the
resulting trees.
"""

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import PKG_ROOT, REPO, SshdFixture  # noqa: E402

AGENT = os.path.join(REPO, "examples", "python", "agent.py")


def load_agent():
    spec = importlib.util.spec_from_file_location("agent_example", AGENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def agent_env(**extra):
    """A small environment like the sandbox's login (no LANG, a plain PATH)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/"),
           "PYTHONPATH": PKG_ROOT, "PYTHONDONTWRITEBYTECODE": "1"}
    if "ASP_LIBRARY" in os.environ:
        env["ASP_LIBRARY"] = os.environ["ASP_LIBRARY"]
    env.update(extra)
    return env


def run_agent(cwd, *args, **env):
    return subprocess.run([sys.executable, AGENT, *args], cwd=cwd, env=agent_env(**env),
                          capture_output=True, timeout=300)


def tree(root):
    """{relative path: (kind, content or None, mode)} of everything under root."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(d, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if os.path.isdir(path):
                out[rel] = ("dir", None, st.st_mode & 0o7777)
            else:
                with open(path, "rb") as f:
                    out[rel] = ("file", f.read(), st.st_mode & 0o7777)
    return out


SEED = {
    "README.md": "# Demo project\n\nA workspace seeded by the test.\n" +
                 "".join(f"line {i}\n" for i in range(4, 31)),
    "src/util.py": "def greet(name):\n    return 'hello ' + name\n",
}

EXTRA_PLAN = [
    {"tool": "read", "args": {"path": "README.md", "offset": 3, "limit": 3}},
    {"tool": "read", "args": {"path": "README.md", "offset": 28}},
    {"tool": "edit", "args": {"path": "src/util.py", "old_string": "'hello '",
                              "new_string": "'hi '"}},
    {"tool": "bash", "args": {"command": "python3 -B -c 'import sys; sys.path.insert(0, \"src\"); "
                                         "import util; print(util.greet(\"asp\"))'"}},
    {"tool": "edit", "args": {"path": "README.md", "old_string": "line"}},
    {"tool": "frobnicate", "args": {}},
]


class TestAgentExample(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.fx = SshdFixture().start()
        for rel, text in SEED.items():
            path = os.path.join(cls.fx.workspace, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        cls.fx.chown_to_user(cls.fx.workspace)
        cls.tmp = tempfile.mkdtemp(prefix="asp-agent-test.")
        cls.copy = os.path.join(cls.tmp, "copy")
        shutil.copytree(cls.fx.workspace, cls.copy, symlinks=True)
        cls.plan = os.path.join(cls.tmp, "plan.json")
        with open(cls.plan, "w") as f:
            json.dump(EXTRA_PLAN, f)

    @classmethod
    def tearDownClass(cls):
        cls.fx.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_1_same_transcript_in_the_sandbox_and_locally(self):
        remote = run_agent(self.fx.dir)               # finds fx.dir/.asp.json
        local = run_agent(self.copy)                  # no .asp.json above /tmp/...
        self.assertEqual(remote.returncode, 0, remote.stderr.decode())
        self.assertEqual(local.returncode, 0, local.stderr.decode())
        self.assertIn(b"agent: tools run in the sandbox", remote.stderr)
        self.assertIn(self.fx.config.encode(), remote.stderr)
        self.assertIn(b"tools run locally in " + self.copy.encode(), local.stderr)
        self.assertEqual(remote.stdout.decode(), local.stdout.decode())

        transcript = remote.stdout.decode()
        for marker in ("     1\tdef add(a, b):",
                       "[lines 5-6 of 11; use offset=7 to read on]",
                       "Edited src/calc.py: replaced 1 occurrence. Lines 1-5 now read:",
                       "old_string occurs 2 times in src/calc.py (lines 11, 12)",
                       "replaced 2 occurrences",
                       "old_string was not found in src/calc.py",
                       "old_string and new_string are identical",
                       "Error: file not found: missing.txt",
                       "Error: src is a directory, not a file",
                       "offset 99 is past the end of src/calc.py (12 lines)",
                       "... [line truncated: 3005 characters]",
                       "looks like a binary file (7 bytes)",
                       "[data/empty.txt is empty]",
                       "Created notes/todo.md (22 bytes, 3 lines)",
                       "Overwrote notes/todo.md",
                       "     4\t- [ ] café ✓",
                       "Error: src is a directory\n",
                       "characters omitted] ...\n",
                       "[stdout]\nto stdout\n[stderr]\nto stderr\n[exit code 3]",
                       "(no output)\n[exit code 0]",
                       "[stdout]\nstarted\n[timed out after 1 s; the command was killed]",
                       "./README.md\n./data/blob.bin"):
            self.assertIn(marker, transcript)
        # The sandbox run really happened over SSH, as the sandbox user.
        if os.geteuid() == 0:
            st = os.stat(os.path.join(self.fx.workspace, "src", "calc.py"))
            self.assertEqual(st.st_uid, self.fx.uid)
        self.assertTrue(self.fx.log_contains(f"Accepted publickey for {self.fx.user}"))

        # ... and left the same files behind.
        self.assertEqual(tree(self.fx.workspace), tree(self.copy))

    def test_2_plan_file_on_seeded_files(self):
        remote = run_agent(self.fx.dir, "--plan", self.plan)
        local = run_agent(self.copy, "--plan", self.plan)
        self.assertEqual((remote.returncode, local.returncode), (0, 0), remote.stderr)
        self.assertEqual(remote.stdout.decode(), local.stdout.decode())
        transcript = remote.stdout.decode()
        self.assertIn("     3\tA workspace seeded by the test.\n     4\tline 4\n     5\tline 5\n"
                      "[lines 3-5 of 30; use offset=6 to read on]", transcript)
        self.assertIn("    30\tline 30\n[lines 28-30 of 30]", transcript)
        self.assertIn("[stdout]\nhi asp\n[exit code 0]", transcript)
        self.assertIn("Error: bad arguments for edit", transcript)
        self.assertIn("Error: unknown tool 'frobnicate'", transcript)
        self.assertEqual(tree(self.fx.workspace), tree(self.copy))

    def test_3_fails_closed_when_asp_config_names_no_file(self):
        with tempfile.TemporaryDirectory() as empty:
            r = run_agent(empty, ASP_CONFIG=os.path.join(empty, "missing.json"))
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(b"names no file", r.stderr)
            self.assertEqual(os.listdir(empty), [])  # nothing ran locally

    def test_5_local_cap_is_libasps_max_output(self):
        import asp
        agent = load_agent()
        full = "".join(f"{i}\n" for i in range(1, 51)).encode()
        with asp.open(self.fx.config) as sb:
            for n in (1, 2, 9, 10, len(full) - 1, len(full)):
                self.assertEqual(sb.exec("seq 1 50", max_output=n).stdout, agent.cap(full, n))

    def test_4_fails_closed_when_the_sandbox_cannot_be_opened(self):
        with tempfile.TemporaryDirectory() as d:
            self.fx.write_config(os.path.join(d, ".asp.json"), identity="/nonexistent/key")
            r = run_agent(d)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(b"cannot open the sandbox", r.stderr)
            self.assertEqual(os.listdir(d), [".asp.json"])


class TestPolicyLayer(unittest.TestCase):
    """The model-facing formatting, on local hands (the tools are coroutines)."""

    @classmethod
    def setUpClass(cls):
        cls.agent = load_agent()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="asp-policy.")
        self.addCleanup(shutil.rmtree, self.dir, True)
        tools = self.agent.Tools(self.agent.LocalHands(self.dir))

        class Blocking:  # each tool call run to its end
            def __getattr__(_, name):
                return lambda *a, **kw: asyncio.run(getattr(tools, name)(*a, **kw))

        self.tools = Blocking()

    def test_read_is_cat_n(self):
        self.tools.write("f.txt", "a\nb\n\nc")
        self.assertEqual(self.tools.read("f.txt"), "     1\ta\n     2\tb\n     3\t\n     4\tc")
        for text in ("a\nb\n\nc", "one\n", "\n\n", "x\ty  \n\tz\n"):
            self.tools.write("g.txt", text)
            with open(os.path.join(self.dir, "g.txt")) as f:
                expected = subprocess.run(["cat", "-n"], stdin=f, capture_output=True,
                                          text=True).stdout
            if expected.endswith("\n"):
                expected = expected[:-1]
            self.assertEqual(self.tools.read("g.txt"), expected)

    def test_head_tail(self):
        text = "".join(str(i % 10) for i in range(100))
        cut = self.agent.head_tail(text, 20)
        self.assertTrue(cut.startswith(text[:10]) and cut.endswith(text[-10:]))
        self.assertIn("[80 characters omitted]", cut)
        self.assertEqual(self.agent.head_tail("short", 20), "short")

    def test_cap(self):
        data = bytes(range(100))
        self.assertEqual(self.agent.cap(data, 9), data[:5] + data[-4:])
        self.assertEqual(self.agent.cap(data, 0), data)

    def test_write_keeps_mode(self):
        self.tools.write("x.sh", "echo 1\n")
        os.chmod(os.path.join(self.dir, "x.sh"), 0o751)
        self.tools.edit("x.sh", "1", "2")
        self.assertEqual(os.stat(os.path.join(self.dir, "x.sh")).st_mode & 0o7777, 0o751)
        self.assertEqual(self.tools.bash("./x.sh"), "[stdout]\n2\n[exit code 0]")


if __name__ == "__main__":
    unittest.main()
