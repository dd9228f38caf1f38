/*
 * test_pool.c - one asp_sandbox under load and under trouble, against the
 * real sshd fixture: many threads sharing the pool within its connection
 * cap; timeout, cancel (token or callback) killing the whole remote process
 * group; a server restart or crash between and during operations (an exec
 * cut off is ECONNLOST and never replayed); a server closing an idle
 * connection or its SFTP channel, or probing it (ClientAliveInterval);
 * idle close, keepalive, a quiet command outliving
 * io_timeout_ms, reuse after an idle spell; waiters for a full pool (and
 * their cancellation); asp_close.
 *
 * Connections are counted from outside the library: "Accepted publickey"
 * lines in sshd's log, ESTABLISHED client sockets to the fixture's port in
 * /proc/net/tcp, and live processes below the sshd listener. Leftover
 * command processes are looked for with ps in the sandbox, by a sleep
 * argument unique to the test process.
 *
 * Worker threads never call ck_assert (a failure there would end the test
 * process from the wrong thread): they record what went wrong and the test
 * thread asserts on it. The fixture is driven from the test thread only.
 */
#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include "asp.h"
#include "fixture/fixture.h"
#include "helpers.h"
#include "tiers.h"

static fx_sshd fx;

/* ---------------------------------------------------------------- helpers */

static void setup(void)
{
	memset(&fx, 0, sizeof(fx));
}

static void teardown(void)
{
	fx_sshd_stop(&fx);
}

static void server_up(const char *extra_sshd_config)
{
	ck_assert_int_eq(fx_sshd_start_with(&fx, extra_sshd_config), 0);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct sb_opts {
	unsigned int max_connections, idle_close_s, keepalive_s, io_timeout_ms;
	unsigned int file_transport; /* an asp_file_transport value */
} sb_opts;

/* asp_open on the fixture's config; 0 fields mean the library default. */
static asp_sandbox *open_sandbox(sb_opts so)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_error e = { 0 };
	asp_sandbox *sb = NULL;
	int rc;

	o.config_path = fx.config;
	o.max_connections = so.max_connections;
	o.idle_close_s = so.idle_close_s;
	o.keepalive_s = so.keepalive_s;
	o.io_timeout_ms = so.io_timeout_ms;
	o.file_transport = so.file_transport;
	rc = asp_open(&sb, &o, &e);
	ck_assert_msg(rc == ASP_OK, "asp_open: %s: %s", asp_error_name(rc), e.message);
	return sb;
}

/* Occurrences of `needle` in sshd's log. */
static int log_count(const char *needle)
{
	char *text = fx_read_file(fx.log, NULL), *p;
	int n = 0;

	if (!text)
		return -1;
	for (p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	free(text);
	return n;
}

/* Connections sshd has authenticated since it started (the log survives restarts). */
static int accepted_count(void)
{
	return log_count("Accepted publickey for ");
}

/* Connections closed politely by libasp ("bye" is asp__conn_close's disconnect text). */
static int polite_disconnect_count(void)
{
	return log_count(":11: bye");
}

/* Wait up to `ms` for the log to contain `needle` at least `n` times. */
static int wait_log_count(const char *needle, int n, long ms)
{
	for (long waited = 0;; waited += 50) {
		if (log_count(needle) >= n)
			return 1;
		if (waited >= ms)
			return 0;
		fx_sleep_ms(50);
	}
}

/*
 * Client-side TCP connections to the fixture (127.0.0.1, its port) in state
 * ESTABLISHED. The address counts too: a parallel job's server in a network
 * namespace of its own can have the same port number, and this namespace's
 * clients of it are listed here (a CI run counted 2 where this test had 1).
 */
static int established_to_server(void)
{
	const char *files[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	const char *loopback[] = { "0100007F", "0000000000000000FFFF00000100007F" }; /* as the files write it */
	int n = 0;

	for (size_t f = 0; f < 2; f++) {
		char *text = fx_read_file(files[f], NULL), *line, *save = NULL;

		if (!text)
			continue;
		for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			char laddr[64], raddr[64];
			unsigned int lport, rport, st;

			if (sscanf(line, " %*d: %63[0-9A-Fa-f]:%x %63[0-9A-Fa-f]:%x %x", laddr, &lport,
				   raddr, &rport, &st) == 5 &&
			    rport == (unsigned int)fx.port && st == 1 /* TCP_ESTABLISHED */ &&
			    !strcasecmp(raddr, loopback[f]))
				n++;
		}
		free(text);
	}
	return n;
}

/* Live processes below the sshd listener (per-connection monitors, their children, shells). */
static int sshd_descendants(void)
{
	enum { MAXP = 4096 };
	static int pids[MAXP], ppids[MAXP];
	int np = 0, count = 0, changed = 1;
	static char in[MAXP];
	DIR *d = opendir("/proc");
	struct dirent *de;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)) != NULL && np < MAXP) {
		char path[300], *stat, *paren;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		if (!(stat = fx_read_file(path, NULL)))
			continue;
		paren = strrchr(stat, ')');
		if (paren && paren[2] != 'Z' && paren[2] != 'X') {
			pids[np] = atoi(de->d_name);
			ppids[np] = atoi(paren + 4);
			np++;
		}
		free(stat);
	}
	closedir(d);
	memset(in, 0, sizeof(in));
	while (changed) {
		changed = 0;
		for (int i = 0; i < np; i++) {
			if (in[i])
				continue;
			for (int j = 0; j < np; j++) {
				if (ppids[i] == fx.pid || (in[j] && ppids[i] == pids[j])) {
					in[i] = 1;
					count++;
					changed = 1;
					break;
				}
			}
		}
	}
	return count;
}

/* Poll `probe` until it returns `want` or `ms` pass; returns the last value seen. */
static int wait_value(int (*probe)(void), int want, long ms)
{
	int v;

	for (long waited = 0;; waited += 50) {
		if ((v = probe()) == want || waited >= ms)
			return v;
		fx_sleep_ms(50);
	}
}

/* asp_exec that must succeed; returns the result (free it). */
static asp_exec_result *exec_ok(asp_sandbox *sb, const char *cmd, const asp_exec_options *o)
{
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	int rc = asp_exec(&r, sb, cmd, o, &e);

	ck_assert_msg(rc == ASP_OK, "asp_exec(%s): %s: %s", cmd, asp_error_name(rc), e.message);
	ck_assert_ptr_nonnull(r);
	return r;
}

/* A stream of a result as a malloc'd C string. */
static char *output_str(const asp_exec_result *r, asp_stream stream)
{
	size_t len = 0;
	const unsigned char *d = asp_exec_result_output(r, stream, &len);
	char *s = malloc(len + 1);

	ck_assert_ptr_nonnull(s);
	if (len)
		memcpy(s, d, len);
	s[len] = '\0';
	return s;
}

/* Run `cmd`, require exit 0, return its stdout (free it). */
static char *exec_stdout(asp_sandbox *sb, const char *cmd)
{
	asp_exec_result *r = exec_ok(sb, cmd, NULL);
	char *out = output_str(r, ASP_STDOUT), *errout = output_str(r, ASP_STDERR);

	ck_assert_msg(asp_exec_result_exit_code(r) == 0, "%s: exit %d, stderr: %s", cmd,
		      asp_exec_result_exit_code(r), errout);
	free(errout);
	asp_exec_result_free(r);
	return out;
}

/*
 * Processes of the login user, seen from inside the sandbox, whose command
 * line contains `token` and that are not zombies. The ps command itself
 * does not contain the token; its lines go into `report`.
 */
static int sandbox_processes_with(asp_sandbox *sb, const char *token, char *report, size_t rlen)
{
	char cmd[128], *ps, *line, *save = NULL;
	int n = 0;

	snprintf(cmd, sizeof(cmd), "ps -ww -u %s -o pid=,stat=,args=", fx.user);
	ps = exec_stdout(sb, cmd);
	report[0] = '\0';
	for (line = strtok_r(ps, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char stat[16] = "";

		if (sscanf(line, " %*d %15s", stat) != 1 || stat[0] == 'Z' || !strstr(line, token))
			continue;
		n++;
		if (strlen(report) + strlen(line) + 2 < rlen) {
			strcat(report, line);
			strcat(report, "\n");
		}
	}
	free(ps);
	return n;
}

/* Nothing whose command line contains `token` survives (SIGKILL takes effect within ~ms). */
static void assert_no_survivors(asp_sandbox *sb, const char *token)
{
	char report[2048];
	int n = 0;

	for (int i = 0; i < 40; i++) {
		if ((n = sandbox_processes_with(sb, token, report, sizeof(report))) == 0)
			return;
		fx_sleep_ms(50);
	}
	ck_abort_msg("%d process(es) with \"%s\" survived:\n%s", n, token, report);
}

/*
 * Positive control for assert_no_survivors: a thread that watches the
 * sandbox while the command runs and records the most processes with
 * `token` it saw at once; it stops when it has seen `want` of them (then
 * runs `then`, if set, e.g. a cancel) or when told to.
 */
typedef struct alive_watch {
	asp_sandbox *sb;
	const char *token;
	int want, seen_max;
	atomic_int stop;
	atomic_int finished; /* set when the watch ends, whatever it saw */
	asp_cancel *then;
} alive_watch;

static void *watch_alive(void *arg)
{
	alive_watch *w = arg;
	char report[2048];
	double until = now_s() + 60.0;

	while (!atomic_load(&w->stop) && now_s() < until) {
		int n = sandbox_processes_with(w->sb, w->token, report, sizeof(report));
		if (n > w->seen_max)
			w->seen_max = n;
		if (n >= w->want)
			break;
		fx_sleep_ms(20);
	}
	atomic_store(&w->finished, 1);
	if (w->then)
		asp_cancel_trigger(w->then);
	return NULL;
}

/* A token unique to this test process, e.g. "300.12345" for `sleep 300.12345`. */
static void unique_sleep_arg(char *out, size_t len, int base)
{
	snprintf(out, len, "%d.%d", base, (int)getpid());
}

/* Join `t` or fail the test if it has not finished within `seconds`. */
static void join_within(pthread_t t, int seconds, const char *what)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += seconds;
	ck_assert_msg(pthread_timedjoin_np(t, NULL, &ts) == 0, "%s did not return within %d s", what,
		      seconds);
}

/* A local path inside the workspace (the sandbox is this machine). */
static void workspace_path(char *out, size_t len, const char *rel)
{
	snprintf(out, len, "%s/%s", fx.workspace, rel);
}

static int count_lines(const char *text)
{
	int n = 0;

	for (; text && *text; text++)
		n += *text == '\n';
	return n;
}

/* ------------------------------------------------- 1. many threads, one sandbox */

#define MIX_THREADS 32
#define MIX_ITERS 20

typedef struct worker {
	pthread_t thread;
	asp_sandbox *sb;
	int id;
	int iters;
	int ok_iters;
	int failures;
	char first_failure[700];
} worker;

static void worker_fail(worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void worker_fail(worker *w, const char *fmt, ...)
{
	va_list ap;

	if (w->failures++)
		return;
	va_start(ap, fmt);
	vsnprintf(w->first_failure, sizeof(w->first_failure), fmt, ap);
	va_end(ap);
}

/* Content unique to (thread, iteration), binary, of a length unique per pair. */
static size_t make_content(unsigned char *buf, int id, int iter)
{
	size_t len = 64 + (size_t)id * 97 + (size_t)iter * 13;
	int h = snprintf((char *)buf, 32, "thread %02d iter %02d\n", id, iter);

	for (size_t k = (size_t)h; k < len; k++)
		buf[k] = (unsigned char)(id * 31 + iter * 17 + (int)k * 7);
	return len;
}

static void *mixed_worker(void *arg)
{
	worker *w = arg;
	unsigned char data[4096];
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;

	wo.flags |= ASP_WRITE_PARENTS; /* all threads race to create "mix/" */
	for (int i = 0; i < w->iters; i++) {
		char path[64], cmd[96];
		size_t len = make_content(data, w->id, i), got_len = 0;
		unsigned char *got = NULL;
		asp_exec_result *r = NULL;
		asp_stat_info st;
		asp_error e = { 0 };
		const unsigned char *out;
		int rc;

		snprintf(path, sizeof(path), "mix/t%02d/f%02d.bin", w->id, i);
		if ((rc = asp_write(w->sb, path, data, len, &wo, &e))) {
			worker_fail(w, "write %s: %s: %s", path, asp_error_name(rc), e.message);
			continue;
		}
		rc = asp_read(&got, &got_len, w->sb, path, 0, ASP_READ_ALL, NULL, &e);
		if (rc)
			worker_fail(w, "read %s: %s: %s", path, asp_error_name(rc), e.message);
		else if (got_len != len || memcmp(got, data, len))
			worker_fail(w, "read %s: %zu bytes, wanted %zu (or content differs)", path, got_len, len);
		asp_free(got);

		snprintf(cmd, sizeof(cmd), "cat %s", path);
		rc = asp_exec(&r, w->sb, cmd, NULL, &e);
		if (rc) {
			worker_fail(w, "exec %s: %s: %s", cmd, asp_error_name(rc), e.message);
		} else {
			size_t ol = 0;
			out = asp_exec_result_output(r, ASP_STDOUT, &ol);
			if (asp_exec_result_exit_code(r) != 0 || ol != len || memcmp(out, data, len))
				worker_fail(w, "exec %s: exit %d, %zu bytes of stdout, wanted %zu", cmd,
					    asp_exec_result_exit_code(r), ol, len);
			asp_exec_result_free(r);
		}

		rc = asp_stat(&st, w->sb, path, NULL, &e);
		if (rc)
			worker_fail(w, "stat %s: %s: %s", path, asp_error_name(rc), e.message);
		else if (st.size != len || st.type != ASP_TYPE_FILE)
			worker_fail(w, "stat %s: size %llu type %u, wanted %zu, file", path,
				    (unsigned long long)st.size, st.type, len);
		else if (!w->failures)
			w->ok_iters++;
	}
	return NULL;
}

/*
 * _i: 0 runs with max_connections = 4, 1 with max_connections = 1. With one
 * connection every call queues behind the others, so a quarter of the
 * iterations still makes 32 threads wait on it 640 times: on far routes
 * (every file call a shell command) 20 iterations there took over 240 s on a
 * loaded CI machine.
 */
START_TEST(test_threads_share_one_sandbox)
{
	const unsigned int max = _i == 0 ? 4 : 1;
	const int iters = _i == 0 ? MIX_ITERS : MIX_ITERS / 4;
	static worker w[MIX_THREADS];
	asp_sandbox *sb;
	int accepted;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ .max_connections = max });
	for (int t = 0; t < MIX_THREADS; t++) {
		memset(&w[t], 0, sizeof(w[t]));
		w[t].sb = sb;
		w[t].id = t;
		w[t].iters = iters;
		ck_assert_int_eq(pthread_create(&w[t].thread, NULL, mixed_worker, &w[t]), 0);
	}
	/*
	 * A hang detector, not a timing: 640 iterations take 16-21 s here on
	 * SFTP, about 60 s with reads and writes as shell commands (check-routes)
	 * on a loaded 2-core VM, where a command's fork costs 3-5 ms; the 160
	 * of the one-connection run take about as long.
	 */
	for (int t = 0; t < MIX_THREADS; t++)
		join_within(w[t].thread, 200, "a worker thread");
	for (int t = 0; t < MIX_THREADS; t++) {
		ck_assert_msg(w[t].failures == 0, "thread %d: %d failure(s), first: %s", t, w[t].failures,
			      w[t].first_failure);
		ck_assert_int_eq(w[t].ok_iters, iters);
	}
	accepted = accepted_count();
	ck_assert_msg(accepted >= 1 && accepted <= (int)max,
		      "sshd accepted %d connections, max_connections is %u", accepted, max);
	asp_close(sb);
}
END_TEST

/* ------------------------------------------------- 2. timeout kills the group */

START_TEST(test_timeout_kills_process_group)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r;
	asp_sandbox *sb;
	alive_watch watch = { 0 };
	pthread_t wt;
	char arg[32], token[48], cmd[256], *out;
	double t0, took;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ 0 });
	unique_sleep_arg(arg, sizeof(arg), 301);
	snprintf(token, sizeof(token), "sleep %s", arg);
	snprintf(cmd, sizeof(cmd),
		 "echo before-timeout; echo err-before >&2; "
		 "sh -c 'trap \"\" TERM; sleep %s' & sleep %s & sleep %s", arg, arg, arg);
	/* Long enough for the watcher to see them under ASan on two busy cores. */
	o.kill_after_ms = 3000;
	o.kill_grace_ms = 500;
	watch.sb = sb;
	watch.token = token;
	watch.want = 3;
	ck_assert_int_eq(pthread_create(&wt, NULL, watch_alive, &watch), 0);
	t0 = now_s();
	r = exec_ok(sb, cmd, &o);
	took = now_s() - t0;
	atomic_store(&watch.stop, 1);
	join_within(wt, 70, "the watching thread");
	ck_assert_msg(watch.seen_max >= 3, "saw %d of the 3 sleeps alive before the timeout",
		      watch.seen_max);
	ck_assert_msg(took < 15.0, "exec with timeout_ms=3000 took %.1f s", took);
	ck_assert_int_eq(asp_exec_result_timed_out(r), 1);
	ck_assert_int_eq(asp_exec_result_cancelled(r), 0);
	ck_assert_msg(asp_exec_result_signal(r) != 0, "no terminating signal reported (exit %d)",
		      asp_exec_result_exit_code(r));
	ck_assert_int_eq(asp_exec_result_exit_code(r), -1);
	out = output_str(r, ASP_STDOUT);
	ck_assert_str_eq(out, "before-timeout\n");
	free(out);
	out = output_str(r, ASP_STDERR);
	ck_assert_str_eq(out, "err-before\n");
	free(out);
	asp_exec_result_free(r);

	/* The TERM-ignoring shell, its sleep and both other sleeps are all gone. */
	assert_no_survivors(sb, token);
	asp_close(sb);
}
END_TEST

/* ------------------------------------------------- 3. cancel */

typedef struct cancel_job {
	asp_cancel *cancel;
	long delay_ms;
	double fired_at;
	alive_watch *watch; /* if set: first see the command's processes alive */
} cancel_job;

static void *cancel_later(void *arg)
{
	cancel_job *j = arg;

	if (j->watch)
		watch_alive(j->watch);
	fx_sleep_ms(j->delay_ms);
	j->fired_at = now_s();
	asp_cancel_trigger(j->cancel);
	return NULL;
}

typedef struct chunk_counter {
	int chunks;
	size_t bytes;
	int stop_after; /* 0: never ask to stop */
	atomic_int *gate; /* if set: ask to stop only once it is set too */
	int asked_at;     /* chunks seen when it asked to stop */
} chunk_counter;

static int count_chunks(asp_stream stream, const unsigned char *data, size_t len, void *userdata)
{
	chunk_counter *cc = userdata;

	(void)data;
	if (stream == ASP_STDOUT) {
		cc->chunks++;
		cc->bytes += len;
	}
	if (!cc->stop_after || cc->chunks < cc->stop_after || (cc->gate && !atomic_load(cc->gate)))
		return 0;
	cc->asked_at = cc->chunks;
	return 1;
}

START_TEST(test_cancel_from_other_thread)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	chunk_counter cc = { 0 };
	cancel_job job = { 0 };
	alive_watch watch = { 0 };
	asp_exec_result *r;
	asp_sandbox *sb;
	pthread_t t;
	char arg[32], token[48], cmd[256], *out;
	double done;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ 0 });
	unique_sleep_arg(arg, sizeof(arg), 302);
	snprintf(token, sizeof(token), "sleep %s", arg);
	snprintf(cmd, sizeof(cmd), "sleep %s & while :; do echo tick; sleep 0.05; done", arg);
	ck_assert_int_eq(asp_cancel_new(&job.cancel, NULL), ASP_OK);
	job.delay_ms = 500;
	watch.sb = sb;
	watch.token = token;
	watch.want = 1;
	job.watch = &watch;
	o.call.cancel = job.cancel;
	o.on_output = count_chunks;
	o.userdata = &cc;
	ck_assert_int_eq(pthread_create(&t, NULL, cancel_later, &job), 0);
	r = exec_ok(sb, cmd, &o);
	done = now_s();
	join_within(t, 70, "the cancelling thread");
	ck_assert_msg(watch.seen_max >= 1, "the sleep was never seen alive before the cancel");
	ck_assert_msg(done - job.fired_at < 10.0, "exec returned %.1f s after the cancel",
		      done - job.fired_at);
	ck_assert_int_eq(asp_exec_result_cancelled(r), 1);
	ck_assert_int_eq(asp_exec_result_timed_out(r), 0);
	ck_assert_msg(asp_exec_result_signal(r) != 0 || asp_exec_result_exit_code(r) != 0,
		      "a cancelled endless loop reports a clean exit");
	ck_assert_msg(cc.chunks > 0, "the callback saw no output");
	out = output_str(r, ASP_STDOUT);
	ck_assert_msg(strncmp(out, "tick\n", 5) == 0, "partial output missing: [%s]", out);
	ck_assert_uint_ge(strlen(out), cc.bytes); /* everything the callback saw is in the result */
	free(out);
	asp_exec_result_free(r);
	assert_no_survivors(sb, token);
	asp_cancel_free(job.cancel);
	asp_close(sb);
}
END_TEST

/* A callback returning non-zero cancels the command like a token would. */
START_TEST(test_callback_stops_command)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	chunk_counter cc = { .stop_after = 3 };
	alive_watch watch = { 0 };
	asp_exec_result *r;
	asp_sandbox *sb;
	pthread_t wt;
	char arg[32], token[48], cmd[256];
	double t0;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ 0 });
	unique_sleep_arg(arg, sizeof(arg), 303);
	snprintf(token, sizeof(token), "sleep %s", arg);
	snprintf(cmd, sizeof(cmd), "sleep %s & while :; do echo tick; sleep 0.05; done", arg);
	/* Positive control: the callback asks to stop only once the watcher is done; it saw the sleep alive. */
	watch.sb = sb;
	watch.token = token;
	watch.want = 1;
	cc.gate = &watch.finished;
	o.on_output = count_chunks;
	o.userdata = &cc;
	ck_assert_int_eq(pthread_create(&wt, NULL, watch_alive, &watch), 0);
	t0 = now_s();
	r = exec_ok(sb, cmd, &o);
	atomic_store(&watch.stop, 1);
	join_within(wt, 70, "the watching thread");
	ck_assert_msg(watch.seen_max >= 1, "the sleep was never seen alive before the stop");
	ck_assert_msg(now_s() - t0 < 70.0, "exec did not stop when the callback asked");
	ck_assert_int_eq(asp_exec_result_cancelled(r), 1);
	ck_assert_int_ge(cc.asked_at, 3);
	ck_assert_int_eq(cc.chunks, cc.asked_at); /* never called again after asking to stop */
	asp_exec_result_free(r);
	assert_no_survivors(sb, token);
	asp_close(sb);
}
END_TEST

/*
 * A token triggered before the call: asp__pool_get checks the token before
 * taking a connection, so asp_exec returns ASP_ECANCELLED ("cancelled
 * through an asp_cancel token") promptly, with no result and nothing run.
 */
START_TEST(test_cancel_before_call)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	asp_cancel *c;
	asp_sandbox *sb;
	char local[400], *out;
	double t0;
	int rc;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ 0 });
	ck_assert_int_eq(asp_cancel_new(&c, NULL), ASP_OK);
	asp_cancel_trigger(c);
	ck_assert_int_eq(asp_cancel_is_triggered(c), 1);
	o.call.cancel = c;
	t0 = now_s();
	rc = asp_exec(&r, sb, "touch ran-despite-cancel; sleep 20", &o, &e);
	ck_assert_msg(now_s() - t0 < 5.0, "a pre-cancelled exec took %.1f s", now_s() - t0);
	ck_assert_msg(rc == ASP_ECANCELLED, "pre-cancelled exec: %s: %s", asp_error_name(rc), e.message);
	ck_assert_int_eq(e.code, ASP_ECANCELLED);
	ck_assert_ptr_null(r);
	workspace_path(local, sizeof(local), "ran-despite-cancel");
	ck_assert_msg(access(local, F_OK) != 0, "the command ran although the token was triggered");

	/* Re-armed, the same token lets a command run. */
	asp_cancel_reset(c);
	ck_assert_int_eq(asp_cancel_is_triggered(c), 0);
	r = exec_ok(sb, "echo after-reset", &o);
	out = output_str(r, ASP_STDOUT);
	ck_assert_str_eq(out, "after-reset\n");
	ck_assert_int_eq(asp_exec_result_cancelled(r), 0);
	free(out);
	asp_exec_result_free(r);
	asp_cancel_free(c);
	asp_close(sb);
}
END_TEST

/* ------------------------------------------------- 4. server restart and crash */

START_TEST(test_restart_between_operations)
{
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	asp_stat_info st;
	unsigned char *got = NULL;
	size_t got_len = 0;
	asp_sandbox *sb;
	char *out;
	int rc, before;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ 0 });
	rc = asp_write(sb, "survivor.txt", "still here\n", 11, &wo, &e);
	ck_assert_msg(rc == ASP_OK, "write: %s", e.message);

	before = accepted_count();
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	rc = asp_read(&got, &got_len, sb, "survivor.txt", 0, ASP_READ_ALL, NULL, &e);
	ck_assert_msg(rc == ASP_OK, "read after restart: %s: %s", asp_error_name(rc), e.message);
	ck_assert_uint_eq(got_len, 11);
	ck_assert_int_eq(memcmp(got, "still here\n", 11), 0);
	asp_free(got);
	ck_assert_int_gt(accepted_count(), before); /* it did reconnect */

	before = accepted_count();
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	rc = asp_stat(&st, sb, "survivor.txt", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "stat after restart: %s: %s", asp_error_name(rc), e.message);
	ck_assert_uint_eq(st.size, 11);
	ck_assert_int_gt(accepted_count(), before);

	before = accepted_count();
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	out = exec_stdout(sb, "cat survivor.txt");
	ck_assert_str_eq(out, "still here\n");
	free(out);
	ck_assert_int_gt(accepted_count(), before);
	asp_close(sb);
}
END_TEST

typedef struct exec_job {
	asp_sandbox *sb;
	const char *cmd;
	asp_exec_options o;
	int rc;
	asp_error err;
	asp_exec_result *r;
	double returned_at;
	atomic_int finished;
} exec_job;

static void *exec_thread(void *arg)
{
	exec_job *j = arg;

	j->rc = asp_exec(&j->r, j->sb, j->cmd, &j->o, &j->err);
	j->returned_at = now_s();
	atomic_store(&j->finished, 1);
	return NULL;
}

static void start_exec(exec_job *j, pthread_t *t, asp_sandbox *sb, const char *cmd)
{
	asp_exec_options d = ASP_EXEC_OPTIONS_INIT;

	memset(j, 0, sizeof(*j));
	j->sb = sb;
	j->cmd = cmd;
	j->o = d;
	ck_assert_int_eq(pthread_create(t, NULL, exec_thread, j), 0);
}

/*
 * Several idle connections all die with the server; the next operations,
 * including one that is never retried (rename), get a live connection.
 */
/* n commands at once (n <= 8), each on its own connection; all must succeed. */
static void run_at_once(asp_sandbox *sb, int n, const char *cmd)
{
	exec_job jobs[8];
	pthread_t t[8];

	ck_assert_int_le(n, 8);
	for (int i = 0; i < n; i++)
		start_exec(&jobs[i], &t[i], sb, cmd);
	for (int i = 0; i < n; i++) {
		join_within(t[i], 30, "a command");
		ck_assert_msg(jobs[i].rc == ASP_OK, "job %d: %s", i, jobs[i].err.message);
		asp_exec_result_free(jobs[i].r);
	}
}

START_TEST(test_restart_with_several_idle_connections)
{
	asp_error e = { 0 };
	asp_stat_info st;
	asp_sandbox *sb;
	int rc, before;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ .max_connections = 4 });
	run_at_once(sb, 4, "sleep 0.3; echo x >> several.txt"); /* one connection each */
	ck_assert_int_ge(established_to_server(), 2);

	before = accepted_count();
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	rc = asp_rename(sb, "several.txt", "several-renamed.txt", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "rename after restart: %s: %s", asp_error_name(rc), e.message);
	rc = asp_stat(&st, sb, "several-renamed.txt", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "stat after restart: %s: %s", asp_error_name(rc), e.message);
	ck_assert_uint_eq(st.size, 8);
	ck_assert_int_eq(accepted_count(), before + 1); /* one new connection served both */
	asp_close(sb);
}
END_TEST

/*
 * Keepalives go out on an idle connection; nobody reads what comes back
 * while it is idle. When the server then goes away, the FIN may sit behind
 * such bytes: the pool must still see that the connection is dead before
 * handing it to an operation that is never retried.
 */
START_TEST(test_restart_after_unread_keepalive_replies)
{
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	asp_sandbox *sb;
	int rc;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ .keepalive_s = 2 });
	rc = asp_write(sb, "ka-a.txt", "a", 1, &wo, &e);
	ck_assert_msg(rc == ASP_OK, "write: %s", e.message);
	fx_sleep_ms(3500); /* keepalives go out at 2 s idle; any reply to them stays unread */
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	rc = asp_rename(sb, "ka-a.txt", "ka-b.txt", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "rename after restart: %s: %s", asp_error_name(rc), e.message);
	asp_close(sb);
}
END_TEST

/* Write a one-byte file, leave the connection idle for `idle` to act, then rename the file. */
static void rename_after_idle(const char *extra_sshd_config, int (*idle)(void), const char *what)
{
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	asp_sandbox *sb;
	char path[400], *out;
	int rc;

	server_up(extra_sshd_config);
	/*
	 * The write opens the SFTP channel that sshd's ChannelTimeout closes.
	 * With auto it could go as a shell command instead, on a connection
	 * that measured a round trip of 10 ms or more (a loaded machine).
	 */
	sb = open_sandbox((sb_opts){ .file_transport = ASP_FILES_SFTP });
	rc = asp_write(sb, "idle-src.txt", "a", 1, &wo, &e);
	ck_assert_msg(rc == ASP_OK, "write: %s", e.message);
	ck_assert_msg(idle(), "%s: the server did not do it", what);
	/* rename is never retried once sent: the pool must hand out a working connection. */
	rc = asp_rename(sb, "idle-src.txt", "idle-dst.txt", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "rename after %s: %s: %s", what, asp_error_name(rc), e.message);
	/*
	 * Look on disk: sshd's timeouts count whole seconds, so a new exec
	 * channel could meet the ChannelTimeout sooner than the 1 s it is sure
	 * of; test_server_closes_quiet_exec_channel covers that case.
	 */
	workspace_path(path, sizeof(path), "idle-dst.txt");
	out = fx_read_file(path, NULL);
	ck_assert_ptr_nonnull(out);
	ck_assert_str_eq(out, "a");
	free(out);
	asp_close(sb);
}

/*
 * The connection ends: sshd terminates it as unused, or, when the pool's
 * maintenance pass sees the closed SFTP channel first, the pool hangs up.
 */
static int server_dropped_connection(void)
{
	return wait_value(established_to_server, 0, 10000) == 0;
}

static int server_closed_sftp_channel(void)
{
	int ok = wait_log_count("closing after 2 seconds of inactivity", 1, 10000);

	fx_sleep_ms(300); /* let the CHANNEL_CLOSE arrive */
	return ok;
}

static int server_probed_for_6s(void)
{
	fx_sleep_ms(6000); /* unanswered, sshd gives up after ~4 s */
	return 1;
}

/*
 * sshd closes the idle connection (ChannelTimeout closes the SFTP channel,
 * UnusedConnectionTimeout then the connection). Its FIN arrives behind the
 * CHANNEL_CLOSE nobody read: the pool must see that the connection is gone.
 */
START_TEST(test_server_drops_idle_connection)
{
	rename_after_idle("ChannelTimeout session:*=2\nUnusedConnectionTimeout 2\n",
			  server_dropped_connection, "sshd dropped the idle connection");
}
END_TEST

/* sshd closes only the idle SFTP channel (ChannelTimeout); the connection stays up. */
START_TEST(test_server_closes_idle_sftp_channel)
{
	rename_after_idle("ChannelTimeout session:*=2\n", server_closed_sftp_channel,
			  "sshd closed the idle SFTP channel");
}
END_TEST

/*
 * sshd probes idle clients (ClientAliveInterval) and hangs up on those that
 * do not answer. Either the pool answers, or it notices the hang-up.
 */
START_TEST(test_server_probes_idle_connection)
{
	rename_after_idle("ClientAliveInterval 1\nClientAliveCountMax 1\n", server_probed_for_6s,
			  "6 s of sshd's ClientAlive probes");
}
END_TEST

/*
 * sshd closes a session channel that stays quiet for its ChannelTimeout
 * (counted in whole seconds, so 2 s here means 1 to 2 s). Here the forced
 * command sleeps before our wrapper runs: no output and no exit status
 * arrive. That is a lost channel: ASP_ECONNLOST, never replayed,
 * never blamed on the login shell; the next call works.
 */
START_TEST(test_server_closes_quiet_exec_channel)
{
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	asp_sandbox *sb;
	char *out;
	int rc;

	server_up("ChannelTimeout session:*=2\n"
		  "ForceCommand case \"$SSH_ORIGINAL_COMMAND\" in *slow-start*) sleep 3;; esac; "
		  "eval \"$SSH_ORIGINAL_COMMAND\"\n");
	sb = open_sandbox((sb_opts){ 0 });
	rc = asp_exec(&r, sb, "echo slow-start", NULL, &e);
	ck_assert_msg(rc == ASP_ECONNLOST, "exec on a channel the server closed: %s: %s",
		      asp_error_name(rc), e.message);
	ck_assert_ptr_null(r);
	ck_assert_msg(strstr(e.message, "before the command reported that it started"), "message: %s",
		      e.message);
	out = exec_stdout(sb, "echo next");
	ck_assert_str_eq(out, "next\n");
	free(out);
	asp_close(sb);
}
END_TEST

/*
 * sshd closes the channel of a command that stays quiet (ChannelTimeout)
 * and sends no exit status, which libssh2 reports as exit 0. That must not
 * pass for success: ASP_ECONNLOST, and the orphaned command is stopped.
 */
START_TEST(test_server_cuts_quiet_command)
{
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	asp_sandbox *sb;
	char path[400];
	int rc;

	server_up("ChannelTimeout session:*=2\n");
	sb = open_sandbox((sb_opts){ 0 });
	rc = asp_exec(&r, sb, "sleep 5; echo late > cut-late.txt", NULL, &e);
	ck_assert_msg(rc == ASP_ECONNLOST, "quiet command under ChannelTimeout: %s: %s",
		      asp_error_name(rc), e.message);
	ck_assert_ptr_null(r);
	ck_assert_msg(strstr(e.message, "while the command ran") &&
			      strstr(e.message, "its process group was stopped"),
		      "message: %s", e.message);
	fx_sleep_ms(5500);
	workspace_path(path, sizeof(path), "cut-late.txt");
	ck_assert_msg(access(path, F_OK) != 0, "the cut command ran on to its end");
	asp_close(sb);
}
END_TEST

/* Wait up to `ms` for a workspace file to have at least one line. */
static int wait_file_line(const char *rel, long ms)
{
	char path[400];

	workspace_path(path, sizeof(path), rel);
	for (long waited = 0;; waited += 20) {
		char *text = fx_read_file(path, NULL);
		int n = count_lines(text);

		free(text);
		if (n >= 1)
			return 1;
		if (waited >= ms)
			return 0;
		fx_sleep_ms(20);
	}
}

START_TEST(test_crash_during_exec_is_not_replayed)
{
	exec_job j;
	pthread_t t;
	asp_sandbox *sb;
	char path[400], *text, *out;
	double killed_at;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ 0 });
	start_exec(&j, &t, sb, "echo ran >> crash-runs.log; sleep 5; echo done");
	ck_assert_msg(wait_file_line("crash-runs.log", 10000), "the command never started");
	killed_at = now_s();
	ck_assert_int_eq(fx_sshd_kill9(&fx), 0);
	ck_assert_int_eq(fx_sshd_start_again(&fx), 0);
	join_within(t, 20, "the exec cut off by the crash");
	ck_assert_msg(j.rc == ASP_ECONNLOST, "exec across a crash: %s: %s", asp_error_name(j.rc),
		      j.err.message);
	ck_assert_int_eq(j.err.code, ASP_ECONNLOST);
	ck_assert_ptr_null(j.r);
	ck_assert_msg(j.returned_at - killed_at < 10.0, "exec returned %.1f s after the crash",
		      j.returned_at - killed_at);

	/* Not replayed: the command's side effect happened exactly once. */
	workspace_path(path, sizeof(path), "crash-runs.log");
	text = fx_read_file(path, NULL);
	ck_assert_ptr_nonnull(text);
	ck_assert_msg(count_lines(text) == 1, "crash-runs.log has %d lines: replayed?", count_lines(text));
	free(text);

	/* The handle keeps working on a new connection. */
	out = exec_stdout(sb, "echo alive");
	ck_assert_str_eq(out, "alive\n");
	free(out);
	asp_close(sb);
}
END_TEST

/* ------------------------------------------------- 5. idle close, keepalive */

START_TEST(test_idle_connection_is_closed)
{
	asp_stat_info st;
	asp_error e = { 0 };
	asp_sandbox *sb;
	char *out;
	int rc, accepted, open_now;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ .idle_close_s = 1 });
	rc = asp_stat(&st, sb, ".", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "stat: %s", e.message);
	ck_assert_int_eq(st.type, ASP_TYPE_DIR);
	ck_assert_int_eq(established_to_server(), 1);
	ck_assert_int_gt(sshd_descendants(), 0);
	accepted = accepted_count();

	fx_sleep_ms(2500);
	open_now = wait_value(established_to_server, 0, 3000);
	ck_assert_msg(open_now == 0, "%d connection(s) still open after 2.5 s idle with idle_close_s=1",
		      open_now);
	ck_assert_msg(wait_log_count(":11: bye", 1, 3000), "sshd saw no disconnect");
	ck_assert_int_eq(wait_value(sshd_descendants, 0, 5000), 0);

	/* The next operation connects again. */
	out = exec_stdout(sb, "echo back");
	ck_assert_str_eq(out, "back\n");
	free(out);
	ck_assert_int_eq(accepted_count(), accepted + 1);
	asp_close(sb);
}
END_TEST

/* An idle connection gets keepalives (sshd logs global requests at DEBUG1) and stays in use. */
START_TEST(test_idle_connection_gets_keepalives)
{
	asp_stat_info st;
	asp_error e = { 0 };
	asp_sandbox *sb;
	int rc, accepted;

	server_up("LogLevel DEBUG1\n");
	sb = open_sandbox((sb_opts){ .keepalive_s = 1 });
	rc = asp_stat(&st, sb, ".", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "stat: %s", e.message);
	accepted = accepted_count();
	ck_assert_int_eq(log_count("keepalive@libssh2.org"), 0);

	fx_sleep_ms(2500);
	ck_assert_msg(wait_log_count("keepalive@libssh2.org", 1, 3000),
		      "no keepalive reached sshd while the connection was idle");
	ck_assert_int_eq(established_to_server(), 1);
	rc = asp_stat(&st, sb, ".", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "stat after keepalives: %s: %s", asp_error_name(rc), e.message);
	ck_assert_int_eq(accepted_count(), accepted); /* the same connection was reused */
	asp_close(sb);
}
END_TEST

/*
 * A command quiet for longer than io_timeout_ms is not mistaken for a dead
 * server: keepalives get answers. _i: 0 keepalive_s=2, 1 keepalive_s=1.
 */
START_TEST(test_quiet_command_outlives_io_timeout)
{
	const unsigned int ka = _i == 0 ? 2 : 1;
	asp_sandbox *sb;
	char *out;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ .keepalive_s = ka, .io_timeout_ms = 1000 });
	out = exec_stdout(sb, "sleep 5; echo quiet-ok");
	ck_assert_str_eq(out, "quiet-ok\n");
	free(out);
	asp_close(sb);
}
END_TEST

/*
 * A connection idle for longer than io_timeout_ms (but not long enough for
 * a keepalive) is still healthy: io_timeout bounds silence *during* an
 * exchange. Reusing it must work, also for an operation that is never
 * retried, and must not cost a new connection. (Both the exec, whose start
 * waits for sshd to fork, and the rename are checked; on loopback a fast
 * reply can occasionally hide the problem from one of them.)
 */
START_TEST(test_reuse_after_idle_longer_than_io_timeout)
{
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	asp_sandbox *sb;
	char *out;
	int rc, accepted;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ .io_timeout_ms = 1000, .keepalive_s = 60 });
	rc = asp_write(sb, "idle-a.txt", "a", 1, &wo, &e);
	ck_assert_msg(rc == ASP_OK, "write: %s", e.message);
	out = exec_stdout(sb, "cat idle-a.txt");
	ck_assert_str_eq(out, "a");
	free(out);
	accepted = accepted_count();

	fx_sleep_ms(1500);
	out = exec_stdout(sb, "echo reused");
	ck_assert_str_eq(out, "reused\n");
	free(out);
	fx_sleep_ms(1500);
	rc = asp_rename(sb, "idle-a.txt", "idle-b.txt", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "rename on a connection idle for 1.5 s (io_timeout_ms=1000): %s: %s",
		      asp_error_name(rc), e.message);
	ck_assert_msg(accepted_count() == accepted,
		      "an idle, healthy connection was replaced (%d new connection(s))",
		      accepted_count() - accepted);
	asp_close(sb);
}
END_TEST

/* ------------------------------------------------- 6. waiters */

#define WAITERS 8

START_TEST(test_waiters_get_freed_connections)
{
	exec_job jobs[WAITERS];
	pthread_t t[WAITERS];
	char cmds[WAITERS][160], *text, path[400];
	asp_sandbox *sb;
	int running = 0, peak = 0, accepted;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ .max_connections = 2 });
	for (int i = 0; i < WAITERS; i++) {
		snprintf(cmds[i], sizeof(cmds[i]),
			 "echo + >> concurrency.log; sleep 0.5; echo - >> concurrency.log; echo job-%d", i);
		start_exec(&jobs[i], &t[i], sb, cmds[i]);
	}
	for (int i = 0; i < WAITERS; i++)
		join_within(t[i], 60, "a command waiting for a connection");
	for (int i = 0; i < WAITERS; i++) {
		char want[32], *out;

		ck_assert_msg(jobs[i].rc == ASP_OK, "job %d: %s: %s", i, asp_error_name(jobs[i].rc),
			      jobs[i].err.message);
		snprintf(want, sizeof(want), "job-%d\n", i);
		out = output_str(jobs[i].r, ASP_STDOUT);
		ck_assert_str_eq(out, want);
		ck_assert_int_eq(asp_exec_result_exit_code(jobs[i].r), 0);
		free(out);
		asp_exec_result_free(jobs[i].r);
	}

	/* At most two commands ran at once, and two did. */
	workspace_path(path, sizeof(path), "concurrency.log");
	ck_assert_ptr_nonnull(text = fx_read_file(path, NULL));
	for (const char *p = text; *p; p++) {
		if (*p == '+' && ++running > peak)
			peak = running;
		if (*p == '-')
			running--;
	}
	ck_assert_int_eq(count_lines(text), 2 * WAITERS);
	free(text);
	ck_assert_msg(peak == 2, "%d commands ran at once with max_connections=2", peak);
	accepted = accepted_count();
	ck_assert_msg(accepted >= 1 && accepted <= 2, "sshd accepted %d connections", accepted);
	asp_close(sb);
}
END_TEST

/* A thread waiting for a connection of a full pool gives up promptly when cancelled. */
START_TEST(test_cancel_while_waiting_for_connection)
{
	exec_job holder, waiter;
	pthread_t th, tw;
	cancel_job job = { 0 };
	pthread_t tc;
	asp_sandbox *sb;
	char path[400];

	server_up(NULL);
	sb = open_sandbox((sb_opts){ .max_connections = 1 });
	start_exec(&holder, &th, sb, "echo held > holder.txt; sleep 3");
	ck_assert_msg(wait_file_line("holder.txt", 10000), "the holder never started");

	ck_assert_int_eq(asp_cancel_new(&job.cancel, NULL), ASP_OK);
	memset(&waiter, 0, sizeof(waiter));
	waiter.sb = sb;
	waiter.cmd = "touch waiter-ran.txt";
	waiter.o = (asp_exec_options)ASP_EXEC_OPTIONS_INIT;
	waiter.o.call.cancel = job.cancel;
	ck_assert_int_eq(pthread_create(&tw, NULL, exec_thread, &waiter), 0);
	job.delay_ms = 300;
	ck_assert_int_eq(pthread_create(&tc, NULL, cancel_later, &job), 0);

	join_within(tw, 10, "the cancelled waiter");
	/* It gave up while the only connection was still busy, not after getting it. */
	ck_assert_msg(!atomic_load(&holder.finished), "the waiter returned only after the holder finished");
	ck_assert_msg(waiter.rc == ASP_ECANCELLED, "cancelled waiter: %s: %s",
		      asp_error_name(waiter.rc), waiter.err.message);
	ck_assert_ptr_null(waiter.r);
	join_within(tc, 5, "the cancelling thread");
	join_within(th, 20, "the holder");
	ck_assert_msg(holder.rc == ASP_OK, "holder: %s", holder.err.message);
	asp_exec_result_free(holder.r);
	workspace_path(path, sizeof(path), "waiter-ran.txt");
	ck_assert_msg(access(path, F_OK) != 0, "the cancelled waiter's command ran");
	asp_cancel_free(job.cancel);
	asp_close(sb);
}
END_TEST

/* ------------------------------------------------- asp_sandbox_warm */

/* Warming makes the connections asked for, one time only, and calls then use them. */
START_TEST(test_warm_fills_pool)
{
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	asp_error e = { 0 };
	asp_sandbox *sb;
	int rc;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ .max_connections = 4 });
	ck_assert_int_eq(accepted_count(), 1); /* asp_open's own */

	rc = asp_sandbox_warm(sb, 3, NULL, &e);
	ck_assert_msg(rc == ASP_OK, "warm 3: %s: %s", asp_error_name(rc), e.message);
	ck_assert_int_eq(accepted_count(), 3);
	ck_assert_int_eq(established_to_server(), 3);
	/* Already there: nothing more to make. */
	ck_assert_int_eq(asp_sandbox_warm(sb, 2, NULL, &e), ASP_OK);
	ck_assert_int_eq(asp_sandbox_warm(sb, 3, &co, &e), ASP_OK);
	ck_assert_int_eq(asp_sandbox_warm(sb, 0, NULL, &e), ASP_OK);
	ck_assert_int_eq(accepted_count(), 3);

	/* Three callers at once: each takes a warmed connection, none handshakes. */
	run_at_once(sb, 3, "sleep 0.5");
	ck_assert_int_eq(accepted_count(), 3);

	/* More than the pool may hold is the caller's mistake, named. */
	memset(&e, 0, sizeof(e));
	rc = asp_sandbox_warm(sb, 5, NULL, &e);
	ck_assert_msg(rc == ASP_EINVAL, "warm 5 of 4: %s", asp_error_name(rc));
	ck_assert_msg(strstr(e.message, "max_connections") && strstr(e.message, "5"), "message: %s",
		      e.message);
	co.version = 99;
	ck_assert_int_eq(asp_sandbox_warm(sb, 4, &co, &e), ASP_EINVAL);
	ck_assert_int_eq(accepted_count(), 3);
	asp_close(sb);
}
END_TEST

/* A lazy handle warms from nothing; a cancelled warm makes nothing. */
START_TEST(test_warm_lazy_and_cancelled)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	asp_error e = { 0 };
	asp_sandbox *sb = NULL;
	int rc;

	server_up(NULL);
	o.config_path = fx.config;
	o.flags = ASP_OPEN_LAZY;
	o.max_connections = 2;
	ck_assert_int_eq(asp_open(&sb, &o, &e), ASP_OK);
	ck_assert_int_eq(accepted_count(), 0);

	ck_assert_int_eq(asp_cancel_new(&co.cancel, &e), ASP_OK);
	asp_cancel_trigger(co.cancel);
	rc = asp_sandbox_warm(sb, 2, &co, &e);
	ck_assert_msg(rc == ASP_ECANCELLED, "cancelled warm: %s", asp_error_name(rc));
	ck_assert_msg(strstr(e.message, "0 of 2"), "message: %s", e.message);
	ck_assert_int_eq(accepted_count(), 0);
	ck_assert_int_eq(established_to_server(), 0);

	asp_cancel_reset(co.cancel);
	rc = asp_sandbox_warm(sb, 2, &co, &e);
	ck_assert_msg(rc == ASP_OK, "warm 2: %s: %s", asp_error_name(rc), e.message);
	ck_assert_int_eq(accepted_count(), 2);
	ck_assert_int_eq(established_to_server(), 2);
	asp_cancel_free(co.cancel);
	asp_close(sb);
}
END_TEST

/*
 * A failed warm gives its slot back and says why; connections the server
 * dropped are replaced, not counted; a changed host key fails closed.
 */
START_TEST(test_warm_after_server_loss)
{
	asp_error e = { 0 };
	asp_sandbox *sb;
	int rc, before;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ .max_connections = 2 });
	ck_assert_int_eq(asp_sandbox_warm(sb, 2, NULL, &e), ASP_OK);
	ck_assert_int_eq(established_to_server(), 2);

	ck_assert_int_eq(fx_sshd_stop_server(&fx), 0);
	ck_assert_int_eq(wait_value(established_to_server, 0, 5000), 0);
	rc = asp_sandbox_warm(sb, 1, NULL, &e);
	ck_assert_msg(rc == ASP_ECONNECT, "warm with the server down: %s: %s", asp_error_name(rc),
		      e.message);

	ck_assert_int_eq(fx_sshd_start_again(&fx), 0);
	before = accepted_count();
	rc = asp_sandbox_warm(sb, 2, NULL, &e);
	ck_assert_msg(rc == ASP_OK, "warm after restart: %s: %s", asp_error_name(rc), e.message);
	ck_assert_int_eq(accepted_count(), before + 2);
	ck_assert_int_eq(established_to_server(), 2);

	/* A new host key: no credential is sent, nothing is added. */
	ck_assert_int_eq(fx_sshd_rotate_host_key(&fx), 0);
	ck_assert_int_eq(wait_value(established_to_server, 0, 5000), 0);
	before = accepted_count();
	rc = asp_sandbox_warm(sb, 1, NULL, &e);
	ck_assert_msg(rc == ASP_EHOSTKEY, "warm after a host key change: %s: %s", asp_error_name(rc),
		      e.message);
	ck_assert_int_eq(accepted_count(), before);
	ck_assert_int_eq(log_count("Failed publickey"), 0);
	asp_close(sb);
}
END_TEST

/* ------------------------------------------------- 7. asp_close */

START_TEST(test_close_closes_idle_connections)
{
	asp_sandbox *sb;
	int accepted, open_now;

	server_up(NULL);
	sb = open_sandbox((sb_opts){ .max_connections = 4 });
	run_at_once(sb, 4, "sleep 0.5");
	accepted = accepted_count();
	ck_assert_int_ge(accepted, 2);
	ck_assert_int_eq(established_to_server(), accepted);
	ck_assert_int_gt(sshd_descendants(), 0);

	asp_close(sb);
	open_now = wait_value(established_to_server, 0, 3000);
	ck_assert_msg(open_now == 0, "%d connection(s) open after asp_close", open_now);
	ck_assert_msg(wait_log_count(":11: bye", accepted, 3000),
		      "sshd saw %d polite disconnects for %d connections", polite_disconnect_count(),
		      accepted);
	ck_assert_msg(wait_value(sshd_descendants, 0, 5000) == 0,
		      "sshd session processes remain after asp_close");
}
END_TEST

/* ------------------------------------------------- 8. one maintenance thread for every handle */

/* Threads of this process (/proc/self/task), -1 when it cannot be read. */
static int thread_count(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* Wait up to ms for the thread count to become `want`; the last count seen. */
static int wait_threads(int want, unsigned int ms)
{
	int n = thread_count();

	for (unsigned int waited = 0; n != want && waited < ms; waited += 20) {
		fx_sleep_ms(20);
		n = thread_count();
	}
	return n;
}

#define MANY_HANDLES 12

/*
 * A harness driving many sandboxes from one process: every handle's pool
 * is kept by one maintenance thread, not one each. Its idle closes still
 * reach every handle, handles closed in any order leave it running for
 * the others, and once the last one is closed no library thread is left.
 */
START_TEST(test_many_handles_one_thread)
{
	asp_sandbox *sb[MANY_HANDLES];
	int base, n, i, open_now;
	static const int order[MANY_HANDLES] = { 5, 0, 11, 3, 8, 1, 10, 2, 7, 4, 9, 6 };

	if (skip_under_tsan("test_many_handles_one_thread", "the thread counts include the sanitizer's own"))
		return;
	server_up(NULL);
	base = thread_count();
	ck_assert_int_gt(base, 0);
	for (i = 0; i < MANY_HANDLES; i++) {
		char *out;
		/* The last six close their idle connections after a second (the first may before the last opens). */
		sb[i] = open_sandbox((sb_opts){ .max_connections = 1, .idle_close_s = i < 6 ? 3600 : 1 });
		out = exec_stdout(sb[i], "echo hi");
		ck_assert_str_eq(out, "hi\n");
		free(out);
	}
	n = thread_count();
	ck_assert_msg(n == base + 1, "%d handles connected: %d threads, %d before (one per handle is %d)",
		      MANY_HANDLES, n, base, base + MANY_HANDLES);

	/* The six handles with idle_close_s=1 lose their connections, the others keep theirs. */
	open_now = wait_value(established_to_server, MANY_HANDLES - 6, 6000);
	ck_assert_msg(open_now == MANY_HANDLES - 6, "%d connections open after the idle close of six handles, "
		      "expected %d", open_now, MANY_HANDLES - 6);

	for (i = 0; i < MANY_HANDLES; i++) {
		asp_close(sb[order[i]]);
		if (i < MANY_HANDLES - 1)
			ck_assert_int_eq(thread_count(), base + 1);
	}
	n = wait_threads(base, (unsigned int)(5000 * fx_slowdown()));
	ck_assert_msg(n == base, "%d threads after every handle closed, %d before the first opened", n, base);
	ck_assert_int_eq(wait_value(established_to_server, 0, 3000), 0);

	/* A handle opened afterwards gets a thread again, and its idle close works. */
	sb[0] = open_sandbox((sb_opts){ .idle_close_s = 1 });
	{
		char *out = exec_stdout(sb[0], "echo again");
		ck_assert_str_eq(out, "again\n");
		free(out);
	}
	ck_assert_int_eq(thread_count(), base + 1);
	ck_assert_int_eq(wait_value(established_to_server, 0, 6000), 0);
	asp_close(sb[0]);
	ck_assert_int_eq(thread_count(), base);
}
END_TEST

/*
 * A process that forks with a connected handle (a harness's worker
 * processes): the child has none of the parent's threads. A handle the
 * child opens works and is kept by a maintenance thread of the child's
 * own, and closing it (the child's last) must not wait for the parent's
 * thread, which the child does not have. The parent's handle goes on.
 */
START_TEST(test_fork_child_gets_its_own_thread)
{
	asp_sandbox *sb;
	char *out;
	pid_t pid;
	int status = 0;

	if (skip_under_tsan("test_fork_child_gets_its_own_thread", "ThreadSanitizer does not follow threads "
			    "started after a threaded process forks"))
		return;
	server_up(NULL);
	sb = open_sandbox((sb_opts){ .idle_close_s = 3600 });
	out = exec_stdout(sb, "echo parent");
	ck_assert_str_eq(out, "parent\n");
	free(out);
	ck_assert_int_eq(established_to_server(), 1);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The child: no ck_assert here (a failure would be the parent's to report). */
		asp_sandbox *mine = NULL;
		asp_open_options o = ASP_OPEN_OPTIONS_INIT;
		asp_exec_result *r = NULL;
		asp_error e = { 0 };
		int base = thread_count(), ok;

		o.config_path = fx.config;
		o.idle_close_s = 1;
		if (asp_open(&mine, &o, &e) || asp_exec(&r, mine, "true", NULL, &e) || asp_exec_result_exit_code(r))
			_exit(10);
		asp_exec_result_free(r);
		ok = thread_count() == base + 1; /* a thread of the child's own */
		if (wait_value(established_to_server, 1, 6000) != 1) /* its idle close came: the parent's is left */
			_exit(11);
		asp_close(mine); /* the child's last pool: ends the child's thread, never the parent's */
		_exit(ok && thread_count() == base ? 0 : 12);
	}
	ck_assert_msg(fx_wait_child(pid, 30000, &status), "the child hung (closing its handle after fork)");
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child: status %d", status);
	out = exec_stdout(sb, "echo still");
	ck_assert_str_eq(out, "still\n");
	free(out);
	asp_close(sb);
}
END_TEST

/* ---------------------------------------------------------------- suite */

Suite *suite_pool(void)
{
	TCase *slow;
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("pool");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240); /* test_threads_share_one_sandbox: see there */
	tcase_add_loop_test(tc, test_threads_share_one_sandbox, 0, 1);
	tcase_add_test(tc, test_timeout_kills_process_group);
	tcase_add_test(tc, test_cancel_from_other_thread);
	tcase_add_test(tc, test_callback_stops_command);
	tcase_add_test(tc, test_cancel_before_call);
	tcase_add_test(tc, test_restart_between_operations);
	tcase_add_test(tc, test_restart_with_several_idle_connections);
	tcase_add_test(tc, test_restart_after_unread_keepalive_replies);
	tcase_add_test(tc, test_server_drops_idle_connection);
	tcase_add_test(tc, test_server_closes_idle_sftp_channel);
	tcase_add_test(tc, test_server_closes_quiet_exec_channel);
	tcase_add_test(tc, test_crash_during_exec_is_not_replayed);
	tcase_add_test(tc, test_idle_connection_is_closed);
	tcase_add_test(tc, test_idle_connection_gets_keepalives);
	tcase_add_loop_test(tc, test_quiet_command_outlives_io_timeout, 0, 2);
	tcase_add_test(tc, test_reuse_after_idle_longer_than_io_timeout);
	tcase_add_test(tc, test_waiters_get_freed_connections);
	tcase_add_test(tc, test_cancel_while_waiting_for_connection);
	tcase_add_test(tc, test_warm_fills_pool);
	tcase_add_test(tc, test_warm_lazy_and_cancelled);
	tcase_add_test(tc, test_warm_after_server_loss);
	tcase_add_test(tc, test_close_closes_idle_connections);
	tcase_add_test(tc, test_many_handles_one_thread);
	tcase_add_test(tc, test_fork_child_gets_its_own_thread);
	suite_add_tcase(s, tc);
	slow = slow_case(s, "pool-slow", FIXTURE_CHECKED, setup, teardown, 240);
	tcase_add_loop_test(slow, test_threads_share_one_sandbox, 1, 2); /* max_connections = 1 */
	tcase_add_test(slow, test_server_probes_idle_connection);
	tcase_add_test(slow, test_server_cuts_quiet_command);
	return s;
}
