/*
 * bench_asp.c - the libasp peer of bench/run.py (links build/libasp.a).
 *
 *   bench_asp workload=lat config=.asp.json iters=200 warmup=20 [ops=exec,read4k]
 *   bench_asp workload=conc config=... callers=1,4,16,64 max_conn=16 ops=400
 *   bench_asp workload=bulk config=... sizes=1,64,256 reps=5,3,3
 *   bench_asp workload=cold start_dir=DIR iters=20
 *   bench_asp workload=scale_conns config=... workspace=DIR n=10 [fill=warm|callers]
 *   bench_asp workload=scale_handles configs=FILE n=10
 *   bench_asp workload=many configs=FILE n=100 [workers=W [all_open=1]]
 *
 * Prints JSON lines (bench_common.h). Connection setup is outside every
 * timed section except in `cold`.
 */
#include <signal.h>
#include <stdatomic.h>

#include "asp.h"
#include "bench_common.h"

static const char *peer;

static void check(int rc, const asp_error *e, const char *what)
{
	if (rc)
		die("%s: %s (%s)", what, e->message, asp_error_name(rc));
}

/* connect_timeout_ms: 0 is the library's default. */
static asp_sandbox *open_sb_timeout(const char *config, unsigned int max_conn, int lazy,
				    unsigned int connect_timeout_ms)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb;
	asp_error e;

	o.config_path = config;
	o.max_connections = max_conn;
	o.flags = lazy ? ASP_OPEN_LAZY : 0;
	o.connect_timeout_ms = connect_timeout_ms;
	check(asp_open(&sb, &o, &e), &e, config);
	return sb;
}

static asp_sandbox *open_sb(const char *config, unsigned int max_conn, int lazy)
{
	return open_sb_timeout(config, max_conn, lazy, 0);
}

static void run_true(asp_sandbox *sb)
{
	asp_exec_result *r;
	asp_error e;

	check(asp_exec(&r, sb, "true", NULL, &e), &e, "exec");
	if (asp_exec_result_exit_code(r) != 0)
		die("exec true: exit %d", asp_exec_result_exit_code(r));
	asp_exec_result_free(r);
}

/* ------------------------------------------------------------ lat */

enum { OP_EXEC, OP_READ, OP_WRITE, OP_WRITE_PLAIN, OP_STAT, OP_COUNT };
static const char *op_names[OP_COUNT] = { "exec", "read4k", "write4k", "write4k_nonatomic", "stat" };

static unsigned char *small;
static unsigned char *last_read; /* the last read4k's bytes, for verify_op */
static char wpath[128];

static void do_op(asp_sandbox *sb, int op)
{
	asp_error e;
	int rc;

	switch (op) {
	case OP_EXEC:
		run_true(sb);
		return;
	case OP_READ: {
		unsigned char *buf;
		size_t len;

		rc = asp_read(&buf, &len, sb, "bench-4k.bin", 0, ASP_READ_ALL, NULL, &e);
		check(rc, &e, "read");
		if (len != 4096)
			die("read: %zu bytes", len);
		asp_free(last_read);
		last_read = buf;
		return;
	}
	case OP_WRITE:
	case OP_WRITE_PLAIN: {
		asp_write_options wo = ASP_WRITE_OPTIONS_INIT;

		wo.flags = op == OP_WRITE_PLAIN ? ASP_WRITE_IN_PLACE : 0;
		check(asp_write(sb, wpath, small, 4096, &wo, &e), &e, "write");
		return;
	}
	case OP_STAT: {
		asp_stat_info st;

		check(asp_stat(&st, sb, "bench-4k.bin", NULL, &e), &e, "stat");
		if (st.size != 4096)
			die("stat: size %llu", (unsigned long long)st.size);
		return;
	}
	}
}

/* The bytes of op's last call (outside the timed region); returns the CPU seconds it took. */
static double verify_op(int op)
{
	double c0 = cpu_s();

	if (op == OP_READ)
		verify_file("read4k", "bench-4k.bin", last_read, 4096);
	else if (op == OP_WRITE || op == OP_WRITE_PLAIN)
		verify_file(op_names[op], wpath, small, 4096);
	return cpu_s() - c0;
}

/*
 * A write to a running command's stdin (asp_proc_write): it returns once the
 * bytes went out, without waiting for a reply, so it should cost well under
 * a round trip. Only the write is timed; the echo is read back untimed, so
 * that nothing piles up.
 */
static void lat_proc_write(asp_sandbox *sb, long iters, long warmup)
{
	samples s = { 0 };
	asp_proc *p;
	asp_error e;
	char buf[64];
	double c0 = 0, w0 = 0;

	check(asp_proc_start(&p, sb, "cat", NULL, &e), &e, "proc start");
	for (long i = 0; i < warmup + iters; i++) {
		size_t got = 0;
		double t;

		if (i == warmup) {
			c0 = cpu_s();
			w0 = now_ms();
		}
		t = now_ms();
		check(asp_proc_write(p, "x\n", 2, &e), &e, "proc write");
		if (i >= warmup)
			samples_add(&s, now_ms() - t);
		while (got < 2) {
			size_t n;
			check(asp_proc_read(&n, NULL, p, buf, sizeof(buf), 30000, &e), &e, "proc read");
			if (!n)
				die("proc read: the command ended");
			got += n;
		}
	}
	emit(peer, "proc_write", "ms", &s, cpu_s() - c0, (now_ms() - w0) / 1e3, NULL);
	free(s.v);
	asp_proc_free(p);
}

/*
 * Background processes (asp_bg_*): bg_start is asp_bg_start until the id is
 * returned; bg_first_output, right after it, is asp_bg_read from offset 0
 * until the first byte arrives (the command prints at once). The process is
 * waited for and removed untimed, so that none pile up.
 */
static void lat_bg(asp_sandbox *sb, long iters, long warmup)
{
	samples st = { 0 }, so = { 0 };
	double c0 = 0, w0 = 0, skip_c = 0, skip_w = 0;
	long reads = 0; /* asp_bg_read calls until the first byte, over the timed iterations */
	asp_error e;

	/* CPU and wall time exclude the untimed cleanup; each row gets half. */

	for (long i = 0; i < warmup + iters; i++) {
		asp_bg_status bs;
		unsigned char *out = NULL;
		size_t len = 0;
		char *id;
		double t, t1, u, c1;

		if (i == warmup) {
			c0 = cpu_s();
			w0 = now_ms();
		}
		t = now_ms();
		check(asp_bg_start(&id, sb, "echo x; exec sleep 1", NULL, &e), &e, "bg start");
		t1 = now_ms();
		while (!len) {
			asp_free(out);
			check(asp_bg_read(&out, &len, &bs, sb, id, 0, 0, NULL, &e), &e, "bg read");
			reads += i >= warmup;
			if (!len && !bs.output_open)
				die("bg read: %s ended without output", id);
		}
		if (i >= warmup) {
			samples_add(&st, t1 - t);
			samples_add(&so, now_ms() - t1);
		}
		u = now_ms();
		c1 = cpu_s();
		if (len != 2 || memcmp(out, "x\n", 2))
			die("bg read: %zu bytes, not \"x\\n\"", len);
		asp_free(out);
		check(asp_bg_signal(sb, id, SIGKILL, NULL, &e), &e, "bg signal");
		check(asp_bg_wait(&bs, sb, id, 30000, NULL, &e), &e, "bg wait");
		check(asp_bg_remove(sb, id, NULL, &e), &e, "bg remove");
		asp_free(id);
		if (i >= warmup) {
			skip_w += now_ms() - u;
			skip_c += cpu_s() - c1;
		}
	}
	c0 = (cpu_s() - c0 - skip_c) / 2;
	w0 = (now_ms() - w0 - skip_w) / 2e3;
	emit(peer, "bg_start", "ms", &st, c0, w0, NULL);
	emit(peer, "bg_first_output", "ms", &so, c0, w0, "\"reads_per_call\": %.2f",
	     iters ? (double)reads / (double)iters : 0.0);
	free(st.v);
	free(so.v);
}

static void lat(void)
{
	asp_sandbox *sb = open_sb(arg_s("config", NULL), 1, 0);
	long iters = arg_l("iters", 100), warmup = arg_l("warmup", 10);
	long pause = arg_l("pause_ms", 0); /* an agent's think time before each call */

	small = pattern(4096);
	snprintf(wpath, sizeof(wpath), "w-%s.bin", arg_s("tag", "libasp"));
	const char *only = arg_s("ops", NULL); /* e.g. ops=read4k,stat: a subset (for profiling) */

	for (int op = 0; op < OP_COUNT; op++) {
		samples s = { 0 };
		double c0, w0, skip_c = 0, skip_w = 0;

		if (only && !strstr(only, op_names[op]))
			continue;
		for (long i = 0; i < warmup; i++) {
			bench_pause(pause);
			do_op(sb, op);
			verify_op(op);
		}
		c0 = cpu_s();
		w0 = now_ms();
		for (long i = 0; i < iters; i++) {
			double t;
			bench_pause(pause);
			t = now_ms();
			do_op(sb, op);
			samples_add(&s, now_ms() - t);
			t = now_ms();
			skip_c += verify_op(op);
			skip_w += now_ms() - t;
		}
		emit(peer, op_names[op], "ms", &s, cpu_s() - c0 - skip_c, (now_ms() - w0 - skip_w) / 1e3, NULL);
		free(s.v);
	}
	if (!only || strstr(only, "proc_write"))
		lat_proc_write(sb, iters, warmup);
	if (!only || strstr(only, "bg_"))
		lat_bg(sb, iters, warmup);
	asp_close(sb);
	asp_free(last_read);
	free(small);
}

/* ------------------------------------------------------------ conc */

typedef struct conc_ctx {
	asp_sandbox *sb;
	atomic_long next;
	long ops;
	double *lat;
} conc_ctx;

static void *conc_worker(void *arg)
{
	conc_ctx *c = arg;
	long i;

	while ((i = atomic_fetch_add(&c->next, 1)) < c->ops) {
		double t = now_ms();
		run_true(c->sb);
		c->lat[i] = now_ms() - t;
	}
	return NULL;
}

static void conc_round(conc_ctx *c, long callers)
{
	atomic_store(&c->next, 0);
	bench_threads(callers, conc_worker, c);
}

static void conc(void)
{
	long callers[16], max_conn = arg_l("max_conn", 16), ops = arg_l("ops", 200);
	int n = arg_list("callers", "1,4,16,64", callers, 16);

	for (int k = 0; k < n; k++) {
		long conns = callers[k] < max_conn ? callers[k] : max_conn;
		long total = ops > callers[k] * 2 ? ops : callers[k] * 2;
		conc_ctx c = { .sb = open_sb(arg_s("config", NULL), (unsigned int)conns, 1) };
		samples s = { 0 };
		double c0, w0, wall;

		/* Warm-up round (connections made here): callers x 2 ops. */
		c.ops = callers[k] * 2;
		c.lat = calloc((size_t)c.ops, sizeof(double));
		conc_round(&c, callers[k]);
		free(c.lat);
		c.ops = total;
		c.lat = calloc((size_t)total, sizeof(double));
		c0 = cpu_s();
		w0 = now_ms();
		conc_round(&c, callers[k]);
		wall = (now_ms() - w0) / 1e3;
		s.v = c.lat;
		s.n = (size_t)total;
		emit(peer, "conc_exec", "ms", &s, cpu_s() - c0, wall, "\"callers\": %ld, \"conns\": %ld",
		     callers[k], conns);
		free(c.lat);
		asp_close(c.sb);
	}
}

/* ------------------------------------------------------------ bulk */

static void bulk(void)
{
	long sizes[8], reps[8];
	int ns = arg_list("sizes", "1,64,256", sizes, 8), nr = arg_list("reps", "5,3,3", reps, 8);
	/* The handle's default pool (0: 4 connections), which large transfers spread over. */
	asp_sandbox *sb = open_sb(arg_s("config", NULL), (unsigned int)arg_l("bulk_conns", 0), 0);
	long maxsz = 0;
	unsigned char *data;
	char dst[128];
	asp_error e;

	for (int i = 0; i < ns; i++)
		maxsz = sizes[i] > maxsz ? sizes[i] : maxsz;
	data = pattern((size_t)maxsz << 20);
	snprintf(dst, sizeof(dst), "bw-%s.bin", arg_s("tag", "libasp"));
	{ /* warm-up: the SFTP channel, one small transfer each way; and every connection a
	   * large transfer spreads over, made here as every peer's is: outside the timing */
		unsigned char *b;
		size_t len;
		long conns = arg_l("bulk_conns", 0);

		check(asp_sandbox_warm(sb, conns > 0 ? (unsigned int)conns : 4, NULL, &e), &e, "warm");
		check(asp_read(&b, &len, sb, "bench-4k.bin", 0, ASP_READ_ALL, NULL, &e), &e, "read");
		asp_free(b);
		check(asp_write(sb, dst, data, 4096, NULL, &e), &e, "write");
	}
	for (int i = 0; i < ns; i++) {
		size_t bytes = (size_t)sizes[i] << 20;
		long r = i < nr ? reps[i] : reps[nr - 1];
		char src[64];
		samples rs = { 0 }, ws = { 0 };
		double rc0, rcpu = 0, wcpu = 0;

		snprintf(src, sizeof(src), "bulk-%ldM.bin", sizes[i]);
		for (long j = 0; j < r; j++) {
			unsigned char *b;
			size_t len;
			double t = now_ms();

			rc0 = cpu_s();
			check(asp_read(&b, &len, sb, src, 0, ASP_READ_ALL, NULL, &e), &e, "bulk read");
			samples_add(&rs, (now_ms() - t) / 1e3);
			rcpu += cpu_s() - rc0;
			if (len != bytes)
				die("bulk read %s: %zu bytes", src, len);
			verify_file("bulk_read", src, b, len);
			asp_free(b);
		}
		for (long j = 0; j < r; j++) {
			double t = now_ms();

			rc0 = cpu_s();
			check(asp_write(sb, dst, data, bytes, NULL, &e), &e, "bulk write");
			samples_add(&ws, (now_ms() - t) / 1e3);
			wcpu += cpu_s() - rc0;
			verify_file("bulk_write", dst, data, bytes);
		}
		emit(peer, "bulk_read", "s", &rs, rcpu, 0, "\"bytes\": %zu", bytes);
		emit(peer, "bulk_write", "s", &ws, wcpu, 0, "\"bytes\": %zu", bytes);
		free(rs.v);
		free(ws.v);
	}
	asp_close(sb);
	free(data);
}

/* ------------------------------------------------------------ cold */

static void cold(void)
{
	long iters = arg_l("iters", 10), warmup = arg_l("warmup", 1);
	const char *start = arg_s("start_dir", NULL);
	samples s = { 0 }, so = { 0 }, sx = { 0 };
	double c0 = 0, cpu = 0, w = 0;

	for (long i = 0; i < warmup + iters; i++) {
		asp_open_options o = ASP_OPEN_OPTIONS_INIT;
		asp_sandbox *sb;
		asp_error e;
		double t = now_ms(), t1;

		c0 = cpu_s();
		o.start_dir = start; /* discovery: .asp.json in start_dir or a parent */
		check(asp_open(&sb, &o, &e), &e, "open");
		t1 = now_ms();
		run_true(sb);
		t1 = now_ms() - t1;
		t = now_ms() - t;
		if (i >= warmup) {
			cpu += cpu_s() - c0;
			w += t / 1e3;
			samples_add(&s, t);
			samples_add(&so, t - t1);
			samples_add(&sx, t1);
		}
		asp_close(sb);
	}
	emit(peer, "cold", "ms", &s, cpu, w, NULL);
	/* The two halves, for the report's breakdown. */
	emit(peer, "cold_open", "ms", &so, 0, 0, NULL);
	emit(peer, "cold_first_exec", "ms", &sx, 0, 0, NULL);
	free(s.v);
	free(so.v);
	free(sx.v);
}

/* ------------------------------------------------------------ scale */

static long count_sockets(void)
{
	char path[64], link[64];
	long n = 0;

	for (int fd = 0; fd < 4096; fd++) {
		ssize_t l;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		l = readlink(path, link, sizeof(link) - 1);
		if (l > 0) {
			link[l] = '\0';
			n += !strncmp(link, "socket:", 7);
		}
	}
	return n;
}

typedef struct hold_ctx {
	asp_sandbox *sb;
	const char *cmd;
	atomic_long *started;
} hold_ctx;

static int on_go(asp_stream stream, const unsigned char *d, size_t n, void *ud)
{
	hold_ctx *h = ud;

	if (stream == ASP_STDOUT && n)
		atomic_fetch_add(h->started, 1);
	return 0;
}

static void *hold_worker(void *arg)
{
	hold_ctx *h = arg;
	asp_exec_options xo = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r;
	asp_error e;

	xo.on_output = on_go;
	xo.userdata = h;
	check(asp_exec(&r, h->sb, h->cmd, &xo, &e), &e, "exec");
	asp_exec_result_free(r);
	return NULL;
}

/* n callers run cmd at once on sb; once all have started, the flag file lets them end. */
static void hold_round(asp_sandbox *sb, long n, const char *cmd, const char *flag, bench_thread *th,
		       hold_ctx *h)
{
	atomic_long started = 0;
	FILE *f;

	for (long i = 0; i < n; i++) {
		h[i] = (hold_ctx){ sb, cmd, &started };
		bench_thread_start(&th[i], hold_worker, &h[i]);
	}
	while (atomic_load(&started) < n)
		usleep(10000);
	if (!(f = fopen(flag, "w")))
		die("cannot create %s", flag);
	fclose(f);
	for (long i = 0; i < n; i++)
		bench_thread_join(&th[i]);
	unlink(flag);
}

/*
 * One pool, n connections. fill=warm: asp_sandbox_warm makes them one after
 * another in this thread, as the libssh2 peer makes its own. fill=callers
 * (the default): n callers run a command that waits for a flag at once
 * (prewarm=1: after one such round on a pool closed again).
 */
/*
 * What is measured here is memory, not speed: 100 handshakes at once on two
 * cores, beside the first callers' commands, passed the default 10 s connect
 * deadline (a full run on 2026-12-02).
 */
#define SCALE_CONNECT_MS 120000u

static void scale_conns(void)
{
	long n = arg_l("n", 10);
	const char *config = arg_s("config", NULL), *ws = arg_s("workspace", NULL);
	char flag[512], cmd[1200];
	asp_sandbox *sb;
	bench_thread *th = calloc((size_t)n, sizeof(*th));
	hold_ctx *h = calloc((size_t)n, sizeof(*h));
	long rss0, rss1, sock0, sock1, heap0, heap1, prewarm = arg_l("prewarm", 0);
	const char *fill = arg_s("fill", "callers");
	int warm = !strcmp(fill, "warm");
	asp_error e = { 0 };

	if (!ws)
		die("scale_conns needs workspace=");
	if (!warm && strcmp(fill, "callers"))
		die("fill=%s: expected warm or callers", fill);
	snprintf(flag, sizeof(flag), "%s/scale-flag-%s", ws, peer);
	unlink(flag);
	/*
	 * Bounded: a bench that dies, or a driver that removes the workspace,
	 * must not leave n loops forking `sleep` in the sandbox for good (closing
	 * a channel does not end its command). 10 minutes at most. Looking twice
	 * a second: n loops forking fast would starve the last handshakes of the
	 * CPU (n=100 at 50 forks a second each passed a 10 s connect deadline).
	 */
	snprintf(cmd, sizeof(cmd), "echo go; i=0; while [ ! -e 'scale-flag-%s' ] && [ -d '%s' ] && "
		 "[ $i -lt 1200 ]; do sleep 0.5; i=$((i+1)); done", peer, ws);
	/* Warm the library (libssh2, OpenSSL) with a handle we close again. */
	sb = open_sb(config, 1, 0);
	run_true(sb);
	asp_close(sb);
	/*
	 * prewarm=1: first a whole round the same way, closed again, so that
	 * what n concurrent callers grow in the process (malloc arenas, per-thread
	 * state) is there before the measured round (bench/LIMITS.md).
	 */
	if (prewarm) {
		sb = open_sb_timeout(config, (unsigned int)n, 1, SCALE_CONNECT_MS);
		hold_round(sb, n, cmd, flag, th, h);
		asp_close(sb);
	}
	sb = open_sb_timeout(config, (unsigned int)n, 1, SCALE_CONNECT_MS);
	rss0 = rss_kb();
	heap0 = heap_kb();
	sock0 = count_sockets();
	if (warm)
		check(asp_sandbox_warm(sb, (unsigned int)n, NULL, &e), &e, "asp_sandbox_warm");
	else
		hold_round(sb, n, cmd, flag, th, h);
	sock1 = count_sockets();
	rss1 = rss_kb();
	heap1 = heap_kb();
	printf("{\"peer\": \"%s\", \"op\": \"scale_conns\", \"n\": %ld, \"fill\": \"%s\", \"prewarm\": %ld, "
	       "\"conns\": %ld, \"rss_before_kb\": %ld, \"rss_after_kb\": %ld, \"heap_before_kb\": %ld, "
	       "\"heap_after_kb\": %ld}\n",
	       peer, n, fill, prewarm, sock1 - sock0, rss0, rss1, heap0, heap1);
	fflush(stdout);
	asp_close(sb);
	free(th);
	free(h);
}

/* n handles, each to its own .asp.json (one line of `configs` each), one exec each. */
static void scale_handles(void)
{
	long n = arg_l("n", 10);
	const char *list = arg_s("configs", NULL);
	char (*paths)[512] = calloc((size_t)n, sizeof(*paths));
	asp_sandbox **sbs = calloc((size_t)n, sizeof(*sbs));
	long count = 0, rss0, rss1, sock0, sock1, heap0, heap1;
	FILE *f = list ? fopen(list, "r") : NULL;
	asp_sandbox *warm;

	if (!f)
		die("scale_handles needs configs=FILE");
	while (count < n && fgets(paths[count], sizeof(paths[0]), f)) {
		paths[count][strcspn(paths[count], "\n")] = '\0';
		count++;
	}
	fclose(f);
	if (count < n)
		die("%s: %ld configs, need %ld", list, count, n);
	warm = open_sb(paths[0], 1, 0);
	run_true(warm);
	asp_close(warm);
	rss0 = rss_kb();
	heap0 = heap_kb();
	sock0 = count_sockets();
	for (long i = 0; i < n; i++) {
		sbs[i] = open_sb(paths[i], 0, 0);
		run_true(sbs[i]);
	}
	sock1 = count_sockets();
	rss1 = rss_kb();
	heap1 = heap_kb();
	printf("{\"peer\": \"%s\", \"op\": \"scale_handles\", \"n\": %ld, \"conns\": %ld, "
	       "\"rss_before_kb\": %ld, \"rss_after_kb\": %ld, \"heap_before_kb\": %ld, \"heap_after_kb\": %ld}\n",
	       peer, n, sock1 - sock0, rss0, rss1, heap0, heap1);
	fflush(stdout);
	for (long i = 0; i < n; i++)
		asp_close(sbs[i]);
	free(sbs);
	free(paths);
}

/* ------------------------------------------------------------ many */

/*
 * n sandboxes at once from this process, each its own handle (one line of
 * `configs` each): open, exec `sleep 1; echo i`, write 4 KiB, read it back
 * (content checked), close. The API blocks, so one caller thread per
 * sandbox; a sampler thread records the process's peak thread count.
 * With workers=W, W threads drive them all instead (many_worker): the
 * command runs with a handle (asp_proc_start), and a worker opens its next
 * sandbox or looks at its running commands (asp_proc_wait with 0) rather
 * than wait on one, so the threads do not grow with n. With all_open=1 as well,
 * no sandbox is closed before every sandbox is open: all n are open at
 * once, as in a run whose sandboxes live for the whole episode, and as
 * the peers that start every flow at once hold them.
 */
enum { MANY_OPEN, MANY_EXEC, MANY_WRITE, MANY_READ, MANY_CLOSE, MANY_PHASES };
static const char *many_phase[MANY_PHASES] = { "open", "exec", "write", "read", "close" };

typedef struct many_ctx {
	char (*paths)[512];
	double (*ms)[MANY_PHASES];
	long n, workers;
	int all_open;              /* close nothing before all n are open */
	_Atomic long next;
	_Atomic long workers_done; /* workers with every sandbox finished, none closed (all_open) */
	_Atomic int done;
	_Atomic long peak_threads;
	_Atomic long live;         /* sandboxes from the start of their open to the end of their close */
	_Atomic long peak_live;
} many_ctx;

static long threads_now(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long n = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Threads:", 8))
			n = atol(line + 8);
	fclose(f);
	return n;
}

static void *many_sampler(void *arg)
{
	many_ctx *m = arg;

	while (!m->done) {
		long t = threads_now();
		if (t > m->peak_threads)
			m->peak_threads = t;
		bench_pause(20);
	}
	return NULL;
}

/* Sandbox i's data, command, expected output and file name. */
static void many_item(long i, unsigned char data[4096], char cmd[64], char want[32], char name[64])
{
	for (size_t k = 0; k < 4096; k++)
		data[k] = (unsigned char)(i * 31 + k * 7);
	snprintf(cmd, 64, "sleep 1; echo %ld", i);
	snprintf(want, 32, "%ld\n", i);
	snprintf(name, 64, "m-%ld.bin", i);
}

static asp_sandbox *many_open(many_ctx *m, long i)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb;
	asp_error e;
	double t = now_ms();

	o.config_path = m->paths[i];
	o.max_connections = 1;
	o.connect_timeout_ms = SCALE_CONNECT_MS; /* as asyncssh's login_timeout, 120 s */
	for (long live = ++m->live, peak = m->peak_live; live > peak;)
		if (atomic_compare_exchange_weak(&m->peak_live, &peak, live))
			break;
	check(asp_open(&sb, &o, &e), &e, m->paths[i]);
	m->ms[i][MANY_OPEN] = now_ms() - t;
	return sb;
}

static void many_check_exec(long i, asp_exec_result *r)
{
	const unsigned char *out;
	char want[32];
	size_t len;

	snprintf(want, sizeof(want), "%ld\n", i);
	out = asp_exec_result_output(r, ASP_STDOUT, &len);
	if (asp_exec_result_exit_code(r) != 0 || len != strlen(want) || memcmp(out, want, len))
		die("exec %ld: exit %d, %zu bytes of output", i, asp_exec_result_exit_code(r), len);
	asp_exec_result_free(r);
}

static void many_close(many_ctx *m, long i, asp_sandbox *sb)
{
	double t = now_ms();

	asp_close(sb);
	m->live--;
	m->ms[i][MANY_CLOSE] = now_ms() - t;
}

/* After the command: write 4 KiB, read it back, close (unless all_open). */
static void many_finish(many_ctx *m, long i, asp_sandbox *sb)
{
	unsigned char data[4096], *back;
	char cmd[64], want[32], name[64];
	size_t len;
	asp_error e;
	double t;

	many_item(i, data, cmd, want, name);
	t = now_ms();
	check(asp_write(sb, name, data, sizeof(data), NULL, &e), &e, "write");
	m->ms[i][MANY_WRITE] = now_ms() - t;
	t = now_ms();
	check(asp_read(&back, &len, sb, name, 0, ASP_READ_ALL, NULL, &e), &e, "read");
	if (len != sizeof(data) || memcmp(back, data, len))
		die("read %ld: %zu bytes, not what was written", i, len);
	asp_free(back);
	m->ms[i][MANY_READ] = now_ms() - t;
	if (!m->all_open)
		many_close(m, i, sb);
}

static void *many_one(void *arg)
{
	many_ctx *m = arg;
	long i = m->next++;
	asp_exec_result *r;
	asp_sandbox *sb;
	unsigned char data[4096];
	char cmd[64], want[32], name[64];
	asp_error e;
	double t;

	many_item(i, data, cmd, want, name);
	sb = many_open(m, i);
	t = now_ms();
	check(asp_exec(&r, sb, cmd, NULL, &e), &e, "exec");
	many_check_exec(i, r);
	m->ms[i][MANY_EXEC] = now_ms() - t;
	many_finish(m, i, sb);
	return NULL;
}

/*
 * One of `workers` threads: sandboxes are taken from the shared counter;
 * each is opened and its command started with a handle, then the worker
 * goes on (the next open, or a look at what runs: asp_proc_wait_any). A
 * finished command's sandbox gets its write, read and close, and every
 * command that has ended is taken so before the next open. With no
 * sandbox left to open, it waits for any of its commands. With all_open,
 * the finished sandboxes wait (in `held`) until every worker has finished
 * all of its own, so all are open at once, and are closed then.
 */
static void *many_worker(void *arg)
{
	many_ctx *m = arg;
	long cap = m->n / m->workers + 2, nrun = 0;
	struct run {
		long i;
		asp_sandbox *sb;
		double t;
	} *run = calloc((size_t)cap, sizeof(*run));
	asp_proc **procs = calloc((size_t)cap, sizeof(*procs));
	struct run *held = NULL;
	long nheld = 0, held_cap = 0;

	if (!run || !procs)
		die("calloc");
	for (int taking = 0;;) { /* taking: the last look found one ended, so look again first */
		asp_exec_result *r;
		asp_error e;
		size_t k;
		int rc, opened = 0;
		long i = (!taking || nrun == 0) && nrun < cap ? m->next++ : m->n;

		if (i < m->n) {
			unsigned char data[4096];
			char cmd[64], want[32], name[64];

			many_item(i, data, cmd, want, name);
			run[nrun].i = i;
			run[nrun].sb = many_open(m, i);
			run[nrun].t = now_ms();
			check(asp_proc_start(&procs[nrun], run[nrun].sb, cmd, NULL, &e), &e, "proc_start");
			nrun++;
			opened = 1;
		} else if (nrun == 0) {
			break;
		}
		/* Having opened one, or more may end before the next open: a look; else a wait. */
		rc = asp_proc_wait_any(&k, procs, (size_t)nrun, opened || (taking && m->next < m->n) ? 0 : -1,
				       NULL, &e);
		taking = rc != ASP_ETIMEOUT;
		if (rc == ASP_ETIMEOUT)
			continue;
		check(rc, &e, "proc_wait_any");
		check(asp_proc_wait(&r, procs[k], 0, &e), &e, "proc_wait");
		m->ms[run[k].i][MANY_EXEC] = now_ms() - run[k].t;
		many_check_exec(run[k].i, r);
		asp_proc_free(procs[k]);
		many_finish(m, run[k].i, run[k].sb);
		if (m->all_open) {
			if (nheld == held_cap) {
				held_cap = held_cap ? 2 * held_cap : cap;
				if (!(held = realloc(held, (size_t)held_cap * sizeof(*held))))
					die("realloc");
			}
			held[nheld++] = run[k];
		}
		nrun--;
		run[k] = run[nrun];
		procs[k] = procs[nrun];
	}
	if (m->all_open) {
		/* Every sandbox this worker opened is finished; close them once all workers' are. */
		m->workers_done++;
		while (m->workers_done < m->workers)
			bench_pause(1);
		for (long k = 0; k < nheld; k++)
			many_close(m, held[k].i, held[k].sb);
	}
	free(held);
	free(procs);
	free(run);
	return NULL;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void many(void)
{
	long n = arg_l("n", 10), count = 0, workers = arg_l("workers", 0),
	     all_open = arg_l("all_open", 0);
	const char *list = arg_s("configs", NULL);
	many_ctx m = { 0 };
	FILE *f = list ? fopen(list, "r") : NULL;
	bench_thread sampler, *th;
	double c0, w0, wall, cpu, *col;
	asp_sandbox *warm;
	long rss0;

	if (!f)
		die("many needs configs=FILE");
	m.paths = calloc((size_t)n, sizeof(*m.paths));
	m.ms = calloc((size_t)n, sizeof(*m.ms));
	th = calloc((size_t)n, sizeof(*th));
	col = calloc((size_t)n, sizeof(*col));
	if (!m.paths || !m.ms || !th || !col)
		die("calloc");
	while (count < n && fgets(m.paths[count], sizeof(m.paths[0]), f)) {
		m.paths[count][strcspn(m.paths[count], "\n")] = '\0';
		count++;
	}
	fclose(f);
	if (count < n)
		die("%s: %ld configs, need %ld", list, count, n);
	/* Warm the library (libssh2, OpenSSL) with a handle we close again, as every peer does. */
	warm = open_sb(m.paths[0], 1, 0);
	run_true(warm);
	asp_close(warm);
	rss0 = rss_kb();
	bench_thread_start(&sampler, many_sampler, &m);
	c0 = cpu_s();
	w0 = now_ms();
	m.n = n;
	m.workers = workers > 0 && workers < n ? workers : n;
	m.all_open = workers > 0 && all_open;
	for (long i = 0; i < m.workers; i++)
		bench_thread_start(&th[i], workers > 0 ? many_worker : many_one, &m);
	for (long i = 0; i < m.workers; i++)
		bench_thread_join(&th[i]);
	wall = (now_ms() - w0) / 1e3;
	cpu = cpu_s() - c0;
	m.done = 1;
	bench_thread_join(&sampler);
	printf("{\"peer\": \"%s\", \"op\": \"many\", \"unit\": \"s\", \"n\": %ld, \"wall_s\": %.4f, "
	       "\"cpu_s\": %.4f, \"peak_threads\": %ld, \"rss0_kb\": %ld, "
	       "\"peak_open\": %ld, \"samples\": [%.4f], \"phases\": {",
	       peer, n, wall, cpu, (long)m.peak_threads, rss0, (long)m.peak_live, wall);
	for (int p = 0; p < MANY_PHASES; p++) {
		for (long i = 0; i < n; i++)
			col[i] = m.ms[i][p];
		qsort(col, (size_t)n, sizeof(*col), cmp_d);
		printf("%s\"%s\": [%.2f, %.2f]", p ? ", " : "", many_phase[p], col[n / 2], col[n - 1]);
	}
	printf("}}\n");
	fflush(stdout);
	free(m.paths);
	free(m.ms);
	free(th);
	free(col);
}

int main(int argc, char **argv)
{
	const char *w;

	bench_args(argc, argv);
	peer = arg_s("peer", "libasp");
	w = arg_s("workload", "lat");
	unsetenv("ASP_CONFIG");
	if (!strcmp(w, "lat"))
		lat();
	else if (!strcmp(w, "conc"))
		conc();
	else if (!strcmp(w, "bulk"))
		bulk();
	else if (!strcmp(w, "cold"))
		cold();
	else if (!strcmp(w, "scale_conns"))
		scale_conns();
	else if (!strcmp(w, "scale_handles"))
		scale_handles();
	else if (!strcmp(w, "many"))
		many();
	else
		die("unknown workload %s", w);
	return 0;
}
