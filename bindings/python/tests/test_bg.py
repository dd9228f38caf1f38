"""Background processes from Python: start with a name, list, read from offsets (the bound
reported), signal the group (seen alive, then gone), wait with a timeout, remove; a process
started by one harness process (a real python3, which then exits) found and stopped by this
one; the asyncio variants. Against the sshd fixture, whose sandbox is local.
    /usr/bin/python3 -m unittest discover -s bindings/python/tests -p test_bg.py -v
"""
import asyncio
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import PKG_ROOT, FixtureForModule, SandboxTest, asp, proc_alive, wait_dead  # noqa: E402

FX = FixtureForModule()
setUpModule, tearDownModule = FX.start, FX.stop
HANG = 30.0  # a hang detector, not a timing


def read_pid(path):
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return int(text)
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"{path} never written")


class BgTest(SandboxTest):
    fx = FX

    def read_all(self, bid, offset=0):
        deadline = time.monotonic() + HANG
        while True:
            out = self.sb.bg_read(bid, offset)
            if not out.status.output_open or time.monotonic() > deadline:
                return out
            time.sleep(0.02)

    def test_start_read_list_remove(self):
        bid = self.sb.bg_start("echo hello; echo err >&2; exit 4", name="it's $(x)\n")
        st = self.sb.bg_wait(bid, timeout=HANG)
        self.assertEqual((st.state, st.exit_code, st.signal), ("exited", 4, None))
        out = self.read_all(bid)
        self.assertEqual(out.data, b"hello\nerr\n")
        self.assertEqual((out.offset, out.next), (0, 10))
        self.assertEqual(self.sb.bg_read(bid, 6, 2).data, b"er")
        mine = [p for p in self.sb.bg_list() if p.id == bid]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0].name, "it's $(x)\n")
        self.assertEqual(mine[0].command, "echo hello; echo err >&2; exit 4")
        self.assertEqual(mine[0].status.output_size, 10)
        self.sb.bg_remove(bid)
        with self.assertRaises(asp.NotFoundError):
            self.sb.bg_read(bid)
        with self.assertRaises(asp.InvalidArgument):
            self.sb.bg_wait("../x", 0)

    def test_bound_reported(self):
        bid = self.sb.bg_start("seq 1 2000", keep=1000)
        self.sb.bg_wait(bid, timeout=HANG)
        want = "".join(f"{i}\n" for i in range(1, 2001)).encode()
        out = self.read_all(bid)
        self.assertEqual(out.status.output_size, len(want))
        self.assertGreater(out.offset, 0)
        self.assertEqual(out.offset, out.status.output_start)
        self.assertLessEqual(len(want) - out.offset, 1000)
        self.assertEqual(out.data, want[out.offset:])
        self.sb.bg_remove(bid)

    def test_signal_and_wait_timeout(self):
        pidfile = self.local("pid")
        bid = self.sb.bg_start(f"sleep 300 & echo $! > {self.p('pid')}; wait")
        pid = read_pid(pidfile)
        self.assertTrue(proc_alive(pid))
        with self.assertRaises(asp.AspTimeout):
            self.sb.bg_wait(bid, 0.1)
        self.sb.bg_signal(bid, signal.SIGTERM)
        self.assertTrue(wait_dead(pid, HANG), "the group's sleep outlived SIGTERM")
        st = self.sb.bg_wait(bid, timeout=HANG)
        self.assertEqual((st.state, st.signal), ("exited", signal.SIGTERM))
        self.sb.bg_remove(bid)

    def test_outlives_the_harness(self):
        """A harness process starts it and exits; this one finds it by id."""
        pidfile = self.local("hpid")
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import asp; sb = asp.open(sys.argv[2]); "
                "print(sb.bg_start(sys.argv[3], name='harness'))")
        r = subprocess.run([sys.executable, "-c", code, PKG_ROOT, FX.config,
                            f"echo $$ > {self.p('hpid')}; exec sleep 300"],
                           capture_output=True, text=True, timeout=HANG)
        self.assertEqual(r.returncode, 0, r.stderr)
        bid = r.stdout.strip()
        pid = read_pid(pidfile)
        self.assertTrue(proc_alive(pid), "it died with the harness")
        mine = [p for p in self.sb.bg_list() if p.id == bid]
        self.assertEqual((mine[0].name, mine[0].status.state, mine[0].pid), ("harness", "running", pid))
        self.sb.bg_signal(bid, signal.SIGKILL)
        self.assertTrue(wait_dead(pid, HANG))
        self.assertEqual(self.sb.bg_wait(bid, HANG).signal, signal.SIGKILL)
        self.sb.bg_remove(bid)

    def test_aio(self):
        async def main():
            async with asp.aio.open(FX.config) as sb:
                bid = await sb.bg_start("echo async", name="aio")
                st = await sb.bg_wait(bid, HANG)
                self.assertEqual(st.exit_code, 0)
                out = await sb.bg_read(bid)
                while out.status.output_open:
                    await asyncio.sleep(0.02)
                    out = await sb.bg_read(bid)
                self.assertEqual(out.data, b"async\n")
                self.assertIn(bid, [p.id for p in await sb.bg_list()])
                await sb.bg_signal(bid)
                await sb.bg_remove(bid)
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
