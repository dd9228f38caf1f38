"""What the Python peers of bench/run.py share: key=value arguments, clocks,
CPU time, RSS, and the JSON lines they print (the same shape as
bench_common.h's)."""
import gc
import json
import os
import resource
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


def timed(fn, iters, warmup):
    """Run fn warmup times, then iters timed times: (samples_ms, cpu_s, wall_s)."""
    for _ in range(warmup):
        fn()
    s = []
    c0, w0 = cpu_s(), now_ms()
    for _ in range(iters):
        t = now_ms()
        fn()
        s.append(now_ms() - t)
    return s, cpu_s() - c0, (now_ms() - w0) / 1e3


async def atimed(fn, iters, warmup):
    for _ in range(warmup):
        await fn()
    s = []
    c0, w0 = cpu_s(), now_ms()
    for _ in range(iters):
        t = now_ms()
        await fn()
        s.append(now_ms() - t)
    return s, cpu_s() - c0, (now_ms() - w0) / 1e3


def sizes_reps():
    sizes = arg_list("sizes", "1,64,256")
    reps = arg_list("reps", "5,3,3")
    return [(s, reps[i] if i < len(reps) else reps[-1]) for i, s in enumerate(sizes)]
