"""asp.Process and asp.aio.AsyncProcess against the sshd fixture: stdin written while the
command runs, output as it comes, close of stdin, signals, wait with a timeout, a terminal,
several processes on one connection beside exec, no room for another (SandboxBusy), close of a
running process, bad input."""

import asyncio
import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import FixtureForModule, SandboxTest, asp, proc_alive, wait_dead  # noqa: E402

FX = FixtureForModule()
setUpModule, tearDownModule = FX.start, FX.stop

HANG = 30.0  # seconds: a hang detector, not a timing


def read_until(proc, needle, streams=None):
    """Read until the output holds needle; streams (a set) collects the streams seen."""
    out = b""
    while needle not in out:
        chunk = proc.read(timeout=HANG)
        if chunk is None:
            raise AssertionError(f"the output ended without {needle!r}: {out!r}")
        if streams is not None:
            streams.add(chunk[0])
        out += chunk[1]
    return out


def sleeps(arg):
    """Local pids of `sleep ARG` (the fixture's sandbox is this machine)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[:2] == [b"sleep", arg.encode()]:
                        pids.append(int(d))
            except OSError:
                pass
    return pids


def find_sleep(arg):
    import time
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        pids = [p for p in sleeps(arg) if proc_alive(p)]
        if pids:
            return pids[0]
        time.sleep(0.02)
    raise AssertionError(f"no `sleep {arg}` appeared")


class ProcessTest(SandboxTest):
    fx = FX

    def test_cat_interactive_and_close_stdin(self):
        with self.sb.start("cat") as p:
            p.write(b"one\n")
            self.assertEqual(read_until(p, b"one\n"), b"one\n")
            p.write("two\n")
            p.write(b"three\n")
            self.assertEqual(read_until(p, b"three\n"), b"two\nthree\n")
            p.close_stdin()
            r = p.wait(timeout=HANG)
            self.assertEqual(r.exit_code, 0)
            self.assertEqual(r.stdout, b"one\ntwo\nthree\n")
            self.assertEqual(p.returncode, 0)
            self.assertIs(p.wait(), r)
            self.assertIsNone(p.read(timeout=0))

    def test_output_as_it_comes_and_wait_timeout(self):
        go = self.p("go")
        with self.sb.start(f"echo first; echo err >&2; while [ ! -e {go} ]; do sleep 0.05; done; "
                           "echo second; exit 3") as p:
            streams = set()
            out = read_until(p, b"err\n", streams)
            if b"first\n" not in out:
                out += read_until(p, b"first\n", streams)
            self.assertEqual(streams, {asp.STDOUT, asp.STDERR})
            with self.assertRaises(asp.AspTimeout):
                p.read(timeout=0)
            with self.assertRaises(asp.AspTimeout):
                p.wait(timeout=0)
            self.sb.write(go, b"")
            read_until(p, b"second\n")
            r = p.wait(timeout=HANG)
            self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, b"first\nsecond\n", b"err\n"))
            self.assertEqual(list(p), [])

    def test_signal_term_kills_the_group(self):
        arg = f"41.{os.getpid()}"
        p = self.sb.start(f"sleep 1{arg} & sleep {arg}")
        fg, bg = find_sleep(arg), find_sleep("1" + arg)
        self.assertTrue(proc_alive(fg) and proc_alive(bg))
        p.signal(signal.SIGTERM)  # sent by name
        self.assertTrue(wait_dead(fg, HANG) and wait_dead(bg, HANG))
        r = p.wait(timeout=HANG)
        self.assertEqual((r.exit_code, r.signal), (-1, 15))
        p.signal("KILL")  # ended: nothing to do
        p.close()
        self.assertTrue(p.closed)

    def test_close_kills_a_running_command(self):
        arg = f"42.{os.getpid()}"
        p = self.sb.start(f"sleep {arg}")
        pid = find_sleep(arg)
        p.close()
        self.assertTrue(wait_dead(pid, HANG))
        with self.assertRaises(asp.InvalidArgument):
            p.write(b"x")

    def test_pty(self):
        with self.sb.start("while IFS= read -r l; do eval \"$l\"; done", pty=True, term="vt100",
                           cols=91, rows=17) as p:
            p.write(b"tty; echo TERM=$TERM; stty size\n")
            out = read_until(p, b"17 91\r\n")
            self.assertIn(b"/dev/pts/", out)
            self.assertIn(b"TERM=vt100\r\n", out)
            p.resize(120, 40)
            p.write(b"stty size\n")
            read_until(p, b"40 120\r\n")
            arg = f"43.{os.getpid()}"
            p.write(f"sleep {arg}\n")
            pid = find_sleep(arg)
            p.write(b"\x03")  # Ctrl-C
            self.assertTrue(wait_dead(pid, HANG))
            r = p.wait(timeout=HANG)
            self.assertNotEqual(r.exit_code, 0)
            self.assertEqual(r.stderr, b"")

    def test_several_on_one_connection(self):
        with asp.open(self.fx.config, max_connections=1) as sb:
            procs = [sb.start("cat") for _ in range(3)]
            self.assertEqual(sb.exec("echo beside").stdout, b"beside\n")
            for i, p in enumerate(procs):
                p.write(f"proc {i}\n")
            for i, p in enumerate(procs):
                self.assertEqual(read_until(p, f"proc {i}\n".encode()), f"proc {i}\n".encode())
            for p in procs:
                p.close_stdin()
                self.assertEqual(p.wait(timeout=HANG).exit_code, 0)
                p.close()
            # a Process left open is closed (killed) by the sandbox's close
            arg = f"44.{os.getpid()}"
            sb.start(f"sleep {arg}")
            pid = find_sleep(arg)
        self.assertTrue(wait_dead(pid, HANG))

    def test_no_room_is_sandbox_busy(self):
        """Every connection at the server's session limit (MaxSessions 10): SandboxBusy, which
        says what to do; a process that ends makes room again."""
        with asp.open(self.fx.config, max_connections=1) as sb:
            procs = []
            with self.assertRaises(asp.SandboxBusy) as cm:
                for _ in range(12):
                    procs.append(sb.start("cat"))
            self.assertEqual(cm.exception.code, asp.ErrorCode.EBUSY)
            self.assertIn("no room for another command", str(cm.exception))
            self.assertIn("max_connections 1", str(cm.exception))
            self.assertTrue(1 <= len(procs) <= 10, len(procs))
            last = procs.pop()
            last.close_stdin()
            self.assertEqual(last.wait(timeout=HANG).exit_code, 0)
            last.close()
            procs.append(sb.start("cat"))
            for p in procs:
                p.close_stdin()
                self.assertEqual(p.wait(timeout=HANG).exit_code, 0)
                p.close()

    def test_bad_input(self):
        with self.assertRaises(asp.InvalidArgument):
            self.sb.start("true", pty=True, term="xterm; rm -rf /")
        with self.assertRaises(asp.InvalidArgument):
            self.sb.start("true", pty=True, cols=0)
        with self.sb.start("cat") as p:
            with self.assertRaises(asp.InvalidArgument) as cm:
                p.signal("NOPE")
            self.assertIn("NOPE", str(cm.exception))
            with self.assertRaises(asp.InvalidArgument):
                p.signal(999)
            with self.assertRaises(asp.InvalidArgument):
                p.resize(80, 24)  # no terminal
            with self.assertRaises(TypeError):
                p.write(12)
            p.close_stdin()
            with self.assertRaises(asp.InvalidArgument):
                p.write(b"late")
            p.wait(timeout=HANG)
        with self.sb.start("true", cwd="no-such-dir-here") as p:
            with self.assertRaises(asp.NotFoundError):
                p.wait(timeout=HANG)


class AsyncProcessTest(SandboxTest):
    fx = FX

    def test_async_process(self):
        async def main():
            async with asp.aio.open(self.fx.config, max_connections=1) as sb:
                async with await sb.start("cat") as p:
                    await p.write(b"hello\n")
                    # the event loop runs while a read waits
                    ticks = 0

                    async def tick():
                        nonlocal ticks
                        while True:
                            ticks += 1
                            await asyncio.sleep(0.01)

                    t = asyncio.ensure_future(tick())
                    stream, data = await p.read()
                    t.cancel()
                    self.assertEqual((stream, data), (asp.STDOUT, b"hello\n"))
                    self.assertEqual((await sb.exec("echo beside")).stdout, b"beside\n")
                    # a cancelled read loses nothing
                    reader = asyncio.ensure_future(p.read())
                    await asyncio.sleep(0.05)
                    reader.cancel()
                    with self.assertRaises(asyncio.CancelledError):
                        await reader
                    await p.write(b"again\n")
                    self.assertEqual(await p.read(timeout=HANG), (asp.STDOUT, b"again\n"))
                    await p.close_stdin()
                    r = await p.wait(timeout=HANG)
                    self.assertEqual(r.exit_code, 0)
                    self.assertEqual([c async for c in p], [])
                arg = f"45.{os.getpid()}"
                p = await sb.start(f"sleep {arg}")
                pid = await asyncio.get_running_loop().run_in_executor(None, find_sleep, arg)
                with self.assertRaises(asp.AspTimeout):
                    await p.wait(timeout=0.1)
                await p.signal("TERM")
                self.assertEqual((await p.wait()).signal, 15)
                await p.close()
                self.assertTrue(wait_dead(pid, HANG))
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
