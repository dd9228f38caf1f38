"""The Python face of libasp: open(), Sandbox, Cancel, ExecResult, Stat, Entry.

Conventions:
  * Paths, commands, cwd and env may be str or bytes (paths also os.PathLike).
    str is encoded as UTF-8 with "surrogateescape", so a name that is not
    UTF-8 (listed by Sandbox.list as str) round-trips to the same bytes.
  * A NUL byte in any string passed to C raises InvalidArgument before the
    call: C would silently cut the string there.
  * Durations are seconds (float); the C ms/s fields are filled for you.
  * Every libasp call runs with the GIL released.
"""

import collections.abc
import ctypes
import enum
import logging
import math
import os
import threading
import typing
from ctypes import byref

from . import _lib
from ._lib import lib
from .errors import ErrorCode, InvalidArgument, exception_class

STDOUT = _lib.ASP_STDOUT
STDERR = _lib.ASP_STDERR


# ------------------------------------------------------------------ helpers

# libasp's messages name C fields; here they name this binding's parameters.
_C_WORDS = (
    ("(asp_call_options.timeout_ms, or asp_open_options.op_timeout_ms)",
     "(timeout=, exec's deadline=, or asp.open(op_timeout=))"),
    ("(asp_exec_options.call.timeout_ms)", "(deadline=)"),
    ("asp_open_options.op_timeout_ms", "asp.open(op_timeout=)"),
    ("asp_open_options.max_read_bytes", "asp.open(max_read_bytes=)"),
    ("asp_open_options.max_list_bytes", "asp.open(max_list_bytes=)"),
    ("asp_open_options.max_list_entries", "asp.open(max_list_entries=)"),
    ("asp_open_options.max_connections", "asp.open(max_connections=)"),
    ("asp_open_options.file_transport", "asp.open(file_transport=)"),
    ("asp_exec_options.stdin_fd", "stdin="),
    ("through stdin_data", "through stdin="),
)


def _binding_words(message):
    for c_words, ours in _C_WORDS:
        message = message.replace(c_words, ours)
    return message


def _raise(rc, err, filename=None, filename2=None):
    code = err.code if err.code else rc
    message = _binding_words(err.message.decode("utf-8", "replace")) if err.message else ""
    if not message:
        message = lib.asp_strerror(code).decode("utf-8", "replace")
    name = lib.asp_error_name(code).decode("ascii", "replace")
    exc = exception_class(code)(message, code, name, filename)
    if filename2 is not None and isinstance(exc, OSError):
        exc.filename2 = filename2
    raise exc from None


def _check(rc, err, filename=None, filename2=None):
    if rc != 0:
        _raise(rc, err, filename, filename2)


def _to_bytes(value, what, allow_pathlike=True):
    """str/bytes(/PathLike) -> bytes without NUL, for a C string."""
    if allow_pathlike and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        try:
            data = value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:
            raise InvalidArgument(f"{what}: not encodable as UTF-8: {e.reason} "
                                  f"at index {e.start}") from None
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    else:
        kinds = "str, bytes or os.PathLike" if allow_pathlike else "str or bytes"
        raise TypeError(f"{what}: expected {kinds}, got {type(value).__name__}")
    if b"\0" in data:
        at = data.index(b"\0")
        raise InvalidArgument(f"{what}: contains a NUL byte at offset {at} "
                              "(a C string would end there)")
    return data


def _path(value, what="path"):
    return _to_bytes(value, what, allow_pathlike=True)


def _data(value, what="data"):
    """Payload bytes (NUL allowed)."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what}: expected bytes, bytearray, memoryview or str, "
                    f"got {type(value).__name__}")


# -- large payloads ------------------------------------------------------
#
# Fresh memory of megabytes costs a page fault per 4 KiB page as it is first
# written: copying a 64 MiB read into a new bytes object took 214 ms of
# faults on the benchmark VM, as long as the transfer itself. So a large
# result is copied into a bytes object whose pages are asked to be huge
# (as the C library does for its own buffer: asp__mem_fill_hint), and a
# write lends the caller's bytearray or memoryview to the C call instead of
# copying it into bytes first.

_LARGE = 4 << 20  # common.h ASP_MEM_LARGE
_HUGE = 2 << 20
_MADV_HUGEPAGE = 14  # Linux
_PyBUF_SIMPLE = 0


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer (Include/pybuffer.h)."""
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


def _capi(name, restype, argtypes):
    f = getattr(getattr(ctypes, "pythonapi", None), name, None)  # CPython only
    if f is not None:
        f.restype, f.argtypes = restype, argtypes
    return f


_get_buffer = _capi("PyObject_GetBuffer", ctypes.c_int,
                    (ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int))
_release_buffer = _capi("PyBuffer_Release", None, (ctypes.POINTER(_PyBuffer),))
_new_bytes = _capi("PyBytes_FromStringAndSize", ctypes.py_object,
                   (ctypes.c_void_p, ctypes.c_ssize_t))
_bytes_data = _capi("PyBytes_AsString", ctypes.c_void_p, (ctypes.py_object,))
_madvise = None
if os.uname().sysname == "Linux":
    _madvise = getattr(ctypes.CDLL(None), "madvise", None)
    if _madvise is not None:
        _madvise.restype = ctypes.c_int
        _madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def _fill_hint(p, n):
    """Ask for huge pages over the 2 MiB-aligned part of [p, p + n): advice only."""
    a, e = (p + _HUGE - 1) & ~(_HUGE - 1), (p + n) & ~(_HUGE - 1)
    if _madvise is not None and e > a:
        _madvise(a, e - a, _MADV_HUGEPAGE)


def _copy_out(ptr, n):
    """n bytes at C address ptr, as bytes."""
    if not n:
        return b""
    if n < _LARGE or _new_bytes is None or _bytes_data is None:
        return ctypes.string_at(ptr, n)
    b = _new_bytes(None, n)  # not yet seen by anyone: filled here, then immutable
    p = _bytes_data(b)
    _fill_hint(p, n)
    ctypes.memmove(p, ptr, n)
    return b


class _Lent:
    """`data` (as _data() takes it) for one C call as .ptr and .len. A
    contiguous bytearray or memoryview lends its memory until release()
    instead of being copied into bytes."""

    def __init__(self, data, what="data"):
        self._view = None
        if isinstance(data, (bytearray, memoryview)) and _get_buffer and _release_buffer:
            view = _PyBuffer()
            try:
                _get_buffer(data, byref(view), _PyBUF_SIMPLE)
            except BufferError:  # not contiguous: copied below
                pass
            else:
                if view.len:
                    self._view = view
                    self.ptr, self.len = view.buf, view.len
                    return
                _release_buffer(byref(view))
        self._data = _data(data, what)
        self.ptr, self.len = self._data, len(self._data)

    def release(self):
        if self._view is not None:
            _release_buffer(byref(self._view))
            self._view = None


def _decode(raw):
    return raw.decode("utf-8", "surrogateescape")


def _int(value, what, lo, hi):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what}: expected int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidArgument(f"{what}: {value} is out of range {lo}..{hi}")
    return value


def _scaled(value, what, scale, hi=_lib.UINT_MAX):
    """Positive seconds -> a positive integer count of 1/scale seconds (rounded up)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what}: expected seconds as int or float, got {type(value).__name__}")
    if not value > 0 or math.isinf(value):
        raise InvalidArgument(f"{what}: expected a positive number of seconds, got {value!r}")
    n = math.ceil(value * scale)
    if n > hi:
        raise InvalidArgument(f"{what}: {value!r} s is too long")
    return n


def _ms(value, what):
    return _scaled(value, what, 1000)


def _seconds(value, what):
    return _scaled(value, what, 1)


# ------------------------------------------------------------------ library-level calls

def version():
    """The running libasp's version string, e.g. "0.1.0"."""
    return lib.asp_version().decode("ascii")


def strerror(code):
    """libasp's fixed text for an error code."""
    return lib.asp_strerror(int(code)).decode("utf-8", "replace")


def error_name(code):
    """The symbolic name of an error code, e.g. "ASP_ENOENT"."""
    return lib.asp_error_name(int(code)).decode("ascii", "replace")


def find_config(start_dir=None):
    """Discovery: $ASP_CONFIG, else .asp.json in start_dir (default: cwd) and its parents.

    Returns the absolute path (str); raises NoConfigError when nothing is found.
    """
    start = None if start_dir is None else _path(start_dir, "start_dir")
    out = ctypes.c_void_p()
    err = _lib.asp_error()
    _check(lib.asp_config_find(byref(out), start, byref(err)), err)
    try:
        return _decode(ctypes.string_at(out))
    finally:
        lib.asp_free(out)


def read_config(start_dir=None):
    """Discovery, returning what the file holds -> (path, text).

    The text is read from the very descriptor discovery opened and judged,
    so it is the file the trust rules accepted, even if the directories
    around it are renamed meanwhile; open(config=path, config_text=text)
    then opens what was judged. (Opening find_config's path again is a
    second lookup.) Raises NoConfigError when nothing is found.
    """
    start = None if start_dir is None else _path(start_dir, "start_dir")
    text = ctypes.c_void_p()
    path = ctypes.c_void_p()
    err = _lib.asp_error()
    _check(lib.asp_config_read(byref(text), byref(path), start, byref(err)), err)
    try:
        return _decode(ctypes.string_at(path)), _decode(ctypes.string_at(text))
    finally:
        lib.asp_free(text)
        lib.asp_free(path)


def check_config(path):
    """Load and strictly validate a configuration file without connecting (ConfigError if bad)."""
    p = _path(path, "config")
    err = _lib.asp_error()
    _check(lib.asp_config_check(p, byref(err)), err, path)


# ------------------------------------------------------------------ small result types

class FileType(enum.IntEnum):
    """asp_file_type (ASP_TYPE_*)."""
    FILE = 1
    DIR = 2
    SYMLINK = 3
    OTHER = 4


def _file_type(value):
    try:
        return FileType(value)
    except ValueError:
        return FileType.OTHER


def _type_tests(cls):
    """Add is_file / is_dir / is_symlink to a NamedTuple with a ``type`` field."""
    cls.is_file = property(lambda self: self.type == FileType.FILE)
    cls.is_dir = property(lambda self: self.type == FileType.DIR)
    cls.is_symlink = property(lambda self: self.type == FileType.SYMLINK)
    return cls


@_type_tests
class Stat(typing.NamedTuple):
    """File metadata: size (bytes), mtime (s since the epoch), mode (07777 bits), type."""
    size: int
    mtime: int
    mode: int
    type: FileType


@_type_tests
class Entry(typing.NamedTuple):
    """A directory entry. A symlink is reported with its own metadata (type SYMLINK)."""
    name: typing.Union[str, bytes]
    size: int
    mtime: int
    mode: int
    type: FileType


class BgStatus(typing.NamedTuple):
    """A background process's state: state is "running", "exited" or "lost"
    (gone without a status); exit_code (0..255) once it exited normally, signal
    (the sandbox's number) when a signal ended it, else None; output_open is
    True while more output may come; output_start is the first byte still kept,
    output_size every byte written."""
    state: str
    exit_code: typing.Optional[int]
    signal: typing.Optional[int]
    output_open: bool
    output_start: int
    output_size: int


class BgOutput(typing.NamedTuple):
    """Sandbox.bg_read's answer: data begins at offset (later than asked when
    older bytes were dropped); next is the offset to ask for next."""
    data: bytes
    offset: int
    next: int
    status: BgStatus


class BgProcess(typing.NamedTuple):
    """One background process of Sandbox.bg_list: name and command as given,
    start_ms (the starter's clock, ms since the epoch), pid (its process group)."""
    id: str
    name: str
    command: str
    start_ms: int
    pid: int
    status: BgStatus


_BG_STATES = {_lib.ASP_BG_RUNNING: "running", _lib.ASP_BG_EXITED: "exited", _lib.ASP_BG_LOST: "lost"}


def _bg_status(st):
    exited = st.state == _lib.ASP_BG_EXITED
    return BgStatus(_BG_STATES.get(st.state, "lost"), st.exit_code if exited and not st.signal else None,
                    st.signal or None, bool(st.output_open), st.output_start, st.output_size)


def _bg_id(value):
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise TypeError(f"id: expected str, got {type(value).__name__}")
    return value.encode("ascii", "replace")


def _env_array_kept(env, keep):
    """_env_array's array, kept alive in keep, as a char **."""
    array = _env_array(env)
    keep.append(array)
    return ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p))


class ExecResult(typing.NamedTuple):
    """The outcome of Sandbox.exec.

    exit_code is 0..255, or -1 when the command was killed by a signal
    (then ``signal`` is its number). timed_out / cancelled say why libasp
    killed it. stdout/stderr are bytes; with max_output they are head + tail
    and *_truncated is True; *_total counts every byte produced.
    duration is wall time in seconds.
    """
    exit_code: int
    signal: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    cancelled: bool
    duration: float
    stdout_truncated: bool
    stderr_truncated: bool
    stdout_total: int
    stderr_total: int

    @property
    def ok(self):
        """True when the command exited with status 0."""
        return self.exit_code == 0


# ------------------------------------------------------------------ Ctrl-C

# How long a call that Ctrl-C cancelled may take to end before KeyboardInterrupt is raised anyway
# (the kill goes on in the call's thread, which the interpreter waits for at exit).
_INTERRUPT_WAIT = 0.3
_POLL = 0.05


def _interruptible():
    """Whether a blocking call should run so that signal handlers run meanwhile: Python runs
    them only on the main thread, between bytecodes, and never while a C call blocks it."""
    return threading.current_thread() is threading.main_thread()


def _interruptible_call(call, cancel, abandon):
    """call() on a thread of its own while this (the main) thread waits in short slices, so that
    Ctrl-C (or any exception a signal handler raises) is raised here at once; it triggers
    `cancel` first, which ends the call (an exec's remote command is killed). When the call has
    not returned within _INTERRUPT_WAIT, the exception is raised anyway and abandon() runs in
    the call's thread once it returns."""
    box = {}
    lock = threading.Lock()
    done = threading.Event()
    abandoned = []

    def work():
        try:
            box["rc"] = call()
        except BaseException as e:  # noqa: B036 - handed to the caller
            box["exc"] = e
        with lock:
            done.set()
            if abandoned:
                abandon()

    worker = threading.Thread(target=work, name="asp-call")
    worker.start()
    try:
        while not done.wait(_POLL):
            pass
    except BaseException:
        cancel.trigger()
        try:
            done.wait(_INTERRUPT_WAIT)
        except BaseException:  # a second Ctrl-C: stop waiting
            pass
        with lock:
            if not done.is_set():
                abandoned.append(True)
        if not abandoned:
            abandon()
        raise
    if "exc" in box:
        raise box["exc"]
    return box["rc"]


# ------------------------------------------------------------------ Cancel

class Cancel:
    """A cancellation token (asp_cancel).

    Pass it to Sandbox.exec(cancel=...); call trigger() from any thread and
    the command's whole remote process group is killed. A token may serve
    several calls at once; reset() re-arms it when no call uses it.
    """

    def __init__(self):
        handle = _lib.cancel_p()
        err = _lib.asp_error()
        _check(lib.asp_cancel_new(byref(handle), byref(err)), err)
        self._handle = handle
        self._lock = threading.Lock()
        self._users = 0
        self._closed = False
        self._linked = set()

    def trigger(self):
        """Cancel every operation using this token (thread-safe; idempotent)."""
        with self._lock:
            if self._handle is not None:
                lib.asp_cancel_trigger(self._handle)
            linked = list(self._linked)
        for other in linked:
            other.trigger()

    def _link(self, other):
        """Until _unlink, trigger() also triggers `other` (asp.aio's per-call token);
        at once when this token is triggered already."""
        with self._lock:
            if self._closed:
                raise InvalidArgument("the cancel token is closed")
            self._linked.add(other)
            triggered = bool(lib.asp_cancel_is_triggered(self._handle))
        if triggered:
            other.trigger()

    def _unlink(self, other):
        with self._lock:
            self._linked.discard(other)

    @property
    def triggered(self):
        with self._lock:
            return self._handle is not None and bool(lib.asp_cancel_is_triggered(self._handle))

    def is_triggered(self):
        return self.triggered

    def reset(self):
        """Re-arm the token. Not while an operation uses it (RuntimeError)."""
        with self._lock:
            if self._handle is None:
                raise InvalidArgument("the cancel token is closed")
            if self._users:
                raise RuntimeError("Cancel.reset() while an operation uses the token")
            lib.asp_cancel_reset(self._handle)

    def close(self):
        """Free the token (deferred until operations using it have returned)."""
        with self._lock:
            self._closed = True
            self._free_if_unused()

    def _free_if_unused(self):
        if self._closed and not self._users and self._handle is not None:
            handle, self._handle = self._handle, None
            lib.asp_cancel_free(handle)

    def _acquire(self):
        with self._lock:
            if self._closed:
                raise InvalidArgument("the cancel token is closed")
            self._users += 1
            return self._handle

    def _release(self):
        with self._lock:
            self._users -= 1
            self._free_if_unused()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        state = "closed" if self._closed else ("triggered" if self.triggered else "armed")
        return f"<asp.Cancel {state}>"


# ------------------------------------------------------------------ Sandbox

_TRUST = {1: "pinned", 2: "known", 3: "first-use"}
_AUTH = {1: "none", 2: "publickey", 3: "agent"}
_FILES = {0: None, 1: "sftp", 2: "exec"}
_FILES_BY_NAME = {"auto": 0, "sftp": 1, "exec": 2}


class _CallOptions:
    """asp_call_options for one file call: holds the Cancel's handle for the call's duration."""

    def __init__(self, cancel, timeout):
        self._cancel = None
        self.ptr = None
        if cancel is None and timeout is None:
            return
        opts = _lib.asp_call_options()
        _check(lib.asp_call_options_init(byref(opts), _lib.ASP_CALL_OPTIONS_VERSION),
               _lib.asp_error())
        opts.timeout_ms = _ms(timeout, "timeout")
        if cancel is not None:
            if not isinstance(cancel, Cancel):
                raise TypeError(f"cancel: expected asp.Cancel, got {type(cancel).__name__}")
            opts.cancel = cancel._acquire()
            self._cancel = cancel
        self._opts = opts
        self.ptr = byref(opts)

    def __enter__(self):
        return self.ptr

    def __exit__(self, *exc):
        if self._cancel is not None:
            self._cancel._release()
            self._cancel = None


_calls = threading.local()


def _thread_calls():
    """This thread's calls in flight, by id(Sandbox): {id: depth}. One per thread, not one per
    sandbox (a threading.local per Sandbox was 0.7 KiB of each of a thousand open sandboxes)."""
    try:
        return _calls.depth
    except AttributeError:
        _calls.depth = {}
        return _calls.depth


class Sandbox:
    """An open sandbox (asp_sandbox): a validated configuration and its connection pool.

    Safe to use from many threads at once; each call releases the GIL.
    Use as a context manager, or call close(). close() waits for calls in
    flight on other threads to return (cancel long commands first).
    """

    def __init__(self, handle):
        self._handle = handle
        self._lock = threading.Lock()
        self._idle = None  # a Condition on _lock, made when close() must wait for calls
        self._busy = 0
        self._closed = False
        self._procs = set()  # the Processes it started and not yet closed

    # -- lifetime -------------------------------------------------------

    def _enter(self):
        with self._lock:
            if self._closed:
                raise InvalidArgument("the sandbox is closed")
            self._busy += 1
        depth = _thread_calls()
        depth[id(self)] = depth.get(id(self), 0) + 1
        return self._handle

    def _leave(self):
        depth = _thread_calls()
        if depth[id(self)] == 1:
            del depth[id(self)]
        else:
            depth[id(self)] -= 1
        with self._lock:
            self._busy -= 1
            if not self._busy and self._idle is not None:
                self._idle.notify_all()

    def close(self):
        """Close every connection and free the handle. Idempotent."""
        if id(self) in _thread_calls():
            raise RuntimeError("Sandbox.close() called from inside a call on the same sandbox "
                               "(an on_output callback?)")
        with self._lock:
            procs = list(self._procs)
        for proc in procs:  # before the handle goes: a Process's command is killed
            proc.close()
        with self._lock:
            self._closed = True
            while self._busy:
                if self._idle is None:
                    self._idle = threading.Condition(self._lock)
                self._idle.wait()
            handle, self._handle = self._handle, None
        if handle is not None:
            lib.asp_close(handle)

    @property
    def closed(self):
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None and not self._busy:
            self._handle = None
            lib.asp_close(handle)

    def __repr__(self):
        if self._closed:
            return "<asp.Sandbox closed>"
        return f"<asp.Sandbox workspace={self.workspace!r} config={self.config_path!r}>"

    # -- description ----------------------------------------------------

    def _string(self, fn):
        h = self._enter()
        try:
            return _decode(fn(h))
        finally:
            self._leave()

    @property
    def workspace(self):
        """The sandbox workspace (absolute path) that relative paths resolve against."""
        return self._string(lib.asp_sandbox_workspace)

    @property
    def config_path(self):
        """The .asp.json in use (absolute path)."""
        return self._string(lib.asp_sandbox_config_path)

    def info(self):
        """Describe the connection; this may connect (when none is open) and so
        fail like open().

        {'trust': 'pinned'|'known'|'first-use', 'auth': 'none'|'publickey'|'agent',
         'host_key_type': 'ssh-ed25519', 'host_key_fingerprint': 'SHA256:...',
         'known_hosts': path or None (None when the key is pinned),
         'kex': 'curve25519-sha256', 'cipher': 'aes128-ctr', 'mac': 'hmac-sha2-256',
         'server_banner': 'SSH-2.0-OpenSSH_9.2p1 ...',
         'file_transport': 'sftp'|'exec'|None (None until a file call decided)}
        """
        out = _lib.asp_sandbox_info()
        err = _lib.asp_error()
        _check(lib.asp_sandbox_info_init(byref(out), _lib.ASP_SANDBOX_INFO_VERSION), err)
        h = self._enter()
        try:
            rc = lib.asp_sandbox_info_get(byref(out), h, byref(err))
        finally:
            self._leave()
        _check(rc, err)
        known = _decode(out.known_hosts)
        return {
            "trust": _TRUST.get(out.trust, str(out.trust)),
            "auth": _AUTH.get(out.auth, str(out.auth)),
            "host_key_type": out.host_key_type.decode("ascii", "replace"),
            "host_key_fingerprint": out.host_key_fingerprint.decode("ascii", "replace"),
            "known_hosts": known or None,
            "kex": _decode(out.kex),
            "cipher": _decode(out.cipher),
            "mac": _decode(out.mac),
            "server_banner": _decode(out.server_banner),
            "file_transport": _FILES.get(out.file_transport, str(out.file_transport)),
        }

    # -- read / write ---------------------------------------------------

    def read(self, path, offset=0, limit=None, *, cancel=None, timeout=None):
        """Up to `limit` bytes (None: to the end) of `path` from byte `offset`.

        At most the handle's max_read_bytes come back: a read that would
        return more raises LimitExceeded (read such a file in ranges).
        cancel: an asp.Cancel that stops the call (Cancelled).
        timeout: the call's overall deadline in seconds (default: the
            handle's op_timeout); TimeoutError when it passes.
        The same two keywords are accepted by write, stat, list, mkdir,
        remove and rename.
        """
        p = _path(path)
        offset = _int(offset, "offset", 0, 2**64 - 1)
        limit = _lib.ASP_READ_ALL if limit is None else _int(limit, "limit", 0, 2**64 - 1)
        out = ctypes.c_void_p()
        n = ctypes.c_size_t()
        err = _lib.asp_error()
        with _CallOptions(cancel, timeout) as co:
            h = self._enter()
            try:
                rc = lib.asp_read(byref(out), byref(n), h, p, offset, limit, co, byref(err))
            finally:
                self._leave()
        _check(rc, err, path)
        try:
            return _copy_out(out, n.value)
        finally:
            lib.asp_free(out)

    def read_text(self, path, encoding="utf-8", errors="strict", *, cancel=None, timeout=None):
        """read() decoded."""
        return self.read(path, cancel=cancel, timeout=timeout).decode(encoding, errors)

    def write(self, path, data, *, mode=None, parents=False, atomic=True, cancel=None,
              timeout=None):
        """Create or replace `path` with `data` (bytes-like, or str written as UTF-8).

        mode: permission bits (1..0o7777); None keeps an existing file's mode
        (a new file gets 0644 less the umask). parents: create missing parent
        directories (as mkdir's parents).
        atomic (default): temp file + rename, readers never see a torn file.

        A bytearray or memoryview is written from its own memory, not a copy:
        leave it unchanged until write returns.
        """
        p = _path(path)
        payload = _Lent(data)
        try:
            self._write(p, payload, path, mode, parents, atomic, cancel, timeout)
        finally:
            payload.release()

    def _write(self, p, payload, path, mode, parents, atomic, cancel, timeout):
        opts = _lib.asp_write_options()
        err = _lib.asp_error()
        _check(lib.asp_write_options_init(byref(opts), _lib.ASP_WRITE_OPTIONS_VERSION), err)
        if mode is not None:
            # 0 means "keep the mode / default" in C: it cannot express mode 0000.
            opts.mode = _int(mode, "mode", 1, 0o7777)
        opts.flags = (_lib.ASP_WRITE_PARENTS if parents else 0) | \
            (0 if atomic else _lib.ASP_WRITE_IN_PLACE)
        opts.call.timeout_ms = _ms(timeout, "timeout")
        if cancel is not None and not isinstance(cancel, Cancel):
            raise TypeError(f"cancel: expected asp.Cancel, got {type(cancel).__name__}")
        if cancel is not None:
            opts.call.cancel = cancel._acquire()
        try:
            h = self._enter()
            try:
                rc = lib.asp_write(h, p, payload.ptr, payload.len, byref(opts), byref(err))
            finally:
                self._leave()
        finally:
            if cancel is not None:
                cancel._release()
        _check(rc, err, path)

    # -- exec -----------------------------------------------------------

    def exec(self, command, *, cwd=None, env=None, stdin=None, timeout=None, on_output=None,
             max_output=None, cancel=None, kill_grace=None, deadline=None):
        """Run shell text `command` in a fresh login shell of the sandbox user.

        cwd: working directory (relative to the workspace; default the workspace).
        env: mapping NAME -> value added to the environment.
        stdin: bytes/str fed to stdin then EOF, or a readable file descriptor
            (int or object with fileno()) streamed until its EOF.
        timeout: the command's kill timer, seconds; when it passes, the whole
            process group is killed and the result has timed_out=True and the
            output so far (no exception).
        deadline: the whole call's deadline, seconds, the run included; when
            it passes, the process group is killed and exec raises
            asp.AspTimeout (no result). None: the handle's op_timeout bounds
            only the start.
        on_output(stream, data): called as output arrives (stream is
            asp.STDOUT or asp.STDERR), on this thread, or when this is the
            main thread on the call's own thread while this one waits.
            Returning True stops the command (cancelled=True). An exception
            raised in it stops the command and is re-raised by exec.
        max_output: keep at most this many bytes of each stream (head + tail).
        cancel: an asp.Cancel; trigger() it from another thread to kill the command.
        kill_grace: seconds between SIGTERM and SIGKILL (default 2).
        Returns ExecResult whatever the exit status.
        On the main thread, Ctrl-C (KeyboardInterrupt, or any exception a
        signal handler raises) is raised at once and kills the command (it
        triggers `cancel` when one was given).
        """
        cmd = _to_bytes(command, "command", allow_pathlike=False)
        opts = _lib.asp_exec_options()
        err = _lib.asp_error()
        _check(lib.asp_exec_options_init(byref(opts), _lib.ASP_EXEC_OPTIONS_VERSION), err)
        keep = []  # everything C points into stays alive until the call returns
        if cwd is not None:
            opts.cwd = _path(cwd, "cwd")
        if env:
            array = _env_array(env)
            keep.append(array)
            opts.env = ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p))
        if stdin is not None:
            if isinstance(stdin, (str, bytes, bytearray, memoryview)):
                data = _data(stdin, "stdin")
                if data:
                    keep.append(data)
                    opts.stdin_data = ctypes.cast(data, ctypes.POINTER(ctypes.c_ubyte))
                    opts.stdin_len = len(data)
            else:
                fd = stdin if isinstance(stdin, int) and not isinstance(stdin, bool) \
                    else getattr(stdin, "fileno", lambda: None)()
                if not isinstance(fd, int) or fd < 0:
                    raise TypeError("stdin: expected bytes, str, a file descriptor or an object "
                                    "with fileno()")
                opts.stdin_fd = fd
                opts.flags |= _lib.ASP_EXEC_STDIN_FD
        opts.kill_after_ms = _ms(timeout, "timeout")
        opts.call.timeout_ms = _ms(deadline, "deadline")
        opts.kill_grace_ms = _ms(kill_grace, "kill_grace")
        if max_output is not None:
            opts.max_output = _int(max_output, "max_output", 1, _lib.SIZE_MAX)
        caught = []
        if on_output is not None:
            if not callable(on_output):
                raise TypeError("on_output must be callable")

            def trampoline(stream, data, length, _userdata):
                try:
                    return 1 if on_output(stream, ctypes.string_at(data, length)) is True else 0
                except BaseException as e:  # re-raised by exec once C has returned
                    if not caught:
                        caught.append(e)
                    return 1

            callback = _lib.asp_output_cb(trampoline)
            keep.append(callback)
            opts.on_output = callback
        cancel_handle = None
        if cancel is not None:
            if not isinstance(cancel, Cancel):
                raise TypeError(f"cancel: expected asp.Cancel, got {type(cancel).__name__}")
            cancel_handle = cancel._acquire()
            opts.call.cancel = cancel_handle
        result = _lib.exec_result_p()
        interrupt = None
        if _interruptible():
            # Ctrl-C must reach the command: a token of the call's own when the caller gave none.
            interrupt = cancel
            if interrupt is None:
                interrupt = Cancel()
                opts.call.cancel = interrupt._acquire()

        def call():
            try:
                h = self._enter()
                try:
                    return lib.asp_exec(byref(result), h, cmd, byref(opts), byref(err))
                finally:
                    self._leave()
            finally:
                if cancel_handle is not None:
                    cancel._release()
                if interrupt is not None and interrupt is not cancel:
                    interrupt._release()
                    interrupt.close()

        def abandon():  # the caller went on (Ctrl-C): the result is nobody's
            if result:
                lib.asp_exec_result_free(result)
            keep.clear()

        if interrupt is None:
            rc = call()
        else:
            rc = _interruptible_call(call, interrupt, abandon)
        try:
            if caught:
                exc = caught[0]
                if hasattr(exc, "add_note"):
                    exc.add_note("raised in Sandbox.exec's on_output callback; the remote "
                                 "command was cancelled")
                raise exc
            _check(rc, err)
            return _result(result)
        finally:
            if result:
                lib.asp_exec_result_free(result)
            keep.clear()  # (held until here on purpose: C pointed into them)

    def start(self, command, *, cwd=None, env=None, pty=False, term=None, cols=None, rows=None,
              timeout=None, kill_grace=None, max_output=None, cancel=None, deadline=None):
        """Start shell text `command` and return an asp.Process at once (asp_proc_start):
        write its stdin while it runs, read its output as it comes, signal it, wait for it.

        cwd, env, max_output, kill_grace: as for exec.
        pty: run it on a pseudo-terminal: TERM is `term` (default xterm-256color), the size
            `cols` x `rows` (default 80 x 24); stdout and stderr are one stream (asp.STDOUT);
            writing b"\x03" (Ctrl-C) interrupts the foreground program.
        timeout: the kill timer, seconds (the result has timed_out=True).
        cancel: an asp.Cancel; triggering it kills the command (cancelled=True).
        deadline: seconds the start may take (default the handle's op_timeout).
        Close the Process (or use it as a context manager) to free it: a command still running
        is killed. Sandbox.close closes the Processes it started.
        """
        cmd = _to_bytes(command, "command", allow_pathlike=False)
        opts = _lib.asp_proc_options()
        err = _lib.asp_error()
        _check(lib.asp_proc_options_init(byref(opts), _lib.ASP_PROC_OPTIONS_VERSION), err)
        keep = []
        if cwd is not None:
            opts.cwd = _path(cwd, "cwd")
        if env:
            array = _env_array(env)
            keep.append(array)
            opts.env = ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p))
        if pty:
            opts.flags |= _lib.ASP_PROC_PTY
            if term is not None:
                opts.term = _to_bytes(term, "term", allow_pathlike=False)
            if cols is not None:
                opts.cols = _int(cols, "cols", 1, 10000)
            if rows is not None:
                opts.rows = _int(rows, "rows", 1, 10000)
        opts.kill_after_ms = _ms(timeout, "timeout")
        opts.kill_grace_ms = _ms(kill_grace, "kill_grace")
        opts.call.timeout_ms = _ms(deadline, "deadline")
        if max_output is not None:
            opts.max_output = _int(max_output, "max_output", 1, _lib.SIZE_MAX)
        if cancel is not None:
            if not isinstance(cancel, Cancel):
                raise TypeError(f"cancel: expected asp.Cancel, got {type(cancel).__name__}")
            opts.call.cancel = cancel._acquire()
        handle = _lib.proc_p()
        try:
            h = self._enter()
            try:
                rc = lib.asp_proc_start(byref(handle), h, cmd, byref(opts), byref(err))
            finally:
                self._leave()
            _check(rc, err)
        except BaseException:
            if cancel is not None:
                cancel._release()
            raise
        proc = Process(self, handle, cancel, bool(pty))
        with self._lock:
            self._procs.add(proc)
        return proc

    def warm(self, connections, *, cancel=None, timeout=None):
        """Connect until the pool holds `connections` (at most max_connections),
        one after another, so that that many concurrent calls start without a
        handshake. Connections already open count; 0 does nothing."""
        n = _int(connections, "connections", 0, _lib.UINT_MAX)
        err = _lib.asp_error()
        with _CallOptions(cancel, timeout) as co:
            h = self._enter()
            try:
                rc = lib.asp_sandbox_warm(h, n, co, byref(err))
            finally:
                self._leave()
        _check(rc, err)

    # -- background processes -------------------------------------------

    def bg_start(self, command, *, name=None, cwd=None, env=None, keep=None, cancel=None,
                 timeout=None):
        """Start shell text `command` in the background (under bash, in a process
        group of its own) and return its id at once. It outlives this call, the
        connection and this process; a later handle finds it by id.

        name: a label, stored and listed as given. cwd, env: as exec. keep: bytes
        of output kept in the sandbox (default 1 MiB; the newest, in two halves).
        timeout: the start's deadline, seconds.
        """
        cmd = _to_bytes(command, "command", allow_pathlike=False)
        opts = _lib.asp_bg_options()
        err = _lib.asp_error()
        _check(lib.asp_bg_options_init(byref(opts), _lib.ASP_BG_OPTIONS_VERSION), err)
        held = []
        if name is not None:
            opts.name = _to_bytes(name, "name", allow_pathlike=False)
        if cwd is not None:
            opts.cwd = _path(cwd, "cwd")
        if env:
            opts.env = _env_array_kept(env, held)
        if keep is not None:
            opts.max_output = _int(keep, "keep", 2, 2**30)
        opts.call.timeout_ms = _ms(timeout, "timeout")
        out = ctypes.c_void_p()
        tok = None
        if cancel is not None:
            if not isinstance(cancel, Cancel):
                raise TypeError(f"cancel: expected asp.Cancel, got {type(cancel).__name__}")
            opts.call.cancel = cancel._acquire()
            tok = cancel
        try:
            h = self._enter()
            try:
                rc = lib.asp_bg_start(byref(out), h, cmd, byref(opts), byref(err))
            finally:
                self._leave()
        finally:
            if tok is not None:
                tok._release()
        _check(rc, err)
        try:
            return ctypes.string_at(out.value).decode("ascii")
        finally:
            lib.asp_free(out)

    def bg_read(self, id, offset=0, limit=None, *, cancel=None, timeout=None):
        """Up to `limit` bytes (default 1 MiB) of a background process's output
        from `offset` -> BgOutput(data, offset, next, status). The bytes begin
        later than asked when older ones were dropped (offset says where)."""
        i = _bg_id(id)
        off = _int(offset, "offset", 0, 2**64 - 1)
        lim = 0 if limit is None else _int(limit, "limit", 1, 2**64 - 1)
        out = ctypes.c_void_p()
        n = ctypes.c_size_t()
        st = _lib.asp_bg_status()
        err = _lib.asp_error()
        with _CallOptions(cancel, timeout) as co:
            h = self._enter()
            try:
                rc = lib.asp_bg_read(byref(out), byref(n), byref(st), h, i, off, lim, co, byref(err))
            finally:
                self._leave()
        _check(rc, err)
        try:
            data = ctypes.string_at(out.value, n.value) if n.value else b""
        finally:
            lib.asp_free(out)
        return BgOutput(data, st.offset, st.offset + len(data), _bg_status(st))

    def bg_signal(self, id, sig=15, *, cancel=None, timeout=None):
        """Send signal `sig` (e.g. signal.SIGTERM, the default) to the whole
        process group of a background process. One that ended is no error."""
        i = _bg_id(id)
        s = _int(int(sig), "sig", 1, 2**31 - 1)
        err = _lib.asp_error()
        with _CallOptions(cancel, timeout) as co:
            h = self._enter()
            try:
                rc = lib.asp_bg_signal(h, i, s, co, byref(err))
            finally:
                self._leave()
        _check(rc, err)

    def bg_wait(self, id, timeout=None, *, cancel=None, deadline=None):
        """Wait up to `timeout` seconds (None: as long as it takes) for a
        background process to end -> BgStatus; asp.AspTimeout when it still runs."""
        i = _bg_id(id)
        ms = _lib.ASP_BG_FOREVER if timeout is None else _ms(timeout, "timeout")
        st = _lib.asp_bg_status()
        err = _lib.asp_error()
        with _CallOptions(cancel, deadline) as co:
            h = self._enter()
            try:
                rc = lib.asp_bg_wait(byref(st), h, i, ms, co, byref(err))
            finally:
                self._leave()
        _check(rc, err)
        return _bg_status(st)

    def bg_remove(self, id, *, cancel=None, timeout=None):
        """Remove an ended background process's files (a running one: InvalidArgument)."""
        i = _bg_id(id)
        err = _lib.asp_error()
        with _CallOptions(cancel, timeout) as co:
            h = self._enter()
            try:
                rc = lib.asp_bg_remove(h, i, co, byref(err))
            finally:
                self._leave()
        _check(rc, err)

    def bg_list(self, *, cancel=None, timeout=None):
        """Every background process of the sandbox user, by start time -> [BgProcess]."""
        out = _lib.bg_list_p()
        err = _lib.asp_error()
        with _CallOptions(cancel, timeout) as co:
            h = self._enter()
            try:
                rc = lib.asp_bg_list_all(byref(out), h, co, byref(err))
            finally:
                self._leave()
        _check(rc, err)
        try:
            procs = []
            for k in range(lib.asp_bg_list_count(out)):
                e = lib.asp_bg_list_get(out, k).contents
                procs.append(BgProcess(e.id.decode("ascii"), _decode(e.name), _decode(e.command),
                                       e.start_ms, e.pid, _bg_status(e.status)))
            return procs
        finally:
            lib.asp_bg_list_free(out)

    # -- filesystem -----------------------------------------------------

    def stat(self, path, *, cancel=None, timeout=None):
        """Metadata of `path`, following symlinks. -> Stat(size, mtime, mode, type)"""
        p = _path(path)
        out = _lib.asp_stat_info()
        err = _lib.asp_error()
        with _CallOptions(cancel, timeout) as co:
            h = self._enter()
            try:
                rc = lib.asp_stat(byref(out), h, p, co, byref(err))
            finally:
                self._leave()
        _check(rc, err, path)
        return Stat(out.size, out.mtime, out.mode, _file_type(out.type))

    def exists(self, path, *, cancel=None, timeout=None):
        """True when `path` exists (following symlinks)."""
        try:
            self.stat(path, cancel=cancel, timeout=timeout)
        except FileNotFoundError:
            return False
        return True

    def mkdir(self, path, mode=0o755, parents=False, *, cancel=None, timeout=None):
        """Create a directory; with parents, also missing parents, and no error if it exists."""
        p = _path(path)
        mode = _int(mode, "mode", 1, 0o7777)
        err = _lib.asp_error()
        with _CallOptions(cancel, timeout) as co:
            h = self._enter()
            try:
                rc = lib.asp_mkdir(h, p, mode, _lib.ASP_MKDIR_PARENTS if parents else 0, co,
                                   byref(err))
            finally:
                self._leave()
        _check(rc, err, path)

    def list(self, path=".", *, cancel=None, timeout=None):
        """Entries of a directory (no . and ..), sorted by name -> [Entry].

        Names are str, or bytes when `path` is bytes (like os.listdir).
        """
        p = _path(path)
        as_bytes = isinstance(path, bytes)
        out = _lib.list_p()
        err = _lib.asp_error()
        with _CallOptions(cancel, timeout) as co:
            h = self._enter()
            try:
                rc = lib.asp_list_dir(byref(out), h, p, co, byref(err))
            finally:
                self._leave()
        _check(rc, err, path)
        try:
            entries = []
            st = _lib.asp_stat_info()
            for i in range(lib.asp_list_count(out)):
                name = lib.asp_list_name(out, i)
                rc = lib.asp_list_stat(byref(st), out, i)
                if name is None or rc != 0:
                    _raise(rc or ErrorCode.EINVAL, _lib.asp_error())
                entries.append(Entry(name if as_bytes else _decode(name), st.size, st.mtime,
                                     st.mode, _file_type(st.type)))
            return entries
        finally:
            lib.asp_list_free(out)

    def remove(self, path, recursive=False, *, cancel=None, timeout=None):
        """Remove a file or an empty directory; with recursive, a whole tree
        (cancel and timeout also stop the remote rm)."""
        p = _path(path)
        err = _lib.asp_error()
        with _CallOptions(cancel, timeout) as co:
            h = self._enter()
            try:
                rc = lib.asp_remove(h, p, _lib.ASP_REMOVE_RECURSIVE if recursive else 0, co,
                                    byref(err))
            finally:
                self._leave()
        _check(rc, err, path)

    def rename(self, src, dst, *, cancel=None, timeout=None):
        """Rename `src` to `dst`, replacing `dst` if it is a file."""
        a = _path(src, "src")
        b = _path(dst, "dst")
        err = _lib.asp_error()
        with _CallOptions(cancel, timeout) as co:
            h = self._enter()
            try:
                rc = lib.asp_rename(h, a, b, co, byref(err))
            finally:
                self._leave()
        _check(rc, err, src, dst)


def _env_array(env):
    """A NULL-terminated C array of b"NAME=value" for a mapping NAME -> value."""
    if not isinstance(env, collections.abc.Mapping):
        raise TypeError(f"env: expected a mapping NAME -> value, got {type(env).__name__}")
    entries = []
    for name, value in env.items():
        n = _to_bytes(name, "env name", allow_pathlike=False)
        if not n or b"=" in n:
            raise InvalidArgument(f"env name {name!r}: must be non-empty and without '='")
        entries.append(n + b"=" + _to_bytes(value, f"env[{name!r}]", allow_pathlike=False))
    return (ctypes.c_char_p * (len(entries) + 1))(*entries, None)


# ------------------------------------------------------------------ Process

_SLICE_MS = 200  # a blocking read or wait returns to Python this often (Ctrl-C, close())


class Process:
    """A running command with a handle (asp_proc), from Sandbox.start.

    write() / close_stdin() feed its stdin while it runs; read() returns its output as it
    comes, as (stream, bytes) (iterate over the Process for the same until the end);
    signal("TERM"), kill(), resize(cols, rows) with pty=True; wait(timeout) returns the
    ExecResult that Sandbox.exec gives. close() (or the with block's end) kills the command
    if it still runs and frees the handle. Its methods may be called from several threads
    (one reads while another writes).
    """

    def __init__(self, sandbox, handle, cancel, pty):
        self._sandbox = sandbox
        self._handle = handle
        self._cancel = cancel
        self.pty = pty
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._busy = 0
        self._closing = False
        self._result = None

    def _enter(self):
        with self._lock:
            if self._closing:
                raise InvalidArgument("the process is closed")
            self._busy += 1
        return self._handle

    def _leave(self):
        with self._lock:
            self._busy -= 1
            if not self._busy:
                self._idle.notify_all()

    def write(self, data):
        """Send bytes (or str, as UTF-8) to stdin. Never waits for a reply."""
        payload = _data(data, "data")
        err = _lib.asp_error()
        h = self._enter()
        try:
            rc = lib.asp_proc_write(h, payload, len(payload), byref(err))
        finally:
            self._leave()
        _check(rc, err)

    def close_stdin(self):
        """EOF on stdin after what was written (a terminal's program reads b"\x04" instead)."""
        err = _lib.asp_error()
        h = self._enter()
        try:
            rc = lib.asp_proc_close_stdin(h, byref(err))
        finally:
            self._leave()
        _check(rc, err)

    def read(self, size=65536, timeout=None):
        """The next output: (asp.STDOUT or asp.STDERR, bytes), at most `size` bytes; None at the
        end (the command ended and everything was read). timeout: seconds to wait (None: no
        limit; 0: only what is there); asp.AspTimeout when nothing came in time."""
        size = _int(size, "size", 1, _lib.SIZE_MAX)
        limit = _wait_ms(timeout)
        buf = ctypes.create_string_buffer(size)
        got = ctypes.c_size_t()
        stream = ctypes.c_int()
        err = _lib.asp_error()
        start = _now_ms()
        while True:
            left = _SLICE_MS if limit is None else max(0, min(_SLICE_MS, limit - (_now_ms() - start)))
            h = self._enter()
            try:
                rc = lib.asp_proc_read(byref(got), byref(stream), h, buf, size, left, byref(err))
            finally:
                self._leave()
            if rc == ErrorCode.ETIMEOUT and (limit is None or _now_ms() - start < limit) \
                    and not self._closing:
                continue
            _check(rc, err)
            if not got.value:
                return None
            return stream.value, buf.raw[:got.value]

    def __iter__(self):
        while True:
            chunk = self.read()
            if chunk is None:
                return
            yield chunk

    def signal(self, sig):
        """Send a signal to the command's process group: a name ("TERM", "SIGINT") or a
        signal.Signals / number (sent by its name: the sandbox's numbers need not be ours)."""
        if isinstance(sig, int) and not isinstance(sig, bool):
            import signal as _signal
            try:
                sig = _signal.Signals(sig).name
            except ValueError:
                raise InvalidArgument(f"signal {sig}: not a signal number") from None
        name = _to_bytes(sig, "signal", allow_pathlike=False)
        err = _lib.asp_error()
        h = self._enter()
        try:
            rc = lib.asp_proc_signal(h, name, byref(err))
        finally:
            self._leave()
        _check(rc, err)

    def kill(self):
        """SIGKILL to the command's process group."""
        self.signal("KILL")

    def resize(self, cols, rows):
        """The terminal's new size (pty=True only)."""
        err = _lib.asp_error()
        c = _int(cols, "cols", 0, _lib.UINT_MAX)
        r = _int(rows, "rows", 0, _lib.UINT_MAX)
        h = self._enter()
        try:
            rc = lib.asp_proc_resize(h, c, r, byref(err))
        finally:
            self._leave()
        _check(rc, err)

    def wait(self, timeout=None):
        """The ExecResult once the command ended (the same each call); asp.AspTimeout when it
        still runs after `timeout` seconds (None: no limit)."""
        if self._result is not None:
            return self._result
        limit = _wait_ms(timeout)
        result = _lib.exec_result_p()
        err = _lib.asp_error()
        start = _now_ms()
        while True:
            left = _SLICE_MS if limit is None else max(0, min(_SLICE_MS, limit - (_now_ms() - start)))
            h = self._enter()
            try:
                if self._result is not None:
                    return self._result
                rc = lib.asp_proc_wait(byref(result), h, left, byref(err))
                if rc == 0:
                    try:
                        self._result = _result(result)
                    finally:
                        lib.asp_exec_result_free(result)
                    return self._result
            finally:
                self._leave()
            if rc == ErrorCode.ETIMEOUT and (limit is None or _now_ms() - start < limit) \
                    and not self._closing:
                continue
            _check(rc, err)

    @property
    def returncode(self):
        """The exit code once wait() returned, else None (as subprocess.Popen's)."""
        return None if self._result is None else self._result.exit_code

    def close(self):
        """Kill the command if it still runs (its whole process group), free the handle."""
        with self._lock:
            if self._handle is None:
                return
            self._closing = True
            while self._busy:
                self._idle.wait()
            handle, self._handle = self._handle, None
        lib.asp_proc_free(handle)
        if self._cancel is not None:
            self._cancel._release()
            self._cancel = None
        sb = self._sandbox
        with sb._lock:
            sb._procs.discard(self)

    @property
    def closed(self):
        return self._handle is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None) is not None and not self._busy:
            try:
                self.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def __repr__(self):
        state = "closed" if self._handle is None else "ended" if self._result else "running"
        return f"<asp.Process {state}{' pty' if self.pty else ''}>"


def _wait_ms(timeout):
    """A wait's timeout in ms: None (no limit) stays None; 0 is a look."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not timeout >= 0 or timeout == math.inf:
        raise InvalidArgument(f"timeout: expected a number of seconds >= 0 or None, got {timeout!r}")
    return min(math.ceil(timeout * 1000), 2**31 - 1)


def _now_ms():
    import time
    return int(time.monotonic() * 1000)


def _result(r):
    def output(stream):
        n = ctypes.c_size_t()
        ptr = lib.asp_exec_result_output(r, stream, byref(n))
        return _copy_out(ptr, n.value) if ptr else b""

    return ExecResult(
        exit_code=lib.asp_exec_result_exit_code(r),
        signal=lib.asp_exec_result_signal(r),
        stdout=output(STDOUT),
        stderr=output(STDERR),
        timed_out=bool(lib.asp_exec_result_timed_out(r)),
        cancelled=bool(lib.asp_exec_result_cancelled(r)),
        duration=lib.asp_exec_result_duration_ms(r) / 1000.0,
        stdout_truncated=bool(lib.asp_exec_result_truncated(r, STDOUT)),
        stderr_truncated=bool(lib.asp_exec_result_truncated(r, STDERR)),
        stdout_total=lib.asp_exec_result_output_total(r, STDOUT),
        stderr_total=lib.asp_exec_result_output_total(r, STDERR),
    )


# ------------------------------------------------------------------ open

# The trace (asp_open_options.log_fn) goes to the logger "asp": DEBUG each
# call, INFO connections, WARNING retries and reconnects.
_log = logging.getLogger("asp")
_log.addHandler(logging.NullHandler())  # a library prints nothing unless the application asks
_LOG_LEVELS = {_lib.ASP_LOG_DEBUG: logging.DEBUG, _lib.ASP_LOG_INFO: logging.INFO,
               _lib.ASP_LOG_WARN: logging.WARNING}


def _on_trace(level, msg, _userdata):
    # Called from libasp's threads too: ctypes takes the GIL for us. An
    # exception must not cross into C.
    try:
        _log.log(_LOG_LEVELS.get(level, logging.WARNING), "%s", msg.decode("utf-8", "replace"))
    except Exception:  # noqa: BLE001 - nothing to report it to
        pass


# One callback object for every handle, alive as long as the module (libasp keeps the pointer).
_TRACE_CB = _lib.asp_log_fn(_on_trace)


def _has_real_handler():
    lg = _log
    while lg:
        if any(not isinstance(h, logging.NullHandler) for h in lg.handlers):
            return True
        lg = lg.parent if lg.propagate else None
    return False


def _trace_options(opts):
    """Bridge the trace to the logger, at the level it has now; ASP_DEBUG alone keeps libasp's stderr."""
    env = os.environ.get("ASP_DEBUG", "")
    if env not in ("", "0") and not _has_real_handler():
        return
    level = _log.getEffectiveLevel()
    if not _log.isEnabledFor(logging.WARNING):
        return
    opts.log_fn = _TRACE_CB
    opts.log_level = (_lib.ASP_LOG_DEBUG if level <= logging.DEBUG else
                      _lib.ASP_LOG_INFO if level <= logging.INFO else _lib.ASP_LOG_WARN)


def open(config=None, start_dir=None, *, known_hosts=None, max_connections=None,
         connect_timeout=None, io_timeout=None, keepalive=None, idle_close=None, lazy=False,
         op_timeout=None, max_read_bytes=None, max_output=None, max_list_entries=None,
         file_transport="auto", config_text=None, max_list_bytes=None):
    """Open a sandbox -> Sandbox.

    config: the .asp.json to use; None means discovery ($ASP_CONFIG, else
        .asp.json in start_dir (default: cwd) and each parent). Discovery
        parses the very file it judged (no second lookup of its name).
    config_text: the configuration's content (str or bytes), used instead
        of reading a file; config then only names it (messages, relative
        identity paths). Not judged: read_config gives a discovered file's
        judged text.
    known_hosts: trust-on-first-use store (default $ASP_KNOWN_HOSTS, else
        ~/.config/asp/known_hosts).
    max_connections: connections kept to the sandbox (default 4).
    connect_timeout: seconds for TCP + handshake + auth (default 10).
    io_timeout: seconds of server silence tolerated during an exchange (default 30).
    keepalive: seconds of idleness before a keepalive (default 15).
    idle_close: close connections idle this many seconds (default 300).
    lazy: do not connect now; the first operation connects. Otherwise a
        wrong host key or credentials fail here.
    op_timeout: seconds, the default overall deadline of one call (default 300;
        a command's run time is not counted: that is exec's timeout).
    max_read_bytes: most bytes one read returns (default 256 MiB).
    max_output: bytes of each exec stream kept by default (default 64 MiB).
    max_list_entries: most entries one list returns (default 100000).
    max_list_bytes: most bytes of names one list holds, the names' lengths
        added up (default 32 MiB); a name over 4096 bytes is refused anyway.
    file_transport: how file calls reach the files: "auto" (SFTP when the
        server offers it, else shell commands), "sftp" or "exec".

    The trace (connect, host key, auth, each call's route and result,
    retries) goes to the logging logger "asp" at the level it has when the
    sandbox opens: DEBUG each call, INFO connections, WARNING retries and
    reconnects. It never holds key text, a passphrase or the user name.
    """
    opts = _lib.asp_open_options()
    err = _lib.asp_error()
    _check(lib.asp_open_options_init(byref(opts), _lib.ASP_OPEN_OPTIONS_VERSION), err)
    if config is not None:
        opts.config_path = _path(config, "config")
    if config_text is not None:
        opts.config_text = _to_bytes(config_text, "config_text", allow_pathlike=False)
    if start_dir is not None:
        opts.start_dir = _path(start_dir, "start_dir")
    if known_hosts is not None:
        opts.known_hosts = _path(known_hosts, "known_hosts")
    if max_connections is not None:
        opts.max_connections = _int(max_connections, "max_connections", 1, _lib.UINT_MAX)
    opts.connect_timeout_ms = _ms(connect_timeout, "connect_timeout")
    opts.io_timeout_ms = _ms(io_timeout, "io_timeout")
    opts.keepalive_s = _seconds(keepalive, "keepalive")
    opts.idle_close_s = _seconds(idle_close, "idle_close")
    if lazy:
        opts.flags |= _lib.ASP_OPEN_LAZY
    opts.op_timeout_ms = _ms(op_timeout, "op_timeout")
    if max_read_bytes is not None:
        opts.max_read_bytes = _int(max_read_bytes, "max_read_bytes", 1, 2**64 - 1)
    if max_output is not None:
        opts.max_output = _int(max_output, "max_output", 1, _lib.SIZE_MAX)
    if max_list_entries is not None:
        opts.max_list_entries = _int(max_list_entries, "max_list_entries", 1, _lib.UINT_MAX)
    if max_list_bytes is not None:
        opts.max_list_bytes = _int(max_list_bytes, "max_list_bytes", 1, 2**64 - 1)
    if file_transport not in _FILES_BY_NAME:
        raise ValueError("file_transport must be one of %s, not %r"
                         % (", ".join(repr(k) for k in _FILES_BY_NAME), file_transport))
    opts.file_transport = _FILES_BY_NAME[file_transport]
    _trace_options(opts)
    handle = _lib.sandbox_p()
    rc = lib.asp_open(byref(handle), byref(opts), byref(err))
    _check(rc, err, config)
    return Sandbox(handle)

