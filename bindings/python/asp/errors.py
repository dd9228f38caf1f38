"""libasp error codes and the exceptions they become.

Every ASP_E* code of include/asp.h maps to one exception class. Each class
derives from AspError and, where Python has a matching built-in exception,
from that too, so ordinary handlers work:

    try:
        data = sb.read("notes.txt")
    except FileNotFoundError:      # asp.NotFoundError is one
        data = b""

Attributes of every AspError: ``code`` (the negative int), ``name``
("ASP_ENOENT") and ``message`` (libasp's specific text, naming the file,
field or path). OSError subclasses also carry ``errno``, ``strerror`` and,
when the call was about a path, ``filename``.
"""

import enum
import errno as _errno


class ErrorCode(enum.IntEnum):
    """The asp_error_code values (never renumbered; new ones are appended)."""
    OK = 0
    ERROR = -1
    EINVAL = -2
    ENOMEM = -3
    ENOCONFIG = -4
    ECONFIG = -5
    EHOSTKEY = -6
    EAUTH = -7
    ECONNECT = -8
    ECONNLOST = -9
    ETIMEOUT = -10
    ECANCELLED = -11
    ENOENT = -12
    EISDIR = -13
    EACCES = -14
    EEXIST = -15
    ENOTDIR = -16
    ENOTEMPTY = -17
    ENOSPC = -18
    EPROTO = -19
    EIO = -20
    ELIMIT = -21
    EROFS = -22
    EBUSY = -23


class AspError(Exception):
    """A libasp call failed. ``code``, ``name`` and ``message`` say how."""

    default_code = ErrorCode.ERROR
    os_errno = None  # set on classes that are also OSError

    def __init__(self, message=None, code=None, name=None, filename=None):
        if code is None:
            code = self.default_code
        try:
            code = ErrorCode(code)
        except ValueError:  # a code newer than these bindings
            code = int(code)
        if name is None:
            name = f"ASP_{code.name}" if isinstance(code, ErrorCode) else "ASP_UNKNOWN"
        if not message:
            message = name
        super().__init__(message)
        self.code = code
        self.name = name
        self.message = message
        if isinstance(self, OSError):
            self.errno = self.os_errno
            self.strerror = message
            if filename is not None:
                self.filename = filename

    def __str__(self):
        return self.message

    def __repr__(self):
        return f"{type(self).__name__}({self.message!r}, code={int(self.code)}, name={self.name!r})"

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, int(self.code), self.name,
                           getattr(self, "filename", None)))


def _rebuild(cls, message, code, name, filename):
    return cls(message, code, name, filename)


class InvalidArgument(AspError, ValueError):
    """ASP_EINVAL: a bad argument (also raised before calling C, e.g. for a NUL byte)."""
    default_code = ErrorCode.EINVAL


class OutOfMemory(AspError, MemoryError):
    """ASP_ENOMEM."""
    default_code = ErrorCode.ENOMEM


class ConfigError(AspError):
    """ASP_ECONFIG: .asp.json or the identity is invalid (the message names file, field, why)."""
    default_code = ErrorCode.ECONFIG


class NoConfigError(ConfigError):
    """ASP_ENOCONFIG: discovery found no .asp.json (or $ASP_CONFIG names no file)."""
    default_code = ErrorCode.ENOCONFIG


class HostKeyError(AspError):
    """ASP_EHOSTKEY: host key mismatch, revoked or unusable; failed closed, no credential sent."""
    default_code = ErrorCode.EHOSTKEY


class AuthError(AspError):
    """ASP_EAUTH: authentication failed."""
    default_code = ErrorCode.EAUTH


class ConnectError(AspError, ConnectionError):
    """ASP_ECONNECT: could not connect or complete the SSH handshake."""
    default_code = ErrorCode.ECONNECT
    os_errno = _errno.ECONNREFUSED


class AspTimeout(ConnectError, TimeoutError):
    """ASP_ETIMEOUT: a deadline passed (connect, handshake, or server silence during I/O).

    Not raised for a command's own timeout: that is ExecResult.timed_out.
    """
    default_code = ErrorCode.ETIMEOUT
    os_errno = _errno.ETIMEDOUT


class ConnectionLost(AspError, ConnectionError):
    """ASP_ECONNLOST: the connection died during an operation that may have had an effect.

    An exec that may have started is never replayed. Also raised when the server
    closed a command's channel without an exit status (sshd's ChannelTimeout).
    """
    default_code = ErrorCode.ECONNLOST
    os_errno = _errno.ECONNRESET


class Cancelled(AspError):
    """ASP_ECANCELLED: cancelled through a Cancel token before anything ran."""
    default_code = ErrorCode.ECANCELLED


class NotFoundError(AspError, FileNotFoundError):
    """ASP_ENOENT: no such file or directory (also: an exec's cwd does not exist)."""
    default_code = ErrorCode.ENOENT
    os_errno = _errno.ENOENT


class IsADirectory(AspError, IsADirectoryError):
    """ASP_EISDIR."""
    default_code = ErrorCode.EISDIR
    os_errno = _errno.EISDIR


class AccessError(AspError, PermissionError):
    """ASP_EACCES: permission denied in the sandbox."""
    default_code = ErrorCode.EACCES
    os_errno = _errno.EACCES


class Exists(AspError, FileExistsError):
    """ASP_EEXIST."""
    default_code = ErrorCode.EEXIST
    os_errno = _errno.EEXIST


class NotADirectory(AspError, NotADirectoryError):
    """ASP_ENOTDIR: a path component is not a directory."""
    default_code = ErrorCode.ENOTDIR
    os_errno = _errno.ENOTDIR


class NotEmpty(AspError, OSError):
    """ASP_ENOTEMPTY: directory not empty."""
    default_code = ErrorCode.ENOTEMPTY
    os_errno = _errno.ENOTEMPTY


class NoSpace(AspError, OSError):
    """ASP_ENOSPC: the sandbox could not store the data."""
    default_code = ErrorCode.ENOSPC
    os_errno = _errno.ENOSPC


class ProtocolError(AspError):
    """ASP_EPROTO: the server broke the SSH/SFTP protocol, or the login shell is not POSIX."""
    default_code = ErrorCode.EPROTO


class RemoteIOError(AspError, OSError):
    """ASP_EIO: the sandbox reported an I/O failure."""
    default_code = ErrorCode.EIO
    os_errno = _errno.EIO


class LimitExceeded(AspError):
    """ASP_ELIMIT: a result would exceed a cap (max_read_bytes, max_list_entries, max_list_bytes); nothing returned."""
    default_code = ErrorCode.ELIMIT


class ReadOnlyFileSystem(AspError, OSError):
    """ASP_EROFS: the sandbox's file system holding the path is read-only."""
    default_code = ErrorCode.EROFS
    os_errno = _errno.EROFS


class SandboxBusy(AspError):
    """ASP_EBUSY: no connection has room for another command: each of max_connections carries as
    many running commands as the server allows (its session limit). End one, or open with more
    connections."""
    default_code = ErrorCode.EBUSY


EXCEPTIONS = {
    ErrorCode.ERROR: AspError,
    ErrorCode.EINVAL: InvalidArgument,
    ErrorCode.ENOMEM: OutOfMemory,
    ErrorCode.ENOCONFIG: NoConfigError,
    ErrorCode.ECONFIG: ConfigError,
    ErrorCode.EHOSTKEY: HostKeyError,
    ErrorCode.EAUTH: AuthError,
    ErrorCode.ECONNECT: ConnectError,
    ErrorCode.ECONNLOST: ConnectionLost,
    ErrorCode.ETIMEOUT: AspTimeout,
    ErrorCode.ECANCELLED: Cancelled,
    ErrorCode.ENOENT: NotFoundError,
    ErrorCode.EISDIR: IsADirectory,
    ErrorCode.EACCES: AccessError,
    ErrorCode.EEXIST: Exists,
    ErrorCode.ENOTDIR: NotADirectory,
    ErrorCode.ENOTEMPTY: NotEmpty,
    ErrorCode.ENOSPC: NoSpace,
    ErrorCode.EPROTO: ProtocolError,
    ErrorCode.EIO: RemoteIOError,
    ErrorCode.ELIMIT: LimitExceeded,
    ErrorCode.EROFS: ReadOnlyFileSystem,
    ErrorCode.EBUSY: SandboxBusy,
}


def exception_class(code):
    """The exception class for a libasp error code (AspError for unknown codes)."""
    try:
        return EXCEPTIONS.get(ErrorCode(code), AspError)
    except ValueError:
        return AspError
