"""What the Python peers of bench/run.py share: key=value arguments, clocks,
CPU time, RSS, and the JSON lines they print (the same shape as
bench_common.h's)."""
import gc
import json
import os
import resource
import shlex
import sys
import time

ARGS = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)


def arg(key, default=None):
    return ARGS.get(key, default)


def arg_i(key, default):
    return int(ARGS.get(key, default))


def arg_list(key, default):
    return [int(x) for x in ARGS.get(key, default).split(",") if x]


def now_ms():
    return time.perf_counter() * 1e3


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_kb():
    gc.collect()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def emit(peer, op, unit, samples, cpu, wall, **extra):
    d = {"peer": peer, "op": op, "unit": unit, "cpu_s": round(cpu, 6), "wall_s": round(wall, 6)}
    d.update(extra)
    d["samples"] = [round(x, 4) for x in samples]
    print(json.dumps(d), flush=True)


def emit_raw(**d):
    print(json.dumps(d), flush=True)


def path(rel):
    """Absolute remote path of a workspace-relative name (SFTP needs it)."""
    return os.path.join(arg("workspace"), rel)


def small_data():
    return os.urandom(4096)


CHUNK = 1 << 20


class _Reader:
    """read(n) over bytes-like data or a local file's path (never whole in memory)."""

    def __init__(self, src):
        self.f, self.m, self.off = None, None, 0
        if isinstance(src, str):
            self.f = open(src, "rb")
        else:
            self.m = memoryview(src).cast("B")

    def read(self, n):
        if self.f:
            return self.f.read(n)
        b = bytes(self.m[self.off:self.off + n])
        self.off += len(b)
        return b

    def close(self):
        if self.f:
            self.f.close()


def verify(what, got, want):
    """Content check, outside every timed region: got and want (bytes-like, or local
    file paths: the workspace is the sandbox's side of the same bytes) must be equal,
    byte for byte. A mismatch ends the peer with "content mismatch" (bench/run.py then
    fails the run)."""
    a, b, off = _Reader(got), _Reader(want), 0
    try:
        while True:
            x, y = a.read(CHUNK), b.read(CHUNK)
            if x != y:
                sys.exit("bench: %s: content mismatch at or after byte %d (%s)" %
                         (what, off, "lengths differ" if len(x) != len(y) else "bytes differ"))
            if not x:
                return
            off += len(x)
    finally:
        a.close()
        b.close()


def ws_file(rel):
    """The local path of a workspace file (bench/run.py's sandbox is on this machine)."""
    return os.path.join(arg("workspace"), rel)


def timed(fn, iters, warmup, check=None):
    """Run fn warmup times, then iters timed times: (samples_ms, cpu_s, wall_s).
    check(result of fn), when given, runs after every call (warm-up too), outside
    the samples, the CPU and the wall time."""
    for _ in range(warmup):
        r = fn()
        if check:
            check(r)
    s = []
    c0, w0, skip_c, skip_w = cpu_s(), now_ms(), 0.0, 0.0
    for _ in range(iters):
        t = now_ms()
        r = fn()
        s.append(now_ms() - t)
        if check:
            k0, t0 = cpu_s(), now_ms()
            check(r)
            skip_c, skip_w = skip_c + cpu_s() - k0, skip_w + now_ms() - t0
    return s, cpu_s() - c0 - skip_c, (now_ms() - w0 - skip_w) / 1e3


async def atimed(fn, iters, warmup, check=None):
    for _ in range(warmup):
        r = await fn()
        if check:
            check(r)
    s = []
    c0, w0, skip_c, skip_w = cpu_s(), now_ms(), 0.0, 0.0
    for _ in range(iters):
        t = now_ms()
        r = await fn()
        s.append(now_ms() - t)
        if check:
            k0, t0 = cpu_s(), now_ms()
            check(r)
            skip_c, skip_w = skip_c + cpu_s() - k0, skip_w + now_ms() - t0
    return s, cpu_s() - c0 - skip_c, (now_ms() - w0 - skip_w) / 1e3


def sizes_reps():
    sizes = arg_list("sizes", "1,64,256")
    reps = arg_list("reps", "5,3,3")
    return [(s, reps[i] if i < len(reps) else reps[-1]) for i, s in enumerate(sizes)]


MANY_PHASES = ("open", "exec", "write", "read", "close")


class ThreadPeak:
    """Samples the process's thread count (/proc/self/status) every 20 ms until stopped."""

    def __init__(self):
        import threading
        self.peak, self._stop = 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    @staticmethod
    def now():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
        return -1

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            self._stop.wait(0.02)

    def stop(self):
        self._stop.set()
        self._t.join()
        return self.peak


def many_data(i):
    return bytes((i * 31 + k * 7) & 0xff for k in range(4096))


class Live:
    """Sandboxes from the start of their open to the end of their close, and their peak (one
    event loop: no lock)."""

    def __init__(self):
        self.now = self.peak = 0

    def up(self):
        self.now += 1
        self.peak = max(self.peak, self.now)

    def down(self):
        self.now -= 1


def emit_many(peer, n, wall, cpu, peak_threads, ms, rss0, peak_open):
    """ms: one dict phase -> milliseconds per sandbox. Median and max of each phase. rss0: the
    process's RSS (KiB) when the N flows started, after the warm-up; peak_open: the most sandboxes
    open at once (Live)."""
    phases = {}
    for p in MANY_PHASES:
        col = sorted(m[p] for m in ms)
        phases[p] = [round(col[len(col) // 2], 2), round(col[-1], 2)]
    emit_raw(peer=peer, op="many", unit="s", n=n, wall_s=round(wall, 4), cpu_s=round(cpu, 4),
             peak_threads=peak_threads, rss0_kb=rss0, peak_open=peak_open, samples=[round(wall, 4)],
             phases=phases)


# The bg rows of the SSH-library peers: what a harness without asp_bg_* does. One exec starts
# the command detached (setsid, its output to a log file in the workspace) and prints its pid;
# then execs of `cat LOG` until the first byte is there. Cleanup (kill, rm) is untimed.
BG_COMMAND = "echo x; exec sleep 1"


def bg_start_cmd(log):
    return "setsid sh -c %s >%s 2>&1 </dev/null & echo $!" % (shlex.quote(BG_COMMAND), shlex.quote(log))


def bg_read_cmd(log):
    return "cat %s" % shlex.quote(log)


def bg_cleanup_cmd(pid, log):
    return "kill %d 2>/dev/null; rm -f %s" % (pid, shlex.quote(log))


def bg_check(out):
    if out != "x\n":
        sys.exit("bg first output: %r, not 'x\\n'" % out)


def bg_rows(peer, run, iters, warmup):
    """run(command) -> its stdout (str), one exec. Emits bg_start and bg_first_output."""
    st, so, cpu, wall, reads = [], [], 0.0, 0.0, 0
    for i in range(warmup + iters):
        log = path("bg-%s-%d.log" % (arg("tag", peer), i))
        c0, t = cpu_s(), now_ms()
        pid = int(run(bg_start_cmd(log)))
        t1 = now_ms()
        out = ""
        while not out:
            out = run(bg_read_cmd(log))
            reads += i >= warmup
        t2, c1 = now_ms(), cpu_s()
        bg_check(out)
        run(bg_cleanup_cmd(pid, log))
        if i >= warmup:
            st.append(t1 - t)
            so.append(t2 - t1)
            cpu, wall = cpu + c1 - c0, wall + (t2 - t) / 1e3
    emit(peer, "bg_start", "ms", st, cpu / 2, wall / 2)
    emit(peer, "bg_first_output", "ms", so, cpu / 2, wall / 2, reads_per_call=reads / max(1, iters))


async def abg_rows(peer, run, iters, warmup):
    """bg_rows with an async run."""
    st, so, cpu, wall, reads = [], [], 0.0, 0.0, 0
    for i in range(warmup + iters):
        log = path("bg-%s-%d.log" % (arg("tag", peer), i))
        c0, t = cpu_s(), now_ms()
        pid = int(await run(bg_start_cmd(log)))
        t1 = now_ms()
        out = ""
        while not out:
            out = await run(bg_read_cmd(log))
            reads += i >= warmup
        t2, c1 = now_ms(), cpu_s()
        bg_check(out)
        await run(bg_cleanup_cmd(pid, log))
        if i >= warmup:
            st.append(t1 - t)
            so.append(t2 - t1)
            cpu, wall = cpu + c1 - c0, wall + (t2 - t) / 1e3
    emit(peer, "bg_start", "ms", st, cpu / 2, wall / 2)
    emit(peer, "bg_first_output", "ms", so, cpu / 2, wall / 2, reads_per_call=reads / max(1, iters))
