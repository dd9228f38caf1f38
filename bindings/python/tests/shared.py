"""What the binding's test modules share: the import path, one sshd fixture per
module, and a sandbox per test class with a directory per test.

A test module starts with

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from shared import FixtureForModule, SandboxTest, asp

    FX = FixtureForModule()
    setUpModule, tearDownModule = FX.start, FX.stop

and uses FX as the running SshdFixture (FX.config, FX.workspace,
FX.write_config(path, ...), FX.restart(), ...).
"""

import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)                    # bindings/python
REPO = os.path.dirname(os.path.dirname(PKG_ROOT))   # the checkout
for _path in (HERE, PKG_ROOT):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import asp  # noqa: E402
from sshd_fixture import SshdFixture  # noqa: E402

__all__ = ["HERE", "PKG_ROOT", "REPO", "asp", "SshdFixture", "FixtureForModule", "SandboxTest", "proc_alive",
           "wait_dead"]


class FixtureForModule:
    """A module's sshd fixture: started by start() (its setUpModule), stopped by
    stop() (its tearDownModule); in between it stands for the SshdFixture."""

    def __init__(self, **fixture_args):
        self._args = fixture_args
        self._fx = None

    def start(self):
        self._fx = SshdFixture(**self._args).start()

    def stop(self):
        fx, self._fx = self._fx, None
        if fx:
            fx.stop()

    def __getattr__(self, name):
        fx = self.__dict__.get("_fx")
        if fx is None:
            raise RuntimeError(f"FX.{name}: the module's sshd fixture is not running (setUpModule)")
        return getattr(fx, name)


class SandboxTest(unittest.TestCase):
    """One sandbox per class on fx (the module's FX); each test gets its own directory, self.d."""

    fx = None
    open_kwargs = {}
    dir_prefix = "t-"

    @classmethod
    def setUpClass(cls):
        cls.sb = asp.open(cls.fx.config, **cls.open_kwargs)

    @classmethod
    def tearDownClass(cls):
        cls.sb.close()

    def setUp(self):
        self.d = self.dir_prefix + self.id().rsplit(".", 1)[1]
        self.sb.mkdir(self.d, parents=True)

    def p(self, *names):
        return "/".join((self.d,) + names)

    def local(self, *names):
        """The same path seen locally (the fixture's workspace is a local directory)."""
        return os.path.join(self.fx.workspace, self.d, *names)


def proc_alive(pid):
    """A local process (the sandbox is local here) exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_dead(pid, timeout=10.0):
    """True once pid is gone (a hang detector, not a timing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc_alive(pid):
            return True
        time.sleep(0.05)
    return not proc_alive(pid)
