"""The libasp Python binding (bindings/python) as a peer of bench/run.py.

    PYTHONPATH=bindings/python /usr/bin/python3 bench/peer_pyasp.py workload=lat config=.asp.json ...

Same workloads and operations as bench_asp.c (writes are atomic, as there).
Exits with status 3 and a note on stderr when the binding cannot be imported.
"""
import os
import sys
import threading

from peer_common import (arg, arg_i, arg_list, cpu_s, emit, now_ms, sizes_reps, small_data,
                         timed, verify, ws_file)

try:
    import asp
except Exception as e:  # the binding may not be there yet
    print("bench: the Python binding is not importable: %s" % e, file=sys.stderr)
    sys.exit(3)

PEER = arg("peer", "python libasp")


def run_true(sb):
    r = sb.exec("true")
    if r.exit_code != 0:
        sys.exit("exec true: exit %s" % r.exit_code)


def lat():
    sb = asp.open(config=arg("config"), max_connections=1)
    data = small_data()
    wname = "w-%s.bin" % arg("tag", "pyasp")

    def read4k():
        return sb.read("bench-4k.bin")

    def stat():
        if sb.stat("bench-4k.bin").size != 4096:
            sys.exit("stat: size")

    iters, warmup = arg_i("iters", 100), arg_i("warmup", 10)
    for name, fn in (("exec", lambda: run_true(sb)), ("read4k", read4k),
                     ("write4k", lambda: sb.write(wname, data)),
                     ("write4k_nonatomic", lambda: sb.write(wname, data, atomic=False)),
                     ("stat", stat)):
        check = (lambda got: verify(name, got, ws_file("bench-4k.bin"))) if name == "read4k" else \
            (lambda _: verify(name, ws_file(wname), data)) if name.startswith("write") else None
        s, c, w = timed(fn, iters, warmup, check)
        emit(PEER, name, "ms", s, c, w)
    sb.close()


def conc():
    max_conn, ops = arg_i("max_conn", 16), arg_i("ops", 200)
    for callers in arg_list("callers", "1,4,16,64"):
        nconn = min(callers, max_conn)
        sb = asp.open(config=arg("config"), max_connections=nconn, lazy=True)
        total = max(ops, callers * 2)

        def round_(n):
            lat = [0.0] * n
            nxt = iter(range(n))
            lock = threading.Lock()

            def worker():
                while True:
                    with lock:
                        i = next(nxt, None)
                    if i is None:
                        return
                    t = now_ms()
                    run_true(sb)
                    lat[i] = now_ms() - t
            th = [threading.Thread(target=worker) for _ in range(callers)]
            for t in th:
                t.start()
            for t in th:
                t.join()
            return lat

        round_(callers * 2)
        c0, w0 = cpu_s(), now_ms()
        lat = round_(total)
        emit(PEER, "conc_exec", "ms", lat, cpu_s() - c0, (now_ms() - w0) / 1e3,
             callers=callers, conns=nconn)
        sb.close()


def bulk():
    sb = asp.open(config=arg("config"), max_connections=1)
    dst = "bw-%s.bin" % arg("tag", "pyasp")
    sb.read("bench-4k.bin")
    sb.write(dst, b"x" * 4096)
    big = os.urandom(max(s for s, _ in sizes_reps()) << 20)
    for size, reps in sizes_reps():
        src, n = "bulk-%dM.bin" % size, size << 20
        view = memoryview(big)[:n]
        for op, fn, check in (("bulk_read", lambda: sb.read(src),
                               lambda got: verify("bulk_read", got, ws_file(src))),
                              ("bulk_write", lambda: sb.write(dst, view),
                               lambda _: verify("bulk_write", ws_file(dst), view))):
            s, cpu = [], 0.0
            for _ in range(reps):
                t, c0 = now_ms(), cpu_s()
                got = fn()
                s.append((now_ms() - t) / 1e3)
                cpu += cpu_s() - c0
                check(got)
                got = None
            emit(PEER, op, "s", s, cpu, 0, bytes=n)
    sb.close()


def cold():
    iters, warmup = arg_i("iters", 10), arg_i("warmup", 1)
    s, cpu, wall = [], 0.0, 0.0
    os.environ.pop("ASP_CONFIG", None)
    for i in range(warmup + iters):
        t, c0 = now_ms(), cpu_s()
        sb = asp.open(start_dir=arg("start_dir"))
        run_true(sb)
        t = now_ms() - t
        if i >= warmup:
            s.append(t)
            cpu += cpu_s() - c0
            wall += t / 1e3
        sb.close()
    emit(PEER, "cold", "ms", s, cpu, wall)


WORKLOADS = {"lat": lat, "conc": conc, "bulk": bulk, "cold": cold}

if __name__ == "__main__":
    WORKLOADS[arg("workload", "lat")]()
