/*
 * test_proc.c - running commands with a handle (asp_proc_*) against a real
 * sshd: stdin written while the command runs, output read as it comes,
 * close of stdin, signals to the process group, waits with a timeout, a
 * pseudo-terminal (tty, size and resize, TERM, Ctrl-C), several procs on
 * one connection beside asp_exec, free of a running proc, hostile input.
 *
 * The fixture's sandbox is this machine: processes are looked for locally
 * (helpers.h: find_process_under the suite's sshd, pid_alive, wait_gone),
 * by a sleep argument unique to the test process.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "asp.h"
#include "fixture/fixture.h"
#include "helpers.h"
#include "proc.h"
#include "tiers.h"

static fx_sshd fx;

static void proc_setup(void)
{
	suite_sshd_start(&fx);
}

static void proc_teardown(void)
{
	fx_sshd_stop(&fx);
}

/* Long enough only to detect a hang. */
static long hang_ms(void)
{
	return 20000 * fx_slowdown();
}

static asp_proc *start(asp_sandbox *sb, const char *cmd, const asp_proc_options *o)
{
	asp_error e = { 0 };
	asp_proc *p = NULL;
	int rc = asp_proc_start(&p, sb, cmd, o, &e);

	ASSERT_OK(rc, e, cmd);
	ck_assert_ptr_nonnull(p);
	return p;
}

static void write_ok(asp_proc *p, const char *text)
{
	asp_error e = { 0 };
	int rc = asp_proc_write(p, text, strlen(text), &e);

	ASSERT_OK(rc, e, "asp_proc_write");
}

/*
 * Read until the output so far holds `needle`; fails on the end or a hang.
 * Returns the output read (malloc'd), and the stream of its last piece.
 */
static char *read_until(asp_proc *p, const char *needle, asp_stream *last)
{
	size_t len = 0, cap = 1 << 16;
	char *acc = calloc(1, cap + 1);
	long long until = fx_now_ms() + hang_ms();

	ck_assert_ptr_nonnull(acc);
	while (!strstr(acc, needle)) {
		asp_error e = { 0 };
		size_t got = 0;
		asp_stream s = 0;
		int rc;

		ck_assert_msg(fx_now_ms() < until, "no \"%s\" in the output; so far: %s", needle, acc);
		ck_assert_msg(len < cap, "output too long without \"%s\"", needle);
		rc = asp_proc_read(&got, &s, p, acc + len, cap - len, 200, &e);
		if (rc == ASP_ETIMEOUT)
			continue;
		ASSERT_OK(rc, e, "asp_proc_read");
		ck_assert_msg(got > 0, "the output ended without \"%s\": %s", needle, acc);
		len += got;
		acc[len] = '\0';
		if (last)
			*last = s;
	}
	return acc;
}

static asp_exec_result *wait_ok(asp_proc *p)
{
	asp_error e = { 0 };
	asp_exec_result *r = NULL;
	int rc = asp_proc_wait(&r, p, (int)hang_ms(), &e);

	ASSERT_OK(rc, e, "asp_proc_wait");
	ck_assert_ptr_nonnull(r);
	return r;
}

/* A process of this test (its unique sleep argument) under the suite's sshd. */
static pid_t find_sleep(const char *arg)
{
	pid_t pid = wait_sleep_under(arg, fx.pid, hang_ms());

	ck_assert_msg(pid, "no process \"sleep %s\" appeared", arg);
	return pid;
}

/* ================================================================== tests */

START_TEST(test_proc_cat_interactive)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_proc *p = start(sb, "cat", NULL);
	asp_exec_result *r;
	asp_stream s = 0;
	char *out;
	size_t len;

	/* Each write comes back before the next is written: the command runs between them. */
	write_ok(p, "one\n");
	out = read_until(p, "one\n", &s);
	ck_assert_str_eq(out, "one\n");
	ck_assert_int_eq(s, ASP_STDOUT);
	free(out);
	write_ok(p, "two\n");
	write_ok(p, "three\n");
	out = read_until(p, "three\n", NULL);
	ck_assert_str_eq(out, "two\nthree\n");
	free(out);
	/* EOF on stdin ends cat, with exit 0; the result keeps every byte. */
	ck_assert_int_eq(asp_proc_close_stdin(p, NULL), ASP_OK);
	ck_assert_int_eq(asp_proc_close_stdin(p, NULL), ASP_OK); /* again: nothing more */
	r = wait_ok(p);
	assert_exited(r, 0);
	ck_assert_mem_eq(asp_exec_result_output(r, ASP_STDOUT, &len), "one\ntwo\nthree\n", 14);
	ck_assert_uint_eq(len, 14);
	asp_exec_result_free(r);
	asp_proc_free(p);
	asp_close(sb);
}
END_TEST

START_TEST(test_proc_output_as_it_comes)
{
	asp_sandbox *sb = sb_open(fx.config);
	char cmd[128], *out;
	asp_exec_result *r;
	asp_error e = { 0 };
	size_t got;
	asp_stream s = 0;
	asp_proc *p;
	int rc;

	/* The second line waits for a file the test makes once it has read the first. */
	snprintf(cmd, sizeof(cmd), "echo first; echo err >&2; while [ ! -e go-%d ]; do sleep 0.05; done; "
		 "echo second; exit 3", (int)getpid());
	p = start(sb, cmd, NULL);
	/* Both streams, in turns: the two lines come in either order. */
	out = read_until(p, "err\n", &s);
	if (!strstr(out, "first\n")) {
		free(out);
		out = read_until(p, "first\n", &s);
	}
	free(out);
	/* Nothing more until told: a read with a short timeout says so, and the command runs on. */
	rc = asp_proc_read(&got, NULL, p, cmd, sizeof(cmd), 0, &e);
	ASSERT_ERR(rc, e, ASP_ETIMEOUT, "still running");
	rc = asp_proc_wait(&r, p, 0, &e);
	ASSERT_ERR(rc, e, ASP_ETIMEOUT, "still running");
	snprintf(cmd, sizeof(cmd), "go-%d", (int)getpid());
	put(sb, cmd, "");
	out = read_until(p, "second\n", NULL);
	free(out);
	r = wait_ok(p);
	assert_exited(r, 3);
	assert_stream(r, ASP_STDOUT, "first\nsecond\n", 13);
	assert_stream(r, ASP_STDERR, "err\n", 4);
	asp_exec_result_free(r);
	/* The result is taken once. */
	rc = asp_proc_wait(&r, p, 0, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "taken");
	/* After the end, a read says so. */
	ck_assert_int_eq(asp_proc_read(&got, NULL, p, cmd, sizeof(cmd), 0, NULL), ASP_OK);
	ck_assert_uint_eq(got, 0);
	asp_proc_free(p);
	remove_ok(sb, cmd, 0);
	asp_close(sb);
}
END_TEST

START_TEST(test_proc_signal_term_kills_group)
{
	asp_sandbox *sb = sb_open(fx.config);
	char cmd[128], arg[32];
	asp_exec_result *r;
	asp_error e = { 0 };
	pid_t child, bg;
	asp_proc *p;

	/* A child in the background and one in the foreground: both in the group. */
	snprintf(arg, sizeof(arg), "32.%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "sleep 1%s & sleep %s", arg, arg);
	p = start(sb, cmd, NULL);
	child = find_sleep(arg);
	{
		char bga[40];
		snprintf(bga, sizeof(bga), "1%s", arg);
		bg = find_sleep(bga);
	}
	ck_assert(pid_alive(child) && pid_alive(bg));
	ASSERT_OK(asp_proc_signal(p, "TERM", &e), e, "asp_proc_signal");
	ck_assert_msg(wait_gone(child, hang_ms()), "the foreground sleep survived TERM");
	ck_assert_msg(wait_gone(bg, hang_ms()), "the background sleep survived TERM");
	r = wait_ok(p);
	ck_assert_int_eq(asp_exec_result_signal(r), 15);
	ck_assert_int_eq(asp_exec_result_exit_code(r), -1);
	ck_assert_int_eq(asp_exec_result_cancelled(r), 0);
	asp_exec_result_free(r);
	/* Signalling a proc that ended sends nothing, and is no error. */
	ASSERT_OK(asp_proc_signal(p, "SIGKILL", &e), e, "signal after the end");
	asp_proc_free(p);
	asp_close(sb);
}
END_TEST

START_TEST(test_proc_free_kills_running)
{
	asp_sandbox *sb = sb_open(fx.config);
	char cmd[128], arg[32];
	pid_t pid;
	asp_proc *p;

	snprintf(arg, sizeof(arg), "33.%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "sleep %s; echo never", arg);
	p = start(sb, cmd, NULL);
	pid = find_sleep(arg);
	ck_assert(pid_alive(pid));
	asp_proc_free(p);
	ck_assert_msg(wait_gone(pid, hang_ms()), "asp_proc_free left the command running");
	/* The handle goes on. */
	asp_exec_result *r = run(sb, "echo ok");
	assert_stream(r, ASP_STDOUT, "ok\n", 3);
	asp_exec_result_free(r);
	asp_close(sb);
}
END_TEST

/*
 * A running command holds no copy of what started it: the exec request (the
 * command inside libasp's wrapper) is freed once sent. A command of 16 KiB
 * adds less than 8 KiB to the heap while it runs; the request, kept, was
 * 32 KiB (grown by doubling), for every running command of a harness.
 */
START_TEST(test_proc_running_holds_no_request)
{
	asp_sandbox *sb = sb_open(fx.config);
	const char *tail = "; sleep 1; echo done";
	size_t n = 16 * 1024, before, during;
	char *cmd = malloc(n + strlen(tail) + 1);
	asp_exec_result *r;
	asp_proc *p;

	ck_assert_ptr_nonnull(cmd);
	memset(cmd, 'x', n);
	memcpy(cmd, ": ", 2);
	strcpy(cmd + n, tail);
	r = run(sb, "true"); /* the connection is up and warm */
	asp_exec_result_free(r);
	before = test_heap_in_use();
	p = start(sb, cmd, NULL);
	during = test_heap_in_use();
	fprintf(stderr, "proc: a running command of %zu bytes holds %+ld bytes of heap\n", strlen(cmd),
		(long)during - (long)before);
	ck_assert_msg(during < before + 8 * 1024, "a running command of %zu bytes holds %zu bytes more heap "
		      "than before it started", strlen(cmd), during - before);
	r = wait_ok(p);
	assert_stream(r, ASP_STDOUT, "done\n", 5);
	asp_exec_result_free(r);
	asp_proc_free(p);
	asp_close(sb);
	free(cmd);
}
END_TEST

START_TEST(test_proc_pty)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_proc_options o = ASP_PROC_OPTIONS_INIT;
	asp_exec_result *r;
	asp_error e = { 0 };
	char *out, line[64], arg[32];
	asp_proc *p;
	pid_t pid;

	o.flags = ASP_PROC_PTY;
	o.cols = 91;
	o.rows = 17;
	o.term = "vt100";
	/* A shell reading commands from the terminal, one line at a time. */
	p = start(sb, "while IFS= read -r l; do eval \"$l\"; done", &o);
	write_ok(p, "tty; echo TERM=$TERM; stty size; echo oops >&2\n");
	out = read_until(p, "\noops\r\n", NULL); /* not the echo of the line typed */
	ck_assert_msg(strstr(out, "/dev/pts/"), "tty did not name a pseudo-terminal: %s", out);
	ck_assert_msg(strstr(out, "TERM=vt100\r\n"), "TERM not set: %s", out);
	ck_assert_msg(strstr(out, "17 91\r\n"), "stty size is not 17 91: %s", out);
	free(out);
	ASSERT_OK(asp_proc_resize(p, 120, 40, &e), e, "asp_proc_resize");
	write_ok(p, "stty size\n");
	out = read_until(p, "40 120\r\n", NULL);
	free(out);
	/* Ctrl-C is a byte: it interrupts the foreground program (and the shell it runs in). */
	snprintf(arg, sizeof(arg), "36.%d", (int)getpid());
	snprintf(line, sizeof(line), "sleep %s\n", arg);
	write_ok(p, line);
	pid = find_sleep(arg); /* running: the line was read, the ^C cannot flush it */
	write_ok(p, "\x03");
	ck_assert_msg(wait_gone(pid, hang_ms()), "Ctrl-C left sleep running");
	r = wait_ok(p);
	ck_assert_msg(asp_exec_result_signal(r) == 2 || asp_exec_result_exit_code(r) == 130,
		      "Ctrl-C: exit %d, signal %d", asp_exec_result_exit_code(r), asp_exec_result_signal(r));
	ck_assert_uint_eq(asp_exec_result_output_total(r, ASP_STDERR), 0);
	asp_exec_result_free(r);
	asp_proc_free(p);
	asp_close(sb);
}
END_TEST

START_TEST(test_proc_pty_ctrl_c_sleep)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_proc_options o = ASP_PROC_OPTIONS_INIT;
	char cmd[64], arg[32];
	asp_exec_result *r;
	pid_t pid;
	asp_proc *p;

	o.flags = ASP_PROC_PTY;
	snprintf(arg, sizeof(arg), "34.%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "sleep %s", arg);
	p = start(sb, cmd, &o);
	pid = find_sleep(arg);
	write_ok(p, "\x03");
	ck_assert_msg(wait_gone(pid, hang_ms()), "Ctrl-C left sleep running");
	r = wait_ok(p);
	ck_assert_int_ne(asp_exec_result_exit_code(r), 0);
	asp_exec_result_free(r);
	asp_proc_free(p);
	asp_close(sb);
}
END_TEST

/* Each of n `cat`s gives back the line written to it. */
static void echo_through_all(asp_proc **p, int n)
{
	char *out, line[16];

	for (int i = 0; i < n; i++) {
		snprintf(line, sizeof(line), "proc %d\n", i);
		write_ok(p[i], line);
		out = read_until(p[i], line, NULL);
		ck_assert_str_eq(out, line);
		free(out);
	}
}

/* End each of n `cat`s: stdin closed, exit 0 waited for, freed. */
static void end_all(asp_proc **p, int n)
{
	for (int i = 0; i < n; i++) {
		asp_exec_result *r;

		ck_assert_int_eq(asp_proc_close_stdin(p[i], NULL), ASP_OK);
		r = wait_ok(p[i]);
		assert_exited(r, 0);
		asp_exec_result_free(r);
		asp_proc_free(p[i]);
	}
}

START_TEST(test_proc_several_on_one_connection)
{
	asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
	asp_proc *p[3];
	asp_exec_result *r;
	char *out, line[16];
	int i;

	oo.config_path = fx.config;
	oo.max_connections = 1;
	test_open_options(&oo);
	asp_sandbox *sb = sb_open_opts(&oo);
	for (i = 0; i < 3; i++)
		p[i] = start(sb, "cat", NULL);
	/* While all three run on the one connection, an exec runs too. */
	r = run(sb, "echo beside");
	assert_stream(r, ASP_STDOUT, "beside\n", 7);
	asp_exec_result_free(r);
	for (i = 2; i >= 0; i--) {
		snprintf(line, sizeof(line), "proc %d\n", i);
		write_ok(p[i], line);
	}
	for (i = 0; i < 3; i++) {
		snprintf(line, sizeof(line), "proc %d\n", i);
		out = read_until(p[i], line, NULL);
		ck_assert_str_eq(out, line);
		free(out);
	}
	r = run(sb, "echo again");
	assert_stream(r, ASP_STDOUT, "again\n", 6);
	asp_exec_result_free(r);
	end_all(p, 3);
	asp_close(sb);
}
END_TEST

/*
 * Commands with a handle spread over the pool's connections: with every
 * connection carrying some, a start goes to the one carrying fewest. 24 on 4
 * connections fit the server's MaxSessions 10 per connection (6 each, beside
 * the SFTP and warm channels); piled on the most recently used one, the 13th
 * start was refused ("Channel open failure").
 */
START_TEST(test_proc_spread_over_connections)
{
	enum { N = 24 };
	asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
	asp_proc *p[N];
	asp_exec_result *r;
	asp_error err = { 0 };
	int i;

	oo.config_path = fx.config;
	oo.max_connections = 4;
	test_open_options(&oo);
	asp_sandbox *sb = sb_open_opts(&oo);
	ck_assert_int_eq(asp_sandbox_warm(sb, 4, NULL, &err), ASP_OK);
	for (i = 0; i < N; i++) {
		int rc = asp_proc_start(&p[i], sb, "cat", NULL, &err);
		ck_assert_msg(rc == ASP_OK, "start %d of %d on 4 connections: %s: %s", i + 1, N,
			      asp_error_name(rc), err.message);
	}
	r = run(sb, "echo beside");
	assert_stream(r, ASP_STDOUT, "beside\n", 7);
	asp_exec_result_free(r);
	echo_through_all(p, N);
	end_all(p, N);
	asp_close(sb);
}
END_TEST

/*
 * Starts from many threads at once spread too: a connection taken by one
 * start is not there for the next, so "fewest among the idle ones" alone
 * piled starts on whichever came back first, and its 9th was refused
 * ("Channel open failure") while other connections had room.
 */
struct start_at_once {
	asp_sandbox *sb;
	pthread_barrier_t *go;
	asp_proc *p;
	int rc;
	asp_error err;
};

static void *start_at_once_main(void *arg)
{
	struct start_at_once *s = arg;

	pthread_barrier_wait(s->go);
	s->rc = asp_proc_start(&s->p, s->sb, "cat", NULL, &s->err);
	return NULL;
}

START_TEST(test_proc_spread_from_threads)
{
	enum { N = 28, ROUNDS = 3 };
	asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
	struct start_at_once s[N];
	pthread_t th[N];
	pthread_barrier_t go;
	asp_error err = { 0 };
	int i, round;

	oo.config_path = fx.config;
	oo.max_connections = 4;
	test_open_options(&oo);
	asp_sandbox *sb = sb_open_opts(&oo);
	ck_assert_int_eq(asp_sandbox_warm(sb, 4, NULL, &err), ASP_OK);
	for (round = 0; round < ROUNDS; round++) {
		asp_proc *p[N];

		ck_assert_int_eq(pthread_barrier_init(&go, NULL, N), 0);
		for (i = 0; i < N; i++) {
			memset(&s[i], 0, sizeof(s[i]));
			s[i].sb = sb;
			s[i].go = &go;
			ck_assert_int_eq(pthread_create(&th[i], NULL, start_at_once_main, &s[i]), 0);
		}
		for (i = 0; i < N; i++)
			ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		pthread_barrier_destroy(&go);
		for (i = 0; i < N; i++) {
			ck_assert_msg(s[i].rc == ASP_OK, "round %d: start %d of %d at once on 4 connections: %s: %s",
				      round + 1, i + 1, N, asp_error_name(s[i].rc), s[i].err.message);
			p[i] = s[i].p;
		}
		echo_through_all(p, N);
		end_all(p, N);
	}
	asp_close(sb);
}
END_TEST

/*
 * Every connection full: a start is ASP_EBUSY and says why (it was a
 * protocol error, "Channel open failure"); so is asp_exec beside it. A call
 * without a new session (stat over the open SFTP channel) still goes, and
 * once a command ends there is room again.
 */
START_TEST(test_proc_no_room_is_busy)
{
	enum { MAX = 12 };
	asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
	asp_stat_info st;
	asp_exec_result *r = NULL;
	asp_error err = { 0 };
	asp_proc *p[MAX], *q;
	int n, rc = ASP_OK;

	oo.config_path = fx.config;
	oo.max_connections = 1;
	test_open_options(&oo);
	asp_sandbox *sb = sb_open_opts(&oo);
	ck_assert_int_eq(asp_stat(&st, sb, ".", NULL, &err), ASP_OK);
	for (n = 0; n < MAX && (rc = asp_proc_start(&p[n], sb, "cat", NULL, &err)) == ASP_OK; n++)
		;
	/* MaxSessions 10: 9 commands beside the SFTP channel, 10 over shell commands alone. */
	ck_assert_msg(n >= 1 && n <= 10, "%d commands started on one connection", n);
	ASSERT_ERR(rc, err, ASP_EBUSY, "no room for another command");
	ASSERT_ERR(rc, err, ASP_EBUSY, "max_connections 1");
	rc = asp_exec(&r, sb, "echo beside", NULL, &err);
	ASSERT_ERR(rc, err, ASP_EBUSY, "no room for another command");
	ck_assert_ptr_null(r);
	if (test_file_transport() != ASP_FILES_EXEC)
		ck_assert_int_eq(asp_stat(&st, sb, ".", NULL, &err), ASP_OK);
	end_all(&p[--n], 1);
	q = start(sb, "cat", NULL);
	end_all(&q, 1);
	end_all(p, n);
	asp_close(sb);
}
END_TEST

START_TEST(test_proc_kill_after_and_cancel)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_proc_options o = ASP_PROC_OPTIONS_INIT;
	asp_exec_result *r;
	asp_cancel *c = NULL;
	char cmd[64], arg[32];
	pid_t pid;
	asp_proc *p;

	snprintf(arg, sizeof(arg), "35.%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "sleep %s", arg);
	o.kill_after_ms = 300;
	p = start(sb, cmd, &o);
	r = wait_ok(p);
	ck_assert_int_eq(asp_exec_result_timed_out(r), 1);
	asp_exec_result_free(r);
	asp_proc_free(p);

	ck_assert_int_eq(asp_cancel_new(&c, NULL), ASP_OK);
	o.kill_after_ms = 0;
	o.call.cancel = c;
	p = start(sb, cmd, &o);
	pid = find_sleep(arg);
	asp_cancel_trigger(c);
	r = wait_ok(p);
	ck_assert_int_eq(asp_exec_result_cancelled(r), 1);
	ck_assert_msg(wait_gone(pid, hang_ms()), "cancel left sleep running");
	asp_exec_result_free(r);
	asp_proc_free(p);
	asp_cancel_free(c);
	asp_close(sb);
}
END_TEST

/* asp_proc_wait_any: its result, and the index it named, checked against what must hold. */
static int wait_any(size_t *index, asp_proc *const *p, size_t n, int timeout_ms, asp_cancel *wake)
{
	asp_error e = { 0 };
	int rc = asp_proc_wait_any(index, p, n, timeout_ms, wake, &e);

	ck_assert_msg(rc == ASP_OK || rc == ASP_ETIMEOUT || rc == ASP_ECANCELLED,
		      "asp_proc_wait_any: %d %s", rc, e.message);
	if (rc)
		ck_assert_msg(strstr(e.message, "asp_proc_wait_any"), "message: %s", e.message);
	return rc;
}

/* The next command to end must be p[want]: its result, taken at once, and p[want] freed (NULL). */
static asp_exec_result *take_ended(asp_proc **p, size_t n, size_t want)
{
	asp_exec_result *r = NULL;
	size_t i = n;

	ck_assert_int_eq(wait_any(&i, p, n, (int)hang_ms(), NULL), ASP_OK);
	ck_assert_uint_eq(i, want);
	ck_assert_int_eq(asp_proc_wait(&r, p[want], 0, NULL), ASP_OK);
	ck_assert_ptr_nonnull(r);
	asp_proc_free(p[want]);
	p[want] = NULL;
	return r;
}

/* 1 when pid's program is sshd (/proc/PID/comm). */
static int is_sshd(pid_t pid)
{
	char path[64], *comm;
	int yes;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	comm = fx_read_file(path, NULL);
	yes = comm && !strncmp(comm, "sshd", 4);
	free(comm);
	return yes;
}

static void *trigger_later(void *arg)
{
	usleep(200 * 1000);
	asp_cancel_trigger(arg);
	return NULL;
}

/*
 * One thread waits for commands on two handles and on one connection:
 * the one that ends is named (the others still run), output nobody read
 * goes to the result without stalling the command, kill timers and cancel
 * tokens act, a wake token interrupts, and a lost connection is reported
 * as its command's end.
 */
START_TEST(test_proc_wait_any)
{
	asp_sandbox *sa = sb_open(fx.config), *sb = sb_open(fx.config);
	asp_proc_options o = ASP_PROC_OPTIONS_INIT, ok = ASP_PROC_OPTIONS_INIT;
	asp_cancel *wake = NULL, *c = NULL;
	asp_exec_result *r;
	asp_proc *p[4];
	char lng[64], arg[32], big[96];
	size_t i = 99;
	pthread_t th;
	pid_t pid, up, pgrp, pids[8];
	int n;

	ck_assert_int_eq(asp_cancel_new(&wake, NULL), ASP_OK);
	ck_assert_int_eq(asp_cancel_new(&c, NULL), ASP_OK);
	snprintf(arg, sizeof(arg), "36.%d", (int)getpid());
	snprintf(lng, sizeof(lng), "sleep %s", arg);
	/* Arguments first. */
	ck_assert_int_eq(asp_proc_wait_any(NULL, p, 1, 0, NULL, NULL), ASP_EINVAL);
	ck_assert_int_eq(asp_proc_wait_any(&i, NULL, 1, 0, NULL, NULL), ASP_EINVAL);
	ck_assert_int_eq(asp_proc_wait_any(&i, p, 1, -2, NULL, NULL), ASP_EINVAL);
	ck_assert_int_eq(wait_any(&i, NULL, 0, 50, NULL), ASP_ETIMEOUT);
	ck_assert_uint_eq(i, 99);

	/*
	 * A look (timeout 0) while none can have ended: cat waits for its
	 * stdin. A command that ends soon starts after it: started before,
	 * a slow start of the next one (valgrind) saw it end first.
	 */
	p[0] = start(sa, lng, NULL);
	p[1] = p[3] = NULL;
	p[2] = start(sa, "cat", NULL);
	ck_assert_int_eq(wait_any(&i, p, 4, 0, NULL), ASP_ETIMEOUT);
	ck_assert_uint_eq(i, 99);
	p[1] = start(sb, "sleep 0.3; echo one", NULL);
	r = take_ended(p, 4, 1);
	assert_stream(r, ASP_STDOUT, "one\n", 4);
	asp_exec_result_free(r);

	/* stdin written meanwhile reaches cat; its end is the next one named. */
	write_ok(p[2], "two\n");
	ck_assert_int_eq(asp_proc_close_stdin(p[2], NULL), ASP_OK);
	r = take_ended(p, 4, 2);
	assert_stream(r, ASP_STDOUT, "two\n", 4);
	asp_exec_result_free(r);

	/* A wake token: triggered from another thread, and already triggered. */
	ck_assert_int_eq(pthread_create(&th, NULL, trigger_later, wake), 0);
	ck_assert_int_eq(wait_any(&i, p, 4, (int)hang_ms(), wake), ASP_ECANCELLED);
	pthread_join(th, NULL);
	ck_assert_int_eq(wait_any(&i, p, 4, (int)hang_ms(), wake), ASP_ECANCELLED);
	asp_cancel_reset(wake);
	ck_assert_int_eq(wait_any(&i, p, 4, 100, wake), ASP_ETIMEOUT);

	/*
	 * 8 MB nobody reads, in pieces (so the passes see the 1 MiB a read
	 * queue holds fill, and then the window): they reach the result.
	 */
	snprintf(big, sizeof(big), "for i in 1 2 3 4 5 6 7 8; do head -c 1000000 /dev/zero; sleep 0.05; done");
	p[1] = start(sb, big, NULL);
	r = take_ended(p, 4, 1);
	assert_exited(r, 0);
	ck_assert_uint_eq(asp_exec_result_output_total(r, ASP_STDOUT), 8000000);
	asp_exec_result_free(r);

	/* A kill timer, then a cancel token, act while only wait_any drives the procs. */
	ok.kill_after_ms = 300;
	p[1] = start(sb, lng, &ok);
	r = take_ended(p, 4, 1);
	ck_assert_int_eq(asp_exec_result_timed_out(r), 1);
	asp_exec_result_free(r);
	o.call.cancel = c;
	p[1] = start(sb, lng, &o);
	ck_assert_int_eq(pthread_create(&th, NULL, trigger_later, c), 0);
	r = take_ended(p, 4, 1);
	pthread_join(th, NULL);
	ck_assert_int_eq(asp_exec_result_cancelled(r), 1);
	asp_exec_result_free(r);

	/* p[0]'s connection is cut (its sshd session killed): named as ended, ASP_ECONNLOST. */
	pid = find_sleep(arg);
	for (n = 0, proc_ids(pid, &up, &pgrp); up != fx.pid; proc_ids(up, &up, &pgrp)) {
		ck_assert_msg(up > 1 && n < 8, "sleep %s is not under the suite's sshd", arg);
		if (is_sshd(up))
			pids[n++] = up; /* the session's sshd and its monitor */
	}
	ck_assert_int_ge(n, 1);
	for (int k = n - 1; k >= 0; k--)
		ck_assert_int_eq(kill(pids[k], SIGKILL), 0);
	ck_assert_int_eq(wait_any(&i, p, 4, (int)hang_ms(), NULL), ASP_OK);
	ck_assert_uint_eq(i, 0);
	ck_assert_int_eq(asp_proc_wait(&r, p[0], 0, NULL), ASP_ECONNLOST);
	asp_proc_free(p[0]);
	asp_cancel_free(wake);
	asp_cancel_free(c);
	asp_close(sa);
	asp_close(sb);
}
END_TEST

/*
 * Of several commands that ended, asp_proc_wait_any names the one whose end
 * was seen first, whatever their places in the list: a caller that takes
 * one per call and does other work between calls (the bench's 16 threads
 * each open a sandbox between looks) serves them in the order they ended.
 * Naming the lowest index instead, a command that ended early behind
 * ever-newer ones at lower places waited for all of them (19 s at N=1000).
 */
START_TEST(test_proc_wait_any_first_ended)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_result *r;
	asp_proc *p[3];
	size_t i = 99;

	/* p[0] ends when told (a line on its stdin): a slow start of p[1] cannot reorder them. */
	p[0] = start(sb, "read x; echo late", NULL);
	p[1] = start(sb, "echo early", NULL);
	p[2] = start(sb, "cat", NULL); /* runs until its stdin closes */
	ck_assert_int_eq(wait_any(&i, p, 3, (int)hang_ms(), NULL), ASP_OK);
	ck_assert_uint_eq(i, 1);
	/* p[1] is left as it is; p[0] ends while a wait looks at it alone. */
	write_ok(p[0], "go\n");
	ck_assert_int_eq(wait_any(&i, p, 1, (int)hang_ms(), NULL), ASP_OK);
	ck_assert_uint_eq(i, 0);
	/* Both ended: p[1] first, and again until it is taken. */
	for (int k = 0; k < 2; k++) {
		i = 99;
		ck_assert_int_eq(wait_any(&i, p, 3, 0, NULL), ASP_OK);
		ck_assert_uint_eq(i, 1);
	}
	r = take_ended(p, 3, 1);
	assert_stream(r, ASP_STDOUT, "early\n", 6);
	asp_exec_result_free(r);
	r = take_ended(p, 3, 0);
	assert_stream(r, ASP_STDOUT, "late\n", 5);
	asp_exec_result_free(r);
	ck_assert_int_eq(asp_proc_close_stdin(p[2], NULL), ASP_OK);
	r = take_ended(p, 3, 2);
	assert_exited(r, 0);
	asp_exec_result_free(r);
	asp_close(sb);
}
END_TEST

/*
 * Quiet commands whose connections nobody else uses are looked at when their
 * socket speaks or once a second, not every 50 ms slice: 8 running `sleep`
 * on 2 handles, 2.5 s of asp_proc_wait_any, fewer than 8 looks each (a look
 * every slice made about 50 each). Then an exec on one of the connections:
 * the commands still end and are named (their bytes may be in libssh2 after
 * that exec's reads, which a poll does not show: a look a slice later does).
 */
START_TEST(test_proc_wait_any_quiet)
{
	enum { N = 8 };
	asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb[2];
	asp_proc *p[N];
	asp_exec_result *r;
	unsigned long looks;
	size_t k;
	int i, rc;

	oo.config_path = fx.config;
	oo.max_connections = 4;
	test_open_options(&oo);
	for (i = 0; i < 2; i++) {
		sb[i] = sb_open_opts(&oo);
		ck_assert_int_eq(asp_sandbox_warm(sb[i], 4, NULL, NULL), ASP_OK);
	}
	for (i = 0; i < N; i++) {
		p[i] = start(sb[i % 2], i < N / 2 ? "sleep 4" : "sleep 5; echo late", NULL);
		ck_assert_int_eq(asp_proc_close_stdin(p[i], NULL), ASP_OK);
	}
	looks = asp__proc_any_looks();
	rc = wait_any(&k, p, N, 2500, NULL);
	ck_assert_msg(rc == ASP_ETIMEOUT, "wait_any: %s", asp_error_name(rc));
	looks = asp__proc_any_looks() - looks;
	fprintf(stderr, "proc: %lu looks at %d quiet commands in 2.5 s\n", looks, N);
	ck_assert_msg(looks >= N, "%lu looks: not even the first look at each", looks);
	ck_assert_msg(looks < 8 * N, "%lu looks at %d quiet commands in 2.5 s (a look every slice)", looks, N);
	r = run(sb[0], "echo beside");
	assert_stream(r, ASP_STDOUT, "beside\n", 7);
	asp_exec_result_free(r);
	for (i = 0; i < N; i++) {
		k = N;
		ck_assert_int_eq(wait_any(&k, p, N, (int)hang_ms(), NULL), ASP_OK);
		ck_assert_uint_lt(k, N);
		ck_assert_int_eq(asp_proc_wait(&r, p[k], 0, NULL), ASP_OK);
		assert_exited(r, 0);
		if (k < N / 2)
			assert_stream(r, ASP_STDOUT, "", 0);
		else
			assert_stream(r, ASP_STDOUT, "late\n", 5);
		asp_exec_result_free(r);
		asp_proc_free(p[k]);
		p[k] = NULL;
	}
	for (i = 0; i < 2; i++)
		asp_close(sb[i]);
}
END_TEST

START_TEST(test_proc_hostile_input)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_proc_options o = ASP_PROC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	asp_proc *p = NULL;
	char buf[8];
	size_t got;
	int rc;

	rc = asp_proc_start(NULL, sb, "true", NULL, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "invalid argument");
	rc = asp_proc_start(&p, sb, NULL, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "invalid argument");
	o.flags = 0x80;
	rc = asp_proc_start(&p, sb, "true", &o, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "asp_proc_options.flags");
	o.flags = ASP_PROC_PTY;
	o.term = "xterm; rm -rf /";
	rc = asp_proc_start(&p, sb, "true", &o, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "asp_proc_options.term");
	o.term = NULL;
	o.cols = 100000;
	rc = asp_proc_start(&p, sb, "true", &o, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "columns");
	o = (asp_proc_options)ASP_PROC_OPTIONS_INIT;
	o.version = 99;
	rc = asp_proc_start(&p, sb, "true", &o, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "asp_proc_options.version");
	ck_assert_ptr_null(p);

	p = start(sb, "cat", NULL);
	rc = asp_proc_write(NULL, "x", 1, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "invalid argument");
	rc = asp_proc_write(p, NULL, 1, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "invalid argument");
	rc = asp_proc_read(&got, NULL, p, buf, 0, 0, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "0 bytes");
	rc = asp_proc_read(&got, NULL, p, buf, sizeof(buf), -5, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "timeout_ms");
	rc = asp_proc_read(NULL, NULL, p, buf, sizeof(buf), 0, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "invalid argument");
	rc = asp_proc_signal(p, "NOPE", &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "NOPE is not a signal name");
	rc = asp_proc_signal(p, "15", &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "not a signal name");
	rc = asp_proc_signal(p, "TERM; rm -rf ~", &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "not a signal name");
	rc = asp_proc_signal(p, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "invalid argument");
	rc = asp_proc_resize(p, 80, 24, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "no terminal");
	rc = asp_proc_wait(NULL, p, 0, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "invalid argument");
	rc = asp_proc_wait(&r, p, -2, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "timeout_ms");
	ck_assert_int_eq(asp_proc_close_stdin(p, NULL), ASP_OK);
	rc = asp_proc_write(p, "x", 1, &e);
	ASSERT_ERR(rc, e, ASP_EINVAL, "stdin was closed");
	r = wait_ok(p);
	asp_exec_result_free(r);
	asp_proc_free(p);
	asp_proc_free(NULL);

	/* A missing cwd is reported by the wait, as asp_exec reports it. */
	o = (asp_proc_options)ASP_PROC_OPTIONS_INIT;
	o.cwd = "no-such-dir-for-proc";
	p = start(sb, "true", &o);
	rc = asp_proc_wait(&r, p, (int)hang_ms(), &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "no-such-dir-for-proc");
	asp_proc_free(p);
	asp_close(sb);
}
END_TEST

Suite *suite_proc(void)
{
	Suite *s = suite_create("proc");
	TCase *tc = tcase_create("proc");

	tcase_add_unchecked_fixture(tc, proc_setup, proc_teardown);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_proc_cat_interactive);
	tcase_add_test(tc, test_proc_output_as_it_comes);
	tcase_add_test(tc, test_proc_signal_term_kills_group);
	tcase_add_test(tc, test_proc_free_kills_running);
	tcase_add_test(tc, test_proc_running_holds_no_request);
	tcase_add_test(tc, test_proc_pty);
	tcase_add_test(tc, test_proc_pty_ctrl_c_sleep);
	tcase_add_test(tc, test_proc_several_on_one_connection);
	tcase_add_test(tc, test_proc_spread_over_connections);
	tcase_add_test(tc, test_proc_spread_from_threads);
	tcase_add_test(tc, test_proc_no_room_is_busy);
	tcase_add_test(tc, test_proc_hostile_input);
	tcase_add_test(tc, test_proc_wait_any);
	tcase_add_test(tc, test_proc_wait_any_first_ended);
	tcase_add_test(tc, test_proc_wait_any_quiet);
	suite_add_tcase(s, tc);

	tc = slow_case(s, "proc-slow", FIXTURE_UNCHECKED, proc_setup, proc_teardown, 90);
	tcase_add_test(tc, test_proc_kill_after_and_cancel);
	return s;
}
