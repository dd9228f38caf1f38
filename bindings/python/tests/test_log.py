"""The trace reaches the logging logger "asp"; ASP_DEBUG=1 alone writes it to stderr.

    /usr/bin/python3 -m unittest discover -s bindings/python/tests -p 'test_log.py' -v
"""

import logging
import os
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import HERE, FixtureForModule, asp  # noqa: E402

FX = FixtureForModule()
setUpModule, tearDownModule = FX.start, FX.stop


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []
        self.mu = threading.Lock()

    def emit(self, record):
        with self.mu:
            self.records.append((record.levelno, record.getMessage(), record.threadName))

    def text(self):
        with self.mu:
            return "\n".join(f"{logging.getLevelName(lv)}: {m}" for lv, m, _ in self.records)


class Trace(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="asp-py-log.")
        self.kh = os.path.join(self.tmp, "known_hosts")
        self.logger = logging.getLogger("asp")
        self.cap = Capture()
        self.logger.addHandler(self.cap)
        self.addCleanup(self.logger.removeHandler, self.cap)
        self.addCleanup(self.logger.setLevel, self.logger.level)
        self.addCleanup(subprocess.run, ["rm", "-rf", self.tmp], check=False)

    def test_connect_and_calls_at_debug(self):
        self.logger.setLevel(logging.DEBUG)
        with asp.open(FX.config, known_hosts=self.kh, file_transport="sftp") as sb:
            sb.write("py-log.txt", b"x")
            self.assertEqual(sb.read("py-log.txt"), b"x")
            self.assertEqual(sb.exec("echo hi").stdout, b"hi\n")
        text = self.cap.text()
        self.assertIn(f"INFO: connected to 127.0.0.1:{FX.port} in ", text)
        self.assertIn("auth publickey (connection.identity)", text)
        self.assertIn(f"DEBUG: write {FX.workspace}/py-log.txt: ok in ", text)
        self.assertIn(" ms via sftp", text)
        self.assertIn(f"DEBUG: exec in {FX.workspace}: ok in ", text)
        self.assertNotIn(FX.user, text)

    def test_level_read_at_open(self):
        self.logger.setLevel(logging.INFO)
        with asp.open(FX.config, known_hosts=self.kh) as sb:
            sb.write("py-log.txt", b"y")
        levels = {lv for lv, _, _ in self.cap.records}
        self.assertIn(logging.INFO, levels)
        self.assertNotIn(logging.DEBUG, levels)

    def test_calls_from_threads(self):
        # The callback runs on the calling threads (and the pool's): each takes the GIL.
        self.logger.setLevel(logging.DEBUG)
        with asp.open(FX.config, known_hosts=self.kh, max_connections=4) as sb:
            errors = []

            def work(i):
                try:
                    for _ in range(5):
                        sb.exec(f"echo {i}")
                except Exception as e:  # noqa: BLE001
                    errors.append(e)
            threads = [threading.Thread(target=work, args=(i,), name=f"w{i}") for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
        calls = [r for r in self.cap.records if r[1].startswith("exec in ")]
        self.assertEqual(len(calls), 20)
        self.assertGreater(len({name for _, _, name in calls}), 1, "every line came from one thread")

    def test_asp_debug_without_logging_goes_to_stderr(self):
        code = ("import sys; sys.path.insert(0, %r); import asp\n"
                "with asp.open(%r, known_hosts=%r) as sb: sb.exec('true')\n"
                % (os.path.dirname(HERE), FX.config, self.kh))
        env = dict(os.environ, ASP_DEBUG="1")
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"asp: info: connected to 127.0.0.1:", p.stderr)
        self.assertIn(b"asp: debug: exec in ", p.stderr)
        env.pop("ASP_DEBUG")
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(b"connected to", p.stderr)


if __name__ == "__main__":
    unittest.main()
