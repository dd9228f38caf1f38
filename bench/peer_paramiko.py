"""paramiko peer of bench/run.py.

    /usr/bin/python3 bench/peer_paramiko.py workload=lat host=... port=... user=... key=...
        workspace=DIR iters=200 warmup=20

Workloads: lat, conc, bulk, cold, scale_conns. Writes are plain SFTP writes.
Concurrency: threads, channels spread over min(callers, max_conn) transports.
"""
import os
import socket
import sys
import threading
import warnings

warnings.filterwarnings("ignore")
import paramiko  # noqa: E402

from peer_common import (arg, arg_i, bg_rows, arg_list, cpu_s, emit, emit_raw, now_ms, path,  # noqa: E402
                         rss_kb, sizes_reps, small_data, timed, verify, ws_file)

PEER = arg("peer", "paramiko")


def connect():
    # paramiko leaves Nagle on; with sshd's delayed ACKs that costs ~40 ms per exec on
    # Linux. A user who cares passes a TCP_NODELAY socket, so we do too.
    sock = socket.create_connection((arg("host"), int(arg("port"))))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c = paramiko.SSHClient()
    c.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    c.connect(arg("host"), port=int(arg("port")), username=arg("user"), key_filename=arg("key"),
              look_for_keys=False, allow_agent=False, sock=sock)
    return c


def run_true(c):
    ch = c.get_transport().open_session()
    ch.exec_command("true")
    while ch.recv(65536):
        pass
    while ch.recv_stderr(65536):
        pass
    st = ch.recv_exit_status()
    ch.close()
    if st != 0:
        sys.exit("exec true: exit %s" % st)


def run_out(c, cmd):
    ch = c.get_transport().open_session()
    ch.exec_command(cmd)
    out = b""
    while True:
        b = ch.recv(65536)
        if not b:
            break
        out += b
    while ch.recv_stderr(65536):
        pass
    st = ch.recv_exit_status()
    ch.close()
    if st != 0:
        sys.exit("%s: exit %s" % (cmd, st))
    return out.decode()


def lat():
    c = connect()
    sftp = c.open_sftp()
    data = small_data()
    rpath, wpath = path("bench-4k.bin"), path("w-%s.bin" % arg("tag", PEER))

    def read4k():
        with sftp.open(rpath, "rb") as f:
            return f.read()

    def write4k():
        with sftp.open(wpath, "wb") as f:
            f.write(data)

    def stat():
        if sftp.stat(rpath).st_size != 4096:
            sys.exit("stat: size")

    iters, warmup = arg_i("iters", 100), arg_i("warmup", 10)
    checks = {"read4k": lambda got: verify("read4k", got, ws_file("bench-4k.bin")),
              "write4k": lambda _: verify("write4k", ws_file(os.path.basename(wpath)), data)}
    for name, fn in (("exec", lambda: run_true(c)), ("read4k", read4k), ("write4k", write4k),
                     ("stat", stat)):
        s, cpu, w = timed(fn, iters, warmup, checks.get(name))
        emit(PEER, name, "ms", s, cpu, w)
    bg_rows(PEER, lambda cmd: run_out(c, cmd), iters, warmup)
    sftp.close()
    c.close()


def conc():
    max_conn, ops = arg_i("max_conn", 16), arg_i("ops", 200)
    for callers in arg_list("callers", "1,4,16,64"):
        nconn = min(callers, max_conn)
        conns = [connect() for _ in range(nconn)]
        total = max(ops, callers * 2)

        def round_(n):
            lat = [0.0] * n
            nxt = iter(range(n))
            lock = threading.Lock()

            def worker(k):
                while True:
                    with lock:
                        i = next(nxt, None)
                    if i is None:
                        return
                    t = now_ms()
                    run_true(conns[k % nconn])
                    lat[i] = now_ms() - t
            th = [threading.Thread(target=worker, args=(k,)) for k in range(callers)]
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
        for c in conns:
            c.close()


def bulk():
    c = connect()
    sftp = c.open_sftp()
    local = os.path.join(arg("localdir"), "get-%s.bin" % PEER)
    dst = path("bw-%s.bin" % arg("tag", PEER))
    sftp.get(path("bench-4k.bin"), local)
    for size, reps in sizes_reps():
        src = path("bulk-%dM.bin" % size)
        for op, fn, got in (("bulk_read", lambda: sftp.get(src, local), local),
                            ("bulk_write", lambda: sftp.put(src, dst), dst)):
            s, cpu = [], 0.0
            for _ in range(reps):
                t, c0 = now_ms(), cpu_s()
                fn()
                s.append((now_ms() - t) / 1e3)
                cpu += cpu_s() - c0
                verify(op, got, src)  # the workspace is local: src and dst are its paths
            emit(PEER, op, "s", s, cpu, 0, bytes=size << 20)
    os.unlink(local)
    sftp.close()
    c.close()


def cold():
    iters, warmup = arg_i("iters", 10), arg_i("warmup", 1)
    s, cpu, wall = [], 0.0, 0.0
    for i in range(warmup + iters):
        t, c0 = now_ms(), cpu_s()
        c = connect()
        run_true(c)
        t = now_ms() - t
        if i >= warmup:
            s.append(t)
            cpu += cpu_s() - c0
            wall += t / 1e3
        c.close()
    emit(PEER, "cold", "ms", s, cpu, wall)


def scale_conns():
    n = arg_i("n", 10)
    warm = connect()
    run_true(warm)
    warm.close()
    rss0 = rss_kb()
    conns = []
    for _ in range(n):
        c = connect()
        run_true(c)
        conns.append(c)
    rss1 = rss_kb()
    emit_raw(peer=PEER, op="scale_conns", n=n, conns=n, rss_before_kb=rss0, rss_after_kb=rss1)
    for c in conns:
        c.close()


WORKLOADS = {"lat": lat, "conc": conc, "bulk": bulk, "cold": cold, "scale_conns": scale_conns}

if __name__ == "__main__":
    WORKLOADS[arg("workload", "lat")]()
