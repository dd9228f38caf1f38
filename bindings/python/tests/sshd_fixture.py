"""A real OpenSSH sshd on 127.0.0.1 for the Python tests: a driver of build/tests/sshd-fixture.

    fx = SshdFixture()
    fx.start()           # fresh dir, ed25519 host + client keys, free port, sshd -D -e
    ...                  # fx.config is a .asp.json pinning the host key, identity = fx.client_key
    fx.stop()            # stops sshd and everything under it, removes fx.dir

or ``with SshdFixture() as fx: ...``.

The server is tests/fixture/fixture.c's, run by its program
(tests/fixture/fixture_main.c, built by `make tests`; $ASP_SSHD_FIXTURE names
another build): the program prints the server's facts as a JSON line, then
obeys one command a line on stdin (stop, kill9, start, restart,
rotate-host-key) and answers each with the facts again. Closing its stdin
stops the server and everything under it and removes the directory; so does
this process's death. What the attributes mean is fx_sshd's doc in
tests/fixture/fixture.h.

Login user: "asp-test" when running as root (created by tools/setup-deps.sh),
else the current user.
"""

import atexit
import json
import os
import socket
import subprocess
import threading

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                     os.pardir, os.pardir, os.pardir))
PROGRAM_ENV = "ASP_SSHD_FIXTURE"
STOP_TIMEOUT = 30.0

OMIT = object()  # write_config(..., host_key=OMIT) leaves the key out

_registry = set()  # running fixtures, for atexit
_registry_lock = threading.Lock()


class FixtureError(RuntimeError):
    pass


def program():
    """The sshd-fixture program: $ASP_SSHD_FIXTURE, else build/tests/sshd-fixture."""
    path = os.environ.get(PROGRAM_ENV) or os.path.join(ROOT, "build", "tests", "sshd-fixture")
    if not os.access(path, os.X_OK):
        raise FixtureError(f"sshd fixture program {path} is missing: build it with "
                           f"`make -C {ROOT} tests` (or set ${PROGRAM_ENV})")
    return path


# ------------------------------------------------------------------ test helpers

def keygen(path):
    """A fresh passphrase-less ed25519 key at path (and path.pub)."""
    if subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", path],
                      stdin=subprocess.DEVNULL).returncode != 0:
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


def _cleanup_at_exit():
    with _registry_lock:
        fixtures = list(_registry)
    for fx in fixtures:
        if fx._owner == os.getpid():
            fx.stop()


atexit.register(_cleanup_at_exit)


# ------------------------------------------------------------------ the fixture

class SshdFixture:
    """One sshd. Attributes mirror fx_sshd of tests/fixture/fixture.h.

    extra_config: sshd_config lines put before the defaults (they win); from the
    first Match line on, at the end of the file. subsystem: "NAME COMMAND",
    replacing the default sftp subsystem."""

    FACTS = ("dir", "user", "uid", "gid", "port", "pid", "host_key", "host_key_line",
             "client_key", "workspace", "config", "log", "sshd_config")

    def __init__(self, extra_config=None, subsystem=None):
        self.extra_config = extra_config
        self.subsystem = subsystem
        self._prog = None
        self._fingerprint = None
        self._lock = threading.Lock()
        self._owner = os.getpid()
        for name in self.FACTS:
            setattr(self, name, None)

    # -- the program -------------------------------------------------

    def _take(self, facts):
        for name in self.FACTS:
            setattr(self, name, facts[name])
        self._fingerprint = facts["host_fingerprint"]

    def _read_reply(self, what):
        line = self._prog.stdout.readline()
        if not line:
            code = self._prog.wait()
            raise FixtureError(f"sshd fixture {what}: the program exited ({code}) without an "
                               "answer; its stderr is above")
        try:
            reply = json.loads(line)
        except ValueError as e:
            raise FixtureError(f"sshd fixture {what}: not JSON: {line!r}") from e
        self._take(reply)
        if not reply["ok"]:
            raise FixtureError(f"sshd fixture {what}: {reply['error']}")
        return reply

    def _command(self, cmd):
        with self._lock:
            if not self._prog or self._prog.poll() is not None:
                raise FixtureError(f"sshd fixture {cmd}: the fixture is not started")
            self._prog.stdin.write(cmd + "\n")
            self._prog.stdin.flush()
            return self._read_reply(cmd)

    # -- lifecycle ---------------------------------------------------

    def start(self):
        argv = [program()]
        if self.extra_config:
            argv += ["--sshd-config", self.extra_config]
        if self.subsystem:
            argv += ["--subsystem", self.subsystem]
        # stderr is ours: what goes wrong shows in the test's output.
        self._prog = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, bufsize=1)
        with _registry_lock:
            _registry.add(self)
        try:
            self._read_reply("start")
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
        prog, self._prog = self._prog, None
        with _registry_lock:
            _registry.discard(self)
        if not prog:
            return
        try:
            prog.stdin.close()  # the program cleans up and exits
        except OSError:
            pass
        try:
            prog.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            prog.kill()
            prog.wait()
            raise FixtureError(f"sshd fixture did not stop within {STOP_TIMEOUT} s; killed it")
        finally:
            prog.stdout.close()
        self.pid = 0

    def stop_server(self):
        """Stop sshd and everything under it; the directory stays (start_again brings it back)."""
        self._command("stop")

    def restart(self):
        """Stop everything and start again on the same port with the same keys."""
        self._command("restart")

    def kill9(self):
        """A crash: SIGKILL the listener and every sshd under it; user commands are left running."""
        self._command("kill9")

    def start_again(self):
        """Start after kill9 or stop_server (same port, keys, config)."""
        self._command("start")

    def rotate_host_key(self):
        """A new host key and a restart; self.config still pins the old key."""
        self._command("rotate-host-key")

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
        with open(path, "w") as f:
            f.write(json.dumps(self.config_dict(**overrides), indent=2) + "\n")
        os.chmod(path, 0o644)
        return path

    def host_fingerprint(self):
        """The current host key's "SHA256:..." (as ssh-keygen -l shows it)."""
        return self._fingerprint

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
