"""asp.aio - the Sandbox API for asyncio programs.

    import asp.aio

    async with asp.aio.open() as sb:            # or: async with await asp.aio.open() as sb
        await sb.write("hello.py", "print('hi')\\n")
        r = await sb.exec("python3 hello.py", timeout=30)
        async with sb.stream("make test") as it:
            async for stream, chunk in it:      # asp.STDOUT or asp.STDERR, bytes
                ...
        print(it.result.exit_code)

No call blocks the event loop, and the threads do not grow with the number
of sandboxes. A call that is one exchange (read, write, stat, list, bg_start,
...) runs the blocking Sandbox method on a pool of CALL_THREADS (64) threads
shared by the process; one sandbox has at most `threads` calls in flight
(default max_connections: more would only wait inside libasp). exec starts
its command there (asp_proc_start) and then waits with every other exec of
the process on one thread (asp_proc_wait_any), so a thousand commands running
at once hold no thread each. Opens run on a pool of OPEN_THREADS (64) threads. What streams or
waits for as long as a command runs (exec with on_output, stdin or deadline,
stream(), bg_wait, start()) runs on a thread of its own, from the sandbox's own
pool of `threads`. Arguments, results and exceptions are the Sandbox's.

Cancelling the awaiting task (task.cancel(), asyncio.timeout, wait_for)
triggers a cancel token private to the call: a command's whole remote process
group is killed, a file call stops. The task's CancelledError is raised once
the worker thread has returned, so when it propagates the command is dead. A
`cancel=` asp.Cancel still works as in Sandbox: triggering it stops every call
that was given it.
"""

import asyncio
import collections
import concurrent.futures
import functools
import ctypes
import threading

from . import _core, _lib
from ._core import Cancel
from ._lib import lib
from .errors import AspTimeout, ErrorCode, InvalidArgument

DEFAULT_CONNECTIONS = 4       # libasp's default max_connections
OPEN_THREADS = 64             # opens (handshakes) that run at once, for the whole process
CALL_THREADS = 64             # one-exchange calls that run at once, for the whole process
STREAM_BUFFER = 1 << 20       # bytes a stream() holds before its command is made to wait


async def _settle(fut):
    """Wait until `fut` is done, even when cancelled meanwhile: a call in a worker
    thread cannot be abandoned (it holds the handle, C points into its arguments)."""
    while not fut.done():
        try:
            await asyncio.wait((fut,))
        except asyncio.CancelledError:
            continue
    if not fut.cancelled():
        fut.exception()  # retrieved: asyncio does not warn about it


_open_pool = None
_open_pool_lock = threading.Lock()


def _opener():
    """The process's pool of OPEN_THREADS threads that run asp_open. Not asyncio's default
    executor: it has min(32, cores + 4) threads (6 on 2 cores), and a harness opening hundreds
    of sandboxes at once waited there for its turn (the open phase of bench/run.py's many
    workload, N = 1000: 92 s median against asyncssh's 66 s). Started at the first open."""
    global _open_pool
    with _open_pool_lock:
        if _open_pool is None:
            _open_pool = concurrent.futures.ThreadPoolExecutor(OPEN_THREADS, "asp-aio-open")
        return _open_pool


_call_pool = None


def _caller():
    """The process's pool of CALL_THREADS threads for one-exchange calls (and exec's start), of
    every sandbox: a pool per sandbox grew a thread per sandbox in use (1067 threads for 1000
    sandboxes in bench/run.py's many workload). Started at the first call."""
    global _call_pool
    with _open_pool_lock:
        if _call_pool is None:
            _call_pool = concurrent.futures.ThreadPoolExecutor(CALL_THREADS, "asp-aio-call")
        return _call_pool


def _resolve(fut, result, exc):
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


class _Waiter:
    """The process's one thread that waits for every asp.aio exec's command at once
    (asp_proc_wait_any); wait(proc) is an asyncio future of its ExecResult. A new command
    wakes the thread through a cancel token (`wake`) so it waits on the new list."""

    def __init__(self):
        self._lock = threading.Lock()
        self._procs = {}   # asp.Process -> (loop, future)
        self._wake = Cancel()
        self._thread = None

    def wait(self, proc):
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._lock:
            self._procs[proc] = (loop, fut)
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name="asp-aio-wait", daemon=True)
                self._thread.start()
        self._wake.trigger()
        return fut

    def _deliver(self, proc, result, exc):
        with self._lock:
            loop, fut = self._procs.pop(proc)
        try:
            loop.call_soon_threadsafe(_resolve, fut, result, exc)
        except RuntimeError:  # its loop is closed: nobody awaits it
            pass

    def _main(self):
        wake = self._wake._handle
        index = ctypes.c_size_t()
        err = _lib.asp_error()
        while True:
            lib.asp_cancel_reset(wake)  # before the list is read: an add after it wakes again
            with self._lock:
                procs = list(self._procs)
            handles = (_lib.proc_p * len(procs))(*(p._handle for p in procs))
            index.value = _lib.SIZE_MAX
            rc = lib.asp_proc_wait_any(ctypes.byref(index), handles, len(procs), -1, wake,
                                       ctypes.byref(err))
            if rc == ErrorCode.ECANCELLED:
                continue
            if rc == 0:
                proc = procs[index.value]
                try:
                    result, exc = proc.wait(0), None
                except Exception as e:  # noqa: BLE001 - the call's error, raised by its exec
                    result, exc = None, e
                self._deliver(proc, result, exc)
                continue
            try:
                _core._check(rc, err)
            except Exception as e:  # noqa: BLE001 - handed to the exec(s) it concerns
                exc = e
            # One command's failure (index set) fails its exec; the wait's own (out of
            # memory) fails every exec waiting now rather than spin on it.
            failed = procs if index.value == _lib.SIZE_MAX else [procs[index.value]]
            for proc in failed:
                self._deliver(proc, None, exc)


_waiter_obj = None


def _waiter():
    global _waiter_obj
    with _open_pool_lock:
        if _waiter_obj is None:
            _waiter_obj = _Waiter()
        return _waiter_obj


class _Call:
    """One call in flight: its private token, and what else stops it."""

    def __init__(self, token, on_stop):
        self.token, self.on_stop, self.future = token, on_stop, None

    def stop(self):
        self.token.trigger()
        if self.on_stop is not None:
            self.on_stop()


class AsyncSandbox:
    """An open sandbox for asyncio: the methods of asp.Sandbox, as coroutines.

    Use as an async context manager, or await close(). close() with calls in
    flight cancels them (a running command is killed: exec returns its result
    with cancelled=True; a file call raises asp.Cancelled), waits until every
    one has returned, then closes the handle. A call started after close()
    began raises asp.InvalidArgument("the sandbox is closed").
    """

    def __init__(self, sandbox, threads):
        self.sandbox = sandbox  # the asp.Sandbox underneath
        self._threads = threads
        self._slots = asyncio.Semaphore(threads)  # this sandbox's calls on the shared threads
        self._own = None        # its pool for calls that last as long as a command runs
        self._calls = set()
        self._closing = False
        self._closed = None  # an asyncio.Event once close() began

    # -- running calls -----------------------------------------------------

    def _own_pool(self):
        if self._own is None:
            self._own = concurrent.futures.ThreadPoolExecutor(self._threads, "asp-aio")
        return self._own

    async def _shared(self, fn):
        """fn() on the process's call threads, at most `threads` of this sandbox's at once."""
        async with self._slots:
            return await asyncio.wrap_future(_caller().submit(fn))

    def _begin(self, cancel, call):
        if self._closing:
            raise InvalidArgument("the sandbox is closed")
        if cancel is not None and not isinstance(cancel, Cancel):
            raise TypeError(f"cancel: expected asp.Cancel, got {type(cancel).__name__}")
        call = call or _Call(Cancel(), None)
        if cancel is not None:
            cancel._link(call.token)
        return call

    def _end(self, cancel, call):
        self._calls.discard(call)
        if cancel is not None:
            cancel._unlink(call.token)
        call.token.close()

    async def _run(self, fn, *args, cancel=None, call=None, own=False, **kwargs):
        """fn(*args, cancel=<the call's token>, **kwargs) on a worker thread: the shared call
        threads, or with own=True one of the sandbox's own (a call as long as a command)."""
        call = self._begin(cancel, call)
        try:
            if own:
                return await self._in(self._own_pool(), call,
                                      functools.partial(fn, *args, cancel=call.token, **kwargs))
            async with self._slots:
                return await self._in(_caller(), call,
                                      functools.partial(fn, *args, cancel=call.token, **kwargs))
        finally:
            self._end(cancel, call)

    async def _in(self, pool, call, fn):
        cf = pool.submit(fn)
        call.future = fut = asyncio.wrap_future(cf)
        self._calls.add(call)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if not cf.cancel():  # it started: stop it and see it return
                call.stop()
                await _settle(fut)
            raise

    def _start_closed(self, command, token, kwargs):
        """Sandbox.start with stdin at end of input at once, as exec without stdin gives it
        (a proc's stdin stays open until closed: `cat` would wait for ever)."""
        proc = self.sandbox.start(command, cancel=token, **kwargs)
        try:
            proc.close_stdin()
        except BaseException:
            proc.close()
            raise
        return proc

    async def _exec_waited(self, command, cancel, kwargs):
        """exec without a thread while the command runs: asp_proc_start on the call threads,
        then the process's waiter thread (asp_proc_wait_any) until it ends. The call's future
        (what close() settles) is done only once the proc is freed."""
        call = self._begin(cancel, None)
        loop = asyncio.get_running_loop()
        call.future = over = loop.create_future()
        self._calls.add(call)
        proc = None
        try:
            # The slot is held until the command ended, as a thread was: one sandbox's execs
            # at once stay within what its connections carry.
            async with self._slots:
                cf = _caller().submit(self._start_closed, command, call.token, kwargs)
                started = asyncio.wrap_future(cf)
                try:
                    proc = await asyncio.shield(started)
                except asyncio.CancelledError:
                    if not cf.cancel():
                        call.stop()  # the command, if it started, is being killed
                        await _settle(started)
                        if not started.cancelled() and started.exception() is None:
                            proc = started.result()
                    raise
                ended = _waiter().wait(proc)
                try:
                    return await asyncio.shield(ended)
                except asyncio.CancelledError:
                    call.stop()
                    await _settle(ended)
                    raise
                finally:
                    if ended.done():
                        proc.close()  # it ended: this only frees
                        proc = None
        finally:
            try:
                if proc is not None:  # cancelled as it started: close kills and waits, on a thread
                    await _settle(asyncio.wrap_future(_caller().submit(proc.close)))
            finally:
                self._end(cancel, call)
                over.set_result(None)

    # -- lifetime ------------------------------------------------------------

    async def close(self):
        """Cancel the calls in flight, wait for them, close the handle. Idempotent."""
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        self._closed = asyncio.Event()
        try:
            calls = list(self._calls)
            for call in calls:
                call.stop()
            for call in calls:
                await _settle(call.future)
            await asyncio.wrap_future(_caller().submit(self.sandbox.close))
        finally:
            if self._own is not None:
                self._own.shutdown(wait=False)
            self._closed.set()

    @property
    def closed(self):
        return self._closing

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def __repr__(self):
        if self._closing:
            return "<asp.aio.AsyncSandbox closed>"
        return (f"<asp.aio.AsyncSandbox workspace={self.workspace!r} "
                f"config={self.config_path!r}>")

    # -- description ---------------------------------------------------------

    @property
    def workspace(self):
        """The sandbox workspace (absolute path); no I/O."""
        return self.sandbox.workspace

    @property
    def config_path(self):
        """The .asp.json in use (absolute path); no I/O."""
        return self.sandbox.config_path

    async def info(self):
        """Sandbox.info(): may connect."""
        if self._closing:
            raise InvalidArgument("the sandbox is closed")
        return await self._shared(self.sandbox.info)

    # -- the calls (arguments and results as in asp.Sandbox) ---------------

    async def warm(self, connections, *, cancel=None, timeout=None):
        return await self._run(self.sandbox.warm, connections, cancel=cancel, timeout=timeout)

    async def read(self, path, offset=0, limit=None, *, cancel=None, timeout=None):
        return await self._run(self.sandbox.read, path, offset, limit, cancel=cancel,
                               timeout=timeout)

    async def read_text(self, path, encoding="utf-8", errors="strict", *, cancel=None,
                        timeout=None):
        return await self._run(self.sandbox.read_text, path, encoding, errors, cancel=cancel,
                               timeout=timeout)

    async def write(self, path, data, *, mode=None, parents=False, atomic=True, cancel=None,
                    timeout=None):
        return await self._run(self.sandbox.write, path, data, mode=mode, parents=parents,
                               atomic=atomic, cancel=cancel, timeout=timeout)

    async def stat(self, path, *, cancel=None, timeout=None):
        return await self._run(self.sandbox.stat, path, cancel=cancel, timeout=timeout)

    async def exists(self, path, *, cancel=None, timeout=None):
        return await self._run(self.sandbox.exists, path, cancel=cancel, timeout=timeout)

    async def mkdir(self, path, mode=0o755, parents=False, *, cancel=None, timeout=None):
        return await self._run(self.sandbox.mkdir, path, mode, parents, cancel=cancel,
                               timeout=timeout)

    async def list(self, path=".", *, cancel=None, timeout=None):
        return await self._run(self.sandbox.list, path, cancel=cancel, timeout=timeout)

    async def remove(self, path, recursive=False, *, cancel=None, timeout=None):
        return await self._run(self.sandbox.remove, path, recursive, cancel=cancel,
                               timeout=timeout)

    async def rename(self, src, dst, *, cancel=None, timeout=None):
        return await self._run(self.sandbox.rename, src, dst, cancel=cancel, timeout=timeout)

    async def bg_start(self, command, *, cancel=None, **kwargs):
        return await self._run(self.sandbox.bg_start, command, cancel=cancel, **kwargs)

    async def bg_read(self, id, offset=0, limit=None, *, cancel=None, timeout=None):
        return await self._run(self.sandbox.bg_read, id, offset, limit, cancel=cancel,
                               timeout=timeout)

    async def bg_signal(self, id, sig=15, *, cancel=None, timeout=None):
        return await self._run(self.sandbox.bg_signal, id, sig, cancel=cancel, timeout=timeout)

    async def bg_wait(self, id, timeout=None, *, cancel=None, deadline=None):
        return await self._run(self.sandbox.bg_wait, id, timeout, cancel=cancel, deadline=deadline,
                               own=True)

    async def bg_remove(self, id, *, cancel=None, timeout=None):
        return await self._run(self.sandbox.bg_remove, id, cancel=cancel, timeout=timeout)

    async def bg_list(self, *, cancel=None, timeout=None):
        return await self._run(self.sandbox.bg_list, cancel=cancel, timeout=timeout)

    async def exec(self, command, *, on_output=None, cancel=None, **kwargs):
        """Sandbox.exec; the same keywords (cwd, env, stdin, timeout, deadline, max_output, kill_grace).

        on_output(stream, data) is called on the event loop's thread, in order,
        as output arrives (each chunk one loop callback: not bounded; use
        stream() for back-pressure). Returning True stops the command
        (cancelled=True); an exception raised in it stops the command and is
        raised by exec.
        """
        if on_output is None:
            if kwargs.get("stdin") is None and kwargs.get("deadline") is None:
                kwargs.pop("stdin", None)
                kwargs.pop("deadline", None)
                return await self._exec_waited(command, cancel, kwargs)
            return await self._run(self.sandbox.exec, command, cancel=cancel, own=True, **kwargs)
        if not callable(on_output):
            raise TypeError("on_output must be callable")
        loop = asyncio.get_running_loop()
        call = _Call(Cancel(), None)
        caught = []

        def deliver(stream, data):
            if caught:
                return
            try:
                if on_output(stream, data) is True:
                    call.token.trigger()
            except BaseException as e:  # raised by exec once the command has returned
                caught.append(e)
                call.token.trigger()

        def in_thread(stream, data):
            loop.call_soon_threadsafe(deliver, stream, data)

        result = await self._run(self.sandbox.exec, command, on_output=in_thread, cancel=cancel,
                                 call=call, own=True, **kwargs)
        if caught:  # every chunk was delivered before the result's callback ran
            exc = caught[0]
            exc.add_note("raised in asp.aio exec's on_output callback; the remote command "
                         "was cancelled")
            raise exc
        return result

    async def start(self, command, **kwargs):
        """Sandbox.start as a coroutine: an AsyncProcess (the same keywords: cwd, env, pty,
        term, cols, rows, timeout, kill_grace, max_output, cancel, deadline). Close it
        (``async with``, or ``await proc.close()``): a command still running is killed."""
        if self._closing:
            raise InvalidArgument("the sandbox is closed")
        fut = asyncio.wrap_future(self._own_pool().submit(functools.partial(self.sandbox.start,
                                                                            command, **kwargs)))
        try:
            proc = await asyncio.shield(fut)
        except asyncio.CancelledError:
            await _settle(fut)
            if not fut.cancelled() and fut.exception() is None:
                await asyncio.get_running_loop().run_in_executor(None, fut.result().close)
            raise
        return AsyncProcess(proc)

    def stream(self, command, *, buffer=STREAM_BUFFER, cancel=None, **kwargs):
        """Run `command` and iterate its output: ``async for stream, chunk in it``;
        ``it.result`` is the ExecResult once the loop ends (an error of the call is
        raised by the loop instead). Keywords as exec's, without on_output.

        Back-pressure: at most about `buffer` bytes wait for the consumer; beyond
        that libasp stops reading the command's output (the remote command then
        blocks on a full pipe) until the consumer catches up.
        Leaving the loop early: use ``async with sb.stream(...) as it`` or
        ``await it.aclose()``, which kill the command and wait for it; an
        iterator dropped unfinished also stops its command.
        """
        if "on_output" in kwargs:
            raise TypeError("stream() delivers the output itself: no on_output")
        buffer = _core._int(buffer, "buffer", 1, 1 << 62)
        return Stream(self, command, buffer, cancel, kwargs)


_PROC_SLICE = 0.2  # seconds: a read or wait in a worker thread returns this often


class AsyncProcess:
    """A running command with a handle, for asyncio (AsyncSandbox.start): the methods of
    asp.Process as coroutines, on two threads of its own (a read never waits for a write, nor
    for the sandbox's other calls). ``async for stream, data in proc`` reads to the end.
    Cancelling a read or wait loses nothing: the output a cancelled read took in is returned
    by the next one, and the result is kept."""

    def __init__(self, process):
        self.process = process  # the asp.Process underneath
        self._pool = concurrent.futures.ThreadPoolExecutor(2, "asp-aio-proc")
        self._held = None       # a chunk a cancelled read took in

    async def _call(self, fn, *args):
        return await asyncio.wrap_future(self._pool.submit(fn, *args))

    @property
    def pty(self):
        return self.process.pty

    @property
    def returncode(self):
        return self.process.returncode

    async def write(self, data):
        await self._call(self.process.write, data)

    async def close_stdin(self):
        await self._call(self.process.close_stdin)

    async def signal(self, sig):
        await self._call(self.process.signal, sig)

    async def kill(self):
        await self._call(self.process.kill)

    async def resize(self, cols, rows):
        await self._call(self.process.resize, cols, rows)

    async def read(self, size=65536, timeout=None):
        """(stream, bytes), None at the end; asp.AspTimeout after `timeout` seconds without output."""
        if self._held is not None:
            chunk, self._held = self._held, None
            return chunk
        loop = asyncio.get_running_loop()
        until = None if timeout is None else loop.time() + timeout
        while True:
            left = _PROC_SLICE if until is None else max(0.0, min(_PROC_SLICE, until - loop.time()))
            fut = asyncio.wrap_future(self._pool.submit(self.process.read, size, left))
            try:
                return await asyncio.shield(fut)
            except asyncio.CancelledError:
                await _settle(fut)
                if not fut.cancelled() and fut.exception() is None and fut.result() is not None:
                    self._held = fut.result()
                raise
            except AspTimeout:
                if until is not None and loop.time() >= until:
                    raise

    def __aiter__(self):
        return self

    async def __anext__(self):
        chunk = await self.read()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def wait(self, timeout=None):
        """The ExecResult; asp.AspTimeout while it still runs after `timeout` seconds."""
        loop = asyncio.get_running_loop()
        until = None if timeout is None else loop.time() + timeout
        while True:
            left = _PROC_SLICE if until is None else max(0.0, min(_PROC_SLICE, until - loop.time()))
            fut = asyncio.wrap_future(self._pool.submit(self.process.wait, left))
            try:
                return await asyncio.shield(fut)
            except asyncio.CancelledError:
                await _settle(fut)
                raise
            except AspTimeout:
                if until is not None and loop.time() >= until:
                    raise

    async def close(self):
        """Kill the command if it still runs, free the handle. Idempotent."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.process.close)
        finally:
            self._pool.shutdown(wait=False)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def __repr__(self):
        return repr(self.process).replace("asp.Process", "asp.aio.AsyncProcess")


class _Buffer:
    """Chunks between the worker thread and the consumer, at most about `limit` bytes.

    Apart from Stream so that the running call does not keep the Stream alive: an
    iterator dropped unfinished is collected, and its __del__ stops the command."""

    def __init__(self, limit, loop):
        self.limit, self.loop = limit, loop
        self.cond = threading.Condition()
        self.chunks = collections.deque()
        self.pending = 0
        self.abandoned = False
        self.wake = asyncio.Event()

    def put(self, stream, data):  # on the worker thread, as exec's on_output
        with self.cond:
            while self.pending >= self.limit and not self.abandoned:
                self.cond.wait()
            if self.abandoned:
                return True  # stop the command
            self.chunks.append((stream, data))
            self.pending += len(data)
        self.loop.call_soon_threadsafe(self.wake.set)
        return None

    def take(self):
        with self.cond:
            if not self.chunks:
                return None
            stream, data = self.chunks.popleft()
            self.pending -= len(data)
            self.cond.notify_all()
            return stream, data

    def abandon(self):
        with self.cond:
            self.abandoned = True
            self.cond.notify_all()


class Stream:
    """One command's output as an async iterator of (stream, chunk); see AsyncSandbox.stream."""

    def __init__(self, asb, command, buffer, cancel, kwargs):
        self._asb, self._command, self._buffer = asb, command, buffer
        self._cancel, self._kwargs = cancel, kwargs
        self._buf = None
        self._call = None
        self._task = None
        self.result = None

    def _start(self):
        loop = asyncio.get_running_loop()
        buf = self._buf = _Buffer(self._buffer, loop)
        self._call = _Call(Cancel(), buf.abandon)
        self._task = loop.create_task(self._asb._run(
            self._asb.sandbox.exec, self._command, on_output=buf.put, cancel=self._cancel,
            call=self._call, own=True, **self._kwargs))
        self._task.add_done_callback(lambda _: buf.wake.set())

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._task is None:
            self._start()
        while True:
            self._buf.wake.clear()
            chunk = self._buf.take()
            if chunk is not None:
                return chunk
            if self._task.done():
                self.result = self._task.result()  # an error of the call is raised here
                raise StopAsyncIteration
            try:
                await self._buf.wake.wait()
            except asyncio.CancelledError:
                await self.aclose()
                raise

    async def aclose(self):
        """Stop the command if it still runs and wait until it has returned; then
        ``result`` is its ExecResult (cancelled=True if it was stopped), unless the
        call failed."""
        if self._task is None:
            return
        self._call.stop()
        await _settle(self._task)
        if not self._task.cancelled() and self._task.exception() is None:
            self.result = self._task.result()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()

    def __del__(self):
        call, task = getattr(self, "_call", None), getattr(self, "_task", None)
        if task is not None and not task.done():
            call.stop()  # unblocks the worker; the command is killed


class _Opening:
    """What open() returns: awaitable (-> AsyncSandbox) and an async context manager."""

    def __init__(self, threads, args, kwargs):
        self._threads, self._args, self._kwargs = threads, args, kwargs
        self._sb = None

    async def _open(self):
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(_opener(), functools.partial(_core.open, *self._args,
                                                           **self._kwargs))
        try:
            sandbox = await asyncio.shield(fut)
        except asyncio.CancelledError:
            # asp_open cannot be interrupted: close what it opens.
            fut.add_done_callback(lambda f: f.cancelled() or f.exception() or f.result().close())
            raise
        conns = self._kwargs.get("max_connections") or DEFAULT_CONNECTIONS
        threads = conns if self._threads is None else self._threads
        return AsyncSandbox(sandbox, threads)

    def __await__(self):
        return self._open().__await__()

    async def __aenter__(self):
        self._sb = await self._open()
        return self._sb

    async def __aexit__(self, *exc):
        await self._sb.close()


def open(config=None, start_dir=None, *, threads=None, **kwargs):
    """asp.open() for asyncio: ``async with asp.aio.open(...) as sb`` or
    ``sb = await asp.aio.open(...)``. The keywords are asp.open's; threads:
    the sandbox's calls that run at once on the shared call threads, and the
    size of its own pool for calls as long as a command (default
    max_connections, itself 4 by default).
    """
    if threads is not None:
        threads = _core._int(threads, "threads", 1, 4096)
    return _Opening(threads, (config, start_dir), kwargs)


__all__ = ["open", "AsyncSandbox", "Stream", "STREAM_BUFFER"]
