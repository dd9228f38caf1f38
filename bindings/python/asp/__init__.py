"""asp - Python bindings for libasp, the Agent Sandbox Protocol client.

A harness that finds `.asp.json` runs its tools' raw I/O in a remote
sandbox over SSH:

    import asp

    with asp.open() as sb:                      # discovery: ./.asp.json, then parents
        sb.write("hello.py", "print('hi')\\n", parents=True)
        r = sb.exec("python3 hello.py", timeout=30)
        print(r.exit_code, r.stdout.decode())
        print(sb.read("hello.py"))

For asyncio programs, asp.aio has the same calls as coroutines:

    async with asp.aio.open() as sb:
        r = await sb.exec("make test", timeout=600)

The shared library is found through $ASP_LIBRARY, then a copy next to this
package, then ../../build/ of a libasp checkout, then the system.
"""

from ._lib import path as library_path
from ._core import (STDERR, STDOUT, BgOutput, BgProcess, BgStatus, Cancel, Entry, ExecResult,
                    FileType, Process, Sandbox, Stat, check_config, error_name, find_config, open,
                    read_config, strerror, version)
from .errors import (AccessError, AspError, AspTimeout, AuthError, Cancelled, ConfigError,
                     ConnectError, ConnectionLost, ErrorCode, Exists, HostKeyError,
                     InvalidArgument, IsADirectory, NoConfigError, NoSpace, NotADirectory,
                     NotEmpty, NotFoundError, OutOfMemory, ProtocolError, RemoteIOError,
                     LimitExceeded, ReadOnlyFileSystem, SandboxBusy, exception_class)

__version__ = "0.1.0"


def __getattr__(name):
    """asp.aio on first use: a blocking program does not import asyncio."""
    if name == "aio":
        import importlib
        return importlib.import_module(__name__ + ".aio")
    raise AttributeError(f"module 'asp' has no attribute {name!r}")


__all__ = [
    "open", "Sandbox", "Process", "Cancel", "ExecResult", "Stat", "Entry", "FileType",
    "BgStatus", "BgOutput", "BgProcess",
    "find_config", "read_config", "check_config", "version", "strerror", "error_name", "library_path",
    "STDOUT", "STDERR", "ErrorCode", "exception_class",
    "AspError", "InvalidArgument", "OutOfMemory", "ConfigError", "NoConfigError",
    "HostKeyError", "AuthError", "ConnectError", "AspTimeout", "ConnectionLost", "Cancelled",
    "NotFoundError", "IsADirectory", "AccessError", "Exists", "NotADirectory", "NotEmpty",
    "NoSpace", "ProtocolError", "RemoteIOError", "LimitExceeded", "ReadOnlyFileSystem", "SandboxBusy",
]
