"""The sshd fixture program (build/tests/sshd-fixture, tests/fixture/fixture_main.c) itself,
driven through its own stdin/stdout protocol, and the driver's failure when it is missing.

Real processes throughout: the OpenSSH client logs in, ssh-keyscan reads the host key, /proc
tells which processes live.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sshd_fixture  # noqa: E402

SSH = ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
       "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
       "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"]


def proc_stat(pid):
    """(state, start time) of pid, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], fields[19]


def alive(pid, start=None):
    st = proc_stat(pid)
    return bool(st) and st[0] not in ("Z", "X") and (start is None or st[1] == start)


def descendants(pid):
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, grew = {pid}, True
    while grew:
        grew = False
        for p, pp in parent.items():
            if pp in found and p not in found:
                found.add(p)
                grew = True
    found.discard(pid)
    return found


def naming(text):
    """Live processes whose command line contains text."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if text.encode() in f.read() and alive(int(name)):
                        out.append(int(name))
            except OSError:
                pass
    return out


def wait_for(cond, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def refused(port):
    with socket.socket() as s:
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
    return False


def banner(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        return s.recv(64)


def keyscan(port):
    out = subprocess.run(["ssh-keyscan", "-T", "10", "-t", "ed25519", "-p", str(port),
                          "127.0.0.1"], capture_output=True, text=True).stdout
    return " ".join(out.split()[1:3])


class Program:
    """The program on pipes, speaking its protocol by hand."""

    def __init__(self, *args):
        self.p = subprocess.Popen([sshd_fixture.program(), *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)
        self.facts = self.reply()

    def reply(self):
        line = self.p.stdout.readline()
        if not line:
            raise AssertionError(f"sshd-fixture exited ({self.p.wait()}) without an answer")
        return json.loads(line)

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        self.facts = self.reply()
        return self.facts

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
        rc = self.p.wait(timeout=60)
        self.p.stdout.close()
        return rc


class TestSshdFixtureProgram(unittest.TestCase):

    def setUp(self):
        self.prog = Program()
        self.addCleanup(self.prog.close)

    def ssh(self, remote, **kw):
        f = self.prog.facts
        return subprocess.Popen(SSH + ["-i", f["client_key"], "-p", str(f["port"]),
                                       f"{f['user']}@127.0.0.1", remote],
                                stdin=subprocess.DEVNULL, **kw)

    def test_facts(self):
        f = self.prog.facts
        self.assertTrue(f["ok"], f)
        for key in ("dir", "workspace", "config", "sshd_config", "log", "host_key", "client_key"):
            self.assertTrue(os.path.exists(f[key]), key)
        self.assertTrue(f["running"])
        self.assertTrue(alive(f["pid"]))
        self.assertEqual(banner(f["port"])[:8], b"SSH-2.0-")
        with open(f["config"]) as c:
            conn = json.load(c)["connection"]
        self.assertEqual((conn["port"], conn["user"], conn["host_key"], conn["identity"]),
                         (f["port"], f["user"], f["host_key_line"], f["client_key"]))
        self.assertEqual(keyscan(f["port"]), f["host_key_line"])
        out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", f["host_key"] + ".pub"],
                             capture_output=True, text=True, check=True).stdout
        self.assertEqual(out.split()[1], f["host_fingerprint"])
        self.assertEqual(os.stat(f["workspace"]).st_uid, f["uid"])
        r = self.ssh("id -un", stdout=subprocess.PIPE)
        self.assertEqual(r.communicate(timeout=30)[0].strip().decode(), f["user"])
        self.assertEqual(self.prog.send("facts")["port"], f["port"])

    def test_kill9_start_again_and_close(self):
        f = self.prog.facts
        client = self.ssh("echo $$; exec sleep 120", stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)
        self.addCleanup(client.communicate)
        self.addCleanup(client.kill)
        user_cmd = int(client.stdout.readline())
        listener = f["pid"]
        sshds = {p: proc_stat(p)[1] for p in descendants(listener) | {listener}
                 if p != user_cmd and p not in descendants(user_cmd)}
        # Positive control: the listener and the connection's sshd processes are there.
        self.assertGreaterEqual(len(sshds), 2, sshds)
        self.assertTrue(all(alive(p, s) for p, s in sshds.items()))
        self.assertTrue(alive(user_cmd))

        f = self.prog.send("kill9")
        self.assertTrue(f["ok"], f)
        self.assertEqual((f["pid"], f["running"]), (0, False))
        self.assertEqual([p for p, s in sshds.items() if alive(p, s)], [])
        self.assertEqual(naming(f["sshd_config"]), [])
        self.assertTrue(refused(f["port"]))
        self.assertTrue(alive(user_cmd), "kill9 leaves user commands running, as a crash does")

        port = f["port"]
        f = self.prog.send("start")
        self.assertTrue(f["ok"], f)
        self.assertEqual(f["port"], port)
        self.assertTrue(alive(f["pid"]))
        self.assertEqual(banner(port)[:8], b"SSH-2.0-")

        self.assertEqual(self.prog.send("kill9")["ok"], True)
        f = self.prog.send("kill9")
        self.assertFalse(f["ok"])
        self.assertIn("not running", f["error"])
        self.assertTrue(self.prog.send("start")["ok"])

        listener, d = self.prog.facts["pid"], self.prog.facts["dir"]
        self.assertTrue(alive(listener) and os.path.isdir(d))
        self.assertEqual(self.prog.close(), 0)
        self.assertFalse(os.path.exists(d))
        self.assertFalse(alive(listener))
        self.assertTrue(refused(port))
        self.assertTrue(wait_for(lambda: not alive(user_cmd)), "kill9's orphan is stopped too")

    def test_stop_restart_and_rotate_host_key(self):
        f = self.prog.facts
        port, old_fpr, old_line, old_pid = f["port"], f["host_fingerprint"], f["host_key_line"], f["pid"]

        f = self.prog.send("stop")
        self.assertTrue(f["ok"], f)
        self.assertFalse(alive(old_pid))
        self.assertTrue(refused(port))
        self.assertTrue(os.path.isdir(f["dir"]), "stop keeps the directory")
        f = self.prog.send("start")
        self.assertTrue(f["ok"] and f["port"] == port and alive(f["pid"]), f)

        old_pid = f["pid"]
        f = self.prog.send("restart")
        self.assertTrue(f["ok"], f)
        self.assertFalse(alive(old_pid))
        self.assertTrue(alive(f["pid"]) and f["port"] == port)

        f = self.prog.send("rotate-host-key")
        self.assertTrue(f["ok"], f)
        self.assertNotEqual(f["host_fingerprint"], old_fpr)
        self.assertNotEqual(f["host_key_line"], old_line)
        self.assertEqual(keyscan(port), f["host_key_line"])
        with open(f["config"]) as c:
            self.assertEqual(json.load(c)["connection"]["host_key"], old_line,
                             ".asp.json still pins the old key")

    def test_unknown_command(self):
        f = self.prog.send("reboot")
        self.assertFalse(f["ok"])
        self.assertIn("unknown command 'reboot'", f["error"])
        self.assertTrue(self.prog.send("facts")["ok"])

    def test_sigterm_cleans_up(self):
        f = self.prog.facts
        self.assertTrue(alive(f["pid"]) and os.path.isdir(f["dir"]))
        self.prog.p.send_signal(signal.SIGTERM)
        self.assertEqual(self.prog.close(), 128 + signal.SIGTERM)
        self.assertFalse(os.path.exists(f["dir"]))
        self.assertFalse(alive(f["pid"]))
        self.assertTrue(refused(f["port"]))


class TestSshdFixtureOptions(unittest.TestCase):

    def test_extra_config_match_and_subsystem(self):
        prog = Program("--sshd-config", "MaxSessions 3\nMatch User nobody\n\tX11Forwarding yes",
                       "--subsystem", "sftp internal-sftp")
        self.addCleanup(prog.close)
        f = prog.facts
        self.assertTrue(f["ok"] and alive(f["pid"]), f)
        with open(f["sshd_config"]) as c:
            lines = [line.strip() for line in c if line.strip() and not line.startswith("#")]
        self.assertLess(lines.index("MaxSessions 3"), lines.index("MaxSessions 10"))
        self.assertEqual(lines[-2:], ["Match User nobody", "X11Forwarding yes"])
        self.assertEqual([line for line in lines if line.startswith("Subsystem")],
                         ["Subsystem sftp internal-sftp"])
        # sshd sees it so, and kept it through a restart.
        self.assertTrue(prog.send("restart")["ok"])
        t = subprocess.run(["/usr/sbin/sshd", "-T", "-f", f["sshd_config"]],
                           capture_output=True, text=True)
        self.assertEqual(t.returncode, 0, t.stderr)
        self.assertIn("maxsessions 3", t.stdout.splitlines())
        self.assertIn("subsystem sftp internal-sftp", t.stdout.splitlines())

    def test_bad_option(self):
        r = subprocess.run([sshd_fixture.program(), "--nope", "x"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--nope", r.stderr)
        self.assertEqual(r.stdout, "")


class TestDriver(unittest.TestCase):

    def test_missing_program_says_how_to_build_it(self):
        saved = os.environ.get(sshd_fixture.PROGRAM_ENV)
        os.environ[sshd_fixture.PROGRAM_ENV] = "/nonexistent/sshd-fixture"
        try:
            with self.assertRaises(sshd_fixture.FixtureError) as cm:
                sshd_fixture.SshdFixture().start()
        finally:
            if saved is None:
                del os.environ[sshd_fixture.PROGRAM_ENV]
            else:
                os.environ[sshd_fixture.PROGRAM_ENV] = saved
        self.assertIn("/nonexistent/sshd-fixture", str(cm.exception))
        self.assertIn("make", str(cm.exception))

    def test_driver_commands_and_stop(self):
        fx = sshd_fixture.SshdFixture(subsystem="sftp internal-sftp").start()
        self.addCleanup(fx.stop)
        d, port, fpr = fx.dir, fx.port, fx.host_fingerprint()
        self.assertTrue(alive(fx.pid))
        fx.kill9()
        self.assertEqual(fx.pid, 0)
        with self.assertRaises(sshd_fixture.FixtureError):
            fx.kill9()
        fx.start_again()
        self.assertEqual(fx.port, port)
        fx.rotate_host_key()
        self.assertNotEqual(fx.host_fingerprint(), fpr)
        pid = fx.pid
        fx.stop()
        self.assertFalse(os.path.exists(d))
        self.assertFalse(alive(pid))


if __name__ == "__main__":
    unittest.main()
