"""A command's life ends with its caller's: Ctrl-C during Sandbox.exec kills it, and so does the
harness's death (SIGKILL: nothing runs on the harness side, the sandbox's watchdog sees the
connection close). Each harness is a real python3 process driving the binding against the sshd
fixture; the sandbox is local, so its processes are seen in /proc.
    /usr/bin/python3 -m unittest discover -s bindings/python/tests -p test_lifecycle.py -v
"""
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import PKG_ROOT, FixtureForModule, proc_alive  # noqa: E402
from shared import wait_dead as _wait_dead  # noqa: E402

FX = FixtureForModule()
setUpModule, tearDownModule = FX.start, FX.stop
HANG = 30.0  # a hang detector, not a timing

# The command: a background sleep in its group and one that left it (setsid); the pids in a file.
COMMAND = ("sleep 300 & a=$!; setsid sleep 301 & b=$!; echo \"$$ $a $b\" > {f}.tmp; "
           "mv {f}.tmp {f}; wait; echo never")

HARNESS = r"""
import sys
sys.path.insert(0, sys.argv[1])
import asp
sb = asp.open(sys.argv[2])
try:
    r = sb.exec(sys.argv[3])
    print("returned", r.exit_code, flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
"""


def wait_dead(pid, timeout=HANG):
    return _wait_dead(pid, timeout)


class HarnessTest(unittest.TestCase):
    def start_harness(self, name):
        pids_file = os.path.join(FX.workspace, name)
        if os.path.exists(pids_file):
            os.unlink(pids_file)
        proc = subprocess.Popen([sys.executable, "-c", HARNESS, PKG_ROOT, FX.config,
                                 COMMAND.format(f=name)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(self.reap, proc)
        deadline = time.monotonic() + HANG
        while True:
            try:
                with open(pids_file) as f:
                    pids = [int(x) for x in f.read().split()]
                if len(pids) == 3:
                    break
            except (OSError, ValueError):
                pass
            if proc.poll() is not None:
                self.fail("the harness ended early: %s" % (proc.communicate(),))
            self.assertLess(time.monotonic(), deadline, "the command never wrote its pids")
            time.sleep(0.02)
        for pid in pids:
            self.assertTrue(proc_alive(pid), f"process {pid} of the command is not running")
        self.addCleanup(self.kill_left, pids)
        return proc, pids

    @staticmethod
    def reap(proc):
        if proc.poll() is None:
            proc.kill()
        proc.communicate()

    @staticmethod
    def kill_left(pids):
        for pid in pids:
            if proc_alive(pid):
                os.kill(pid, signal.SIGKILL)

    def assert_gone(self, pids):
        names = ("the wrapper shell", "a sleep in its group", "a setsid sleep")
        for pid, name in zip(pids, names):
            self.assertTrue(wait_dead(pid), f"process {pid} ({name}) survived")

    def test_ctrl_c_raises_and_kills_the_command(self):
        proc, pids = self.start_harness("ctrlc-pids")
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=HANG)
        except subprocess.TimeoutExpired:
            self.fail("Ctrl-C did not end Sandbox.exec: it waits for the command")
        self.assertIn("KeyboardInterrupt", out, err)
        self.assertEqual(proc.returncode, 0, err)
        self.assert_gone(pids)

    def test_harness_killed_kills_the_command(self):
        proc, pids = self.start_harness("sigkill-pids")
        proc.kill()
        proc.wait(timeout=HANG)
        self.assert_gone(pids)


if __name__ == "__main__":
    unittest.main()
