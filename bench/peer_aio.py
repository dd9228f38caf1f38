"""asp.aio (the asyncio face of the Python binding) as a peer of bench/run.py.

    PYTHONPATH=bindings/python /usr/bin/python3 bench/peer_aio.py workload=conc config=.asp.json \
        callers=1,16,64 max_conn=16 ops=512

Workloads: many (n sandboxes at once, bench/run.py), lat (sequential exec, read4k, write4k, stat on one connection) and conc (exec "true"
from N asyncio tasks over min(N, max_conn) connections), shaped like peer_asyncssh.py's so the
rows compare with asyncssh's. conc also reports "python libasp aio (threads=callers)": the same
run with as many calls in flight per handle as tasks (threads=callers) instead of asp.aio's
default of one per connection (the measurement behind that default). Exits with status 3 and a note on stderr when the binding
cannot be imported.
"""
import asyncio
import sys

from peer_common import (ThreadPeak, arg, arg_i, arg_list, atimed, cpu_s, emit, emit_many, Live, many_data, now_ms,
                         rss_kb, small_data, verify, ws_file)

try:
    import asp.aio
except Exception as e:  # the binding may not be there yet
    print("bench: the Python binding is not importable: %s" % e, file=sys.stderr)
    sys.exit(3)

PEER = arg("peer", "python libasp aio")


async def run_true(sb):
    r = await sb.exec("true")
    if r.exit_code != 0:
        sys.exit("exec true: exit %s" % r.exit_code)


async def lat():
    data = small_data()
    wname = "w-%s.bin" % arg("tag", "pyaio")
    async with asp.aio.open(config=arg("config"), max_connections=1) as sb:
        async def read4k():
            return await sb.read("bench-4k.bin")

        async def stat():
            if (await sb.stat("bench-4k.bin")).size != 4096:
                sys.exit("stat: size")

        iters, warmup = arg_i("iters", 100), arg_i("warmup", 10)
        for name, fn in (("exec", lambda: run_true(sb)), ("read4k", read4k),
                         ("write4k", lambda: sb.write(wname, data)), ("stat", stat)):
            check = {"read4k": lambda got: verify("read4k", got, ws_file("bench-4k.bin")),
                     "write4k": lambda _: verify("write4k", ws_file(wname), data)}.get(name)
            s, c, w = await atimed(fn, iters, warmup, check)
            emit(PEER, name, "ms", s, c, w)


async def conc_round(sb, callers, n):
    lat = [0.0] * n
    nxt = iter(range(n))

    async def worker():
        for i in nxt:
            t = now_ms()
            await run_true(sb)
            lat[i] = now_ms() - t
    await asyncio.gather(*(worker() for _ in range(callers)))
    return lat


async def conc():
    max_conn, ops = arg_i("max_conn", 16), arg_i("ops", 200)
    for callers in arg_list("callers", "1,4,16,64"):
        nconn = min(callers, max_conn)
        total = max(ops, callers * 2)
        for name, threads in ((PEER, None), (PEER + " (threads=callers)", callers)):
            if threads is not None and threads == nconn:
                continue  # the same configuration as the default
            async with asp.aio.open(config=arg("config"), max_connections=nconn, lazy=True,
                                    threads=threads) as sb:
                await conc_round(sb, callers, callers * 2)  # warm-up: connects
                c0, w0 = cpu_s(), now_ms()
                lat = await conc_round(sb, callers, total)
                emit(name, "conc_exec", "ms", lat, cpu_s() - c0, (now_ms() - w0) / 1e3,
                     callers=callers, conns=nconn)


async def many():
    """n sandboxes at once, each its own handle (one line of `configs` each): open, exec
    `sleep 1; echo i`, write 4 KiB, read it back (checked), close."""
    n = arg_i("n", 10)
    with open(arg("configs")) as f:
        paths = f.read().split()[:n]
    async with asp.aio.open(config=paths[0], max_connections=1) as sb:  # warm the library
        await run_true(sb)
    ms = [dict() for _ in range(n)]
    live = Live()

    async def one(i):
        m, data = ms[i], many_data(i)
        t = now_ms()
        live.up()
        sb = await asp.aio.open(config=paths[i], max_connections=1, connect_timeout=120)
        m["open"], t = now_ms() - t, now_ms()
        r = await sb.exec("sleep 1; echo %d" % i)
        if r.exit_code != 0 or r.stdout != b"%d\n" % i:
            sys.exit("exec %d: exit %s, %r" % (i, r.exit_code, r.stdout))
        m["exec"], t = now_ms() - t, now_ms()
        await sb.write("m-%d.bin" % i, data)
        m["write"], t = now_ms() - t, now_ms()
        if await sb.read("m-%d.bin" % i) != data:
            sys.exit("read %d: not what was written" % i)
        m["read"], t = now_ms() - t, now_ms()
        await sb.close()
        live.down()
        m["close"] = now_ms() - t

    rss0 = rss_kb()
    peak = ThreadPeak()
    c0, w0 = cpu_s(), now_ms()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall, cpu = (now_ms() - w0) / 1e3, cpu_s() - c0
    emit_many(PEER, n, wall, cpu, peak.stop(), ms, rss0, live.peak)


WORKLOADS = {"lat": lat, "conc": conc, "many": many}

if __name__ == "__main__":
    asyncio.run(WORKLOADS[arg("workload", "lat")]())
