"""Messages name this binding's parameters (max_read_bytes=, stdin=, timeout=), not libasp's C
struct fields (asp_open_options.max_read_bytes, stdin_data, timeout_ms), against the sshd fixture.
    /usr/bin/python3 -m unittest discover -s bindings/python/tests -p test_messages.py -v
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import FixtureForModule, asp  # noqa: E402

FX = FixtureForModule()
setUpModule, tearDownModule = FX.start, FX.stop
C_WORDS = ("asp_open_options", "asp_exec_options", "stdin_data", "timeout_ms", "_ms)")


class MessagesTest(unittest.TestCase):
    def assert_binding_words(self, exc, want):
        text = str(exc)
        self.assertIn(want, text)
        for word in C_WORDS:
            self.assertNotIn(word, text)

    def test_read_cap_names_max_read_bytes(self):
        with asp.open(FX.config, max_read_bytes=4) as sb:
            sb.write("five.txt", b"12345")
            with self.assertRaises(asp.AspError) as cm:
                sb.read("five.txt")
        self.assert_binding_words(cm.exception, "max_read_bytes=")

    def test_long_command_names_stdin(self):
        with asp.open(FX.config) as sb:
            with self.assertRaises(asp.AspError) as cm:
                sb.exec("echo " + "x" * 40000)
        self.assert_binding_words(cm.exception, "stdin=")

    def test_deadline_names_timeout(self):
        with asp.open(FX.config) as sb:
            sb.exec("true")
            with self.assertRaises(asp.AspError) as cm:
                # A read that waits on a fifo no one writes: only the deadline ends it.
                sb.exec("mkfifo msg-fifo 2>/dev/null; true")
                sb.read("msg-fifo", timeout=0.5)
        self.assert_binding_words(cm.exception, "timeout=")


if __name__ == "__main__":
    unittest.main()
