"""Per-call cancel tokens and deadlines on the file calls, against a real sshd.

A call is made to hang for real: the SFTP server opens a FIFO in the
workspace for reading and blocks until a writer comes, so no reply ever
arrives on its own.
"""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import FixtureForModule, SandboxTest, asp  # noqa: E402

FX = FixtureForModule()
setUpModule, tearDownModule = FX.start, FX.stop


class TestCallOptions(SandboxTest):

    fx = FX
    dir_prefix = "co-"

    def setUp(self):
        super().setUp()
        self.fifo = self.d + "/fifo"
        r = self.sb.exec("mkfifo " + self.fifo)
        self.assertEqual(r.exit_code, 0, r.stderr)

    def tearDown(self):
        # Release the SFTP server still blocked opening the FIFO: give it a writer.
        self.sb.exec("exec 3<>" + self.fifo + "; exec 3>&-", timeout=5)
        self.sb.remove(self.d, recursive=True)

    def test_timeout_ends_a_stuck_read(self):
        start = time.monotonic()
        with self.assertRaises(asp.AspTimeout) as cm:
            self.sb.read(self.fifo, timeout=0.5)
        self.assertIn("deadline", str(cm.exception))
        # Bounded: not the default five minutes (no timing is asserted beyond that).
        self.assertLess(time.monotonic() - start, 60)
        # The handle still works.
        self.sb.write(self.d + "/after", b"ok")
        self.assertEqual(self.sb.read(self.d + "/after"), b"ok")

    def test_op_timeout_is_the_default_deadline(self):
        with asp.open(FX.config, op_timeout=0.5) as sb:
            with self.assertRaises(asp.AspTimeout):
                sb.read(self.fifo)
            # A call's own timeout replaces the default.
            t = threading.Timer(1.5, lambda: self.sb.exec("exec 3<>" + self.fifo + "; exec 3>&-",
                                                           timeout=5))
            t.start()
            try:
                self.assertEqual(sb.read(self.fifo, timeout=30), b"")
            finally:
                t.join()

    def test_cancel_from_another_thread(self):
        c = asp.Cancel()
        t = threading.Timer(0.3, c.trigger)
        t.start()
        try:
            with self.assertRaises(asp.Cancelled):
                self.sb.read(self.fifo, cancel=c, timeout=60)
        finally:
            t.join()
            c.close()
        self.assertEqual(self.sb.stat(self.d + "/fifo").type, asp.FileType.OTHER)

    def test_triggered_token_stops_every_file_call(self):
        c = asp.Cancel()
        c.trigger()
        calls = [
            lambda: self.sb.read(self.d + "/x", cancel=c),
            lambda: self.sb.write(self.d + "/x", b"data", cancel=c),
            lambda: self.sb.stat(self.d, cancel=c),
            lambda: self.sb.list(self.d, cancel=c),
            lambda: self.sb.mkdir(self.d + "/sub", cancel=c),
            lambda: self.sb.remove(self.d + "/x", cancel=c),
            lambda: self.sb.rename(self.d + "/x", self.d + "/y", cancel=c),
        ]
        for call in calls:
            with self.assertRaises(asp.Cancelled):
                call()
        c.close()
        # Nothing happened.
        self.assertEqual([e.name for e in self.sb.list(self.d)], ["fifo"])

    def test_bad_arguments(self):
        with self.assertRaises(TypeError):
            self.sb.stat(self.d, cancel="no")
        with self.assertRaises(ValueError):
            self.sb.stat(self.d, timeout=-1)


if __name__ == "__main__":
    unittest.main()
