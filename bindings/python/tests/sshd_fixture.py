"""A real OpenSSH sshd on 127.0.0.1 for the Python tests (the twin of tests/fixture/fixture.c).

    fx = SshdFixture()
    fx.start()           # fresh dir, ed25519 host + client keys, free port, sshd -D -e
    ...                  # fx.config is a .asp.json pinning the host key, identity = fx.client_key
    fx.stop()            # stops sshd and everything under it, removes fx.dir

or ``with SshdFixture() as fx: ...``.

The private directory (mkdtemp under /tmp, 0755 so sshd's unprivileged side
can read authorized_keys) holds the keys, sshd_config, the log, `.asp.json`
and `workspace/`, owned by the login user.

Login user: "asp-test" when running as root (created by tools/setup-deps.sh),
else the current user. Running as root is what makes permission errors real:
the client key belongs to root, the workspace to asp-test.

Processes: sshd forks a monitor per connection (which calls setsid), the
monitor an unprivileged child, and that child the user's shell, so neither
the listener's process group nor its session reaches them; stop() walks
/proc parent links from the listener, freezes the tree, then terminates it.
Every fixture is also stopped at interpreter exit (only by the process that
started it), and sshd gets SIGTERM if the thread that started it dies
(PR_SET_PDEATHSIG).
"""

import atexit
import ctypes
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
TEST_USER = "asp-test"
START_TIMEOUT = 5.0
STOP_TIMEOUT = 5.0
PORT_ATTEMPTS = 5

OMIT = object()  # write_config(..., host_key=OMIT) leaves the key out

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
_registry = {}  # dir -> fixture, for atexit
_registry_lock = threading.Lock()
_penalties = None


class FixtureError(RuntimeError):
    pass


# ------------------------------------------------------------------ /proc

def _proc(pid):
    """(pid, ppid, start, state, comm) or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    lp, rp = raw.find("("), raw.rfind(")")
    if lp < 0 or rp < lp:
        return None
    fields = raw[rp + 2:].split()
    try:
        return (pid, int(fields[1]), int(fields[19]), fields[0], raw[lp + 1:rp])
    except (IndexError, ValueError):
        return None


def _table():
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            p = _proc(int(name))
            if p:
                out.append(p)
    return out


def _alive(p):
    now = _proc(p[0])
    return bool(now) and now[2] == p[2] and now[3] not in ("Z", "X")


def _signal(p, sig):
    if _alive(p):
        try:
            os.kill(p[0], sig)
        except ProcessLookupError:
            pass


def _tree(root_pid, freeze):
    """The root and all its descendants; with freeze, each is SIGSTOPped as found."""
    root = _proc(root_pid)
    if not root:
        return []
    found = {root[0]: root}
    if freeze:
        _signal(root, signal.SIGSTOP)
    while True:
        added = False
        for p in _table():
            if p[1] in found and p[0] not in found:
                found[p[0]] = p
                if freeze:
                    _signal(p, signal.SIGSTOP)
                added = True
        if not added:
            return list(found.values())


def _wait_gone(procs, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in procs):
            return True
        time.sleep(0.01)
    return False


def _terminate(procs):
    for p in procs:
        _signal(p, signal.SIGTERM)
    for p in procs:
        _signal(p, signal.SIGCONT)
    if not _wait_gone(procs, STOP_TIMEOUT):
        for p in procs:
            _signal(p, signal.SIGKILL)
        _wait_gone(procs, STOP_TIMEOUT)


# ------------------------------------------------------------------ helpers

def _run(argv, quiet=False):
    return subprocess.run(argv, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL if quiet else None,
                          stderr=subprocess.DEVNULL if quiet else None).returncode


def keygen(path):
    """A fresh passphrase-less ed25519 key at path (and path.pub)."""
    if _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", path]) != 0:
        raise FixtureError(f"ssh-keygen -f {path} failed")


def pub_line(key):
    """'ssh-ed25519 AAAA...' of key.pub, without the comment."""
    with open(key + ".pub") as f:
        parts = f.read().split()
    return f"{parts[0]} {parts[1]}"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def _cleanup_at_exit():
    with _registry_lock:
        fixtures = list(_registry.values())
    for fx in fixtures:
        if fx._owner == os.getpid():
            fx.stop()


atexit.register(_cleanup_at_exit)


# ------------------------------------------------------------------ the fixture

class SshdFixture:
    """One sshd. Attributes mirror fx_sshd of tests/fixture/fixture.h."""

    def __init__(self, extra_config=None):
        self.extra_config = extra_config
        self.dir = None
        self.user = None
        self.uid = self.gid = None
        self.port = None
        self.proc = None
        self.host_key = self.host_key_line = None
        self.client_key = None
        self.workspace = None
        self.config = None
        self.log = None
        self._orphans = []
        self._owner = os.getpid()

    @property
    def pid(self):
        return self.proc.pid if self.proc else 0

    # -- lifecycle ---------------------------------------------------

    def start(self):
        try:
            self._prepare()
            self._launch_on_free_port()
            self.write_config(self.config)
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        """Stop sshd and everything under it, then remove the directory. Idempotent."""
        if not self.dir:
            return
        self._terminate_server()
        shutil.rmtree(self.dir, ignore_errors=True)
        with _registry_lock:
            _registry.pop(self.dir, None)
        self.dir = None

    def restart(self):
        """Stop everything and start again on the same port with the same keys."""
        self._terminate_server()
        self._launch_or_raise()

    def kill9(self):
        """A crash: SIGKILL the listener and every sshd under it; user commands are left running."""
        if not self.proc or self.proc.poll() is not None:
            raise FixtureError("kill9: sshd is not running")
        procs = _tree(self.proc.pid, freeze=True)
        for p in procs:
            if p[4] == "sshd":
                _signal(p, signal.SIGKILL)
        self._orphans += [p for p in procs if p[4] != "sshd"]
        for p in procs:
            if p[4] != "sshd":
                _signal(p, signal.SIGCONT)
        _wait_gone([p for p in procs if p[4] == "sshd"], STOP_TIMEOUT)
        self.proc.wait()
        self.proc = None

    def start_again(self):
        """Start after kill9 (same port, keys, config)."""
        if self.proc and self.proc.poll() is None:
            raise FixtureError("start_again: sshd is still running")
        self._launch_or_raise()

    def rotate_host_key(self):
        """A new host key and a restart; self.config still pins the old key."""
        i = 1
        while os.path.exists(f"{self.dir}/ssh_host_ed25519_key.{i}"):
            i += 1
        path = f"{self.dir}/ssh_host_ed25519_key.{i}"
        keygen(path)
        self.host_key = path
        self.host_key_line = pub_line(path)
        self._write_sshd_config()
        self.restart()

    # -- setup -------------------------------------------------------

    def _prepare(self):
        self.dir = tempfile.mkdtemp(prefix="asp-pyfx.", dir="/tmp")
        with _registry_lock:
            _registry[self.dir] = self
        os.chmod(self.dir, 0o755)
        pw = pwd.getpwnam(TEST_USER) if os.geteuid() == 0 else pwd.getpwuid(os.geteuid())
        self.user, self.uid, self.gid = pw.pw_name, pw.pw_uid, pw.pw_gid
        self.workspace = f"{self.dir}/workspace"
        os.mkdir(self.workspace, 0o755)
        os.chmod(self.workspace, 0o755)
        os.chown(self.workspace, self.uid, self.gid)
        self.host_key = f"{self.dir}/ssh_host_ed25519_key"
        self.client_key = f"{self.dir}/client_ed25519"
        keygen(self.host_key)
        keygen(self.client_key)
        self.host_key_line = pub_line(self.host_key)
        with open(self.client_key + ".pub") as f:
            _write(f"{self.dir}/authorized_keys", f.read())  # read by sshd as the login user
        self.log = f"{self.dir}/sshd.log"
        self.config = f"{self.dir}/.asp.json"

    def _write_sshd_config(self):
        extra = self.extra_config or ""
        head, tail = extra, ""
        lines = extra.splitlines(keepends=True)
        for i, line in enumerate(lines):
            if line.strip().lower().startswith("match") and line.strip()[5:6].isspace():
                head, tail = "".join(lines[:i]), "".join(lines[i:])
                break
        defaults = (
            "ListenAddress 127.0.0.1\n"
            f"Port {self.port}\n"
            f"HostKey {self.host_key}\n"
            "PidFile none\n"
            f"AuthorizedKeysFile {self.dir}/authorized_keys\n"
            "StrictModes no\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\n"
            "UsePAM no\n"
            "LogLevel VERBOSE\n"
            "MaxStartups 100:30:200\n"
            "MaxSessions 10\n"
            f"AllowUsers {self.user}\n"
            "PermitRootLogin no\n"
            "PrintMotd no\n"
            "X11Forwarding no\n")
        if "subsystem" not in extra.lower():
            defaults += f"Subsystem sftp {SFTP_SERVER}\n"
        # sshd keeps the first value it reads for a keyword: extra lines go first.
        _write(f"{self.dir}/sshd_config",
               "# written by bindings/python/tests/sshd_fixture.py\n" + head + "\n" + defaults +
               tail + "\n")

    # -- launching ---------------------------------------------------

    def _has_penalties(self):
        """PerSourcePenalties (OpenSSH >= 9.8) would refuse tests that crash on purpose."""
        global _penalties
        if _penalties is None:
            _penalties = _run([SSHD, "-t", "-f", f"{self.dir}/sshd_config", "-o",
                               "PerSourcePenalties=no"], quiet=True) == 0
        return _penalties

    def _launch(self):
        """Start sshd; True when listening, False when the port was taken, else raises."""
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        argv = [SSHD, "-D", "-e", "-f", f"{self.dir}/sshd_config", "-E", self.log]
        if self._has_penalties():
            argv += ["-o", "PerSourcePenalties=no"]
        start_offset = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        log = open(self.log, "ab")

        def child_setup():
            os.setpgid(0, 0)
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         preexec_fn=child_setup)
        finally:
            log.close()
        needle = f"Server listening on 127.0.0.1 port {self.port}."
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            with open(self.log, "rb") as f:
                f.seek(start_offset)
                text = f.read().decode("utf-8", "replace")
            if needle in text:
                return True
            if self.proc.poll() is not None:
                self.proc = None
                if "Address already in use" in text:
                    return False
                raise FixtureError(f"sshd exited at start:\n{self.log_tail()}")
            time.sleep(0.01)
        self._terminate_server()
        raise FixtureError(f"sshd did not listen within {START_TIMEOUT} s:\n{self.log_tail()}")

    def _launch_on_free_port(self):
        for _ in range(PORT_ATTEMPTS):
            self.port = free_port()
            self._write_sshd_config()
            if self._launch():
                return
        raise FixtureError(f"sshd could not bind a free port:\n{self.log_tail()}")

    def _launch_or_raise(self):
        if not self._launch():
            raise FixtureError(f"port {self.port} is taken:\n{self.log_tail()}")

    def _terminate_server(self):
        procs = []
        if self.proc and self.proc.poll() is None:
            procs = _tree(self.proc.pid, freeze=True)
        procs += self._orphans
        self._orphans = []
        _terminate(procs)
        if self.proc:
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    # -- .asp.json and friends ---------------------------------------

    def config_dict(self, host=None, port=0, user=None, identity=None, host_key=None,
                    workspace=None, extra=None, top_extra=None):
        """The .asp.json content for this server. None takes the fixture's value;
        OMIT leaves a key out; port 0 is fx.port."""
        conn = {}
        for key, value, default in (("host", host, "127.0.0.1"),
                                    ("port", port, self.port),
                                    ("user", user, self.user),
                                    ("identity", identity, self.client_key),
                                    ("host_key", host_key, self.host_key_line)):
            if value is OMIT:
                continue
            conn[key] = default if value is None or (key == "port" and value == 0) else value
        conn.update(extra or {})
        cfg = {"version": "0", "transport": "ssh", "connection": conn}
        if workspace is not OMIT:
            cfg["workspace"] = self.workspace if workspace is None else workspace
        cfg.update(top_extra or {})
        return cfg

    def write_config(self, path, **overrides):
        """Write a .asp.json for this server at path (0644); see config_dict."""
        _write(path, json.dumps(self.config_dict(**overrides), indent=2) + "\n")
        return path

    def host_fingerprint(self):
        out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", self.host_key + ".pub"],
                             capture_output=True, text=True, check=True).stdout
        return out.split()[1]

    def log_text(self):
        try:
            with open(self.log, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except (OSError, TypeError):
            return ""

    def log_tail(self, n=2000):
        return self.log_text()[-n:]

    def log_contains(self, needle):
        return needle in self.log_text()

    def chown_to_user(self, path):
        """Give path (recursively) to the login user, as if the sandbox had made it."""
        for root, dirs, files in os.walk(path):
            os.chown(root, self.uid, self.gid)
            for name in files:
                os.chown(os.path.join(root, name), self.uid, self.gid, follow_symlinks=False)
        if not os.path.isdir(path):
            os.chown(path, self.uid, self.gid, follow_symlinks=False)
