"""file_transport="exec": file calls over shell commands, against a real sshd.

A sandbox forced to "exec" reads, writes and lists without ever asking for
the SFTP subsystem (sshd's log says so), and info() reports it; under
"auto", a server with no SFTP subsystem falls back to the same.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import SshdFixture, asp  # noqa: E402

ALL_BYTES = bytes(range(256)) * 3


def log_text(fx):
    with open(fx.log, encoding="utf-8", errors="replace") as f:
        return f.read()


class TestFileTransport(unittest.TestCase):

    def calls(self, sb, d):
        sb.write(d + "/sub/bytes.bin", ALL_BYTES, parents=True)
        self.assertEqual(sb.read(d + "/sub/bytes.bin"), ALL_BYTES)
        self.assertEqual(sb.read(d + "/sub/bytes.bin", offset=255, limit=3), ALL_BYTES[255:258])
        sb.write(d + "/sub/it's $(x).txt", "text")
        names = sorted(e.name for e in sb.list(d + "/sub"))
        self.assertEqual(names, ["bytes.bin", "it's $(x).txt"])
        self.assertEqual(sb.stat(d + "/sub/bytes.bin").size, len(ALL_BYTES))
        with self.assertRaises(asp.NotFoundError):
            sb.read(d + "/nope")

    def test_forced_exec_never_opens_sftp(self):
        with SshdFixture() as fx:
            with asp.open(fx.config, file_transport="exec") as sb:
                self.assertEqual(sb.info()["file_transport"], "exec")
                self.calls(sb, "forced")
                self.assertEqual(sb.info()["file_transport"], "exec")
            log = log_text(fx)
            self.assertIn("Accepted publickey", log)
            self.assertNotIn("subsystem 'sftp'", log)
            # The same calls under auto do ask for SFTP: the log check can fail.
            with asp.open(fx.config) as sb:
                self.calls(sb, "auto")
                self.assertEqual(sb.info()["file_transport"], "sftp")
            self.assertIn("subsystem 'sftp'", log_text(fx))

    def test_auto_falls_back_without_sftp(self):
        with SshdFixture(extra_config="# Subsystem: none on this server\n") as fx:
            with asp.open(fx.config) as sb:
                self.assertIsNone(sb.info()["file_transport"])
                self.calls(sb, "auto")
                self.assertEqual(sb.info()["file_transport"], "exec")
            with asp.open(fx.config, file_transport="sftp") as sb:
                with self.assertRaises(asp.ProtocolError) as cm:
                    sb.read("anything")
                self.assertIn("no SFTP subsystem", str(cm.exception))
                self.assertIn("file_transport", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
