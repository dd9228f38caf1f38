"""asyncssh peer of bench/run.py (the ASP draft's reference client).

    /usr/bin/python3 bench/peer_asyncssh.py workload=lat host=... port=... user=... key=...
        host_key="ssh-ed25519 AAAA..." workspace=DIR iters=200 warmup=20

Workloads: lat, conc, bulk, cold, scale_conns, many (see bench/run.py). Writes are
plain SFTP writes (open/write/close), not atomic. Concurrency: asyncio tasks
spread over min(callers, max_conn) connections (channels multiplexed).
"""
import asyncio
import os
import sys
import warnings

warnings.filterwarnings("ignore")  # asyncssh imports deprecated ciphers on import
import asyncssh  # noqa: E402

from peer_common import (ThreadPeak, abg_rows, arg, arg_i, arg_list, atimed, cpu_s, emit, emit_many, Live,  # noqa: E402
                         emit_raw, many_data, now_ms, path, rss_kb, sizes_reps, small_data, verify, ws_file)

PEER = arg("peer", "asyncssh")


async def connect(port=None):
    # No compression, as every other peer: asyncssh would otherwise negotiate zlib@openssh.com
    # (its default) with the bench's sshd.
    pinned = asyncssh.import_public_key(arg("host_key"))
    return await asyncssh.connect(arg("host"), port=port or int(arg("port")), username=arg("user"),
                                  client_keys=[arg("key")], known_hosts=([pinned], [], []),
                                  agent_path=None, compression_algs=None)


async def run_true(conn):
    r = await conn.run("true", check=False)
    if r.exit_status != 0:
        sys.exit("exec true: exit %s" % r.exit_status)


async def lat():
    conn = await connect()
    sftp = await conn.start_sftp_client()
    data = small_data()
    rpath, wpath = path("bench-4k.bin"), path("w-%s.bin" % arg("tag", PEER))

    async def read4k():
        async with sftp.open(rpath, "rb") as f:
            return await f.read()

    async def write4k():
        async with sftp.open(wpath, "wb") as f:
            await f.write(data)

    async def stat():
        if (await sftp.stat(rpath)).size != 4096:
            sys.exit("stat: size")

    iters, warmup = arg_i("iters", 100), arg_i("warmup", 10)
    checks = {"read4k": lambda got: verify("read4k", got, ws_file("bench-4k.bin")),
              "write4k": lambda _: verify("write4k", ws_file(os.path.basename(wpath)), data)}
    for name, fn in (("exec", lambda: run_true(conn)), ("read4k", read4k), ("write4k", write4k),
                     ("stat", stat)):
        s, c, w = await atimed(fn, iters, warmup, checks.get(name))
        emit(PEER, name, "ms", s, c, w)

    async def run_out(cmd):
        r = await conn.run(cmd, check=False)
        if r.exit_status != 0:
            sys.exit("%s: exit %s" % (cmd, r.exit_status))
        return r.stdout

    await abg_rows(PEER, run_out, iters, warmup)
    sftp.exit()
    conn.close()
    await conn.wait_closed()


async def conc():
    max_conn, ops = arg_i("max_conn", 16), arg_i("ops", 200)
    for callers in arg_list("callers", "1,4,16,64"):
        nconn = min(callers, max_conn)
        conns = [await connect() for _ in range(nconn)]
        total = max(ops, callers * 2)

        async def round_(n):
            lat = [0.0] * n
            nxt = iter(range(n))

            async def worker(k):
                for i in nxt:
                    t = now_ms()
                    await run_true(conns[k % nconn])
                    lat[i] = now_ms() - t
            await asyncio.gather(*(worker(k) for k in range(callers)))
            return lat

        await round_(callers * 2)  # warm-up
        c0, w0 = cpu_s(), now_ms()
        lat = await round_(total)
        emit(PEER, "conc_exec", "ms", lat, cpu_s() - c0, (now_ms() - w0) / 1e3,
             callers=callers, conns=nconn)
        for c in conns:
            c.close()
            await c.wait_closed()


async def bulk():
    conn = await connect()
    sftp = await conn.start_sftp_client()
    local = os.path.join(arg("localdir"), "get-%s.bin" % PEER)
    dst = path("bw-%s.bin" % arg("tag", PEER))
    await sftp.get(path("bench-4k.bin"), local)
    for size, reps in sizes_reps():
        src = path("bulk-%dM.bin" % size)
        for op, fn, got in (("bulk_read", lambda: sftp.get(src, local), local),
                            ("bulk_write", lambda: sftp.put(src, dst), dst)):
            s, cpu = [], 0.0
            for _ in range(reps):
                t, c0 = now_ms(), cpu_s()
                await fn()
                s.append((now_ms() - t) / 1e3)
                cpu += cpu_s() - c0
                verify(op, got, src)  # the workspace is local: src and dst are its paths
            emit(PEER, op, "s", s, cpu, 0, bytes=size << 20)
    os.unlink(local)
    sftp.exit()
    conn.close()


async def cold():
    iters, warmup = arg_i("iters", 10), arg_i("warmup", 1)
    s, cpu, wall = [], 0.0, 0.0
    for i in range(warmup + iters):
        t, c0 = now_ms(), cpu_s()
        conn = await connect()
        await run_true(conn)
        t = now_ms() - t
        if i >= warmup:
            s.append(t)
            cpu += cpu_s() - c0
            wall += t / 1e3
        conn.close()
        await conn.wait_closed()
    emit(PEER, "cold", "ms", s, cpu, wall)


async def scale_conns():
    n = arg_i("n", 10)
    warm = await connect()
    await run_true(warm)
    warm.close()
    await warm.wait_closed()
    rss0 = rss_kb()
    conns = []
    for _ in range(n):
        c = await connect()
        await run_true(c)
        conns.append(c)
    rss1 = rss_kb()
    emit_raw(peer=PEER, op="scale_conns", n=n, conns=n, rss_before_kb=rss0, rss_after_kb=rss1)
    for c in conns:
        c.close()


async def many():
    """n connections at once in this one event loop (one per sandbox, ports= spread over the
    servers): connect, exec `sleep 1; echo i`, SFTP write 4 KiB (its session started then,
    as libasp starts SFTP at the first file call), read it back (checked), close."""
    n = arg_i("n", 10)
    ports = [int(p) for p in arg("ports").split(",")]
    warm = await connect(ports[0])
    await run_true(warm)
    warm.close()
    await warm.wait_closed()
    ms = [dict() for _ in range(n)]
    live = Live()

    async def one(i):
        m, data, name = ms[i], many_data(i), path("m-%d.bin" % i)
        t = now_ms()
        live.up()
        conn = await connect(ports[i % len(ports)])
        m["open"], t = now_ms() - t, now_ms()
        r = await conn.run("sleep 1; echo %d" % i, check=False)
        if r.exit_status != 0 or r.stdout != "%d\n" % i:
            sys.exit("exec %d: exit %s, %r" % (i, r.exit_status, r.stdout))
        m["exec"], t = now_ms() - t, now_ms()
        sftp = await conn.start_sftp_client()
        async with sftp.open(name, "wb") as f:
            await f.write(data)
        m["write"], t = now_ms() - t, now_ms()
        async with sftp.open(name, "rb") as f:
            if await f.read() != data:
                sys.exit("read %d: not what was written" % i)
        m["read"], t = now_ms() - t, now_ms()
        sftp.exit()
        conn.close()
        await conn.wait_closed()
        live.down()
        m["close"] = now_ms() - t

    rss0 = rss_kb()
    peak = ThreadPeak()
    c0, w0 = cpu_s(), now_ms()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall, cpu = (now_ms() - w0) / 1e3, cpu_s() - c0
    emit_many(PEER, n, wall, cpu, peak.stop(), ms, rss0, live.peak)


WORKLOADS = {"many": many, "lat": lat, "conc": conc, "bulk": bulk, "cold": cold, "scale_conns": scale_conns}

if __name__ == "__main__":
    asyncio.run(WORKLOADS[arg("workload", "lat")]())
