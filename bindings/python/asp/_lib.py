"""Loading libasp and declaring its C API for ctypes.

Everything that knows about C types lives here: the library search, the
opaque handle types, the option/info structs (mirrored field for field from
include/asp.h), and an argtypes/restype declaration for every exported
function, so that ctypes never guesses (no implicit int return values, no
silent int-to-pointer conversions).

The library is a ctypes.CDLL: ctypes releases the GIL around every foreign
call, so Python threads run libasp calls in parallel.
"""

import ctypes
import ctypes.util
import os

from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_int, c_int64,
                    c_size_t, c_ubyte, c_uint, c_uint32, c_uint64, c_void_p)

SONAME = "libasp.so.0"
ABI_MAJOR = 0

# ------------------------------------------------------------------ constants (asp.h)

ASP_ERROR_MESSAGE_MAX = 512
ASP_OPEN_LAZY = 0x1
ASP_OPEN_OPTIONS_VERSION = 3
ASP_LOG_DEBUG = 1
ASP_LOG_INFO = 2
ASP_LOG_WARN = 3
ASP_WRITE_OPTIONS_VERSION = 1
ASP_CALL_OPTIONS_VERSION = 1
ASP_EXEC_OPTIONS_VERSION = 1
ASP_SANDBOX_INFO_VERSION = 1
ASP_READ_ALL = 2**64 - 1
ASP_STDOUT = 1  # asp_stream (an int-sized enum)
ASP_STDERR = 2
ASP_EXEC_STDIN_FD = 0x1
ASP_MKDIR_PARENTS = 0x1
ASP_WRITE_PARENTS = 0x1
ASP_WRITE_IN_PLACE = 0x2
ASP_REMOVE_RECURSIVE = 0x1
ASP_BG_OPTIONS_VERSION = 1
ASP_BG_RUNNING = 1  # asp_bg_state
ASP_BG_EXITED = 2
ASP_BG_LOST = 3
ASP_BG_FOREVER = 0xffffffff
ASP_PROC_OPTIONS_VERSION = 1
ASP_PROC_PTY = 0x1

UINT_MAX = 2**32 - 1
SIZE_MAX = 2**(8 * ctypes.sizeof(c_size_t)) - 1


# ------------------------------------------------------------------ types

class asp_error(Structure):
    _fields_ = [
        ("code", c_int),
        ("message", c_char * ASP_ERROR_MESSAGE_MAX),
        ("spare", c_uint32 * 4),
    ]


# Opaque handles: distinct pointer types, so that a cancel token cannot be
# passed where a sandbox is expected and a plain int is never accepted.
class _asp_sandbox(Structure):
    pass


class _asp_cancel(Structure):
    pass


class _asp_exec_result(Structure):
    pass


class _asp_list(Structure):
    pass


class _asp_bg_list(Structure):
    pass


class _asp_proc(Structure):
    pass


sandbox_p = POINTER(_asp_sandbox)
cancel_p = POINTER(_asp_cancel)
exec_result_p = POINTER(_asp_exec_result)
list_p = POINTER(_asp_list)
bg_list_p = POINTER(_asp_bg_list)
proc_p = POINTER(_asp_proc)
error_p = POINTER(asp_error)


# void (*asp_log_fn)(asp_log_level level, const char *msg, void *userdata)
asp_log_fn = CFUNCTYPE(None, c_int, c_char_p, c_void_p)


class asp_open_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("config_path", c_char_p),
        ("start_dir", c_char_p),
        ("known_hosts", c_char_p),
        ("max_connections", c_uint),
        ("connect_timeout_ms", c_uint),
        ("io_timeout_ms", c_uint),
        ("keepalive_s", c_uint),
        ("idle_close_s", c_uint),
        ("flags", c_uint),
        ("op_timeout_ms", c_uint),
        ("max_read_bytes", c_uint64),
        ("max_output", c_size_t),
        ("max_list_entries", c_uint),
        ("file_transport", c_uint),
        ("config_text", c_char_p),  # version 2
        ("max_list_bytes", c_uint64),  # version 2
        ("log_fn", asp_log_fn),  # version 3
        ("log_userdata", c_void_p),  # version 3
        ("log_level", c_uint),  # version 3
    ]


class asp_call_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("cancel", cancel_p),
        ("timeout_ms", c_uint),
    ]


class asp_sandbox_info(Structure):
    _fields_ = [
        ("version", c_uint),
        ("trust", c_int),
        ("auth", c_int),
        ("host_key_type", c_char * 32),
        ("host_key_fingerprint", c_char * 64),
        ("known_hosts", c_char * 1024),
        ("kex", c_char * 64),
        ("cipher", c_char * 128),
        ("mac", c_char * 128),
        ("server_banner", c_char * 256),
        ("file_transport", c_int),
    ]


class asp_write_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("call", asp_call_options),  # cancel token and deadline; call.version may stay 0
        ("mode", c_uint),
        ("flags", c_uint),  # ASP_WRITE_PARENTS, ASP_WRITE_IN_PLACE
    ]


# int (*asp_output_cb)(asp_stream stream, const unsigned char *data, size_t len, void *userdata)
# (asp_stream is an enum, int-sized on every supported ABI: passed as c_int)
asp_output_cb = CFUNCTYPE(c_int, c_int, POINTER(c_ubyte), c_size_t, c_void_p)


class asp_exec_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("call", asp_call_options),  # cancel token and the call's deadline
        ("cwd", c_char_p),
        ("env", POINTER(c_char_p)),
        ("stdin_data", POINTER(c_ubyte)),
        ("stdin_len", c_size_t),
        ("kill_after_ms", c_uint),  # the command's kill timer (timed_out in the result)
        ("kill_grace_ms", c_uint),
        ("on_output", asp_output_cb),
        ("userdata", c_void_p),
        ("max_output", c_size_t),
        ("stdin_fd", c_int),
        ("flags", c_uint),
    ]


class asp_proc_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("call", asp_call_options),  # cancel token; timeout_ms bounds the start only
        ("cwd", c_char_p),
        ("env", POINTER(c_char_p)),
        ("kill_after_ms", c_uint),
        ("kill_grace_ms", c_uint),
        ("max_output", c_size_t),
        ("flags", c_uint),  # ASP_PROC_PTY
        ("term", c_char_p),
        ("cols", c_uint),
        ("rows", c_uint),
    ]


class asp_stat_info(Structure):
    _fields_ = [
        ("size", c_uint64),
        ("mtime", c_int64),
        ("mode", c_uint32),
        ("type", c_uint32),  # an asp_file_type value
        ("spare", c_uint64 * 4),
    ]


class asp_bg_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("call", asp_call_options),
        ("name", c_char_p),
        ("cwd", c_char_p),
        ("env", POINTER(c_char_p)),
        ("max_output", c_uint64),
    ]


class asp_bg_status(Structure):
    _fields_ = [
        ("state", c_int),
        ("exit_code", c_int),
        ("signal", c_int),
        ("output_open", c_int),
        ("output_start", c_uint64),
        ("output_size", c_uint64),
        ("offset", c_uint64),
        ("spare", c_uint64 * 4),
    ]


class asp_bg_entry(Structure):
    _fields_ = [
        ("id", c_char_p),
        ("name", c_char_p),
        ("command", c_char_p),
        ("start_ms", c_int64),
        ("pid", c_int64),
        ("status", asp_bg_status),
    ]


# name: (restype, argtypes). Every exported function of libasp.so.0.
PROTOTYPES = {
    "asp_version": (c_char_p, []),
    "asp_strerror": (c_char_p, [c_int]),
    "asp_error_name": (c_char_p, [c_int]),
    "asp_free": (None, [c_void_p]),
    "asp_config_find": (c_int, [POINTER(c_void_p), c_char_p, error_p]),
    "asp_config_read": (c_int, [POINTER(c_void_p), POINTER(c_void_p), c_char_p, error_p]),
    "asp_config_check": (c_int, [c_char_p, error_p]),
    "asp_open_options_init": (c_int, [POINTER(asp_open_options), c_uint]),
    "asp_open": (c_int, [POINTER(sandbox_p), POINTER(asp_open_options), error_p]),
    "asp_close": (None, [sandbox_p]),
    "asp_sandbox_config_path": (c_char_p, [sandbox_p]),
    "asp_sandbox_workspace": (c_char_p, [sandbox_p]),
    "asp_sandbox_info_init": (c_int, [POINTER(asp_sandbox_info), c_uint]),
    "asp_sandbox_info_get": (c_int, [POINTER(asp_sandbox_info), sandbox_p, error_p]),
    "asp_cancel_new": (c_int, [POINTER(cancel_p), error_p]),
    "asp_cancel_trigger": (None, [cancel_p]),
    "asp_cancel_is_triggered": (c_int, [cancel_p]),
    "asp_cancel_reset": (None, [cancel_p]),
    "asp_cancel_free": (None, [cancel_p]),
    "asp_call_options_init": (c_int, [POINTER(asp_call_options), c_uint]),
    "asp_read": (c_int, [POINTER(c_void_p), POINTER(c_size_t), sandbox_p, c_char_p, c_uint64,
                         c_uint64, POINTER(asp_call_options), error_p]),
    "asp_write_options_init": (c_int, [POINTER(asp_write_options), c_uint]),
    "asp_write": (c_int, [sandbox_p, c_char_p, c_void_p, c_size_t, POINTER(asp_write_options),
                          error_p]),
    "asp_exec_options_init": (c_int, [POINTER(asp_exec_options), c_uint]),
    "asp_exec": (c_int, [POINTER(exec_result_p), sandbox_p, c_char_p, POINTER(asp_exec_options),
                         error_p]),
    "asp_exec_result_exit_code": (c_int, [exec_result_p]),
    "asp_exec_result_signal": (c_int, [exec_result_p]),
    "asp_exec_result_timed_out": (c_int, [exec_result_p]),
    "asp_exec_result_cancelled": (c_int, [exec_result_p]),
    "asp_exec_result_output": (c_void_p, [exec_result_p, c_int, POINTER(c_size_t)]),
    "asp_exec_result_output_total": (c_uint64, [exec_result_p, c_int]),
    "asp_exec_result_truncated": (c_int, [exec_result_p, c_int]),
    "asp_exec_result_duration_ms": (c_uint64, [exec_result_p]),
    "asp_exec_result_free": (None, [exec_result_p]),
    "asp_sandbox_warm": (c_int, [sandbox_p, c_uint, POINTER(asp_call_options), error_p]),
    "asp_stat": (c_int, [POINTER(asp_stat_info), sandbox_p, c_char_p, POINTER(asp_call_options),
                         error_p]),
    "asp_mkdir": (c_int, [sandbox_p, c_char_p, c_uint, c_uint, POINTER(asp_call_options),
                          error_p]),
    "asp_remove": (c_int, [sandbox_p, c_char_p, c_uint, POINTER(asp_call_options), error_p]),
    "asp_rename": (c_int, [sandbox_p, c_char_p, c_char_p, POINTER(asp_call_options), error_p]),
    "asp_list_dir": (c_int, [POINTER(list_p), sandbox_p, c_char_p, POINTER(asp_call_options),
                             error_p]),
    "asp_list_count": (c_size_t, [list_p]),
    "asp_list_name": (c_char_p, [list_p, c_size_t]),
    "asp_list_stat": (c_int, [POINTER(asp_stat_info), list_p, c_size_t]),
    "asp_list_free": (None, [list_p]),
    "asp_bg_options_init": (c_int, [POINTER(asp_bg_options), c_uint]),
    "asp_bg_start": (c_int, [POINTER(c_void_p), sandbox_p, c_char_p, POINTER(asp_bg_options),
                             error_p]),
    "asp_bg_read": (c_int, [POINTER(c_void_p), POINTER(c_size_t), POINTER(asp_bg_status), sandbox_p,
                            c_char_p, c_uint64, c_uint64, POINTER(asp_call_options), error_p]),
    "asp_bg_signal": (c_int, [sandbox_p, c_char_p, c_int, POINTER(asp_call_options), error_p]),
    "asp_bg_wait": (c_int, [POINTER(asp_bg_status), sandbox_p, c_char_p, c_uint,
                            POINTER(asp_call_options), error_p]),
    "asp_bg_remove": (c_int, [sandbox_p, c_char_p, POINTER(asp_call_options), error_p]),
    "asp_bg_list_all": (c_int, [POINTER(bg_list_p), sandbox_p, POINTER(asp_call_options), error_p]),
    "asp_bg_list_count": (c_size_t, [bg_list_p]),
    "asp_bg_list_get": (POINTER(asp_bg_entry), [bg_list_p, c_size_t]),
    "asp_bg_list_free": (None, [bg_list_p]),
    "asp_proc_options_init": (c_int, [POINTER(asp_proc_options), c_uint]),
    "asp_proc_start": (c_int, [POINTER(proc_p), sandbox_p, c_char_p, POINTER(asp_proc_options),
                               error_p]),
    "asp_proc_write": (c_int, [proc_p, c_void_p, c_size_t, error_p]),
    "asp_proc_close_stdin": (c_int, [proc_p, error_p]),
    "asp_proc_read": (c_int, [POINTER(c_size_t), POINTER(c_int), proc_p, c_void_p, c_size_t, c_int,
                              error_p]),
    "asp_proc_signal": (c_int, [proc_p, c_char_p, error_p]),
    "asp_proc_resize": (c_int, [proc_p, c_uint, c_uint, error_p]),
    "asp_proc_wait": (c_int, [POINTER(exec_result_p), proc_p, c_int, error_p]),
    "asp_proc_wait_any": (c_int, [POINTER(c_size_t), POINTER(proc_p), c_size_t, c_int, cancel_p,
                                  error_p]),
    "asp_proc_free": (None, [proc_p]),
}


# ------------------------------------------------------------------ loading

def _package_dir():
    return os.path.dirname(os.path.abspath(__file__))


def candidates():
    """The places searched, in order, as (description, path-or-name)."""
    found = []
    env = os.environ.get("ASP_LIBRARY")
    if env:
        # An explicit choice is final: never fall back to another copy.
        return [("$ASP_LIBRARY", env)]
    here = _package_dir()
    found.append(("next to the package", os.path.join(here, SONAME)))
    # bindings/python/asp -> the repository root's build/ (a checkout, not installed).
    found.append(("the build tree", os.path.normpath(
        os.path.join(here, os.pardir, os.pardir, os.pardir, "build", SONAME))))
    system = ctypes.util.find_library("asp")
    if system:
        found.append(("the system (find_library)", system))
    found.append(("the system (dynamic loader)", SONAME))
    return found


def _load():
    tried = []
    for where, path in candidates():
        is_file = os.sep in path
        if is_file and not os.path.exists(path):
            tried.append(f"{where}: {path}: not found")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{where}: {path}: {e}")
            if where == "$ASP_LIBRARY":
                break
            continue
        missing = [name for name in PROTOTYPES if not hasattr(lib, name)]
        if missing:
            tried.append(f"{where}: {path}: not libasp {ABI_MAJOR}.x "
                         f"(missing {', '.join(missing)})")
            if where == "$ASP_LIBRARY":
                break
            continue
        return lib, path
    raise ImportError("cannot load libasp (" + SONAME + "); tried:\n  " + "\n  ".join(tried) +
                      "\nBuild it with `make lib`, install it, or set ASP_LIBRARY to its path.")


def _declare(lib):
    for name, (restype, argtypes) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


lib, path = _load()
_declare(lib)
