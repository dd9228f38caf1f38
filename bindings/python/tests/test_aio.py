"""Tests of asp.aio (the asyncio face of the bindings) against a real OpenSSH sshd.

    /usr/bin/python3 -m unittest -v bindings/python/tests/test_aio.py
"""

import asyncio
import concurrent.futures
import gc
import os
import re
import shutil
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import FixtureForModule, asp, proc_alive, wait_dead  # noqa: E402
import asp.aio  # noqa: E402

FX = FixtureForModule()
setUpModule, tearDownModule = FX.start, FX.stop


class LagProbe:
    """A task ticking every 10 ms; `worst` is its largest lateness in seconds."""

    TICK = 0.01

    def __init__(self):
        self.worst = 0.0
        self.ticks = 0
        self._task = None

    async def _run(self):
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.TICK
            await asyncio.sleep(self.TICK)
            self.worst = max(self.worst, loop.time() - due)
            self.ticks += 1

    async def __aenter__(self):
        self._task = asyncio.get_running_loop().create_task(self._run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc):
        await asyncio.sleep(3 * self.TICK)  # a tick after the last stall measures it
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass


class GroupWatch:
    """on_output for a command printing "pids: A B ...": sees each pid alive (the
    positive control of a kill check); runs on the event loop's thread."""

    def __init__(self):
        self.buf, self.pids, self.alive = b"", [], []
        self.seen = asyncio.Event()
        self.threads = set()

    def __call__(self, stream, data):
        self.threads.add(threading.get_ident())
        if stream != asp.STDOUT or self.seen.is_set():
            return None
        self.buf += data
        m = re.search(rb"pids:((?: [0-9]+)+)\n", self.buf)
        if m:
            self.pids = [int(x) for x in m.group(1).split()]
            self.alive = [proc_alive(pid) for pid in self.pids]
            self.seen.set()
        return None

    async def wait_seen(self, test):
        try:
            async with asyncio.timeout(30):
                await self.seen.wait()
        except TimeoutError:
            test.fail(f"the command never printed its pids: {self.buf!r}")

    def assert_alive_then_dead(self, test, n):
        test.assertEqual(len(self.pids), n, f"pids line: {self.buf!r}")
        test.assertEqual(self.alive, [True] * n, f"not all of {self.pids} seen alive first")
        for pid in self.pids:
            test.assertTrue(wait_dead(pid), f"process {pid} of the group survived")


GROUP = 'sleep 30 & echo "pids: $$ $!"; wait'
STOPPED_WITHIN = 20  # s: a stopped GROUP ends long before its 30 s sleep would


async def finished(test, aw, what):
    """Await `aw`, failing if it does not end within STOPPED_WITHIN seconds (the command
    was not stopped); not a timing assertion: a stopped command ends in about kill_grace."""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=STOPPED_WITHIN)
    test.assertTrue(done, f"{what}: still running after {STOPPED_WITHIN} s")
    return task.result()


class AioTest(unittest.IsolatedAsyncioTestCase):

    open_kwargs = {}

    async def asyncSetUp(self):
        self.sb = await asp.aio.open(FX.config, **self.open_kwargs)
        self.dir = "t-" + self.id().rsplit(".", 1)[-1]
        self.local = os.path.join(FX.workspace, self.dir)
        await self.sb.mkdir(self.dir)

    async def asyncTearDown(self):
        await self.sb.close()
        shutil.rmtree(self.local, ignore_errors=True)

    def p(self, name):
        return f"{self.dir}/{name}"


class TestOpen(unittest.IsolatedAsyncioTestCase):

    async def test_both_forms(self):
        async with asp.aio.open(FX.config) as sb:
            self.assertIsInstance(sb, asp.aio.AsyncSandbox)
            self.assertEqual(sb.workspace, FX.workspace)
            info = await sb.info()
            self.assertEqual(info["host_key_fingerprint"], FX.host_fingerprint())
        self.assertTrue(sb.closed)
        async with await asp.aio.open(FX.config, max_connections=2) as sb:
            self.assertEqual(sb._threads, 2)
            self.assertEqual((await sb.exec("echo hi")).stdout, b"hi\n")
        self.assertTrue(sb.closed)
        sb = await asp.aio.open(config=FX.config, threads=3)
        self.assertEqual(sb._threads, 3)
        await sb.close()
        await sb.close()  # idempotent

    async def test_open_errors_are_the_sync_ones(self):
        with self.assertRaises(asp.ConfigError):
            await asp.aio.open(os.path.join(FX.dir, "missing.asp.json"))
        with self.assertRaises(ValueError):
            await asp.aio.open(FX.config, file_transport="ftp")
        with self.assertRaises(asp.InvalidArgument):
            asp.aio.open(FX.config, threads=0)

    async def test_warm(self):
        before = FX.log_text().count("Accepted publickey for ")
        async with asp.aio.open(FX.config, lazy=True, max_connections=2) as sb:
            self.assertIsNone(await sb.warm(2))
            self.assertEqual(FX.log_text().count("Accepted publickey for "), before + 2)
            with self.assertRaises(asp.InvalidArgument):
                await sb.warm(3)

    async def test_open_keywords_reach_libasp(self):
        async with asp.aio.open(FX.config, file_transport="exec", lazy=True,
                                max_read_bytes=4) as sb:
            await sb.write("aio-kw.txt", b"12345")
            with self.assertRaises(asp.LimitExceeded):
                await sb.read("aio-kw.txt")
            self.assertEqual(await sb.read("aio-kw.txt", limit=4), b"1234")
            await sb.remove("aio-kw.txt")


class TestCalls(AioTest):

    async def test_file_calls(self):
        sb = self.sb
        await sb.write(self.p("a/b.txt"), "héllo\n", parents=True, mode=0o640)
        self.assertEqual(await sb.read(self.p("a/b.txt")), "héllo\n".encode())
        self.assertEqual(await sb.read(self.p("a/b.txt"), 1, 2), "é".encode())
        self.assertEqual(await sb.read_text(self.p("a/b.txt")), "héllo\n")
        st = await sb.stat(self.p("a/b.txt"))
        self.assertEqual((st.size, st.mode, st.is_file), (7, 0o640, True))
        self.assertTrue(await sb.exists(self.p("a")))
        self.assertFalse(await sb.exists(self.p("nope")))
        await sb.mkdir(self.p("x/y"), parents=True)
        await sb.rename(self.p("a/b.txt"), self.p("x/c.txt"))
        self.assertEqual([e.name for e in await sb.list(self.p("x"))], ["c.txt", "y"])
        await sb.remove(self.p("x"), recursive=True)
        self.assertFalse(os.path.exists(os.path.join(self.local, "x")))
        with open(os.path.join(self.local, "local.txt"), "w") as f:
            f.write("made here\n")
        self.assertEqual(await sb.read(self.p("local.txt"), timeout=10), b"made here\n")

    async def test_errors_are_the_sync_ones(self):
        with self.assertRaises(asp.NotFoundError) as cm:
            await self.sb.read(self.p("missing"))
        self.assertIsInstance(cm.exception, FileNotFoundError)
        self.assertEqual(cm.exception.filename, self.p("missing"))
        self.assertEqual(cm.exception.name, "ASP_ENOENT")
        with self.assertRaises(asp.IsADirectory):
            await self.sb.read(self.dir)
        with self.assertRaises(asp.InvalidArgument):
            await self.sb.write("a\0b", b"")
        with self.assertRaises(TypeError):
            await self.sb.exec("true", cancel="not a token")
        with self.assertRaises(TypeError):
            await self.sb.exec("true", on_output=42)
        with self.assertRaises(asp.InvalidArgument):
            await self.sb.exec("true", timeout=-1)

    async def test_exec(self):
        r = await self.sb.exec('printf "%s|" "$NAME"; cat; pwd; exit 3', cwd=self.dir,
                               env={"NAME": "it's $x"}, stdin=b"data\n")
        self.assertIsInstance(r, asp.ExecResult)
        self.assertEqual(r.exit_code, 3)
        self.assertEqual(r.stdout, b"it's $x|data\n" + self.local.encode() + b"\n")
        r = await self.sb.exec("seq 1 1000", max_output=10)
        self.assertTrue(r.stdout_truncated)
        self.assertEqual(len(r.stdout), 10)

    async def test_exec_without_stdin_reads_eof(self):
        """As Sandbox.exec: a command that reads stdin, given none, reads end of input at
        once (the waited route starts a proc, whose stdin would stay open)."""
        r = await asyncio.wait_for(self.sb.exec("cat; read -r x || echo eof"), 20)
        self.assertEqual((r.exit_code, r.stdout), (0, b"eof\n"))
        self.assertEqual(self.sb.sandbox.exec("cat; read -r x || echo eof").stdout, r.stdout)

    async def test_exec_timeout_is_a_result(self):
        watch = GroupWatch()
        r = await self.sb.exec(GROUP, timeout=3, kill_grace=0.5, on_output=watch)
        self.assertTrue(r.timed_out)
        watch.assert_alive_then_dead(self, 2)

    async def test_loop_is_never_blocked(self):
        """A task ticking every 10 ms stays on time while a 2 s command runs; the same
        probe around the blocking call made on the loop sees the loop stop (the control)."""
        async with LagProbe() as probe:
            t0 = time.monotonic()
            r = await self.sb.exec("sleep 2; echo done")
            took = time.monotonic() - t0
        self.assertEqual(r.stdout, b"done\n")
        self.assertLess(probe.worst, took / 4, f"loop stalled {probe.worst:.3f} s of {took:.3f} s")
        self.assertGreater(probe.ticks, 20)
        asyncio.get_running_loop().slow_callback_duration = 60  # the control stalls on purpose
        async with LagProbe() as control:
            t0 = time.monotonic()
            self.sb.sandbox.exec("sleep 1")  # blocking, on the loop: what asp.aio avoids
            took = time.monotonic() - t0
        self.assertGreater(control.worst, took / 2, "the probe cannot see a blocked loop")

    async def test_on_output_runs_on_the_loop_in_order(self):
        seen = []
        loop_thread = threading.get_ident()

        def on_output(stream, data):
            seen.append((threading.get_ident(), stream, data))

        r = await self.sb.exec("for i in 1 2 3 4 5; do echo o$i; echo e$i >&2; done",
                               on_output=on_output)
        self.assertEqual({t for t, _, _ in seen}, {loop_thread})
        self.assertEqual(b"".join(d for _, s, d in seen if s == asp.STDOUT), r.stdout)
        self.assertEqual(b"".join(d for _, s, d in seen if s == asp.STDERR), r.stderr)
        self.assertEqual(r.stdout, b"o1\no2\no3\no4\no5\n")

    async def test_on_output_returning_true_stops_the_command(self):
        watch = GroupWatch()

        def stop_when_seen(stream, data):
            watch(stream, data)
            return True if watch.seen.is_set() else None

        r = await self.sb.exec(GROUP, on_output=stop_when_seen, kill_grace=0.5)
        self.assertTrue(r.cancelled)
        watch.assert_alive_then_dead(self, 2)

    async def test_exception_in_on_output_propagates(self):
        class Boom(Exception):
            pass

        watch = GroupWatch()

        def boom(stream, data):
            watch(stream, data)
            if watch.seen.is_set():
                raise Boom()

        with self.assertRaises(Boom) as cm:
            await self.sb.exec(GROUP, on_output=boom, kill_grace=0.5)
        self.assertTrue(any("on_output" in n for n in cm.exception.__notes__))
        watch.assert_alive_then_dead(self, 2)
        self.assertEqual((await self.sb.exec("echo fine")).stdout, b"fine\n")

    async def test_64_concurrent_tasks(self):
        async def one(i):
            name = self.p(f"f{i}.txt")
            await self.sb.write(name, f"{i}\n")
            r = await self.sb.exec(f"cat {name}; echo {i} >&2")
            self.assertEqual((r.exit_code, r.stdout, r.stderr), (0, b"%d\n" % i, b"%d\n" % i))
            return (await self.sb.stat(name)).size

        sizes = await asyncio.gather(*(one(i) for i in range(64)))
        self.assertEqual(sizes, [len(f"{i}\n") for i in range(64)])
        self.assertEqual(len(await self.sb.list(self.dir)), 64)
        self.assertEqual(self.sb._calls, set())


class TestCancellation(AioTest):

    async def test_task_cancel_kills_the_group(self):
        watch = GroupWatch()
        task = asyncio.create_task(self.sb.exec(GROUP, on_output=watch, kill_grace=0.5))
        await watch.wait_seen(self)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await finished(self, task, "the cancelled exec")
        self.assertEqual(self.sb._calls, set())  # the call has returned
        watch.assert_alive_then_dead(self, 2)

    async def test_asyncio_timeout_kills_the_group(self):
        watch = GroupWatch()

        async def run():
            async with asyncio.timeout(3):  # time to see the group alive on busy cores
                await self.sb.exec(GROUP, on_output=watch, kill_grace=0.5)

        with self.assertRaises(TimeoutError):
            await finished(self, run(), "exec under asyncio.timeout")
        watch.assert_alive_then_dead(self, 2)

    async def test_wait_for_kills_the_group(self):
        watch = GroupWatch()
        with self.assertRaises(TimeoutError):
            await finished(self, asyncio.wait_for(
                self.sb.exec(GROUP, on_output=watch, kill_grace=0.5), 3), "exec under wait_for")
        watch.assert_alive_then_dead(self, 2)

    async def test_cancel_token_stops_every_call_given_it(self):
        cancel = asp.Cancel()
        watches = [GroupWatch(), GroupWatch()]
        tasks = [asyncio.create_task(self.sb.exec(GROUP, cancel=cancel, on_output=w,
                                                  kill_grace=0.5)) for w in watches]
        for w in watches:
            await w.wait_seen(self)
        cancel.trigger()
        results = await finished(self, asyncio.gather(*tasks), "the execs given the token")
        self.assertEqual([r.cancelled for r in results], [True, True])
        for w in watches:
            w.assert_alive_then_dead(self, 2)
        with self.assertRaises(asp.Cancelled):  # already triggered: nothing runs
            await self.sb.exec(f"touch {self.p('ran')}", cancel=cancel)
        self.assertFalse(os.path.exists(os.path.join(self.local, "ran")))
        cancel.reset()
        self.assertEqual((await self.sb.exec("echo again", cancel=cancel)).stdout, b"again\n")
        self.assertEqual(cancel._linked, set())
        cancel.close()

    async def test_task_cancel_leaves_the_callers_token_alone(self):
        cancel = asp.Cancel()
        watch = GroupWatch()
        task = asyncio.create_task(self.sb.exec(GROUP, cancel=cancel, on_output=watch,
                                                kill_grace=0.5))
        other = asyncio.create_task(self.sb.exec("sleep 1; echo other", cancel=cancel))
        await watch.wait_seen(self)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await finished(self, task, "the cancelled exec")
        watch.assert_alive_then_dead(self, 2)
        self.assertFalse(cancel.triggered)
        r = await other
        self.assertEqual((r.cancelled, r.stdout), (False, b"other\n"))
        cancel.close()

    async def test_cancel_a_file_call_waiting_for_a_thread(self):
        async with asp.aio.open(FX.config, max_connections=1) as sb:
            watch = GroupWatch()
            busy = asyncio.create_task(sb.exec(GROUP, on_output=watch, kill_grace=0.5))
            await watch.wait_seen(self)
            queued = asyncio.create_task(sb.write(self.p("never"), b"x"))
            await asyncio.sleep(0.2)
            queued.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await queued
            busy.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await finished(self, busy, "the cancelled exec")
            watch.assert_alive_then_dead(self, 2)
            self.assertFalse(await sb.exists(self.p("never")))


class TestStream(AioTest):

    async def test_stream_delivers_as_it_comes(self):
        """The command waits for a file the consumer writes on seeing its first line:
        it ends only if output is delivered while it runs."""
        got = []
        it = self.sb.stream(f"echo first; echo err >&2; while [ ! -e {self.p('go')} ]; "
                            "do sleep 0.05; done; echo second", timeout=60)
        async for stream, chunk in it:
            got.append((stream, chunk))
            if b"first" in chunk:
                await self.sb.write(self.p("go"), b"")
        self.assertFalse(it.result.timed_out)
        self.assertEqual(it.result.exit_code, 0)
        self.assertEqual(b"".join(c for s, c in got if s == asp.STDOUT), b"first\nsecond\n")
        self.assertEqual(b"".join(c for s, c in got if s == asp.STDERR), b"err\n")
        self.assertEqual(it.result.stdout, b"first\nsecond\n")

    async def test_stream_error_is_raised_by_the_loop(self):
        with self.assertRaises(asp.NotFoundError):
            async for _ in self.sb.stream("true", cwd=self.p("nope")):
                pass
        with self.assertRaises(TypeError):
            self.sb.stream("true", on_output=print)

    async def test_stream_back_pressure_and_early_exit(self):
        """A consumer that stops reading makes the remote writer wait; leaving the
        loop kills the command."""
        buffer = 64 << 10
        progress = os.path.join(self.local, "progress")
        # 64 KiB blocks, each counted in a file, for up to 1 GiB.
        tmp, count_file = self.p("p.tmp"), self.p("progress")
        cmd = (f'echo "pids: $$"; i=0; while [ $i -lt 16384 ]; do head -c 65536 /dev/zero; '
               f'i=$((i+1)); echo $i > {tmp}; mv {tmp} {count_file}; done')
        watch = GroupWatch()

        def count():
            try:
                with open(progress) as f:
                    return int(f.read() or 0)
            except (OSError, ValueError):
                return 0

        async with self.sb.stream(cmd, buffer=buffer, max_output=1 << 20) as it:
            async for stream, chunk in it:
                watch(stream, chunk)
                if watch.seen.is_set():
                    break
            # Not reading now: the count must stop, far below what 1 GiB would be.
            last, stable = -1, 0
            for _ in range(100):
                await asyncio.sleep(0.1)
                n = count()
                stable = stable + 1 if n == last and n > 0 else 0
                last = n
                if stable >= 5:
                    break
            self.assertGreaterEqual(stable, 5, f"the writer never stopped ({last} blocks)")
            # In flight: the buffer, SSH windows and pipes (about 4 MiB on loopback).
            self.assertLess(last, 256, "more than 16 MiB were written for a stopped reader")
            with it._buf.cond:
                self.assertLessEqual(it._buf.pending, buffer + 65536)
        self.assertTrue(it.result.cancelled)
        watch.assert_alive_then_dead(self, 1)
        self.assertLess(count(), 16384)


    async def test_a_dropped_stream_stops_its_command(self):
        watch = GroupWatch()
        it = self.sb.stream(GROUP, buffer=1, kill_grace=0.5)
        async for stream, chunk in it:
            watch(stream, chunk)
            if watch.seen.is_set():
                break
        task = it._task
        del it  # no aclose(): the iterator is garbage now
        gc.collect()
        r = await finished(self, task, "the dropped stream's exec")
        self.assertTrue(r.cancelled)
        watch.assert_alive_then_dead(self, 2)


class TestWaiter(unittest.IsolatedAsyncioTestCase):

    async def test_running_commands_hold_no_thread(self):
        """12 commands on 3 sandboxes run at once with 2 call threads in the process: each
        waits in the sandbox until all 12 have started (a barrier), which commands that each
        held a thread until their end could not pass; and no sandbox made a pool of its own."""
        saved = asp.aio._call_pool
        asp.aio._call_pool = concurrent.futures.ThreadPoolExecutor(2, "asp-aio-call-two")
        sbs = []
        d = f"barrier-{os.getpid()}"
        try:
            for _ in range(3):
                sbs.append(await asp.aio.open(FX.config))
            await sbs[0].mkdir(d)
            cmd = (f'touch {d}/"$K"; i=0; while [ "$(ls {d} | wc -l)" -lt 12 ] && '
                   f'[ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done; ls {d} | wc -l')
            most = 0

            async def watch():
                nonlocal most
                while True:
                    names = [t.name for t in threading.enumerate()]
                    most = max(most, sum(n.startswith("asp-aio-call-two") for n in names))
                    await asyncio.sleep(0.02)

            watcher = asyncio.ensure_future(watch())
            runs = [sb.exec(cmd, env={"K": f"{j}-{k}"}) for j, sb in enumerate(sbs)
                    for k in range(4)]
            results = await finished(self, asyncio.gather(*runs), "12 commands at a barrier")
            watcher.cancel()
            self.assertEqual([r.stdout for r in results], [b"12\n"] * 12,
                             [r.stderr for r in results])
            self.assertLessEqual(most, 2)
            self.assertTrue(most >= 1, "no call thread seen: the watch saw nothing")
            self.assertEqual([sb._own for sb in sbs], [None] * 3)
        finally:
            for sb in sbs:
                await sb.close()
            shutil.rmtree(os.path.join(FX.workspace, d), ignore_errors=True)
            asp.aio._call_pool.shutdown()
            asp.aio._call_pool = saved


class TestClose(unittest.IsolatedAsyncioTestCase):

    async def test_close_with_calls_in_flight(self):
        sb = await asp.aio.open(FX.config, max_connections=2)
        watch = GroupWatch()
        running = asyncio.create_task(sb.exec(GROUP, on_output=watch, kill_grace=0.5))
        swatch = GroupWatch()
        it = sb.stream(GROUP, kill_grace=0.5)

        async def consume():
            async for stream, chunk in it:
                swatch(stream, chunk)

        streaming = asyncio.create_task(consume())
        await watch.wait_seen(self)
        await swatch.wait_seen(self)
        queued = asyncio.create_task(sb.read("aio-close-never.txt"))  # no thread is free
        await asyncio.sleep(0.1)
        closing = asyncio.create_task(sb.close())
        await asyncio.sleep(0)  # it began: a second close() waits for the same end
        await finished(self, asyncio.gather(closing, sb.close()), "close() with calls in flight")
        self.assertTrue(sb.closed)
        self.assertEqual(sb._calls, set())
        r = await running
        self.assertTrue(r.cancelled)
        await streaming
        self.assertTrue(it.result.cancelled)
        with self.assertRaises(asp.Cancelled):
            await queued
        watch.assert_alive_then_dead(self, 2)
        swatch.assert_alive_then_dead(self, 2)
        with self.assertRaises(asp.InvalidArgument) as cm:
            await sb.exec("true")
        self.assertIn("closed", str(cm.exception))
        with self.assertRaises(asp.InvalidArgument):
            await sb.info()
        self.assertTrue(sb.sandbox.closed)
        await sb.close()


if __name__ == "__main__":
    unittest.main()
