#!/usr/bin/python3
"""bench/run.py - libasp and its peers, side by side, against one local sshd.

    make bench                          # BENCH_SCALE=full, writes docs/PERFORMANCE.md
    make bench BENCH_SCALE=quick        # a shorter run, same tables
    make bench-smoke                    # every peer, tiny counts; fails only if a peer
                                        # produced no numbers (timings are never asserted)
    /usr/bin/python3 bench/run.py --scale quick --workloads lat,wan --peers libasp,asyncssh

The driver starts an OpenSSH sshd on 127.0.0.1 (fresh keys, a free port, login
user asp-test when root) with its workspace on tmpfs when it can, a delay proxy
for the emulated WAN, and extra sshd instances for the per-handle scale test.
It runs each peer's benchmark program once per workload with the same
parameters, collects the JSON lines they print (bench_common.h describes the
shape), and prints Markdown tables with ratios against the libasp row and the
goals checklist of the benchmark issue.

Every knob of a run is in SCALES below, and nowhere else.
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import platform
import pwd
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
PY = "/usr/bin/python3"  # Debian's: it has asyncssh and paramiko
SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
TEST_USER = "asp-test"

# ------------------------------------------------------------------ knobs
# One place for every count. smoke: make check (seconds); quick: a look;
# full: the numbers that go into docs/PERFORMANCE.md.
SCALES = {
    "smoke": dict(iters=3, warmup=1, fresh_iters=2, cli_iters=3,
                  callers=[1, 4], conc_ops=8, max_conn=16,
                  bulk_sizes=[1], bulk_reps=[2],
                  cold_iters=2,
                  wan_iters=2, wan_fresh_iters=1, wan_cold_iters=1, wan_rtts=[50],
                  pause_iters=2,
                  scale_n=[1, 2], scale_servers=1,
                  many_n=[5]),
    "quick": dict(iters=50, warmup=5, fresh_iters=10, cli_iters=20,
                  callers=[1, 4, 16, 64], conc_ops=128, max_conn=16,
                  bulk_sizes=[1, 16, 64], bulk_reps=[3, 2, 2],
                  cold_iters=5,
                  wan_iters=5, wan_fresh_iters=2, wan_cold_iters=2, wan_rtts=[10, 50, 100],
                  pause_iters=8,
                  scale_n=[1, 10], scale_servers=2,
                  many_n=[1, 10, 100]),
    "full": dict(iters=300, warmup=30, fresh_iters=40, cli_iters=100,
                 callers=[1, 4, 16, 64], conc_ops=512, max_conn=16,
                 bulk_sizes=[1, 16, 64, 256], bulk_reps=[9, 7, 5, 5],
                 cold_iters=20,
                 wan_iters=15, wan_fresh_iters=3, wan_cold_iters=3, wan_rtts=[10, 50, 100],
                 pause_iters=20,
                 scale_n=[1, 10, 100], scale_servers=4,
                 many_n=[1, 10, 100, 500, 1000]),
}
RTT_MS = 50              # the WAN tables' link (bench/delayproxy: 25 ms each way); the
                         # latency plot adds the scale's other wan_rtts
PEER_TIMEOUT_S = 1800    # one peer, one workload
PAUSE_MS = 500           # an agent's think time between tool calls (the "pause" rows)
PAUSE_PEERS = ("libasp", "libssh2")
WORKLOADS = ["lat", "conc", "bulk", "cold", "wan", "scale", "many"]
MANY_PER_SERVER = 200    # "many": sandboxes per sshd instance (each has MaxStartups 256:30:512)
SCALE_CALLERS = " (N callers at once)"  # libasp's pool grown by concurrent calls, not asp_sandbox_warm

# ------------------------------------------------------------------ utilities


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fs_type(path):
    """The filesystem type of path, from /proc/mounts (longest mount prefix)."""
    best, kind = "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            _, mnt, typ = line.split()[:3]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                best, kind = mnt, typ
    return kind


def out_of(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.SubprocessError):
        return ""


_libc = ctypes.CDLL(None, use_errno=True)


def _pdeathsig():
    _libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: die with the driver


def _sshd_preexec():
    _pdeathsig()
    # PR_SET_CHILD_SUBREAPER (kept across exec): a process that leaves its session (a daemon's
    # double fork) is reaped by this sshd, so its CPU counts in the sshd's (Sshd.cpu_s).
    _libc.prctl(36, 1)


def descendants(pid):
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, want, grew = [], {pid}, True
    while grew:
        grew = False
        for p, pp in parent.items():
            if pp in want and p not in want:
                want.add(p)
                out.append(p)
                grew = True
    return out


def kill_tree(pid):
    pids = [pid] + descendants(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        deadline = time.time() + 3
        while time.time() < deadline and any(os.path.exists("/proc/%d" % p) and
                                              not _zombie(p) for p in pids):
            time.sleep(0.02)
    try:
        os.waitpid(pid, os.WNOHANG)
    except OSError:
        pass


def _zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True

# ------------------------------------------------------------------ the sandbox side


class Sshd:
    """An sshd on 127.0.0.1 like tests/fixture/fixture.c's, sharing one dir's keys."""

    def __init__(self, env, name, loglevel="ERROR"):
        self.env, self.name, self.loglevel = env, name, loglevel
        self.cfg = os.path.join(env.dir, "sshd_config.%s" % name)
        self.log = os.path.join(env.dir, "sshd.%s.log" % name)
        self.port, self.proc = 0, None

    def _config(self):
        e = self.env
        return "\n".join([
            "ListenAddress 127.0.0.1", "Port %d" % self.port, "HostKey %s" % e.host_key,
            "PidFile none", "AuthorizedKeysFile %s/authorized_keys" % e.dir, "StrictModes no",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes", "UsePAM no", "LogLevel %s" % self.loglevel,
            "MaxStartups 256:30:512", "MaxSessions 10", "AllowUsers %s" % e.user,
            "PermitRootLogin no", "PrintMotd no", "X11Forwarding no",
            "Subsystem sftp %s" % SFTP_SERVER, ""])

    def start(self):
        for _ in range(5):
            self.port = free_port()
            with open(self.cfg, "w") as f:
                f.write(self._config())
            argv = [SSHD, "-D", "-e", "-f", self.cfg, "-E", self.log]
            if subprocess.run([SSHD, "-t", "-f", self.cfg, "-o", "PerSourcePenalties=no"],
                              capture_output=True).returncode == 0:
                argv += ["-o", "PerSourcePenalties=no"]
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, preexec_fn=_sshd_preexec)
            deadline = time.time() + 5
            while time.time() < deadline and self.proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                        if s.recv(64).startswith(b"SSH-"):
                            return self
                except OSError:
                    time.sleep(0.02)
            self.stop()
        raise SystemExit("bench: sshd did not start; see %s" % self.log)

    def cpu_s(self):
        """CPU seconds of this sshd and its reaped descendants: every connection's, once it ended."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            st = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in st[11:15]) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            kill_tree(self.proc.pid)
        self.proc = None


class Env:
    """Keys, sshd, workspace files, configs, the delay proxy: everything peers share."""

    def __init__(self, scale, workloads):
        self.scale, self.workloads = scale, workloads
        self.servers, self.proxies = [], []
        base = "/tmp"
        if fs_type("/tmp") != "tmpfs" and os.path.isdir("/dev/shm") and fs_type("/dev/shm") == "tmpfs":
            base = "/dev/shm"
        self.fs = "%s (%s)" % (base, fs_type(base))
        self.dir = tempfile.mkdtemp(prefix="asp-bench.", dir=base)
        os.chmod(self.dir, 0o755)  # sshd's unprivileged side reads authorized_keys here
        self.user = TEST_USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        pw = pwd.getpwnam(self.user)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.host_key = os.path.join(self.dir, "host_ed25519")
        self.key = os.path.join(self.dir, "client_ed25519")
        for k in (self.host_key, self.key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", k], check=True)
        with open(self.host_key + ".pub") as f:
            self.host_key_line = " ".join(f.read().split()[:2])
        shutil.copy(self.key + ".pub", os.path.join(self.dir, "authorized_keys"))
        os.chmod(os.path.join(self.dir, "authorized_keys"), 0o644)
        self.ws = self._mkdir("workspace", owned=True)
        self.local = self._mkdir("local")
        self.xdg = self._mkdir("xdg")
        self.main = Sshd(self, "main").start()
        self.servers.append(self.main)
        self.config = self.write_config("asp.json", self.main.port)
        self.start_dir = self._discovery_tree("proj", self.main.port)
        self._make_files()

    def _mkdir(self, name, owned=False, mode=0o755):
        d = os.path.join(self.dir, name)
        os.makedirs(d, exist_ok=True)
        os.chmod(d, mode)
        if owned and os.geteuid() == 0:
            os.chown(d, self.uid, self.gid)
        return d

    def write_config(self, rel, port):
        p = os.path.join(self.dir, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        doc = {"version": "0", "transport": "ssh",
               "connection": {"host": "127.0.0.1", "port": port, "user": self.user,
                              "identity": self.key, "host_key": self.host_key_line},
               "workspace": self.ws}
        with open(p, "w") as f:
            json.dump(doc, f, indent=1)
        return p

    def _discovery_tree(self, name, port):
        """NAME/.asp.json, and NAME/a/b/c/d to start discovery from (four parents up)."""
        self.write_config(os.path.join(name, ".asp.json"), port)
        d = os.path.join(self.dir, name, "a", "b", "c", "d")
        os.makedirs(d, exist_ok=True)
        return d

    def _make_files(self):
        def make(name, size):
            p = os.path.join(self.ws, name)
            with open(p, "wb") as f:
                left = size
                while left:
                    n = min(left, 1 << 22)
                    f.write(os.urandom(n))
                    left -= n
            if os.geteuid() == 0:
                os.chown(p, self.uid, self.gid)
        make("bench-4k.bin", 4096)
        if "bulk" in self.workloads:
            for s in self.scale["bulk_sizes"]:
                make("bulk-%dM.bin" % s, s << 20)

    def start_proxy(self, rtt_ms):
        """A delay proxy of rtt_ms round trip: (port, config, discovery start dir)."""
        p = subprocess.Popen([os.path.join(BUILD, "bench", "delayproxy"),
                              "target_port=%d" % self.main.port, "delay_ms=%d" % (rtt_ms // 2)],
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        self.proxies.append(p)
        port = int(p.stdout.readline())
        return (port, self.write_config("asp-wan%d.json" % rtt_ms, port),
                self._discovery_tree("proj-wan%d" % rtt_ms, port))

    def handle_configs(self, n, servers=None, tag="handles"):
        """A file listing n .asp.json paths spread over `servers` (default scale_servers) sshd
        instances besides the main one."""
        servers = servers or self.scale["scale_servers"]
        while len(self.servers) < 1 + servers:
            self.servers.append(Sshd(self, "s%d" % len(self.servers)).start())
        extra = self.servers[1:1 + servers]
        paths = [self.write_config("%s/%d/%03d.json" % (tag, n, i), extra[i % len(extra)].port)
                 for i in range(n)]
        lst = os.path.join(self.dir, tag, "%d.list" % n)
        with open(lst, "w") as f:
            f.write("\n".join(paths) + "\n")
        return lst

    def clean_workspace(self):
        for name in os.listdir(self.ws):
            if name.startswith(("bw-", "w-", "m-", ".bw-", ".w-", ".m-")):
                try:
                    os.unlink(os.path.join(self.ws, name))
                except OSError:
                    pass

    def close(self):
        for p in self.proxies:
            p.terminate()
            p.wait()
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

# ------------------------------------------------------------------ peers


def _importable(mod, extra_env=None):
    env = dict(os.environ, **(extra_env or {}))
    r = subprocess.run([PY, "-W", "ignore", "-c", "import " + mod], capture_output=True, text=True, env=env)
    return r.returncode == 0, (r.stderr.strip().splitlines() or [""])[-1]


class Peer:
    def __init__(self, name, argv, workloads, env=None, check=None, tag=None):
        self.name, self.argv, self.workloads = name, argv, workloads
        self.env, self.check, self.tag = env or {}, check, tag or name.replace(" ", "-")

    def available(self):
        return self.check() if self.check else (True, "")


def _exists(path, what):
    return lambda: (True, "") if os.path.exists(path) else (False, "%s not built (%s)" % (what, path))


ASP_EXEC = os.path.join(BUILD, "bin", "asp-exec")
PYASP_ENV = {"PYTHONPATH": os.path.join(ROOT, "bindings", "python")}
PEERS = [
    Peer("libasp", [os.path.join(BUILD, "bench", "bench_asp")],
         {"lat", "conc", "bulk", "cold", "wan", "scale", "many"},
         check=_exists(os.path.join(BUILD, "bench", "bench_asp"), "bench_asp")),
    Peer("libasp (16 threads)", [os.path.join(BUILD, "bench", "bench_asp"), "workers=16",
                                 "peer=libasp (16 threads)"],
         {"many"}, check=_exists(os.path.join(BUILD, "bench", "bench_asp"), "bench_asp")),
    Peer("libasp (16 threads; all open)", [os.path.join(BUILD, "bench", "bench_asp"), "workers=16", "all_open=1",
                                           "peer=libasp (16 threads; all open)"],
         {"many"}, tag="libasp-16-threads-all-open", check=_exists(os.path.join(BUILD, "bench", "bench_asp"), "bench_asp")),
    Peer("libasp (1 connection)", [os.path.join(BUILD, "bench", "bench_asp"), "bulk_conns=1",
                                   "peer=libasp (1 connection)"],
         {"bulk"}, check=_exists(os.path.join(BUILD, "bench", "bench_asp"), "bench_asp")),
    Peer("libssh2", [os.path.join(BUILD, "bench", "bench_libssh2")],
         {"lat", "conc", "bulk", "cold", "wan", "scale"}, check=_exists(os.path.join(BUILD, "bench", "bench_libssh2"), "bench_libssh2")),
    Peer("asyncssh", [PY, os.path.join(BENCH, "peer_asyncssh.py")],
         {"lat", "conc", "bulk", "cold", "wan", "scale", "many"}, check=lambda: _importable("asyncssh")),
    Peer("paramiko", [PY, os.path.join(BENCH, "peer_paramiko.py")],
         {"lat", "conc", "bulk", "cold", "wan", "scale"}, check=lambda: _importable("paramiko")),
    Peer("node ssh2", ["node", "--expose-gc", os.path.join(BENCH, "peer_node.js"), "impl=ssh2"],
         {"lat", "conc", "bulk", "cold", "wan", "scale"},
         check=_exists(os.path.join(BENCH, "node_modules", "ssh2"), "npm install in bench/")),
    Peer("node libasp", ["node", os.path.join(BENCH, "peer_node.js"), "impl=asp"],
         {"lat", "conc", "bulk", "cold", "wan", "many"},
         check=_exists(os.path.join(ROOT, "bindings", "node", "node_modules", "koffi"),
                       "npm install in bindings/node")),
    Peer("python libasp", [PY, os.path.join(BENCH, "peer_pyasp.py")],
         {"lat", "conc", "bulk", "cold", "wan"}, env=PYASP_ENV,
         check=lambda: _importable("asp", PYASP_ENV)),
    Peer("python libasp aio", [PY, os.path.join(BENCH, "peer_aio.py")], {"lat", "conc", "many"},
         env=PYASP_ENV, check=lambda: _importable("asp.aio", PYASP_ENV)),
    Peer("cli", [PY, os.path.join(BENCH, "peer_cli.py")], {"lat", "bulk", "cold", "wan"},
         check=lambda: (shutil.which("ssh") is not None, "no ssh client")),
]
# Row order in the tables; names the programs report.
ORDER = ["libasp", "libasp (16 threads)", "libasp (16 threads; all open)", "libasp (non-atomic)", "libasp (1 connection)", "libssh2", "asyncssh", "paramiko", "node ssh2",
         "node libasp", "node libasp (non-atomic)", "python libasp", "python libasp (non-atomic)",
         "python libasp aio", "python libasp aio (threads=callers)",
         "ssh ControlMaster", "ssh fresh", "asp-exec master", "asp-exec --no-master",
         "local /bin/true", "sftp", "sftp (one session)", "scp"]
# Rows that are libasp itself, or no SSH client at all: not peers in "best peer" comparisons.
OURS = {"libasp", "libasp (16 threads)", "libasp (16 threads; all open)", "libasp (non-atomic)", "libasp (1 connection)", "node libasp", "node libasp (non-atomic)", "python libasp",
        "python libasp (non-atomic)", "python libasp aio", "python libasp aio (threads=callers)", "asp-exec master", "asp-exec --no-master", "local /bin/true"}


RUSAGE = os.path.join(BUILD, "bench", "rusage")


def run_program(argv, env, timeout):
    """Run a peer program (through bench/rusage, for an honest peak RSS);
    returns (rc, stdout, stderr, maxrss_kb, wall_s)."""
    t0 = time.time()
    fd, ru_file = tempfile.mkstemp(prefix="asp-bench-ru.")
    os.close(fd)
    p = subprocess.Popen([RUSAGE, ru_file] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, env=env, cwd=ROOT, start_new_session=True,
                         preexec_fn=_pdeathsig)
    bufs = {}
    readers = [threading.Thread(target=lambda n, f: bufs.__setitem__(n, f.read()), args=(n, f))
               for n, f in (("out", p.stdout), ("err", p.stderr))]
    for t in readers:
        t.start()
    timer = threading.Timer(timeout, lambda: kill_tree(p.pid))
    timer.start()
    p.wait()
    timer.cancel()
    for t in readers:
        t.join()
    try:
        with open(ru_file) as f:
            maxrss = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        maxrss = 0
    os.unlink(ru_file)
    return (p.returncode, bufs["out"].decode(errors="replace"), bufs["err"].decode(errors="replace"),
            maxrss, time.time() - t0)


def why_failed(err):
    """A failed peer's reason: its error line ("bench: ...", or the last line naming an error)
    whole, then the last lines of its stack, so the report says why and where."""
    lines = [ln.strip() for ln in err.strip().splitlines() if ln.strip()]
    if not lines:
        return "no output"
    msg = [ln for ln in lines if ln.startswith("bench:") or "Error" in ln.split(":")[0]]
    head = msg[-1] if msg else lines[-1]
    tail = [ln for ln in lines[-3:] if ln != head]
    return " | ".join([head] + tail)


def wan_tag(rtt):
    """The results' workload tag of the latency run over an rtt-ms link ("wan" for RTT_MS)."""
    return "wan" if rtt == RTT_MS else "wan%d" % rtt


class Runner:
    def __init__(self, env, scale, peers):
        self.env, self.scale, self.peers = env, scale, peers
        self.results, self.skipped, self.failed = [], {}, {}
        self.mismatches = []  # "content mismatch" lines of the peers: the run fails
        self.algorithms = {}  # peer -> [(what, kex, cipher, MAC, compression)], from probe_algorithms
        self.wan = {}  # rtt -> (port, config, start_dir), when the wan workload runs

    def common(self, peer, port=None, config=None):
        e = self.env
        return {"host": "127.0.0.1", "port": port or e.main.port, "user": e.user, "key": e.key,
                "host_key": e.host_key_line, "workspace": e.ws, "config": config or e.config,
                "localdir": e.local, "tag": peer.tag,
                "asp_exec": ASP_EXEC if os.access(ASP_EXEC, os.X_OK) else "",
                "asp_exec_note": "asp-exec not built (%s): `make` builds it when tools/asp-exec is ready" % ASP_EXEC,
                "rundir": os.path.join(e.dir, "run"), "rusage": RUSAGE}

    def run(self, peer, workload, params, tag=None):
        env = dict(os.environ, **peer.env)
        env.pop("ASP_CONFIG", None)
        env.pop("ASP_KNOWN_HOSTS", None)
        env["XDG_CONFIG_HOME"] = self.env.xdg
        argv = peer.argv + ["%s=%s" % (k, v) for k, v in params.items()]
        rc, out, err, maxrss, wall = run_program(argv, env, PEER_TIMEOUT_S)
        key = "%s/%s" % (peer.name, tag or workload)
        if rc == 3:
            self.skipped[key] = err.strip().splitlines()[-1] if err.strip() else "skipped"
            log("%-16s %-10s skipped: %s" % (peer.name, tag or workload, self.skipped[key]))
            return
        got = 0
        for line in out.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            d = json.loads(line)
            if d.get("op") == "skipped":
                self.skipped["%s/%s" % (d["peer"], tag or workload)] = d.get("note", "")
                continue
            d["workload"] = tag or workload
            d["program"] = peer.name
            d["proc_maxrss_kb"] = maxrss
            self.results.append(d)
            got += 1
        if "content mismatch" in err:
            self.mismatches += [ln.strip() for ln in err.splitlines() if "content mismatch" in ln]
        if rc != 0 or got == 0:
            self.failed[key] = "exit %d: %s" % (rc, why_failed(err))
            log("%-16s %-10s FAILED (%s)" % (peer.name, tag or workload, self.failed[key]))
        else:
            log("%-16s %-10s %d results, %.1f s" % (peer.name, tag or workload, got, wall))

    def bulk_interleaved(self):
        """The bulk workload in rounds: each peer does one rep of every size still due (its own
        process; its connections are made before the timing), then the next peer, round after
        round (ABAB...), so a drift in the machine's load falls on every peer alike. The rounds'
        lines are merged into one per peer, op and size."""
        s, e = self.scale, self.env
        reps = {sz: s["bulk_reps"][min(i, len(s["bulk_reps"]) - 1)] for i, sz in enumerate(s["bulk_sizes"])}
        first = len(self.results)
        for k in range(max(reps.values())):
            for peer in self.peers:
                key = "%s/bulk" % peer.name
                if "bulk" not in peer.workloads or key in self.failed or key in self.skipped:
                    continue
                self.run(peer, "bulk", dict(self.common(peer), workload="bulk", reps=1,
                                            sizes=",".join(str(sz) for sz in s["bulk_sizes"] if reps[sz] > k)))
                e.clean_workspace()
        merged = {}
        for d in self.results[first:]:
            k = (d["program"], d["peer"], d["op"], d.get("bytes"))
            if k not in merged:
                merged[k] = dict(d, rounds=0)
            else:
                m = merged[k]
                m["samples"] = m["samples"] + d["samples"]
                for f in ("cpu_s", "wall_s"):
                    m[f] = m[f] + d[f]
                for f in ("rss_kb", "proc_maxrss_kb"):
                    if f in d:
                        m[f] = max(m.get(f) or 0, d[f] or 0)
            merged[k]["rounds"] += 1
        self.results[first:] = list(merged.values())

    def probe_algorithms(self):
        """Each peer's negotiated key exchange, cipher, MAC and compression: one connect + exec
        (the cold workload, once) to an sshd like the main one but at LogLevel DEBUG1, whose
        log names them (sshd's "kex: ..." lines). Not a timing: nothing here is reported but
        the algorithms."""
        e = self.env
        probe = Sshd(e, "probe", loglevel="DEBUG1").start()
        e.servers.append(probe)
        config = e.write_config("asp-probe.json", probe.port)
        start_dir = e._discovery_tree("proj-probe", probe.port)
        for peer in self.peers:
            if "cold" not in peer.workloads:
                continue
            with open(probe.log, "rb") as f:
                f.seek(0, 2)
                off = f.tell()
            c = self.common(peer, port=probe.port, config=config)
            c["rundir"] = os.path.join(e.dir, "run-probe")
            env = dict(os.environ, **peer.env)
            env.pop("ASP_CONFIG", None)
            env["XDG_CONFIG_HOME"] = e.xdg
            argv = peer.argv + ["%s=%s" % kv for kv in dict(c, workload="cold", iters=1, warmup=0, probe=1,
                                                                start_dir=start_dir).items()]
            rc, _, err, _, _ = run_program(argv, env, 300)
            with open(probe.log, "rb") as f:
                f.seek(off)
                text = f.read().decode(errors="replace")
            conns = []
            for line in text.splitlines():
                if "kex: algorithm: " in line:
                    conns.append({"kex": line.split("kex: algorithm: ", 1)[1].split()[0]})
                elif "kex: client->server cipher: " in line and conns:
                    w = line.split("kex: client->server ", 1)[1].split()
                    # cipher: X MAC: Y compression: Z
                    conns[-1].update(cipher=w[1], mac=w[3], compression=w[5])
            # The cli peer's cold runs `ssh` then `asp-exec --no-master`, one connection each.
            names = ["OpenSSH ssh (also sftp, scp)", "asp-exec"] if peer.name == "cli" else [peer.name]
            rows = []
            for i, cn in enumerate(conns):
                what = names[min(i, len(names) - 1)]
                row = [what, cn.get("kex", "?"), cn.get("cipher", "?"), cn.get("mac", "?"), cn.get("compression", "?")]
                if row not in rows:
                    rows.append(row)
            if rc not in (0, 3) or not rows:
                log("%-16s algorithms: not seen (exit %d: %s)" % (peer.name, rc, err.strip()[-200:]))
            self.algorithms[peer.name] = rows
        probe.stop()

    def workload(self, w):
        s, e = self.scale, self.env
        if w == "bulk":
            return self.bulk_interleaved()
        for peer in self.peers:
            if w not in peer.workloads:
                continue
            c = self.common(peer)
            if w == "lat":
                self.run(peer, w, dict(c, workload="lat", iters=s["cli_iters"] if peer.name == "cli" else s["iters"],
                                       warmup=s["warmup"], fresh_iters=s["fresh_iters"]))
                if peer.name in PAUSE_PEERS:
                    self.run(peer, w, dict(c, workload="lat", ops="exec", iters=s["pause_iters"], warmup=2,
                                           pause_ms=PAUSE_MS), tag="pause")
            elif w == "conc":
                self.run(peer, w, dict(c, workload="conc", callers=",".join(map(str, s["callers"])),
                                       max_conn=s["max_conn"], ops=s["conc_ops"]))
            elif w == "cold":
                self.run(peer, w, dict(c, workload="cold", iters=s["cold_iters"], warmup=1,
                                       start_dir=e.start_dir))
            elif w == "wan":
                for rtt in s["wan_rtts"]:
                    port, config, start_dir = self.wan[rtt]
                    cw = self.common(peer, port=port, config=config)
                    cw["rundir"] = os.path.join(e.dir, "run-wan%d" % rtt)
                    self.run(peer, w, dict(cw, workload="lat", iters=s["wan_iters"], warmup=2,
                                           fresh_iters=s["wan_fresh_iters"]), tag=wan_tag(rtt))
                    if rtt == RTT_MS:
                        self.run(peer, w, dict(cw, workload="cold", iters=s["wan_cold_iters"], warmup=1,
                                               start_dir=start_dir), tag="wan_cold")
                    if rtt == RTT_MS and peer.name in PAUSE_PEERS:
                        self.run(peer, w, dict(cw, workload="lat", ops="exec", iters=s["pause_iters"], warmup=2,
                                               pause_ms=PAUSE_MS), tag="wan_pause")
            elif w == "many":
                for n in s["many_n"]:
                    servers = max(1, -(-n // MANY_PER_SERVER))
                    lst = e.handle_configs(n, servers, tag="many")
                    used = e.servers[1:1 + servers]
                    ports = ",".join(str(x.port) for x in used)
                    cpu0 = sum(x.cpu_s() for x in used)
                    self.run(peer, w, dict(c, workload="many", n=n, configs=lst, ports=ports))
                    # The sandbox side's CPU: each sshd's ended connections, once reaped.
                    deadline = time.time() + 30
                    while time.time() < deadline and any(descendants(x.proc.pid) for x in used):
                        time.sleep(0.1)
                    sandbox = sum(x.cpu_s() for x in used) - cpu0
                    for d in self.results:
                        if d.get("op") == "many" and d.get("n") == n and d["program"] == peer.name:
                            d.setdefault("sandbox_cpu_s", sandbox)
                    e.clean_workspace()
            elif w == "scale":
                for n in s["scale_n"]:
                    if peer.name == "libasp":
                        # Made as every peer makes them, one after another (asp_sandbox_warm),
                        # and as a harness's concurrent calls grow the pool (bench/LIMITS.md).
                        for fill in ("warm", "callers"):
                            self.run(peer, w, dict(c, workload="scale_conns", n=n, fill=fill), tag="scale")
                    else:
                        self.run(peer, w, dict(c, workload="scale_conns", n=n), tag="scale")
                    if peer.name == "libasp":
                        self.run(peer, w, dict(c, workload="scale_handles", n=n,
                                               configs=e.handle_configs(n)), tag="scale")

# ------------------------------------------------------------------ statistics


def p99(v):
    v = sorted(v)
    return v[max(0, math.ceil(0.99 * len(v)) - 1)] if v else float("nan")


def med(v):
    return statistics.median(v) if v else float("nan")


def row_name(d):
    n = d["peer"]
    return n + " (non-atomic)" if d["op"] == "write4k_nonatomic" else n


def order_key(name):
    return ORDER.index(name) if name in ORDER else len(ORDER)


def fmt(x, nd=2):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if abs(x) >= 1000:
        return "%.0f" % x
    if abs(x) >= 100:
        return "%.1f" % x
    return ("%%.%df" % nd) % x


def ratio(x, base):
    if not x or not base or math.isnan(x) or math.isnan(base):
        return "–"
    return "%.2f×" % (x / base)


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i == 0 else "--:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


class Report:
    def __init__(self, runner, scale_name, cmd, info):
        self.r, self.scale_name, self.cmd, self.info = runner, scale_name, cmd, info
        self.res = runner.results
        self.plot_dir, self.plot_names = "", []  # relative to the report, and what plots() wrote

    def pick(self, workload, op, **kw):
        return [d for d in self.res if d["workload"] == workload and d["op"] == op and
                all(d.get(k) == v for k, v in kw.items())]

    def one(self, workload, name, op):
        """The result row `name` (as row_name shows it) of op in workload."""
        ops = ("write4k", "write4k_nonatomic") if op.startswith("write4k") else (op,)
        for d in self.res:
            if d["workload"] == workload and d["op"] in ops and row_name(d) == name:
                return d
        return None

    def lat_med(self, workload, name, op):
        d = self.one(workload, name, op)
        return med(d["samples"]) if d else None

    # ---------------------------------------------------------- sections

    def sec_lat(self):
        out = []
        for op, title in (("exec", "exec `true`"), ("read4k", "read 4 KiB"),
                          ("write4k", "write 4 KiB (libasp and its bindings: atomic; peers: plain SFTP "
                                      "open/write/close; ssh/asp-exec CLI: `cat >` / `--write`)"),
                          ("stat", "stat")):
            ds = self.pick("lat", op) + (self.pick("lat", "write4k_nonatomic") if op == "write4k" else [])
            if not ds:
                continue
            base = self.lat_med("lat", "libasp", op)
            rows = []
            for d in sorted(ds, key=lambda d: order_key(row_name(d))):
                s = d["samples"]
                m = med(s)
                rss = d.get("rss_kb") or d.get("proc_maxrss_kb")
                rows.append([row_name(d), fmt(m), fmt(p99(s)), fmt(1e3 * len(s) / sum(s), 0) if sum(s) else "–",
                             fmt(1e6 * d["cpu_s"] / len(s), 0) if s else "–", fmt(rss / 1024, 1) if rss else "–",
                             ratio(m, base)])
            out.append("**%s** (loopback, %d calls after %d warm-up)\n\n" %
                       (title, self.r.scale["iters"], self.r.scale["warmup"]) +
                       table(["peer", "median ms", "p99 ms", "ops/s", "CPU µs/op", "peak RSS MiB",
                              "peer ÷ libasp"], rows))
        return "\n\n".join(out)

    def sec_conc(self):
        ds = self.pick("conc", "conc_exec")
        if not ds:
            return ""
        rows = []
        for callers in sorted({d["callers"] for d in ds}):
            base = next((d for d in ds if d["peer"] == "libasp" and d["callers"] == callers), None)
            bt = len(base["samples"]) / base["wall_s"] if base else None
            for d in sorted((d for d in ds if d["callers"] == callers), key=lambda d: order_key(d["peer"])):
                tput = len(d["samples"]) / d["wall_s"] if d["wall_s"] else float("nan")
                rows.append([d["peer"], callers, d["conns"], fmt(tput, 0), fmt(med(d["samples"])),
                             fmt(p99(d["samples"])), fmt(1e6 * d["cpu_s"] / len(d["samples"]), 0),
                             ratio(tput, bt)])
        return table(["peer", "callers", "connections", "exec/s", "median ms", "p99 ms", "CPU µs/op",
                      "throughput peer ÷ libasp"], rows)

    def mbps(self, d):
        return d["bytes"] / med(d["samples"]) / 1e6 if d and d["samples"] else None

    def mbps_spread(self, d):
        """'median (min–max)' MB/s over the reps, so a reader sees how far one run is from another."""
        m = self.mbps(d)
        if m is None:
            return fmt(m, 1)
        if len(d["samples"]) < 2:
            return "%s (1 rep)" % fmt(m, 1)
        return "%s (%s–%s)" % (fmt(m, 1), fmt(d["bytes"] / max(d["samples"]) / 1e6, 1),
                               fmt(d["bytes"] / min(d["samples"]) / 1e6, 1))

    def sec_bulk(self):
        ds = self.pick("bulk", "bulk_read") + self.pick("bulk", "bulk_write")
        if not ds:
            return ""
        rows = []
        for size in sorted({d["bytes"] for d in ds}):
            names = sorted({d["peer"] for d in ds if d["bytes"] == size}, key=order_key)
            get = lambda n, op: next((d for d in ds if d["peer"] == n and d["op"] == op and d["bytes"] == size), None)  # noqa: E731
            br, bw = self.mbps(get("libasp", "bulk_read")), self.mbps(get("libasp", "bulk_write"))
            for n in names:
                r, w = get(n, "bulk_read"), get(n, "bulk_write")
                rr, ww = self.mbps(r), self.mbps(w)
                rss = max((x.get("rss_kb") or x.get("proc_maxrss_kb") or 0) for x in (r, w) if x)
                cpu = sum(x["cpu_s"] for x in (r, w) if x) / max(1, sum(len(x["samples"]) for x in (r, w) if x))
                rows.append([n, "%d MiB" % (size >> 20), self.mbps_spread(r), ratio(rr, br), self.mbps_spread(w),
                             ratio(ww, bw),
                             fmt(cpu * 1e3 / (size / 1e9), 0), fmt(rss / 1024, 1)])
        return table(["peer", "size", "read MB/s median (min–max)", "read peer ÷ libasp",
                      "write MB/s median (min–max)", "write peer ÷ libasp",
                      "CPU ms/GB", "peak RSS MiB"], rows)

    def sec_cold(self):
        ds = self.pick("cold", "cold")
        if not ds:
            return ""
        base = next((med(d["samples"]) for d in ds if d["peer"] == "libasp"), None)
        rows = [[d["peer"], fmt(med(d["samples"])), fmt(p99(d["samples"])),
                 fmt(1e3 * d["cpu_s"] / len(d["samples"])), ratio(med(d["samples"]), base)]
                for d in sorted(ds, key=lambda d: order_key(d["peer"]))]
        for op, what in (("cold_open", "libasp: of which asp_open (discovery + connect)"),
                         ("cold_first_exec", "libasp: of which the first exec")):
            for d in self.pick("cold", op):
                rows.append([what, fmt(med(d["samples"])), fmt(p99(d["samples"])), "", ""])
        return table(["peer", "median ms", "p99 ms", "CPU ms", "peer ÷ libasp"], rows)

    def sec_wan(self):
        ds = self.pick("wan", "exec") + self.pick("wan_cold", "cold")
        if not ds:
            return ""
        names = sorted({row_name(d) for d in self.res if d["workload"] in ("wan", "wan_cold")}, key=order_key)
        rows = []
        for n in names:
            row = [n]
            for op in ("exec", "read4k", "write4k", "stat"):
                m = self.lat_med("wan", n, op)
                row.append("%.2f (%s ms)" % (m / RTT_MS, fmt(m, 0)) if m else "–")
            d = self.one("wan_cold", n, "cold")
            row.append("%.1f (%s ms)" % (med(d["samples"]) / RTT_MS, fmt(med(d["samples"]), 0)) if d else "–")
            rows.append(row)
        return table(["peer", "exec RTTs", "read 4 KiB RTTs", "write 4 KiB RTTs", "stat RTTs",
                      "connect + first exec RTTs"], rows)

    def sec_pause(self):
        ds = self.pick("pause", "exec") + self.pick("wan_pause", "exec")
        if not ds:
            return ""
        names = sorted({row_name(d) for d in ds}, key=order_key)
        lb, wb = self.lat_med("pause", "libasp", "exec"), self.lat_med("wan_pause", "libasp", "exec")
        rows = []
        for n in names:
            lm, wm = self.lat_med("pause", n, "exec"), self.lat_med("wan_pause", n, "exec")
            back = self.lat_med("wan", n, "exec")
            rows.append([n, fmt(lm) if lm else "–", ratio(lm, lb) if lm else "–",
                         "%.2f (%s ms)" % (wm / RTT_MS, fmt(wm, 0)) if wm else "–", ratio(wm, wb) if wm else "–",
                         "%.2f" % (back / RTT_MS) if back else "–"])
        return table(["peer", "loopback median ms", "peer ÷ libasp", "50 ms RTT: RTTs (ms)", "peer ÷ libasp",
                      "50 ms RTT back to back (section 5): RTTs"], rows)

    BG_OPS = (("bg_start", "start a background process (until its id / pid is back)", 1.2),
              ("bg_first_output", "then read until its first output byte", 1.2),
              ("proc_write", "write to a running command's stdin (no reply awaited)", 0.5))

    def spread(self, s):
        """'median (min–max)' ms of the samples."""
        return "%s (%s–%s)" % (fmt(med(s)), fmt(min(s)), fmt(max(s))) if s else "–"

    def sec_bg(self):
        ds = [d for op, _, _ in self.BG_OPS for d in self.pick("lat", op) + self.pick("wan", op)]
        if not ds:
            return ""
        rows = []
        for op, what, lim in self.BG_OPS:
            for n in sorted({d["peer"] for d in ds if d["op"] == op}, key=order_key):
                lo, wa = self.one("lat", n, op), self.one("wan", n, op)
                reads = "/".join("%.1f" % d["reads_per_call"] if d and "reads_per_call" in d else "–"
                                 for d in (lo, wa)) if op == "bg_first_output" else ""
                rows.append([what, n, self.spread(lo["samples"]) if lo else "–",
                             self.spread(wa["samples"]) if wa else "–",
                             "%.2f" % (med(wa["samples"]) / RTT_MS) if wa else "–", "≤ %.1f" % lim, reads])
        return table(["operation", "peer", "loopback median ms (min–max)", "50 ms RTT median ms (min–max)",
                      "50 ms RTT: RTTs", "goal RTTs", "reads until the byte (loopback/50 ms)"], rows)

    def scale_rows(self):
        ds = self.pick("scale", "scale_conns") + self.pick("scale", "scale_handles")
        rows = []
        for d in ds:
            delta = d["rss_after_kb"] - d["rss_before_kb"]
            suffix = (" (handles)" if d["op"] == "scale_handles" else
                      SCALE_CALLERS if d.get("fill") == "callers" else "")
            heap = (d["heap_after_kb"] - d["heap_before_kb"]) / d["n"] if "heap_after_kb" in d else None
            rows.append((d["peer"] + suffix, d["n"], d["conns"], delta, delta / d["n"], heap, d["peer"]))
        rows.sort(key=lambda r: (order_key(r[6]), r[0], r[1]))
        return rows

    def sec_scale(self):
        rows = self.scale_rows()
        if not rows:
            return ""
        return table(["peer", "N", "sockets seen", "RSS delta KiB", "RSS KiB per connection/handle",
                      "live malloc heap KiB per connection (C peers)"],
                     [[n, k, c, d, fmt(per, 0), fmt(heap, 0)] for n, k, c, d, per, heap, _ in rows])

    def many_rows(self):
        """(peer, n, wall s, peak RSS MiB, peak threads, CPU s, phases, sandbox CPU s, peak RSS above the
        process's RSS at the start of the N flows MiB, the most sandboxes open at once or None) of the
        "many" workload."""
        return sorted(((d["peer"], d["n"], d["wall_s"], d["proc_maxrss_kb"] / 1024, d["peak_threads"],
                        d["cpu_s"], d["phases"], d.get("sandbox_cpu_s"),
                        (d["proc_maxrss_kb"] - d["rss0_kb"]) / 1024 if "rss0_kb" in d else None,
                        d.get("peak_open"))
                       for d in self.pick("many", "many")),
                      key=lambda r: (r[1], order_key(r[0])))

    def sec_many(self):
        rows = self.many_rows()
        if not rows:
            return ""
        base = {r[1]: r for r in rows if r[0] == "asyncssh"}
        out = []
        for p, n, wall, rss, thr, cpu, ph, scpu, grown, live in rows:
            b = base.get(n)
            out.append([p, n, live if live is not None else "–", fmt(wall), ratio(wall, b[2]) if b else "–", fmt(rss, 1),
                        ratio(rss, b[3]) if b else "–", fmt(grown, 1),
                        ratio(grown, b[8]) if b and grown is not None and min(grown, b[8]) >= 1 else "–",
                        thr, fmt(cpu), ratio(cpu, b[5]) if b else "–",
                        fmt(scpu) if scpu is not None else "–",
                        ratio(scpu, b[7]) if b and scpu is not None and b[7] else "–"] +
                       ["%s / %s" % (fmt(ph[k][0] / 1e3), fmt(ph[k][1] / 1e3))
                        for k in ("open", "exec", "write", "read", "close")])
        return table(["peer", "N", "open at once (peak)", "wall s", "÷ asyncssh", "peak RSS MiB", "÷ asyncssh",
                      "RSS grown MiB", "÷ asyncssh", "peak threads",
                      "client CPU s", "÷ asyncssh", "sandbox CPU s", "÷ asyncssh", "open s (median / max)", "exec s", "write s", "read s",
                      "close s"], out)

    def sec_cli(self):
        ds = [d for d in self.pick("lat", "exec") if d["peer"] in ("ssh ControlMaster", "ssh fresh", "asp-exec master",
                                                                     "asp-exec --no-master", "local /bin/true")]
        if not ds:
            return ""
        base = next((med(d["samples"]) for d in ds if d["peer"] == "ssh ControlMaster"), None)
        rows = [[d["peer"], fmt(med(d["samples"])), fmt(p99(d["samples"])),
                 fmt(1e3 * d["cpu_s"] / len(d["samples"])), fmt(d.get("rss_kb", 0) / 1024, 1),
                 ratio(med(d["samples"]), base)]
                for d in sorted(ds, key=lambda d: order_key(d["peer"]))]
        return table(["per call (`true`)", "median ms", "p99 ms", "CPU ms/call (incl. master)",
                      "client peak RSS MiB", "÷ ssh ControlMaster"], rows)

    # ---------------------------------------------------------- goals

    def absent_peers(self, workload, ran):
        """Peers (not libasp's own rows) that run `workload` but have no row in `ran`
        (the cli peer's row is OpenSSH's `ssh` with a fresh process)."""
        rows = {"cli": "ssh fresh"}
        return sorted(p.name for p in PEERS if workload in p.workloads and p.name not in OURS and
                      rows.get(p.name, p.name) not in ran)

    def goals(self):
        """The goals of docs/PERFORMANCE.md, each met, not met or not measured, from this run."""
        g = []

        def add(text, ok, detail):
            g.append((text, ok, detail))

        L = lambda n, op, w="lat": self.lat_med(w, n, op)  # noqa: E731
        # Round trips at 50 ms: exec, read, atomic write, stat and the background-process rows, each
        # against a limit.
        for op, lim, what in (("exec", 1.2, "warm pool: exec `true`"), ("read4k", 1.2, "warm pool: read 4 KiB"),
                              ("write4k", 1.2, "warm pool: atomic write 4 KiB"), ("stat", 1.05, "warm pool: stat")) + \
                tuple((op, lim, what) for op, what, lim in self.BG_OPS):
            a = L("libasp", op, "wan")
            peers = {row_name(d): med(d["samples"]) for d in self.pick("wan", op) if row_name(d) not in OURS}
            text = "50 ms RTT, %s in ≤ %.2f RTT" % (what, lim)
            if not a:
                add(text, None, "missing data")
                continue
            bn = min(peers, key=peers.get) if peers else None
            add(text, a / RTT_MS <= lim, "libasp %.2f RTT%s" % (a / RTT_MS, ", best peer %s %.2f RTT" %
                                                               (bn, peers[bn] / RTT_MS) if bn else ""))
        a, f = L("libasp", "exec"), L("libssh2", "exec")
        add("exec `true` on loopback ≤ 0.9× raw libssh2 (a fresh channel each call)",
            (a <= 0.9 * f) if a and f else None,
            "libasp %.2f ms = %.2f× libssh2 (%.2f ms)" % (a, a / f, f) if a and f else "missing data")
        cold = {row_name(d): med(d["samples"]) for d in self.pick("wan_cold", "cold")}
        # "The best peer" is over every peer that runs this workload: with one missing, the
        # minimum over the rest would be a weaker goal, so the goal is not measured.
        absent = self.absent_peers("wan", cold)
        others = {k: v for k, v in cold.items() if k not in OURS}
        text = "connect + first exec at 50 ms ≤ the best peer in the same run"
        if "libasp" in cold and others and not absent:
            bn = min(others, key=others.get)
            add(text, cold["libasp"] <= others[bn],
                "libasp %.1f RTT, best peer %s %.1f RTT" % (cold["libasp"] / RTT_MS, bn, others[bn] / RTT_MS))
        else:
            add(text, None, "peers that did not run: %s" % ", ".join(absent) if absent else "missing data")
        for size in (64, 256):
            for op in ("bulk_read", "bulk_write"):
                dd = {d["peer"]: d for d in self.pick("bulk", op, bytes=size << 20)}
                text = "bulk %s %d MiB ≥ 1.0× OpenSSH sftp (the faster of its rows)" % (op.split("_")[1], size)
                # OpenSSH's sftp with and without a process start per transfer: both must have run.
                sftps = [n for n in ("sftp", "sftp (one session)") if n in dd]
                if "libasp" in dd and len(sftps) == 2:
                    sn = max(sftps, key=lambda n: self.mbps(dd[n]))
                    x, s_ = self.mbps(dd["libasp"]), self.mbps(dd[sn])
                    add(text, x >= s_, "libasp %.0f MB/s, %s %.0f MB/s: ratio %.2f" % (x, sn, s_, x / s_))
                else:
                    add(text, None, "not run at this scale" if not self.pick("bulk", op, bytes=size << 20)
                        else "missing data")
        rows = [r for r in self.scale_rows() if "(handles)" not in r[0]]
        if rows:
            n = max(r[1] for r in rows)
            at = {r[0]: r[4] for r in rows if r[1] == n}
            if "libasp" in at and "libssh2" in at:
                grown = ("; grown by %d callers at once: %.0f KiB" % (n, at["libasp" + SCALE_CALLERS])
                         if "libasp" + SCALE_CALLERS in at else "")
                add("memory per idle pooled connection ≤ raw libssh2's", at["libasp"] <= at["libssh2"],
                    "N=%d: libasp %.0f KiB/connection (asp_sandbox_warm), libssh2 %.0f KiB%s" %
                    (n, at["libasp"], at["libssh2"], grown))
            else:
                add("memory per idle pooled connection ≤ raw libssh2's", None, "missing data")
        else:
            add("memory per idle pooled connection ≤ raw libssh2's", None, "missing data")
        cd = {d["peer"]: d for d in self.pick("conc", "conc_exec", callers=16)}
        if "libasp" in cd and "node libasp" in cd:
            tc = len(cd["libasp"]["samples"]) / cd["libasp"]["wall_s"]
            tn = len(cd["node libasp"]["samples"]) / cd["node libasp"]["wall_s"]
            add("Node binding, 16 concurrent exec: ≥ 0.95× the C library's throughput", tn >= 0.95 * tc,
                "node libasp %.0f/s = %.2f× C %.0f/s" % (tn, tn / tc, tc))
        else:
            add("Node binding, 16 concurrent exec: ≥ 0.95× the C library's throughput", None, "missing data")
        a, c = L("node libasp", "exec"), L("libasp", "exec")
        add("Node binding: per-call exec latency ≤ 1.15× C", (a <= 1.15 * c) if a and c else None,
            "node libasp %.2f ms = %.2f× C (%.2f ms)" % (a, a / c, c) if a and c else "missing data")
        parts, ok = [], True
        for op in ("exec", "read4k", "write4k", "stat"):
            p_, b_ = L("python libasp", op), L("libasp", op)
            if p_ and b_:
                parts.append("%s %.2f×" % (op, p_ / b_))
                ok = ok and p_ <= 1.1 * b_
            else:
                ok = None
        add("Python binding within 1.1× of the C library", ok if parts else None,
            ", ".join(parts) if parts else "binding not run")
        if "libasp" in cd and "asyncssh" in cd:
            ta = len(cd["libasp"]["samples"]) / cd["libasp"]["wall_s"]
            ty = len(cd["asyncssh"]["samples"]) / cd["asyncssh"]["wall_s"]
            add("16 concurrent callers: exec throughput ≥ 1.5× asyncssh's", ta >= 1.5 * ty,
                "libasp %.0f/s = %.2f× asyncssh %.0f/s" % (ta, ta / ty, ty))
        else:
            add("16 concurrent callers: exec throughput ≥ 1.5× asyncssh's", None,
                "asyncssh did not run" if "libasp" in cd else "missing data")
        a, c = L("asp-exec master", "exec"), L("ssh ControlMaster", "exec")
        add("asp-exec with its master ≤ 0.5× OpenSSH ControlMaster per call",
            (a <= 0.5 * c) if a and c else None,
            "asp-exec %.2f ms = %.2f× ssh ControlMaster (%.2f ms)" % (a, a / c, c) if a and c else
            ("asp-exec not built" if not a else "missing data"))
        self.many_goals(add)
        return g

    MANY_GOALS = ("N sandboxes from one process: wall ≤ asyncssh's at every N",
                  "N sandboxes from one process: peak RSS ≤ 0.5× asyncssh's at every N",
                  "N sandboxes from one process: threads bounded by a constant, not by N",
                  "N sandboxes from one process: no call slower than with one sandbox by more than "
                  "the sandbox side's own cost")

    def many_goals(self, add_goal):
        """Section 8's goals, for every libasp row of it: each row must meet each goal, and a goal
        with one of those rows missing is not measured."""
        rows = self.many_rows()
        by = {(r[0], r[1]): r for r in rows}
        ours = sorted({r[0] for r in rows if r[0] in OURS}, key=order_key)
        ns = {p: sorted(n for q, n in by if q == p) for p in ours}
        absent = [p.name for p in PEERS if "many" in p.workloads and p.name in OURS and p.name not in ours]

        def add(text, ok, detail):
            if absent:
                ok, detail = None, "%s; did not run: %s" % (detail, ", ".join(absent))
            add_goal(text, ok, detail)

        if not ours:
            for text in self.MANY_GOALS:
                add(text, None, "missing data")
            return
        # Wall and RSS: against asyncssh's row at the same N (asyncssh missing at an N: not measured).
        missing = sorted({n for p in ours for n in ns[p] if ("asyncssh", n) not in by})
        for text, col, lim in ((self.MANY_GOALS[0], 2, 1.0), (self.MANY_GOALS[1], 3, 0.5)):
            if missing:
                add(text, None, "asyncssh did not run at N=%s" % ", ".join(map(str, missing)))
                continue
            parts, ok = [], True
            for p in ours:
                rs = [(n, by[p, n][col] / by["asyncssh", n][col]) for n in ns[p]]
                over = [str(n) for n, x in rs if x > lim]
                ok = ok and not over
                # For memory, also what the run added to each process (the "RSS grown" column).
                gs = [by[p, n][8] / by["asyncssh", n][8] for n in ns[p]
                      if col == 3 and by[p, n][8] is not None and by["asyncssh", n][8] is not None and
                      min(by[p, n][8], by["asyncssh", n][8]) >= 1]  # below 1 MiB: the noise of a start
                parts.append("%s %.2f-%.2f×%s%s" % (p, min(x for _, x in rs), max(x for _, x in rs),
                                                    " (over at N=%s)" % ", ".join(over) if over else "",
                                                    ", grown %.2f-%.2f×" % (min(gs), max(gs)) if gs else ""))
            add(text, ok, "; ".join(parts))
        # Threads: from the row's next largest N to its largest, fewer than one more thread per ten more
        # sandboxes (one per sandbox is the slope of a thread per sandbox). The C row is not judged: its
        # threads are its caller's, one per sandbox because asp_exec blocks; the 16-thread row is the
        # same library with a bounded caller.
        parts, ok = [], True
        for p in ours:
            if p == "libasp":
                parts.append("libasp not judged (one caller thread per sandbox)")
                continue
            if len(ns[p]) < 2:
                ok = None
                parts.append("%s: one N only" % p)
                continue
            a, b = ns[p][-2], ns[p][-1]
            t = {n: by[p, n][4] for n in (a, b)}
            grew = t[b] - t[a] > 0.1 * (b - a)
            ok = ok and not grew if ok is not None else None
            parts.append("%s %d → %d at N=%d → %d%s" % (p, t[a], t[b], a, b, " (grew)" if grew else ""))
        if ours == ["libasp"]:
            ok = None  # nothing judged (and the other rows did not run)
        add(self.MANY_GOALS[2], ok, "; ".join(parts))
        # Calls: each phase's slowest call at N against the same call at N=1, allowed the time the
        # sandbox side's work takes on this machine's CPUs (its CPU time ÷ the CPUs), since the
        # sandboxes share those CPUs with each other and with the client.
        cpus = machine_cpus(self.info)
        parts, ok = [], True
        for p in ours:
            if (p, 1) not in by or len(ns[p]) < 2:
                ok = None
                parts.append("%s: no N=1 row" % p if (p, 1) not in by else "%s: N=1 only" % p)
                continue
            one, worst = by[p, 1][6], None
            for n in ns[p][1:]:
                scpu = by[p, n][7]
                if scpu is None:
                    ok = None
                    continue
                for k, (_, mx) in by[p, n][6].items():
                    over = (mx - one[k][1]) / 1e3 - scpu / cpus
                    if worst is None or over > worst[0]:
                        worst = (over, n, k, (mx - one[k][1]) / 1e3, scpu / cpus)
            if worst is None:
                parts.append("%s: no sandbox CPU" % p)
                continue
            bad = worst[0] > 0
            if ok is not None:
                ok = ok and not bad
            parts.append("%s: closest %s at N=%d, +%.2f s of %.2f s" % (p, worst[2], worst[1], worst[3], worst[4])
                         if not bad else "%s: %s at N=%d, +%.2f s, allowed %.2f s" %
                         (p, worst[2], worst[1], worst[3], worst[4]))
        add(self.MANY_GOALS[3], ok, "; ".join(parts))

    # ---------------------------------------------------------- plots

    def plot_series(self):
        """{plot name: (gnuplot settings, [(panel title, {series title: [(x, y)]})])} from this run."""
        plots = {}
        rtts = [0] + sorted(self.r.scale.get("wan_rtts", []))
        # The RTTs evenly spaced (x = their index), the latency on a log scale; "n RTT" guides.
        guides = {"%d RTT" % k: [(i, k * rtt) for i, rtt in enumerate(rtts) if rtt] for k in (1, 2, 3)}
        panels = []
        for op, what in (("exec", "exec true"), ("read4k", "read 4 KiB"), ("write4k", "write 4 KiB"),
                         ("stat", "stat")):
            series = {}
            for i, rtt in enumerate(rtts):
                tag = "lat" if rtt == 0 else wan_tag(rtt)
                for d in self.res:
                    if d["workload"] == tag and d["op"] in (op, op + "_nonatomic") and d.get("samples"):
                        series.setdefault(row_name(d), []).append((i, med(d["samples"])))
            if series:
                panels.append((what, series))
        if panels:
            plots["latency-rtt"] = (
                ['set xlabel "link RTT, ms (0 = loopback)"', 'set ylabel "median latency, ms"',
                 "set logscale y", "set xrange [-0.3:%g]" % (len(rtts) - 0.7),
                 "set xtics (%s)" % ", ".join('"%d" %d' % (rtt, i) for i, rtt in enumerate(rtts)),
                 'set key outside right top font ",8"'],
                panels, "multiplot layout 2,2", guides)
        series = {}
        for d in self.pick("conc", "conc_exec"):
            if d["wall_s"]:
                series.setdefault(d["peer"], []).append((d["callers"], len(d["samples"]) / d["wall_s"]))
        if series:
            plots["conc"] = (['set xlabel "concurrent callers"', 'set ylabel "exec true per second"',
                              "set logscale x 2", 'set key outside right top font ",9"'],
                             [("exec throughput vs concurrent callers (loopback)", series)], "", {})
        panels = []
        for op, what in (("bulk_read", "read"), ("bulk_write", "write")):
            series = {}
            for d in self.pick("bulk", op):
                if d["samples"]:
                    series.setdefault(d["peer"], []).append((d["bytes"] / 2**20, self.mbps(d)))
            if series:
                panels.append(("bulk %s (loopback)" % what, series))
        if panels:
            plots["bulk"] = (['set xlabel "transfer size, MiB"', 'set ylabel "MB/s"', "set logscale x 2",
                              'set key outside right top font ",8"'],
                             panels, "multiplot layout 2,1", {})
        panels = []
        rows = self.many_rows()
        for col, what in ((2, "wall time, s"), (3, "peak RSS, MiB"), (4, "peak threads"), (5, "client CPU, s")):
            series = {}
            for r in rows:
                series.setdefault(r[0], []).append((r[1], r[col]))
            if series:
                panels.append(("N sandboxes at once: " + what, series))
        if panels:
            plots["many"] = (['set xlabel "sandboxes at once (N)"', "set logscale x 10", "set logscale y 10",
                              'set key outside right top font ",8"'], panels, "multiplot layout 2,2", {})
        return plots

    def plots(self, outdir):
        """Write this run's plots as outdir/NAME.svg with gnuplot; returns the names written."""
        if not shutil.which("gnuplot"):
            log("plots: gnuplot not installed (Debian: gnuplot-nox); no plots")
            return []
        os.makedirs(outdir, exist_ok=True)
        done, plots = [], self.plot_series()
        # One colour and point type per peer in every panel and plot.
        names = sorted({t for _, panels, _, _ in plots.values() for _, series in panels for t in series},
                       key=lambda n: (order_key(n), n))
        style = {n: "lt %d pt %d" % (i % 8 + 1, i % 13 + 1) for i, n in enumerate(names)}
        for name, (settings, panels, multi, guides) in sorted(plots.items()):
            path = os.path.join(outdir, name + ".svg")
            q = lambda t: '"%s"' % t.replace("\\", "\\\\").replace('"', '\\"')  # noqa: E731
            lines = ['set terminal svg size 1000,%d dynamic font "sans,10" background "white"' %
                     (760 if multi else 480), "set output %s" % q(path), "set grid"]
            block = lambda label, pts: "%s << EOD\n%s\nEOD" % (label, "\n".join(  # noqa: E731
                "%g %g" % (x, y) for x, y in sorted(pts) if y and not math.isnan(y)))
            blocks = [block("$g%d" % gi, pts) for gi, pts in enumerate(guides.values())]
            for pi, (_, series) in enumerate(panels):
                for si, (title, pts) in enumerate(sorted(series.items(), key=lambda kv: order_key(kv[0]))):
                    blocks.append(block("$d%d_%d" % (pi, si), pts))
            lines += blocks + settings
            if multi:
                lines.append("set %s" % multi)
            for pi, (title, series) in enumerate(panels):
                lines.append("set title %s noenhanced" % q(title))
                items = ["$d%d_%d using 1:2 with linespoints %s title %s noenhanced" % (pi, si, style[t], q(t))
                         for si, (t, _) in enumerate(sorted(series.items(), key=lambda kv: order_key(kv[0])))]
                items += ["$g%d using 1:2 with lines dashtype 2 lc rgb 'gray' title %s" % (gi, q(t))
                          for gi, t in enumerate(guides)]
                lines.append("plot " + ", ".join(items))
            if multi:
                lines.append("unset multiplot")
            r = subprocess.run(["gnuplot"], input="\n".join(lines) + "\n", text=True, capture_output=True)
            if r.returncode or not os.path.getsize(path):
                log("plots: gnuplot failed for %s: %s" % (name, r.stderr.strip()[-600:]))
                continue
            done.append(name)
        return done

    # ---------------------------------------------------------- the document

    def markdown(self):
        i, s = self.info, self.r.scale
        parts = ["# Performance",
                 "Generated by `bench/run.py`; do not edit by hand, re-run the command below.",
                 "Command: `%s`" % self.cmd,
                 table(["", ""], [[k, v] for k, v in i.items()])]
        noisy, why = busy(i)
        if noisy:
            parts.append("> **The machine was busy during this run** (%s); treat the numbers as noisy "
                         "and re-run on a quiet machine." % why)
        parts.append("Ratios are *peer ÷ libasp* unless a column says otherwise: for times, above 1 "
                     "means libasp is faster; for throughput (exec/s, MB/s), below 1 means libasp is faster.")
        parts.append("## Goals\n\n" + "\n".join(
            "- %s **%s** — %s" % ({True: "✅", False: "❌", None: "➖"}[ok],
                                   {True: "met", False: "NOT met", None: "not measured"}[ok] + ": " + t, d)
            for t, ok, d in self.goals()))
        secs = [("1. Sequential latency", self.sec_lat()),
                ("2. Concurrency: exec `true` throughput (threads for libasp, libssh2, paramiko and the "
                 "Python binding; asyncio tasks for asyncssh; promises for Node)", self.sec_conc()),
                ("3. Bulk transfer (MB = 10⁶ bytes; median of %s reps per size, the peers taking turns "
                 "rep by rep)" %
                 "/".join(map(str, s["bulk_reps"])), self.sec_bulk()),
                ("4. Cold start: discovery + connect + first exec (in process; the CLI rows are whole "
                 "processes)", self.sec_cold()),
                ("5. Emulated WAN, 50 ms RTT (bench/delayproxy: 25 ms each way): median latency in RTTs",
                 self.sec_wan()),
                ("5b. exec `true` after a %d ms pause before each call (an agent's think time; %d calls "
                 "after 2 warm-up)" % (PAUSE_MS, s.get("pause_iters", 0)), self.sec_pause()),
                ("5c. Long-running processes: a background process started and its first output read "
                 "(libasp: asp_bg_start, then asp_bg_read until a byte; the SSH libraries: an exec of "
                 "`setsid sh -c CMD >LOG 2>&1 </dev/null & echo $!`, then execs of `cat LOG` until a "
                 "byte), and a write to a running command's stdin (asp_proc_write)", self.sec_bg()),
                ("6. Scale: RSS per idle connection (the peers' have each run one exec; libasp's are made "
                 "by asp_sandbox_warm, or grown by N callers running a command at once), and per open "
                 "libasp handle",
                 self.sec_scale()),
                ("7. CLI per call: asp-exec vs OpenSSH", self.sec_cli()),
                ("8. Many sandboxes from one process: N handles at once, each open, exec `sleep 1; echo i`, "
                 "write 4 KiB, read it back (checked), close (the sshd instances on 127.0.0.1, %d sandboxes "
                 "each; ratios here are peer ÷ asyncssh: below 1 is better than asyncssh; *RSS grown* is the "
                 "peak RSS less the process's RSS when the N flows started, after its warm-up: what the "
                 "sandboxes cost it, without the runtime and libraries it had already; its ratio only where "
                 "both rows grew by 1 MiB or more; *open at once*: the most sandboxes between the start of "
                 "their open and the end of their close at one time)" % MANY_PER_SERVER,
                 self.sec_many())]
        for title, body in secs:
            if body:
                parts.append("## %s\n\n%s" % (title, body))
        if self.plot_names:
            parts.append("## Plots (from the numbers above, by bench/run.py with gnuplot)\n\n" + "\n\n".join(
                "**%s**\n\n![%s](%s/%s.svg)" % (PLOTS[n], n, self.plot_dir, n)
                for n in self.plot_names if n in PLOTS))
        if self.r.skipped or self.r.failed:
            parts.append("## Skipped and failed\n\n" + "\n".join(
                ["- skipped %s: %s" % kv for kv in sorted(self.r.skipped.items())] +
                ["- **failed** %s: %s" % kv for kv in sorted(self.r.failed.items())]))
        limits = os.path.join(ROOT, "bench", "LIMITS.md")
        if os.path.exists(limits):
            with open(limits) as f:
                parts.append(f.read().strip())
        parts.append(METHOD % OTHER_CPU_BUSY_PCT)
        algos = getattr(self.r, "algorithms", None)
        if algos:
            parts.append("**Negotiated algorithms** (one connection per peer program to an sshd configured as the "
                         "bench's but at `LogLevel DEBUG1`, from its `kex:` log lines; client→server, the "
                         "other direction is the same):\n\n" + table(
                             ["client", "key exchange", "cipher", "MAC", "compression"],
                             [r for name in sorted(algos, key=order_key) for r in algos[name]] or
                             [["(none seen)", "", "", "", ""]]))
        return "\n\n".join(parts) + "\n"


PLOTS = {
    "latency-rtt": "Median latency vs link RTT (0 = loopback; the others through bench/delayproxy), "
                   "log scale. The dashed lines are 1, 2 and 3 RTTs: a peer on the n-RTT line "
                   "pays n round trips per call.",
    "conc": "exec `true` throughput vs concurrent callers (section 2).",
    "bulk": "Bulk MB/s vs transfer size (section 3); log scale of the size.",
    "many": "N sandboxes from one process (section 8): wall time, peak RSS, peak threads and client "
            "CPU vs N, log scales.",
}

METHOD = """## Method

- One OpenSSH sshd on 127.0.0.1 (fresh ed25519 keys, `LogLevel ERROR`, `MaxSessions 10`), login user
  `asp-test` (bash), workspace on tmpfs when /tmp or /dev/shm is tmpfs. Every peer talks to it in the
  same run, one peer at a time; each peer/workload is its own process.
- Interleaved: bulk runs in rounds, each peer doing one rep of every size (its own process, its
  connections made before the timing) and then the next peer, round after round (ABAB...), so a
  drift in the machine's load falls on every peer alike; the CLI rows of section 1 take turns call
  by call. The other sections run one peer's calls after another's, all within minutes.
- A busy machine is reported, not hidden: the table above gives the load average at the start
  (and at the end, which is the run's own: section 8's sandboxes raise it to 40-60) and the CPU
  that processes outside the run took while it ran (the machine's user and system time from
  /proc/stat, less the run's own processes, all reaped by its end, plus the hypervisor's steal).
  A start load above half the CPUs, or others' CPU above %d%% of the run's, heads the report
  with a warning.
- Content is checked, not only lengths: after every timed read or write (outside its time and
  CPU), the peer compares the bytes it read (or the local file it read into) with the workspace
  file, and the workspace file it wrote with what it sent, byte for byte (the sandbox is on this
  machine). A mismatch fails the run at every scale.
- paramiko and ssh2 leave Nagle's algorithm on by default, which with sshd's delayed ACKs costs
  about 40 ms per exec on Linux; their benchmarks hand them a `TCP_NODELAY` socket, as a user who
  cares would (libasp, libssh2's peer here, asyncssh and OpenSSH set it themselves).
- Connection setup is outside every timed section except cold start. Warm-up calls are not timed.
  Latency = median and p99 (nearest rank) of per-call wall time; ops/s = calls ÷ their summed time;
  CPU = user + system time of the client process over the timed calls (the sshd side is not counted;
  for the CLI rows and sftp/scp, the client processes plus the ssh/asp-exec master's own CPU); peak RSS = the
  client process's ru_maxrss over the whole workload (bulk: includes whole-file buffers where the API
  returns the file in memory, as libasp's does).
- Peers: **libssh2** = plain blocking libssh2 1.10 (`bench/bench_libssh2.c`: a channel per exec,
  one `libssh2_sftp_*` session, 1 MiB read/write calls for bulk); **asyncssh** / **paramiko** = Debian's
  packages with their ordinary APIs (`conn.run`, `sftp.open().read()`, `get`/`put`); **node ssh2** =
  npm `ssh2` (`exec`, `sftp.readFile`/`writeFile`, `fastGet`/`fastPut`); **ssh fresh / ControlMaster**
  = one `ssh` process per call (`cat`, `cat >`, `stat` for the file operations); **sftp / scp** = OpenSSH's
  tools through the ControlMaster connection (scp uses the SFTP protocol in OpenSSH ≥ 9.0), one
  process per transfer, whose start is in the time (tens of ms: it weighs most on the small sizes);
  **sftp (one session)** = one `sftp -b -` process for all of a round's transfers, each timed from its
  `get`/`put` command to sftp's answer to an `lpwd` sent after it (answered locally), so without a
  process start; the
  **node libasp** and **python libasp** rows are libasp's bindings (atomic writes, like libasp).
- Each client negotiates its own default algorithms with sshd, as a user of each would get; the
  table at the end names what each negotiated in this run (from the server's log). No peer
  compresses: asyncssh, whose default would negotiate `zlib@openssh.com` with this sshd, is given
  `compression_algs=None`; the others do not offer compression by default.
- A goal that compares with the best peer, or with one named peer, is *not measured* when a peer
  it needs did not run; it is never met over the peers that happened to run.
- Section 8's goals hold for every libasp row (C, 16 threads, 16 threads holding all N open,
  Node, `asp.aio`) at every N, each against asyncssh's row at the same N. *Threads bounded*: from
  the next largest N to the largest, the peak grows by less than one thread per ten more
  sandboxes; the C row is not judged (its threads are its caller's: one per sandbox, since
  `asp_exec` blocks), the 16-thread rows are the same library under a caller with a bounded count. *No call slower*: each phase's
  slowest call at N, less the same phase at N=1, within the sandbox side's CPU time at N ÷ the
  machine's CPUs (the sandboxes share them, with the client too).
- libasp's writes are atomic (temp file + posix-rename); the *(non-atomic)* rows use `ASP_WRITE_IN_PLACE`.
  Peers' writes are plain SFTP open/write/close. Bulk reads land in memory for libasp, libssh2 and the
  bindings, in a local tmpfs file for asyncssh/paramiko/ssh2/sftp/scp (their bulk APIs); bulk writes
  come from memory or from a tmpfs file respectively.
- Concurrency: every peer gets min(callers, max_conn) connections; libasp's `max_connections` is
  that number; asyncssh/paramiko/ssh2 spread callers over their connections as channels.
  The Node binding runs with its own libuv pool size (64 threads, set when it loads; libuv's default
  is 4): a plain `exec` holds no thread while its command runs, the other calls one each.
- WAN: `bench/delayproxy` holds each byte RTT/2 in each direction on 127.0.0.1 (no bandwidth limit,
  no loss): 50 ms RTT in the tables, and the scale's other RTTs (10 and 100 ms) in the latency plot.
  Its TCP connect is local, so cold-start RTT counts there are one RTT short of a real link for every
  peer alike.
- Bulk: libasp uses the handle's default pool (4 connections, made by `asp_sandbox_warm` before the
  timing, as every peer's connection is); a read or atomic write of 32 MiB or more is cut into parts
  that several pooled connections move at once (libasp/fs/bulk.c), and *libasp (1 connection)* is
  the same with `max_connections = 1`.
- Scale: RSS (VmRSS) of the client before and after opening N connections that each ran one exec;
  libasp's N pooled connections come from N threads (on stacks the benchmark unmaps afterwards) in
  one handle with `max_connections = N`; *libasp (handles)* opens N handles (one connection each) to
  several sshd instances. Managed runtimes are measured after a GC.
- A timing is never a test assertion: `make bench-smoke` (part of `make check`) only checks that every
  peer produced numbers.
"""

# ------------------------------------------------------------------ machine info


def source_state():
    """The commit measured and whether its sources had local changes, read when the run starts
    (after its build): an edit made while it runs is not in what it measures. The report's own
    outputs (docs/) are not sources."""
    return (out_of(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
            out_of(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs"]))


def machine_info(scale_name, env, load0, source):
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = f.readline().split()[1]
    libssh2 = out_of(["dpkg-query", "-W", "-f", "${Version}", "libssh2-1"]) or out_of(
        ["pkg-config", "--modversion", "libssh2"])
    vers = out_of([PY, "-W", "ignore", "-c", "import asyncssh, paramiko; print(asyncssh.__version__, paramiko.__version__)"]).split()
    ssh2v = "?"
    try:
        with open(os.path.join(BENCH, "node_modules", "ssh2", "package.json")) as f:
            ssh2v = json.load(f)["version"]
    except OSError:
        pass
    commit, dirty = source
    load1 = os.getloadavg()[0]
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "scale": scale_name,
        "libasp": "%s (commit %s%s)" % (out_of([PY, "-c", "print(open('%s/include/asp.h').read().split('ASP_VERSION \"')[1].split('\"')[0])" % ROOT]),
                                        commit, ", with local changes" if dirty else ""),
        "machine": "%d CPUs (nproc), %s, %.1f GiB RAM" % (os.cpu_count(), cpu, int(mem) / 2**20),
        "kernel": platform.release(),
        "OpenSSH": out_of(["ssh", "-V"]),
        "libssh2": libssh2,
        "Python (peers)": "%s, asyncssh %s, paramiko %s" % (
            out_of([PY, "-c", "import platform; print(platform.python_version())"]),
            vers[0] if vers else "?", vers[1] if len(vers) > 1 else "?"),
        "Node": "%s, ssh2 %s" % (out_of(["node", "--version"]), ssh2v),
        "workspace filesystem": env.fs,
        "load average (start → end)": "%.2f → %.2f" % (load0, load1),
    }

# ------------------------------------------------------------------ main

OTHER_CPU = "CPU of other processes during the run"
OTHER_CPU_BUSY_PCT = 5   # of the machine's CPU time: above it, the report says the machine was busy


def cpu_split():
    """(the machine's user + system CPU seconds, its steal, this process's and its reaped
    descendants' CPU seconds): every peer, sshd and what they start is a descendant, reaped by
    the end of the run."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    ours = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
    return (v[0] + v[1] + v[2]) / hz, (v[7] if len(v) > 7 else 0) / hz, ours


def other_cpu(a, b, wall):
    """What the machine's CPUs did outside this run while it ran: user and system time not
    charged to the run's processes (kernel threads too), and the hypervisor's steal; the
    share comes first (busy() reads it back from saved results)."""
    other, steal = max(0.0, (b[0] - a[0]) - (b[2] - a[2])), b[1] - a[1]
    total = wall * os.cpu_count()
    return "%.1f%% (%.0f s of other processes and %.0f s of steal, of %.0f CPU s)" % (
        100 * (other + steal) / total, other, steal, total)


def machine_cpus(info):
    """The CPU count of the machine line of machine_info()."""
    return int(info["machine"].split()[0])


def busy(info):
    """(whether the report must say the machine was busy, what it judged by) from a run's info."""
    loads = [float(x) for x in info["load average (start → end)"].replace("→", " ").split()[:2]]
    cpus = machine_cpus(info)
    other = info.get(OTHER_CPU)
    if other is None:  # results from before the other processes' CPU was measured
        return max(loads) > 0.5 * cpus, "load average above, at its start or its end"
    # Busy when it started, or when processes outside the run took a share of the CPUs while it
    # ran (the end load is the run's own: section 8 alone raises it to 40-60).
    return (loads[0] > 0.5 * cpus or float(other.split("%")[0]) > OTHER_CPU_BUSY_PCT,
            "the load average at its start, or the CPU of other processes during it, above")


def write_report(rep, out):
    """Plots next to the report (or in build/bench), then the Markdown; returns it."""
    plot_dir = os.path.join(os.path.dirname(os.path.abspath(out)) if out else os.path.join(BUILD, "bench"), "perf")
    rep.plot_names = rep.plots(plot_dir)
    rep.plot_dir = os.path.relpath(plot_dir, os.path.dirname(os.path.abspath(out))) if out else plot_dir
    md = rep.markdown()
    if out:
        with open(out, "w") as f:
            f.write(md)
        log("wrote %s" % os.path.relpath(out, ROOT))
    return md


def render(path, out):
    """--render: the report of an earlier run's results file, nothing run."""
    with open(path) as f:
        saved = json.load(f)
    scale = saved.get("scale") or saved["info"]["scale"]
    runner = types.SimpleNamespace(results=saved["results"], skipped=saved["skipped"],
                                   failed=saved["failed"], scale=dict(SCALES[scale]),
                                   algorithms=saved.get("algorithms", {}))
    cmd = saved.get("cmd") or "make bench BENCH_SCALE=%s" % scale
    write_report(Report(runner, scale, cmd, saved["info"]),
                 out if out is not None else os.path.join(ROOT, "docs", "PERFORMANCE.md"))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", default=os.environ.get("BENCH_SCALE") or "full", choices=sorted(SCALES))
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ",".join(WORKLOADS))
    ap.add_argument("--peers", default="", help="comma-separated peer names (default: all)")
    ap.add_argument("--out", default=None, help="Markdown report (default docs/PERFORMANCE.md; "
                    "smoke: none)")
    ap.add_argument("--json", default=None, help="raw results (default build/bench/results.json; smoke: "
                    "build/bench/results-smoke.json, so that `make check` keeps the last real run's)")
    ap.add_argument("--smoke", action="store_true", help="fail unless every peer produced numbers")
    ap.add_argument("--bulk-sizes", default="", help="comma-separated MiB, instead of the scale's")
    ap.add_argument("--many-n", default="", help="comma-separated sandbox counts for the many workload, "
                    "instead of the scale's")
    ap.add_argument("--render", default="", metavar="JSON",
                    help="run nothing: write the report (and plots) again from the results file of "
                         "an earlier run, e.g. after editing bench/LIMITS.md")
    a = ap.parse_args()
    if a.render:
        return render(a.render, a.out)
    smoke = a.smoke or a.scale == "smoke"
    out = a.out if a.out is not None else ("" if smoke else os.path.join(ROOT, "docs", "PERFORMANCE.md"))
    if a.json is None:
        a.json = os.path.join(BUILD, "bench", "results-smoke.json" if smoke else "results.json")
    scale = dict(SCALES[a.scale])
    if a.bulk_sizes:
        scale["bulk_sizes"] = [int(x) for x in a.bulk_sizes.split(",")]
        scale["bulk_reps"] = [scale["bulk_reps"][-1]]
    if a.many_n:
        scale["many_n"] = [int(x) for x in a.many_n.split(",")]
    workloads = [w for w in a.workloads.split(",") if w]
    bad = [w for w in workloads if w not in WORKLOADS]
    if bad:
        ap.error("unknown workloads: %s" % ",".join(bad))
    want = {p for p in a.peers.split(",") if p}
    peers = []
    skipped = {}
    for p in PEERS:
        if want and p.name not in want:
            continue
        ok, note = p.available()
        if ok:
            peers.append(p)
        else:
            skipped[p.name] = note
            log("%s: skipped (%s)" % (p.name, note))
    if os.environ.get("MAKELEVEL"):
        cmd = "make bench-smoke" if smoke else "make bench BENCH_SCALE=%s" % a.scale
    else:
        cmd = " ".join(["/usr/bin/python3", "bench/run.py"] + sys.argv[1:])
    load0 = os.getloadavg()[0]
    source = source_state()
    t0 = time.time()
    cpu0 = cpu_split()
    env = Env(scale, workloads)
    runner = Runner(env, scale, peers)
    runner.skipped.update({"%s/*" % k: v for k, v in skipped.items()})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        log("scale %s, workspace %s, sshd port %d" % (a.scale, env.fs, env.main.port))
        if "wan" in workloads:
            runner.wan = {rtt: env.start_proxy(rtt) for rtt in scale["wan_rtts"]}
        for w in workloads:
            runner.workload(w)
        info = machine_info(a.scale, env, load0, source)
        runner.probe_algorithms()
    finally:
        env.close()
    info["total run time"] = "%.0f s" % (time.time() - t0)
    info[OTHER_CPU] = other_cpu(cpu0, cpu_split(), time.time() - t0)
    rep = Report(runner, a.scale, cmd, info)
    md = write_report(rep, out)
    print(md)
    if a.json:
        os.makedirs(os.path.dirname(a.json), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"info": info, "results": runner.results, "skipped": runner.skipped,
                       "failed": runner.failed, "scale": a.scale, "cmd": cmd,
                       "algorithms": runner.algorithms}, f)
    if runner.mismatches:
        # Wrong bytes are a bug, at every scale: not a number to print.
        for m in runner.mismatches:
            log("CONTENT MISMATCH: %s" % m)
        log("FAILED: a peer read or wrote other bytes than it should (above)")
        sys.exit(1)
    if smoke:
        problems = dict(runner.failed)
        for p in peers:
            for w in p.workloads & set(workloads):
                tags = {"wan": ("wan", "wan_cold", "wan_pause"), "lat": ("lat", "pause")}.get(w, (w,))
                got = [d for d in runner.results if d["workload"] in tags and d["program"] == p.name]
                if not got and not any(k.startswith(p.name + "/") for k in runner.skipped):
                    problems["%s/%s" % (p.name, w)] = "no numbers"
                for d in got:
                    if "samples" in d and not d["samples"]:
                        problems["%s/%s/%s" % (d["peer"], w, d["op"])] = "empty samples"
        for name in rep.plot_series():
            if name not in rep.plot_names:
                problems["plot %s" % name] = "not written (%s)" % os.path.join(rep.plot_dir, name + ".svg")
        if problems:
            for k, v in sorted(problems.items()):
                log("smoke: %s: %s" % (k, v))
            sys.exit(1)
        log("smoke: every peer produced numbers (%d result lines, %d skipped)" %
            (len(runner.results), len(runner.skipped)))


if __name__ == "__main__":
    main()
