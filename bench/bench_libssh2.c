/*
 * bench_libssh2.c - the floor of this stack for bench/run.py: plain
 * blocking libssh2, a channel per exec and one SFTP session per connection
 * through libssh2_sftp_* (what a straightforward C client would write).
 *
 *   bench_libssh2 workload=lat host=127.0.0.1 port=N user=U key=FILE iters=200 warmup=20
 *   bench_libssh2 workload=conc ... callers=1,4,16,64 max_conn=16 ops=400
 *   bench_libssh2 workload=bulk ... sizes=1,64,256 reps=5,3,3 workspace=DIR
 *   bench_libssh2 workload=cold ... iters=20
 *   bench_libssh2 workload=scale_conns ... n=10
 *
 * Relative paths are resolved against workspace= (SFTP paths are absolute
 * or relative to the login directory). The host key is not checked (it
 * costs nothing measurable either way).
 */
#include <arpa/inet.h>
#include <libssh2.h>
#include <libssh2_sftp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "bench_common.h"

#define PEER "libssh2"

typedef struct conn {
	int fd;
	LIBSSH2_SESSION *s;
	LIBSSH2_SFTP *sftp;
} conn;

static const char *ws;

static void ssh_die(LIBSSH2_SESSION *s, const char *what)
{
	char *msg = NULL;

	libssh2_session_last_error(s, &msg, NULL, 0);
	die("%s: %s", what, msg ? msg : "?");
}

static conn *conn_open(int with_sftp)
{
	conn *c = calloc(1, sizeof(*c));
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int one = 1;

	sa.sin_port = htons((uint16_t)arg_l("port", 22));
	inet_pton(AF_INET, arg_s("host", "127.0.0.1"), &sa.sin_addr);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect");
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->s = libssh2_session_init();
	libssh2_session_set_blocking(c->s, 1);
	if (libssh2_session_handshake(c->s, c->fd))
		ssh_die(c->s, "handshake");
	if (libssh2_userauth_publickey_fromfile(c->s, arg_s("user", "asp-test"), NULL,
						arg_s("key", NULL), NULL))
		ssh_die(c->s, "auth");
	if (with_sftp && !(c->sftp = libssh2_sftp_init(c->s)))
		ssh_die(c->s, "sftp_init");
	return c;
}

static void conn_close(conn *c)
{
	if (c->sftp)
		libssh2_sftp_shutdown(c->sftp);
	libssh2_session_disconnect(c->s, "bye");
	libssh2_session_free(c->s);
	close(c->fd);
	free(c);
}

static void run_true(conn *c)
{
	char buf[4096];
	LIBSSH2_CHANNEL *ch = libssh2_channel_open_session(c->s);

	if (!ch)
		ssh_die(c->s, "channel_open");
	if (libssh2_channel_exec(ch, "true"))
		ssh_die(c->s, "exec");
	while (libssh2_channel_read(ch, buf, sizeof(buf)) > 0)
		;
	while (libssh2_channel_read_stderr(ch, buf, sizeof(buf)) > 0)
		;
	libssh2_channel_close(ch);
	libssh2_channel_wait_closed(ch);
	if (libssh2_channel_get_exit_status(ch) != 0)
		die("exec true: exit %d", libssh2_channel_get_exit_status(ch));
	libssh2_channel_free(ch);
}

static void path_of(char *out, size_t len, const char *rel)
{
	snprintf(out, len, "%s/%s", ws, rel);
}

/* Read a file until EOF (or cap bytes) into buf; returns the byte count. */
static size_t sftp_read_all(conn *c, const char *rel, unsigned char *buf, size_t cap, size_t chunk)
{
	char p[512];
	LIBSSH2_SFTP_HANDLE *h;
	size_t got = 0;
	ssize_t n = 0;

	path_of(p, sizeof(p), rel);
	if (!(h = libssh2_sftp_open(c->sftp, p, LIBSSH2_FXF_READ, 0)))
		ssh_die(c->s, "sftp_open read");
	while (got < cap && (n = libssh2_sftp_read(h, (char *)buf + got,
						   cap - got < chunk ? cap - got : chunk)) > 0)
		got += (size_t)n;
	if (n < 0)
		ssh_die(c->s, "sftp_read");
	libssh2_sftp_close(h);
	return got;
}

static void sftp_write_all(conn *c, const char *rel, const unsigned char *data, size_t len, size_t chunk)
{
	char p[512];
	LIBSSH2_SFTP_HANDLE *h;
	size_t off = 0;

	path_of(p, sizeof(p), rel);
	h = libssh2_sftp_open(c->sftp, p, LIBSSH2_FXF_WRITE | LIBSSH2_FXF_CREAT | LIBSSH2_FXF_TRUNC, 0644);
	if (!h)
		ssh_die(c->s, "sftp_open write");
	while (off < len) {
		ssize_t n = libssh2_sftp_write(h, (const char *)data + off, len - off < chunk ? len - off : chunk);
		if (n < 0)
			ssh_die(c->s, "sftp_write");
		off += (size_t)n;
	}
	libssh2_sftp_close(h);
}

/* ------------------------------------------------------------ lat */

static const char *op_names[] = { "exec", "read4k", "write4k", "stat" };

static void lat(void)
{
	conn *c = conn_open(1);
	long iters = arg_l("iters", 100), warmup = arg_l("warmup", 10);
	long pause = arg_l("pause_ms", 0); /* an agent's think time before each call */
	const char *only = arg_s("ops", NULL);
	unsigned char *data = pattern(4096), buf[8192];
	char wname[64], p[512];

	snprintf(wname, sizeof(wname), "w-%s.bin", arg_s("tag", PEER));
	path_of(p, sizeof(p), "bench-4k.bin");
	for (int op = 0; op < 4; op++) {
		samples s = { 0 };
		double c0 = 0, w0 = 0, skip_c = 0, skip_w = 0;

		if (only && !strstr(only, op_names[op]))
			continue;
		for (long i = 0; i < warmup + iters; i++) {
			double t;
			LIBSSH2_SFTP_ATTRIBUTES a;

			if (i == warmup) {
				c0 = cpu_s();
				w0 = now_ms();
			}
			bench_pause(pause);
			t = now_ms();
			switch (op) {
			case 0:
				run_true(c);
				break;
			case 1:
				if (sftp_read_all(c, "bench-4k.bin", buf, sizeof(buf), sizeof(buf)) != 4096)
					die("read4k: short");
				break;
			case 2:
				sftp_write_all(c, wname, data, 4096, 4096);
				break;
			case 3:
				if (libssh2_sftp_stat(c->sftp, p, &a) || a.filesize != 4096)
					ssh_die(c->s, "stat");
				break;
			}
			if (i >= warmup)
				samples_add(&s, now_ms() - t);
			if (op == 1 || op == 2) { /* the bytes, outside the samples, CPU and wall */
				double k0 = cpu_s(), t0 = now_ms();

				if (op == 1)
					verify_file("read4k", "bench-4k.bin", buf, 4096);
				else
					verify_file("write4k", wname, data, 4096);
				if (i >= warmup) {
					skip_c += cpu_s() - k0;
					skip_w += now_ms() - t0;
				}
			}
		}
		emit(PEER, op_names[op], "ms", &s, cpu_s() - c0 - skip_c, (now_ms() - w0 - skip_w) / 1e3, NULL);
		free(s.v);
	}
	free(data);
	conn_close(c);
}

/* ------------------------------------------------------------ conc */

typedef struct pool {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	conn **idle;
	long nidle;
	atomic_long next;
	long ops;
	double *lat;
} pool;

static void *conc_worker(void *arg)
{
	pool *p = arg;
	long i;

	while ((i = atomic_fetch_add(&p->next, 1)) < p->ops) {
		double t = now_ms();
		conn *c;

		pthread_mutex_lock(&p->mu);
		while (!p->nidle)
			pthread_cond_wait(&p->cv, &p->mu);
		c = p->idle[--p->nidle];
		pthread_mutex_unlock(&p->mu);
		run_true(c);
		pthread_mutex_lock(&p->mu);
		p->idle[p->nidle++] = c;
		pthread_cond_signal(&p->cv);
		pthread_mutex_unlock(&p->mu);
		p->lat[i] = now_ms() - t;
	}
	return NULL;
}

static void conc_round(pool *p, long callers, long ops)
{
	p->ops = ops;
	p->lat = calloc((size_t)ops, sizeof(double));
	atomic_store(&p->next, 0);
	bench_threads(callers, conc_worker, p);
}

static void conc(void)
{
	long callers[16], max_conn = arg_l("max_conn", 16), ops = arg_l("ops", 200);
	int n = arg_list("callers", "1,4,16,64", callers, 16);

	for (int k = 0; k < n; k++) {
		long conns = callers[k] < max_conn ? callers[k] : max_conn;
		long total = ops > callers[k] * 2 ? ops : callers[k] * 2;
		pool p = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
		samples s;
		double c0, w0, wall;

		p.idle = calloc((size_t)conns, sizeof(conn *));
		for (long i = 0; i < conns; i++)
			p.idle[p.nidle++] = conn_open(0);
		conc_round(&p, callers[k], callers[k] * 2); /* warm-up */
		free(p.lat);
		c0 = cpu_s();
		w0 = now_ms();
		conc_round(&p, callers[k], total);
		wall = (now_ms() - w0) / 1e3;
		s = (samples){ p.lat, (size_t)total, (size_t)total };
		emit(PEER, "conc_exec", "ms", &s, cpu_s() - c0, wall, "\"callers\": %ld, \"conns\": %ld",
		     callers[k], conns);
		free(p.lat);
		for (long i = 0; i < p.nidle; i++)
			conn_close(p.idle[i]);
		free(p.idle);
	}
}

/* ------------------------------------------------------------ bulk */

static void bulk(void)
{
	long sizes[8], reps[8];
	int ns = arg_list("sizes", "1,64,256", sizes, 8), nr = arg_list("reps", "5,3,3", reps, 8);
	size_t chunk = (size_t)arg_l("chunk_kib", 1024) << 10;
	conn *c = conn_open(1);
	long maxsz = 0;
	unsigned char *data, *buf;
	char dst[64];

	for (int i = 0; i < ns; i++)
		maxsz = sizes[i] > maxsz ? sizes[i] : maxsz;
	data = pattern((size_t)maxsz << 20);
	buf = malloc(((size_t)maxsz << 20) + 1);
	snprintf(dst, sizeof(dst), "bw-%s.bin", arg_s("tag", PEER));
	sftp_read_all(c, "bench-4k.bin", buf, 8192, chunk);
	sftp_write_all(c, dst, data, 4096, chunk);
	for (int i = 0; i < ns; i++) {
		size_t bytes = (size_t)sizes[i] << 20;
		long r = i < nr ? reps[i] : reps[nr - 1];
		char src[64];
		samples rs = { 0 }, ws_ = { 0 };
		double c0, rcpu = 0, wcpu = 0;

		snprintf(src, sizeof(src), "bulk-%ldM.bin", sizes[i]);
		for (long j = 0; j < r; j++) {
			double t = now_ms();
			c0 = cpu_s();
			if (sftp_read_all(c, src, buf, bytes + 1, chunk) != bytes)
				die("bulk read: short");
			samples_add(&rs, (now_ms() - t) / 1e3);
			rcpu += cpu_s() - c0;
			verify_file("bulk_read", src, buf, bytes);
		}
		for (long j = 0; j < r; j++) {
			double t = now_ms();
			c0 = cpu_s();
			sftp_write_all(c, dst, data, bytes, chunk);
			samples_add(&ws_, (now_ms() - t) / 1e3);
			wcpu += cpu_s() - c0;
			verify_file("bulk_write", dst, data, bytes);
		}
		emit(PEER, "bulk_read", "s", &rs, rcpu, 0, "\"bytes\": %zu", bytes);
		emit(PEER, "bulk_write", "s", &ws_, wcpu, 0, "\"bytes\": %zu", bytes);
		free(rs.v);
		free(ws_.v);
	}
	free(data);
	free(buf);
	conn_close(c);
}

/* ------------------------------------------------------------ cold */

static void cold(void)
{
	long iters = arg_l("iters", 10), warmup = arg_l("warmup", 1);
	samples s = { 0 };
	double cpu = 0, w = 0;

	for (long i = 0; i < warmup + iters; i++) {
		double t = now_ms(), c0 = cpu_s();
		conn *c = conn_open(0);

		run_true(c);
		t = now_ms() - t;
		if (i >= warmup) {
			cpu += cpu_s() - c0;
			w += t / 1e3;
			samples_add(&s, t);
		}
		conn_close(c);
	}
	emit(PEER, "cold", "ms", &s, cpu, w, NULL);
	free(s.v);
}

/* ------------------------------------------------------------ scale */

static void scale_conns(void)
{
	long n = arg_l("n", 10), rss0, rss1, heap0, heap1;
	conn **cs = calloc((size_t)n, sizeof(*cs)), *warm = conn_open(0);

	run_true(warm);
	conn_close(warm);
	rss0 = rss_kb();
	heap0 = heap_kb();
	for (long i = 0; i < n; i++) {
		cs[i] = conn_open(0);
		run_true(cs[i]);
	}
	rss1 = rss_kb();
	heap1 = heap_kb();
	printf("{\"peer\": \"%s\", \"op\": \"scale_conns\", \"n\": %ld, \"conns\": %ld, "
	       "\"rss_before_kb\": %ld, \"rss_after_kb\": %ld, \"heap_before_kb\": %ld, \"heap_after_kb\": %ld}\n",
	       PEER, n, n, rss0, rss1, heap0, heap1);
	fflush(stdout);
	for (long i = 0; i < n; i++)
		conn_close(cs[i]);
	free(cs);
}

int main(int argc, char **argv)
{
	const char *w;

	bench_args(argc, argv);
	ws = arg_s("workspace", ".");
	w = arg_s("workload", "lat");
	if (libssh2_init(0))
		die("libssh2_init");
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
	else
		die("unknown workload %s", w);
	libssh2_exit();
	return 0;
}
