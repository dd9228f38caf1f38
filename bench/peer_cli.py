"""Command-line peers of bench/run.py: one process per call, as shell-based
harnesses do it.

  ssh fresh            ssh USER@HOST CMD, a full handshake per call
  ssh ControlMaster    the same through a ControlMaster/ControlPersist mux
  asp-exec master      build/bin/asp-exec CMD, through its connection-sharing master
  asp-exec --no-master asp-exec with a full handshake per call
  sftp, scp            OpenSSH's own bulk transfer (through the ControlMaster, so
                       the handshake is not timed; scp uses the SFTP protocol, the
                       9.x default), one process per transfer
  sftp (one session)   one `sftp -b -` process for every transfer of the run, each
                       timed from its command to the reply of the next (`lpwd`,
                       answered locally): no process start in the time

    /usr/bin/python3 bench/peer_cli.py workload=lat|bulk|cold host=... port=... user=...
        key=... workspace=DIR config=.asp.json asp_exec=PATH|'' rundir=DIR ...

Operations per call: exec `true`; read4k `cat FILE` (asp-exec --read FILE); write4k
`cat > FILE` with 4 KiB on stdin (asp-exec --write FILE, atomic); stat `stat -c %s FILE`.
CPU per call is the client process's (wait4), plus the master's own CPU for the
ControlMaster and asp-exec master variants (read from /proc).

Every read's output and every written file is compared with the bytes it should be
(outside the timing); a mismatch ends the program with "content mismatch".
"""
import os
import re
import subprocess
import sys

from peer_common import arg, arg_i, emit, emit_raw, now_ms, path, sizes_reps, verify, ws_file

HOST, PORT, USER = arg("host"), arg("port"), arg("user")
DEST = "%s@%s" % (USER, HOST)
RUNDIR = arg("rundir")
CM = os.path.join(RUNDIR, "cm")
ASP_EXEC = arg("asp_exec", "")
SSH_OPTS = ["-F", "/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no",
            "-o", "LogLevel=ERROR", "-i", arg("key")]
SSH = ["ssh"] + SSH_OPTS + ["-p", PORT]
SSH_CM = SSH + ["-o", "ControlPath=" + CM]
ENV = dict(os.environ, XDG_RUNTIME_DIR=RUNDIR)
ENV.pop("ASP_CONFIG", None)
CLK = os.sysconf("SC_CLK_TCK")


def call(argv, stdin=None, cwd=None, out=None):
    """Run one call (its stdout into the file out, if given); returns (wall_ms, cpu_s)
    of the client process."""
    sink = open(out, "wb") if out else subprocess.DEVNULL
    t = now_ms()
    p = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                         stdout=sink, env=ENV, cwd=cwd)
    if out:
        sink.close()
    if stdin is not None:
        p.stdin.write(stdin)
        p.stdin.close()
    _, status, ru = os.wait4(p.pid, 0)
    wall = now_ms() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit("bench: %s exited %d" % (" ".join(argv[:1] + argv[-3:]), p.returncode))
    return wall, ru.ru_utime + ru.ru_stime


def peak_rss(argv, stdin=None, cwd=None):
    """One more (untimed) call through bench/rusage: the client's own peak RSS, KiB.
    (A child forked from this Python process would be charged our RSS too.)"""
    out = os.path.join(RUNDIR, "rusage.out")
    subprocess.run([arg("rusage")] + [out] + argv, input=stdin, stdout=subprocess.DEVNULL,
                   stdin=None if stdin is not None else subprocess.DEVNULL, env=ENV, cwd=cwd)
    try:
        with open(out) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def proc_cpu(pid):
    if not pid:
        return 0.0
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except OSError:
        return 0.0


def cm_pid():
    r = subprocess.run(SSH_CM + ["-O", "check", DEST], capture_output=True, text=True)
    m = re.search(r"pid=(\d+)", r.stderr)
    return int(m.group(1)) if m else 0


def asp_master_pid():
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--master" in argv and any(RUNDIR.encode() in a for a in argv):
            return int(d)
    return 0


def start_masters():
    # The masters outlive this call: keep them off our stdout/stderr pipes (bench/run.py
    # reads those to EOF), and let them time out by themselves if we die (120 s idle).
    quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(SSH_CM + ["-o", "ControlMaster=yes", "-o", "ControlPersist=120", DEST, "true"],
                   check=True, **quiet)
    if ASP_EXEC:
        subprocess.run([ASP_EXEC, "--config", arg("config"), "--persist", "120", "true"], env=ENV,
                       check=True, **quiet)


def stop_masters():
    subprocess.run(SSH_CM + ["-O", "exit", DEST], capture_output=True)
    if ASP_EXEC:
        subprocess.run([ASP_EXEC, "--config", arg("config"), "--stop"], env=ENV, capture_output=True)


def variants():
    r4k, w4k = path("bench-4k.bin"), path("w-cli.bin")
    q = lambda s: "'" + s.replace("'", "'\\''") + "'"  # noqa: E731
    ssh_ops = {"exec": (["true"], None), "read4k": (["cat " + q(r4k)], None),
               "write4k": (["cat > " + q(w4k)], True), "stat": (["stat -c %s " + q(r4k)], None)}
    warm = [("ssh ControlMaster", SSH_CM + [DEST], ssh_ops, cm_pid)]
    fresh = [("ssh fresh", SSH + [DEST], ssh_ops, None)]
    if ASP_EXEC:
        a_ops = {"exec": (["true"], None), "read4k": (["--read", "bench-4k.bin"], None),
                 "write4k": (["--write", "w-cli-asp.bin"], True),
                 "stat": (["stat -c %s bench-4k.bin"], None)}
        base = [ASP_EXEC, "--config", arg("config")]
        warm.append(("asp-exec master", base, a_ops, asp_master_pid))
        fresh.append(("asp-exec --no-master", base + ["--no-master"], a_ops, None))
    return warm, fresh


def lat():
    data = os.urandom(4096)
    got = os.path.join(RUNDIR, "read4k.out")
    # What each op's call must leave: read4k's output, write4k's file (the ssh rows write
    # w-cli.bin, asp-exec w-cli-asp.bin).
    checks = {"read4k": lambda name: verify(name + " read4k", got, ws_file("bench-4k.bin")),
              "write4k": lambda name: verify(name + " write4k", ws_file(
                  "w-cli-asp.bin" if name.startswith("asp-exec") else "w-cli.bin"), data)}
    start_masters()
    try:
        warm, fresh = variants()
        # The spawn floor: what any one-process-per-call client pays before SSH.
        groups = [(warm + [("local /bin/true", [], {"exec": (["/bin/true"], None)}, None)],
                   arg_i("iters", 50), arg_i("warmup", 5)),
                  (fresh, arg_i("fresh_iters", 20), 1)]
        for op in ("exec", "read4k", "write4k", "stat"):
            for group, iters, warmup in groups:
                group = [v for v in group if op in v[2]]
                res = {v[0]: ([], 0.0) for v in group}
                mcpu = {}
                for i in range(warmup + iters):
                    # Interleaved, so machine noise hits every variant alike.
                    for name, base, ops, master in group:
                        argv, stdin = ops[op]
                        if i == warmup and master:
                            pid = master()
                            mcpu[name] = (pid, proc_cpu(pid))
                        w, c = call(base + argv, data if stdin else None, cwd=arg("workspace"),
                                    out=got if op == "read4k" else None)
                        if op in checks:  # after the call: not in its time or CPU
                            checks[op](name)
                        if i >= warmup:
                            s, cc = res[name]
                            s.append(w)
                            res[name] = (s, cc + c)
                for name, (s, c) in res.items():
                    if name in mcpu:
                        c += proc_cpu(mcpu[name][0]) - mcpu[name][1]
                    base, ops = next((v[1], v[2]) for v in group if v[0] == name)
                    argv, stdin = ops[op]
                    rss = peak_rss(base + argv, data if stdin else None, cwd=arg("workspace"))
                    emit(name, op, "ms", s, c, sum(s) / 1e3, rss_kb=rss)
    finally:
        stop_masters()


def bulk():
    start_masters()
    local = os.path.join(arg("localdir"), "get-cli.bin")
    dst = path("bw-cli.bin")
    sftp = ["sftp", "-q", "-b", "-"] + SSH_OPTS + ["-o", "ControlPath=" + CM, "-P", PORT, DEST]
    scp = ["scp", "-q"] + SSH_OPTS + ["-o", "ControlPath=" + CM, "-P", PORT]
    try:
        session = SftpSession(sftp)
        for size, reps in sizes_reps():
            src = path("bulk-%dM.bin" % size)
            for name, op, argv, stdin in (
                    ("sftp", "bulk_read", sftp, b"get %s %s\n" % (src.encode(), local.encode())),
                    ("sftp", "bulk_write", sftp, b"put %s %s\n" % (src.encode(), dst.encode())),
                    ("scp", "bulk_read", scp + ["%s:%s" % (DEST, src), local], None),
                    ("scp", "bulk_write", scp + [src, "%s:%s" % (DEST, dst)], None)):
                s, cpu = [], 0.0
                master = cm_pid()  # the ControlMaster does the crypto: count its CPU too
                m0 = proc_cpu(master)
                for _ in range(reps):
                    w, c = call(argv, stdin)
                    s.append(w / 1e3)
                    cpu += c
                    verify("%s %s" % (name, op), local if op == "bulk_read" else dst, src)
                cpu += proc_cpu(master) - m0
                emit(name, op, "s", s, cpu, 0, bytes=size << 20,
                     rss_kb=peak_rss(argv, stdin) if size <= 64 else 0)
            session.transfer(size, reps, src, local, dst)
        session.close()
    finally:
        stop_masters()
        if os.path.exists(local):
            os.unlink(local)


class SftpSession:
    """One long-lived `sftp -b -` for every transfer: OpenSSH's sftp without a process
    start per transfer. A transfer's time runs from writing its command to the reply
    of the `lpwd` written right after it (answered by sftp itself, no round trip):
    sftp runs batch commands one at a time and echoes each, line-buffered."""

    NAME = "sftp (one session)"

    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=ENV)
        self.master = cm_pid()
        self.command(b"")  # up, and its SFTP session open: the warm-up

    def command(self, cmd):
        """cmd (if any), then lpwd; returns when lpwd answered (sftp ended: the run fails)."""
        self.p.stdin.write((cmd + b"\n" if cmd else b"") + b"lpwd\n")
        self.p.stdin.flush()
        while True:
            line = self.p.stdout.readline()
            if not line:
                sys.exit("bench: %s: sftp ended (exit %s) after %r" % (self.NAME, self.p.wait(), cmd))
            if line.startswith(b"Local working directory"):
                return

    def cpu(self):
        return proc_cpu(self.p.pid) + proc_cpu(self.master)

    def transfer(self, size, reps, src, local, dst):
        for op, cmd, got in (("bulk_read", b"get %s %s" % (src.encode(), local.encode()), local),
                             ("bulk_write", b"put %s %s" % (src.encode(), dst.encode()), dst)):
            s, cpu = [], 0.0
            for _ in range(reps):
                c0, t = self.cpu(), now_ms()
                self.command(cmd)
                s.append((now_ms() - t) / 1e3)
                cpu += self.cpu() - c0
                verify("%s %s" % (self.NAME, op), got, src)
            emit(self.NAME, op, "s", s, cpu, 0, bytes=size << 20, rss_kb=self.hwm())

    def hwm(self):
        """The sftp process's own peak RSS so far, KiB."""
        try:
            with open("/proc/%d/status" % self.p.pid) as f:
                return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
        except (OSError, StopIteration):
            return 0

    def close(self):
        self.p.stdin.close()
        self.p.stdout.read()
        self.p.stdout.close()
        if self.p.wait() != 0:
            sys.exit("bench: %s: sftp exited %d" % (self.NAME, self.p.returncode))


def cold():
    """A whole process per call: ssh fresh, and asp-exec --no-master discovering .asp.json."""
    iters, warmup = arg_i("iters", 10), arg_i("warmup", 1)
    runs = [("ssh fresh", SSH + [DEST, "true"], None)]
    if ASP_EXEC:
        runs.append(("asp-exec --no-master", [ASP_EXEC, "--no-master", "true"], arg("start_dir")))
    for name, argv, cwd in runs:
        s, cpu = [], 0.0
        for i in range(warmup + iters):
            w, c = call(argv, cwd=cwd)
            if i >= warmup:
                s.append(w)
                cpu += c
        # probe=1 (bench/run.py's algorithm probe): one connection per client, in this order.
        emit(name, "cold", "ms", s, cpu, sum(s) / 1e3, rss_kb=0 if arg("probe") else peak_rss(argv, cwd=cwd))


WORKLOADS = {"lat": lat, "bulk": bulk, "cold": cold}

if __name__ == "__main__":
    os.makedirs(RUNDIR, mode=0o700, exist_ok=True)
    if not ASP_EXEC:
        emit_raw(peer="asp-exec", op="skipped", note=arg("asp_exec_note", "asp-exec not built"))
    WORKLOADS[arg("workload", "lat")]()
