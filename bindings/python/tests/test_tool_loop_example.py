"""examples/c/tool_loop.c, compiled against the build tree and run where discovery finds the
sshd fixture's .asp.json: its calls run in the sandbox, and the background server one call
starts is still there for the next call, which queries it, and gone after the third."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import REPO, SshdFixture, proc_alive  # noqa: E402

SOURCE = os.path.join(REPO, "examples", "c", "tool_loop.c")
BUILD = os.path.join(REPO, os.environ.get("BUILD", "build"))


class TestToolLoopExample(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.fx = SshdFixture().start()
        cls.tmp = tempfile.mkdtemp(prefix="tool-loop.")
        cls.binary = os.path.join(cls.tmp, "tool_loop")
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise unittest.SkipTest("no C compiler")
        subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-I",
                        os.path.join(REPO, "include"), SOURCE, "-o", cls.binary, "-L", BUILD,
                        "-lasp", "-Wl,-rpath," + BUILD], check=True)

    @classmethod
    def tearDownClass(cls):
        cls.fx.stop()
        shutil.rmtree(cls.tmp, True)

    def test_a_background_server_outlives_its_call(self):
        r = subprocess.run([self.binary], cwd=self.fx.dir, capture_output=True, timeout=120,
                           env={"PATH": "/usr/local/bin:/usr/bin:/bin",
                                "HOME": os.environ.get("HOME", "/")})
        out, err = r.stdout.decode(), r.stderr.decode()
        self.assertEqual(r.returncode, 0, out + err)
        self.assertIn("hello from the sandbox\n", out)
        self.assertIn("server started\n[exit 0]", out)
        m = re.search(r"^server (\d+) is running, on port (\d+)\n", out, re.M)
        self.assertIsNotNone(m, out)
        pid = int(m.group(1))
        # The later call got the file from the server: the source, as written.
        fetched = out[m.end():]
        self.assertTrue(fetched.startswith('#include <stdio.h>\nint main(void)\n'), out)
        self.assertIn("server stopped\n[exit 0]", out)
        self.assertFalse(proc_alive(pid), f"server {pid} is still alive")
        ws = self.fx.workspace
        self.assertFalse(os.path.exists(os.path.join(ws, "server.pid")))
        self.assertFalse(os.path.exists(os.path.join(ws, "server.log")))


if __name__ == "__main__":
    unittest.main()
