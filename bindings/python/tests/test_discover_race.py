"""A discovered .asp.json is judged and read through one descriptor.

A second user (asp-test, made by tools/setup-deps.sh) swaps the victim's
project directory with their own inside a shared directory whose group may
rename entries (mode 2775, listed in ASP_SAFE_DIRS), with renameat2
RENAME_EXCHANGE in a loop. The attacker's connection.x-asp-proxy-command
creates a marker file; through asp.open(start_dir=...) and through
asp.read_config + asp.open(config_text=...) it must never run. Each open
ends either on the victim's file (its connect to port 1 is refused) or in a
refusal; at least one refusal shows the swap reached discovery.
(docs/SECURITY.md, "Configuration trust"; the C side is
tests/integration/test_discover_race.c.)
"""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import asp

OPENS = 1000
TEST_USER = "asp-test"

RACER = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
AT_FDCWD, RENAME_EXCHANGE = -100, 2
print("swapping", flush=True)
while libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
    pass
sys.exit("renameat2: errno %d" % ctypes.get_errno())
"""


def _user():
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        return None


@unittest.skipUnless(os.geteuid() == 0 and _user() is not None,
                     "SKIP: the discovery race needs root and the user %s "
                     "(tools/setup-deps.sh)" % TEST_USER)
class TestDiscoveryRace(unittest.TestCase):

    def setUp(self):
        pw = _user()
        self.base = tempfile.mkdtemp(prefix="asp-pyrace.")
        self.addCleanup(shutil.rmtree, self.base, True)
        os.chmod(self.base, 0o755)
        self.shared = os.path.join(self.base, "shared")
        self.victim = os.path.join(self.shared, "victim")
        self.attacker = os.path.join(self.shared, "attacker")
        self.marker = os.path.join(self.base, "foreign-command-ran")
        os.mkdir(self.shared)
        os.chown(self.shared, 0, pw.pw_gid)
        os.chmod(self.shared, 0o2775)
        os.mkdir(self.victim, 0o755)
        os.mkdir(self.attacker, 0o755)
        os.chown(self.attacker, pw.pw_uid, pw.pw_gid)
        conn = '"host":"127.0.0.1","port":1,"user":"%s"'
        with open(os.path.join(self.victim, ".asp.json"), "w") as f:
            f.write('{"version":"0","transport":"ssh","connection":{%s},"workspace":"/w"}'
                    % (conn % "victim"))
        path = os.path.join(self.attacker, ".asp.json")
        with open(path, "w") as f:
            f.write('{"version":"0","transport":"ssh","connection":{%s,'
                    '"x-asp-proxy-command":"touch %s; exit 1"},"workspace":"/w"}'
                    % (conn % "attacker", self.marker))
        os.chown(path, pw.pw_uid, pw.pw_gid)
        env = mock.patch.dict(os.environ, {"ASP_SAFE_DIRS": self.shared,
                                           "ASP_KNOWN_HOSTS": os.path.join(self.base, "kh")})
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("ASP_CONFIG", None)
        self.racer = subprocess.Popen([sys.executable, "-c", RACER, self.victim, self.attacker],
                                      user=pw.pw_uid, group=pw.pw_gid, extra_groups=[],
                                      stdout=subprocess.PIPE)
        self.addCleanup(self._stop)
        self.assertEqual(self.racer.stdout.readline(), b"swapping\n")

    def _stop(self):
        self.racer.kill()
        self.racer.wait()
        self.racer.stdout.close()

    def _race(self, open_once, what):
        victim = refused = foreign = 0
        for _ in range(OPENS):
            try:
                open_once().close()
                self.fail("%s: the sandbox opened" % what)
            except asp.ConnectError as e:
                self.assertIn("127.0.0.1", str(e))
                victim += 1
            except asp.ConfigError:
                refused += 1
            if os.path.exists(self.marker):
                os.unlink(self.marker)
                foreign += 1
        self.assertIsNone(self.racer.poll(), "the racer stopped")
        sys.stderr.write("discover race (python, %s): %d opens: %d victim, %d refused; the "
                         "attacker's command ran %d times\n" % (what, OPENS, victim, refused,
                                                               foreign))
        self.assertEqual(foreign, 0, "%s: the attacker's x-asp-proxy-command ran %d of %d "
                         "times" % (what, foreign, OPENS))
        self.assertGreater(refused, 0, "no open saw the attacker's directory: no race")
        self.assertGreater(victim, 0, "no open used the victim's file")

    def test_open_start_dir(self):
        self._race(lambda: asp.open(start_dir=self.victim, connect_timeout=5), "open")

    def test_read_config_then_open_text(self):
        def once():
            path, text = asp.read_config(self.victim)
            return asp.open(path, config_text=text, connect_timeout=5)
        self._race(once, "read_config")


class TestConfigText(unittest.TestCase):
    """open(config_text=...) reads no file: the name only labels the text."""

    def test_text_names_nothing_to_open(self):
        with tempfile.TemporaryDirectory() as tmp:
            named = os.path.join(tmp, "nowhere", ".asp.json")
            with self.assertRaises(asp.ConfigError) as cm:
                asp.open(named, config_text='{"version":"0"}', lazy=True)
            self.assertIn(".asp.json", str(cm.exception))
            self.assertIn("transport", str(cm.exception))
            with self.assertRaises(asp.InvalidArgument):
                asp.open(named, config_text="{\0}", lazy=True)

    def test_read_config_returns_what_is_there(self):
        with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ):
            os.environ.pop("ASP_CONFIG", None)
            text = ('{"version":"0","transport":"ssh","connection":{"host":"127.0.0.1",'
                    '"user":"u"},"workspace":"/w"}')
            with open(os.path.join(tmp, ".asp.json"), "w") as f:
                f.write(text)
            deep = os.path.join(tmp, "a", "b")
            os.makedirs(deep)
            path, got = asp.read_config(deep)
            self.assertEqual(path, os.path.join(os.path.realpath(tmp), ".asp.json"))
            self.assertEqual(got, text)
            sb = asp.open(path, config_text=got, lazy=True,
                          known_hosts=os.path.join(tmp, "kh"))
            self.assertEqual(sb.config_path, path)
            self.assertEqual(sb.workspace, "/w")
            sb.close()


if __name__ == "__main__":
    unittest.main()
