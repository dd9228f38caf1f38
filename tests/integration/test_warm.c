/*
 * test_warm.c - the warm channel: each pooled connection keeps a session
 * channel open ahead of the next command, so a call sends its exec request
 * at once. Against the real sshd fixture (and the fault proxy):
 *
 *   - the warm channel is really used: sshd's DEBUG log shows one session
 *     channel more opened than commands requested, before the next call, and
 *     libasp's channel counters (asp__exec_stats, tests only) agree;
 *   - a warm channel the server closed (ChannelTimeout shorter than the gap
 *     between calls), a server restart, a cut link between calls: the next
 *     command runs, exactly once (a marker file gets one line per call);
 *   - a command the server acknowledged and then lost is never replayed;
 *   - the server's session limit (MaxSessions 2, with SFTP and a kill
 *     channel needed) is respected: calls keep working;
 *   - stdin, exit codes and timeouts behave the same on a warm channel;
 *   - a read over SFTP sends its READs behind the OPEN, on the handle the
 *     OPEN will get: the guesses hit, and a wrong guess loses nothing;
 *   - after a pause, the next command runs on a primed shell started after
 *     the call before it ended, never on one primed before a later call
 *     ended; a primed shell killed or closed by ChannelTimeout runs nothing,
 *     and the command runs once on the warm channel.
 *
 * No timing is asserted: every check is on what ran and what the server saw.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "asp.h"
#include "chan.h"
#include "exec.h"
#include "route.h"
#include "sftp.h"
#include "ssh.h"
#include "fixture/fixture.h"
#include "fixture/proxy.h"
#include "helpers.h"
#include "tiers.h"

static fx_sshd fx;
static fx_proxy px;

static void setup(void)
{
	memset(&fx, 0, sizeof(fx));
	memset(&px, 0, sizeof(px));
	px.ctl = -1;
}

static void teardown(void)
{
	fx_proxy_stop(&px);
	fx_sshd_stop(&fx);
}

static void server_up(const char *extra)
{
	ck_assert_int_eq(fx_sshd_start_with(&fx, extra), 0);
}

/* Occurrences of `needle` in sshd's log. */
static int log_count(const char *needle)
{
	char *text = fx_read_file(fx.log, NULL), *p;
	int n = 0;

	ck_assert_msg(text != NULL, "cannot read sshd's log %s", fx.log);
	for (p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	free(text);
	return n;
}

/* Wait up to ms for the log to hold `needle` at least n times. */
static int wait_log(const char *needle, int n, long ms)
{
	for (long waited = 0;; waited += 50) {
		if (log_count(needle) >= n)
			return 1;
		if (waited >= ms)
			return 0;
		fx_sleep_ms(50);
	}
}

/* sshd's DEBUG1 lines for a session channel opened and an exec request. */
#define LOG_OPEN "server_input_channel_open: ctype session"
#define LOG_EXEC "req exec"

static int lines_in(const char *rel)
{
	char *text = fx_read_file(ws_path(fx.workspace, rel), NULL);
	int n = 0;

	if (!text)
		return 0;
	for (char *p = text; *p; p++)
		n += *p == '\n';
	free(text);
	return n;
}

static asp_exec_stats stats(void)
{
	asp_exec_stats s;

	asp__exec_stats(&s);
	return s;
}

/* Append one line to `rel` in the workspace; the call must succeed. */
static void mark(asp_sandbox *sb, const char *rel, const char *what)
{
	char cmd[256];
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	int rc;

	snprintf(cmd, sizeof(cmd), "echo ran >> %s", rel);
	rc = asp_exec(&r, sb, cmd, NULL, &e);
	ck_assert_msg(rc == ASP_OK, "%s: exec `%s`: %s: %s", what, cmd, asp_error_name(rc), e.message);
	ck_assert_int_eq(asp_exec_result_exit_code(r), 0);
	asp_exec_result_free(r);
}

/*
 * After the first call, every call finds its channel open: sshd has opened
 * one session more than it ran commands, before each call is made, and the
 * call opens only the next one.
 */
START_TEST(test_warm_channel_is_used)
{
	asp_exec_stats s0, s1;
	asp_sandbox *sb;
	int i, opens, execs;

	server_up("LogLevel DEBUG1\n");
	s0 = stats();
	sb = sb_open(fx.config);
	/* The connection's first channel was opened along with authentication. */
	ck_assert_msg(wait_log(LOG_OPEN, 1, 5000), "sshd opened no session at connect");
	ck_assert_int_eq(log_count(LOG_EXEC), 0);
	expect_stdout(sb, "echo first", "first\n");
	s1 = stats();
	ck_assert_msg(s1.warm_used == s0.warm_used + 1, "the first call did not use the channel "
		      "opened at connect");
	ck_assert_msg(wait_log(LOG_EXEC, 1, 5000), "sshd logged no exec request");
	for (i = 0; i < 5; i++) {
		char want[32], cmd[32];
		/* Before the call: the channel it will use is already open on the server. */
		ck_assert_msg(wait_log(LOG_OPEN, i + 2, 5000),
			      "call %d: sshd has not opened the next session before the call "
			      "(%d opens, %d execs)", i + 2, log_count(LOG_OPEN), log_count(LOG_EXEC));
		opens = log_count(LOG_OPEN);
		execs = log_count(LOG_EXEC);
		ck_assert_msg(opens == execs + 1, "before call %d: %d sessions opened, %d exec requests",
			      i + 2, opens, execs);
		s0 = stats();
		snprintf(cmd, sizeof(cmd), "echo call-%d", i);
		snprintf(want, sizeof(want), "call-%d\n", i);
		expect_stdout(sb, cmd, want);
		s1 = stats();
		ck_assert_msg(s1.warm_used == s0.warm_used + 1, "call %d did not run on the warm channel",
			      i + 2);
		ck_assert_msg(s1.opens == s0.opens + 1, "call %d opened %lu channels (the next warm one only "
			      "expected)", i + 2, s1.opens - s0.opens);
	}
	asp_close(sb);
}
END_TEST

/*
 * OpenSSH 9.2 gives a session channel its ChannelTimeout when it opens
 * (the log says "inactive timeout: 1") but only expires channels that run
 * something: a warm channel, which has had no request yet, is never
 * closed by it, however long the gap between calls. The pattern "session"
 * is the one such a channel carries (session:command etc. come with the
 * request, and a primed shell's channel is one of those). Each call still
 * runs on its warm channel or a primed shell, exactly once.
 */
START_TEST(test_warm_channel_outlives_channel_timeout)
{
	asp_exec_stats s0, s1;
	asp_sandbox *sb;
	int i;

	server_up("LogLevel DEBUG1\nChannelTimeout session=1\n");
	sb = sb_open(fx.config);
	mark(sb, "timeout.txt", "first call");
	ck_assert_msg(wait_log("(inactive timeout: 1)", 2, 5000),
		      "sshd did not give the warm channel its ChannelTimeout");
	for (i = 0; i < 2; i++) {
		fx_sleep_ms(2500); /* longer than the timeout and sshd's whole-second rounding */
		s0 = stats();
		mark(sb, "timeout.txt", "after a gap longer than ChannelTimeout");
		s1 = stats();
		/* After the first gap the call before primes a shell: its channel runs something. */
		ck_assert_msg(s1.warm_used + s1.primed_used == s0.warm_used + s0.primed_used + 1 &&
			      s1.warm_closed == s0.warm_closed && s1.primed_closed == s0.primed_closed,
			      "gap %d: neither the warm channel nor a primed shell was used (warm %lu, "
			      "primed %lu, closed %lu + %lu)", i + 1, s1.warm_used - s0.warm_used,
			      s1.primed_used - s0.primed_used, s1.warm_closed - s0.warm_closed,
			      s1.primed_closed - s0.primed_closed);
	}
	ck_assert_int_eq(log_count("seconds of inactivity"), 0);
	ck_assert_int_eq(lines_in("timeout.txt"), 3);
	asp_close(sb);
}
END_TEST

/*
 * sshd's UnusedConnectionTimeout closes a connection with no channel in
 * use; a warm channel (no request yet) does not count as one, so the
 * server's policy still holds: the idle connection is closed, the pool
 * notices, and the next call runs once on a new connection.
 */
START_TEST(test_warm_unused_connection_timeout)
{
	asp_sandbox *sb;

	server_up("UnusedConnectionTimeout 1\n");
	sb = sb_open(fx.config);
	mark(sb, "unused.txt", "first call");
	ck_assert_msg(wait_log("terminating inactive connection", 1, 10000),
		      "sshd did not close the idle connection (UnusedConnectionTimeout 1)");
	fx_sleep_ms(200); /* let the FIN arrive */
	mark(sb, "unused.txt", "after sshd closed the idle connection");
	ck_assert_int_eq(log_count("Accepted publickey"), 2);
	ck_assert_int_eq(lines_in("unused.txt"), 2);
	asp_close(sb);
}
END_TEST

/* A restart between calls takes the warm channel with the connection: the next call runs once. */
START_TEST(test_warm_restart_between_calls)
{
	asp_sandbox *sb;

	server_up(NULL);
	sb = sb_open(fx.config);
	mark(sb, "restart.txt", "before the restart");
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	mark(sb, "restart.txt", "after the restart");
	mark(sb, "restart.txt", "on the new connection's warm channel");
	ck_assert_int_eq(lines_in("restart.txt"), 3);
	asp_close(sb);
}
END_TEST

static void proxy_up(const char *extra, char *config, size_t size)
{
	server_up(extra);
	ck_assert_int_eq(fx_proxy_start(&px, fx.port), 0);
	snprintf(config, size, "%s/proxied.asp.json", fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, config, &(fx_config_opts){ .port = px.port }), 0);
}

/* The link is reset between calls (the warm channel is gone with it): the next call runs once. */
START_TEST(test_warm_cut_between_calls)
{
	char config[400];
	asp_sandbox *sb;

	proxy_up(NULL, config, sizeof(config));
	sb = sb_open(config);
	mark(sb, "cut.txt", "before the cut");
	mark(sb, "cut.txt", "on the warm channel");
	ck_assert_int_eq(fx_proxy_cut(&px), 0);
	mark(sb, "cut.txt", "after the cut");
	ck_assert_int_eq(lines_in("cut.txt"), 3);
	asp_close(sb);
}
END_TEST

typedef struct bg_exec {
	asp_sandbox *sb;
	const char *cmd;
	int rc;
	asp_error e;
} bg_exec;

static void *bg_run(void *arg)
{
	bg_exec *b = arg;
	asp_exec_result *r = NULL;

	b->rc = asp_exec(&r, b->sb, b->cmd, NULL, &b->e);
	asp_exec_result_free(r);
	return NULL;
}

/*
 * A command the server acknowledged on a warm channel, then cut off with
 * the link: ASP_ECONNLOST, and it is never run a second time.
 */
START_TEST(test_warm_acknowledged_never_replayed)
{
	char config[400];
	asp_sandbox *sb;
	pthread_t t;
	bg_exec b = { 0 };
	asp_exec_stats s0, s1;

	proxy_up(NULL, config, sizeof(config));
	sb = sb_open(config);
	mark(sb, "acked.txt", "the first call");
	s0 = stats();
	b.sb = sb;
	b.cmd = "echo ran >> acked.txt; sleep 3";
	ck_assert_int_eq(pthread_create(&t, NULL, bg_run, &b), 0);
	for (int waited = 0; lines_in("acked.txt") < 2 && waited < 10000; waited += 20)
		fx_sleep_ms(20);
	ck_assert_msg(lines_in("acked.txt") == 2, "the command did not start");
	ck_assert_int_eq(fx_proxy_cut(&px), 0);
	pthread_join(t, NULL);
	s1 = stats();
	ASSERT_ERR(b.rc, b.e, ASP_ECONNLOST, "not replayed");
	fx_sleep_ms(500);
	ck_assert_int_eq(lines_in("acked.txt"), 2);
	ck_assert_msg(s1.warm_used == s0.warm_used + 1, "the command did not run on the warm channel");
	mark(sb, "acked.txt", "the next call");
	ck_assert_int_eq(lines_in("acked.txt"), 3);
	asp_close(sb);
}
END_TEST

/*
 * The server's session limit: with MaxSessions 2 the SFTP channel, a
 * running command and its warm successor fill it, and a timeout needs a
 * kill channel too; with MaxSessions 1 there is never room for a warm
 * channel, nor for a kill channel beside a running command: the kill goes
 * on a connection of its own. Every call still works, and a command still
 * stops at its timeout; the refused opens are only the warm ones.
 */
static void calls_within_limit(const char *extra, int side_kill)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_stats s0, s1;
	asp_exec_result *r;
	asp_sandbox *sb;
	char cmd[128];
	int i;

	server_up(extra);
	sb = sb_open(fx.config);
	for (i = 0; i < 3; i++)
		mark(sb, "limit.txt", "exec within the session limit");
	/*
	 * This process's own sleep: other runs of this suite may run at once. It
	 * says it started in a file: a watcher scanning /proc every 20 ms missed
	 * a command that ran only 300 ms on a loaded machine.
	 */
	snprintf(cmd, sizeof(cmd), "echo > limit-started.txt; sleep 30.%06d && echo ran to its end > limit-end.txt",
		 (int)getpid());
	o.kill_after_ms = 300;
	s0 = stats();
	r = run_opts(sb, cmd, &o);
	s1 = stats();
	ck_assert_msg(lines_in("limit-started.txt") == 1, "`%s` never started in the sandbox", cmd);
	ck_assert_msg(asp_exec_result_timed_out(r), "the command was not stopped at its timeout");
	/* Stopped at its timeout, not at its end: gone when the call returns, and never finished. */
	ck_assert_msg(!find_process(cmd), "`%s` still runs after its timeout", cmd);
	ck_assert_msg(!lines_in("limit-end.txt"), "`%s` ran to its end: its timeout did not stop it", cmd);
	ck_assert_msg(s1.side_kills - s0.side_kills == (unsigned long)side_kill,
		      "kills on a connection of their own: %lu, expected %d",
		      s1.side_kills - s0.side_kills, side_kill);
	asp_exec_result_free(r);
	mark(sb, "limit.txt", "exec after a timeout");
	ck_assert_int_eq(lines_in("limit.txt"), 4);
	asp_close(sb);
}

START_TEST(test_warm_max_sessions_2)
{
	asp_sandbox *sb;

	calls_within_limit("MaxSessions 2\n", 0);
	/* With the SFTP channel open too. */
	sb = sb_open(fx.config);
	put(sb, "limit-file.txt", "x");
	mark(sb, "limit.txt", "exec beside the SFTP channel");
	assert_content(sb, "limit-file.txt", "x", 1);
	mark(sb, "limit.txt", "exec beside the SFTP channel, again");
	ck_assert_int_eq(lines_in("limit.txt"), 6);
	asp_close(sb);
}
END_TEST

START_TEST(test_warm_max_sessions_1)
{
	calls_within_limit("MaxSessions 1\n", 1);
}
END_TEST

/* Run cmd with stdin `in`; the command's stdout, exit code and whether stdin went inline. */
static void stdin_case(asp_sandbox *sb, const char *cmd, const void *in, size_t len, const void *want,
		       size_t wlen, int code, int inlined)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_stats s0, s1;
	asp_exec_result *r;

	o.stdin_data = in;
	o.stdin_len = len;
	s0 = stats();
	r = run_opts(sb, cmd, &o);
	s1 = stats();
	assert_exited(r, code);
	assert_stream(r, ASP_STDOUT, want, wlen);
	ck_assert_msg(s1.stdin_inline - s0.stdin_inline == (unsigned long)inlined,
		      "`%s` with %zu bytes of stdin: inline %lu, expected %d", cmd, len,
		      s1.stdin_inline - s0.stdin_inline, inlined);
	asp_exec_result_free(r);
}

/*
 * Small stdin inside the exec request (chosen when the round trip is long;
 * forced here): the command sees exactly the bytes, then EOF, with quotes,
 * percent signs, backslashes and no final newline; its exit code and a
 * partial read come through; stdin it never reads does not block it. Data
 * with a NUL byte or longer than 4 KiB goes on the channel as before.
 */
START_TEST(test_warm_stdin_inline)
{
	static const char text[] = "it's 100% \\n 'quoted' \"dq\" $HOME `x`\n\nlast line, no newline";
	char big[4097], nul[] = { 'a', 0, 'b' };
	asp_sandbox *sb;

	server_up(NULL);
	sb = sb_open(fx.config);
	asp__route_force_inline(1);
	stdin_case(sb, "cat", text, strlen(text), text, strlen(text), 0, 1);
	stdin_case(sb, "cat; exit 3", "x", 1, "x", 1, 3, 1);
	stdin_case(sb, "head -c 3", text, strlen(text), text, 3, 0, 1);
	stdin_case(sb, "echo not reading", text, strlen(text), "not reading\n", 12, 0, 1);
	stdin_case(sb, "wc -c | tr -d ' '", "\n", 1, "1\n", 2, 0, 1);
	memset(big, 'b', sizeof(big));
	stdin_case(sb, "wc -c | tr -d ' '", big, 4096, "4096\n", 5, 0, 1);
	stdin_case(sb, "wc -c | tr -d ' '", big, 4097, "4097\n", 5, 0, 0);
	stdin_case(sb, "od -An -c | tr -d ' \n'", nul, 3, "a\\0b", 4, 0, 0);
	{
		/* stdin_fd follows stdin_data on the same stdin: never inline. */
		asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
		asp_exec_stats s0 = stats(), s1;
		asp_exec_result *r;
		int fds[2];

		ck_assert_int_eq(pipe(fds), 0);
		ck_assert_int_eq(write(fds[1], "-fd", 3), 3);
		close(fds[1]);
		o.stdin_data = (const unsigned char *)"data";
		o.stdin_len = 4;
		o.flags = ASP_EXEC_STDIN_FD;
		o.stdin_fd = fds[0];
		r = run_opts(sb, "cat", &o);
		s1 = stats();
		close(fds[0]);
		assert_exited(r, 0);
		assert_stream(r, ASP_STDOUT, "data-fd", 7);
		ck_assert_uint_eq(s1.stdin_inline, s0.stdin_inline);
		asp_exec_result_free(r);
	}
	asp__route_force_inline(0);
	asp_close(sb);
}
END_TEST

/*
 * With file_transport auto on a long round trip (forced here), reads and
 * atomic writes run as shell commands on the warm channel: the SFTP
 * subsystem is not even started for them, the bytes are exact, and a
 * write's temp file is gone. stat and in-place writes still use SFTP.
 */
START_TEST(test_warm_small_files_over_exec)
{
	static const char text[] = "small file\nwith 'quotes' and 100%\n";
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_exec_stats s0, s1;
	asp_sandbox *sb;
	asp_error e = { 0 };
	unsigned char bin[300];
	int i, commands;

	for (i = 0; i < (int)sizeof(bin); i++)
		bin[i] = (unsigned char)i;
	server_up(NULL);
	sb = sb_open(fx.config);
	asp__route_force_files(1);
	s0 = stats();
	put(sb, "small.txt", text); /* also connects, and looks for old temp files here once */
	commands = log_count("Starting session: command");
	assert_content(sb, "small.txt", text, strlen(text));
	put_opts(sb, "small.bin", bin, sizeof(bin), NULL);
	assert_content(sb, "small.bin", bin, sizeof(bin));
	s1 = stats();
	ck_assert_msg(s1.warm_used >= s0.warm_used + 4, "the file calls did not run on warm channels");
	/* One command each: a script's `exit` still ends in the wrapper's end line (its EXIT trap). */
	commands = log_count("Starting session: command") - commands;
	ck_assert_msg(commands == 3, "3 file calls ran %d commands in the sandbox", commands);
	ck_assert_int_eq(log_count("subsystem 'sftp'"), 0);
	assert_no_temp_files(sb, fx.workspace, ".");
	(void)stat_ok(sb, "small.txt");
	ck_assert_int_eq(log_count("subsystem 'sftp'"), 1);
	wo.flags |= ASP_WRITE_IN_PLACE;
	ck_assert_int_eq(asp_write(sb, "small.txt", "x", 1, &wo, &e), ASP_OK);
	asp__route_force_files(0);
	assert_local_content(ws_path(fx.workspace, "small.txt"), "x", 1);
	asp_close(sb);
}
END_TEST

/*
 * The routes follow the least round trip sampled on the connection: a
 * first sample inflated by a stall (10 ms or more on loopback) moves reads
 * to exec only until a later sample is short, and a long link's samples,
 * all long, keep them there.
 */
START_TEST(test_warm_rtt_is_the_least_sample)
{
	static const struct {
		unsigned int samples[4];
		unsigned int n, rtt;
		int exec_files, inline_stdin_link;
	} cases[] = {
		{ { 0 }, 0, 0, 0, 0 },
		{ { 12 }, 1, 12, 1, 1 },
		{ { 12, 0 }, 2, 0, 0, 0 },
		{ { 0, 40, 80 }, 3, 0, 0, 0 },
		{ { 60, 52, 75, 9000 }, 4, 52, 1, 1 },
		{ { 30, 7 }, 2, 7, 0, 1 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		asp_conn c;

		memset(&c, 0, sizeof(c));
		for (unsigned int k = 0; k < cases[i].n; k++)
			asp__ssh_rtt_sample(&c, cases[i].samples[k]);
		ck_assert_msg(c.rtt_ms == cases[i].rtt, "case %zu: rtt %u, expected %u", i, c.rtt_ms,
			      cases[i].rtt);
		ck_assert_msg(asp__route_files_faster(&c, 0) == cases[i].exec_files,
			      "case %zu: files over exec %d", i, asp__route_files_faster(&c, 0));
		ck_assert_int_eq(c.rtt_ms >= 5, cases[i].inline_stdin_link);
		/*
		 * Reads: SFTP not open yet (opened for them) or able to guess its
		 * handles (one round trip): SFTP; exec only when it cannot guess.
		 */
		ck_assert_msg(!asp__route_reads_faster(&c), "case %zu: read over exec before SFTP", i);
		c.file_transport = ASP_FILES_SFTP;
		c.sftp.guess_len = 4;
		ck_assert_msg(!asp__route_reads_faster(&c), "case %zu: read over exec, SFTP guessing", i);
		c.sftp.held = 1;
		ck_assert_msg(asp__route_reads_faster(&c) == cases[i].exec_files,
			      "case %zu: a handle held: read over exec %d", i, asp__route_reads_faster(&c));
		c.sftp.held = 0;
		c.sftp.guess_missed = 2;
		ck_assert_int_eq(asp__route_reads_faster(&c), cases[i].exec_files);
	}
}
END_TEST

static void guesses(unsigned long *hit, unsigned long *missed)
{
	asp__sftp_guess_stats(hit, missed);
}

static void write_local(const char *rel, const void *data, size_t len)
{
	FILE *f = fopen(ws_path(fx.workspace, rel), "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

static void read_fails(asp_sandbox *sb, const char *path, int want)
{
	unsigned char *out = NULL;
	size_t n = 0;
	asp_error e = { 0 };
	int rc = asp_read(&out, &n, sb, path, 0, ASP_READ_ALL, NULL, &e);

	ASSERT_ERR(rc, e, want, path);
	ck_assert_ptr_null(out);
}

/*
 * A read over SFTP sends its READs right behind the OPEN, on the handle the
 * OPEN will get (OpenSSH's sftp-server gives the lowest free slot): every
 * read's guess hits, and the bytes are exact, for a small file and one of
 * several READ windows. A missing file, a directory and a file over the cap
 * fail as before and leave the next guess right.
 */
START_TEST(test_warm_read_one_flight)
{
	static const char text[] = "one round trip\n";
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	unsigned char *big = random_bytes(300 * 1024, 7);
	unsigned long h0, m0, h1, m1;
	asp_sandbox *sb, *capped;

	server_up(NULL);
	write_local("one.txt", text, strlen(text));
	write_local("big.bin", big, 300 * 1024);
	sb = sb_open(fx.config);
	o.config_path = fx.config;
	o.max_read_bytes = 1000;
	test_open_options(&o);
	capped = sb_open_opts(&o);
	guesses(&h0, &m0);
	for (int i = 0; i < 3; i++)
		assert_content(sb, "one.txt", text, strlen(text));
	assert_content(sb, "big.bin", big, 300 * 1024);
	read_fails(sb, "missing.txt", ASP_ENOENT); /* no handle: no guess to judge */
	read_fails(sb, ".", ASP_EISDIR);           /* OpenSSH opens a directory: a hit */
	read_fails(capped, "big.bin", ASP_ELIMIT);  /* its own connection's first: a hit */
	assert_content(capped, "one.txt", text, strlen(text));
	assert_content(sb, "one.txt", text, strlen(text));
	guesses(&h1, &m1);
	ck_assert_msg(m1 == m0, "%lu guesses missed", m1 - m0);
	ck_assert_msg(h1 - h0 == 8, "%lu guesses hit, expected 8", h1 - h0);
	asp_close(capped);
	asp_close(sb);
	free(big);
}
END_TEST

/*
 * A wrong guess loses nothing: made to guess a handle the server never gave,
 * reads still return exact bytes (the READs on the guess fail and are
 * dropped; the read goes on with the OPEN's handle). After two misses in a
 * row the connection stops guessing.
 */
START_TEST(test_warm_read_wrong_guess)
{
	static const char text[] = "guessed wrong\n";
	unsigned char *big = random_bytes(200 * 1024, 11);
	unsigned long h0, m0, h1, m1;
	asp_sandbox *sb;

	server_up(NULL);
	write_local("wrong.txt", text, strlen(text));
	write_local("wrong.bin", big, 200 * 1024);
	sb = sb_open(fx.config);
	asp__sftp_force_guess("\0\0\0\x2a", 4);
	guesses(&h0, &m0);
	assert_content(sb, "wrong.txt", text, strlen(text));
	assert_content(sb, "wrong.bin", big, 200 * 1024);
	guesses(&h1, &m1);
	ck_assert_msg(m1 - m0 == 2 && h1 == h0, "%lu missed, %lu hit; expected 2 and 0", m1 - m0,
		      h1 - h0);
	assert_content(sb, "wrong.txt", text, strlen(text));
	asp__sftp_force_guess(NULL, 0);
	assert_content(sb, "wrong.bin", big, 200 * 1024);
	guesses(&h1, &m1);
	ck_assert_msg(m1 - m0 == 2 && h1 == h0, "the connection still guesses: %lu missed, %lu hit",
		      m1 - m0, h1 - h0);
	asp_close(sb);
	free(big);
}
END_TEST

/*
 * On a real connection the warm channels' confirmations are samples too:
 * after a few commands the connection has more samples than the one taken
 * while authenticating.
 */
START_TEST(test_warm_confirmations_are_rtt_samples)
{
	asp_exec_stats s0, s1;
	asp_sandbox *sb;

	server_up(NULL);
	sb = sb_open(fx.config);
	s0 = stats();
	for (int i = 0; i < 3; i++)
		mark(sb, "rtt.txt", "a call");
	s1 = stats();
	ck_assert_msg(s1.rtt_samples >= s0.rtt_samples + 3, "%lu round-trip samples in 3 calls",
		      s1.rtt_samples - s0.rtt_samples);
	asp_close(sb);
}
END_TEST

/* ------------------------------------------------------------ primed shells */

/* The primed shell in the sandbox's process list: its exec request (quote.h). */
#define PRIMED_NEEDLE "IFS= read -r l;do case"

/* This machine's uptime in ms: the sandbox is this machine, so its clock. */
static uint64_t uptime_ms(void)
{
	char *text = fx_read_file("/proc/uptime", NULL);
	double up;

	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(sscanf(text, "%lf", &up), 1);
	free(text);
	return (uint64_t)(up * 1000);
}

/* Run `true`, the call must succeed. */
static void run_true(asp_sandbox *sb)
{
	expect_stdout(sb, "true", "");
}

/*
 * A command that prints when its shell started (ms since boot, from
 * /proc/$$/stat in clock ticks of 10 ms), reads a line of stdin, shows
 * whether the priming loop's variables leaked, and exits 3.
 */
#define PROBE "read -r a < /proc/$$/stat; set -- ${a##*) }; echo \"${20}\"; read -r x; " \
	      "echo \"in:$x\"; echo \"vars:${s-u}${l-u}\"; exit 3"

static uint64_t probe(asp_sandbox *sb)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r;
	const char *out;
	unsigned long long ticks;
	char rest[64];
	size_t len;

	o.stdin_data = (const unsigned char *)"hello\nmore\n";
	o.stdin_len = 11;
	r = run_opts(sb, PROBE, &o);
	assert_exited(r, 3);
	out = (const char *)asp_exec_result_output(r, ASP_STDOUT, &len);
	ck_assert_msg(sscanf(out, "%llu\n%63[^\n]", &ticks, rest) == 2 && !strcmp(rest, "in:hello") &&
		      strstr(out, "\nvars:uu\n"), "probe printed: %.*s", (int)len, out);
	asp_exec_result_free(r);
	return ticks * 10;
}

/* A file call after a pause primes nothing; a command after the same pause does. */
START_TEST(test_warm_file_call_primes_nothing)
{
	asp_exec_stats s0, s1;
	asp_sandbox *sb;
	unsigned char *back = NULL;
	size_t len = 0;
	asp_error e = { 0 };

	server_up(NULL);
	sb = sb_open(fx.config);
	ck_assert_int_eq(asp_write(sb, "unprimed.txt", "x", 1, NULL, &e), ASP_OK);
	run_true(sb);
	fx_sleep_ms(300);
	s0 = stats();
	ck_assert_int_eq(asp_read(&back, &len, sb, "unprimed.txt", 0, ASP_READ_ALL, NULL, &e), ASP_OK);
	asp_free(back);
	s1 = stats();
	ck_assert_msg(s1.primed == s0.primed, "a read after a pause primed %lu shells", s1.primed - s0.primed);
	fx_sleep_ms(300);
	run_true(sb);
	s1 = stats();
	ck_assert_msg(s1.primed == s0.primed + 1, "a command after the same pause primed %lu shells",
		      s1.primed - s0.primed);
	asp_close(sb);
}
END_TEST

/*
 * After a pause, the call's end primes a shell, and the next command runs
 * on it: its shell started after the call before it had ended (never during
 * it), its stdin starts right after its script, the loop's variables are
 * gone, its exit code comes through. A call that ends in between (a write)
 * makes the primed shell stale: the next command runs on a shell started
 * after that call. Calls without a pause prime nothing.
 */
START_TEST(test_warm_primed_shell_after_pause)
{
	asp_exec_stats s0, s1;
	asp_error e = { 0 };
	asp_sandbox *sb;
	uint64_t begun, started;

	server_up(NULL);
	sb = sb_open(fx.config);
	s0 = stats();
	run_true(sb);
	run_true(sb);
	s1 = stats();
	ck_assert_msg(s1.primed == s0.primed, "calls without a pause primed %lu shells",
		      s1.primed - s0.primed);
	fx_sleep_ms(300);
	/*
	 * A call after a pause, busy for 500 ms: a shell primed during it would
	 * start too early. Its sleep ends 500 ms or more after `begun`; both
	 * clocks count in 10 ms ticks, rounded down.
	 */
	begun = uptime_ms();
	expect_stdout(sb, "sleep 0.5", "");
	s1 = stats();
	ck_assert_msg(s1.primed == s0.primed + 1, "a call after a pause primed %lu shells",
		      s1.primed - s0.primed);
	fx_sleep_ms(300);
	s0 = stats();
	started = probe(sb);
	s1 = stats();
	ck_assert_msg(s1.primed_used == s0.primed_used + 1, "the command after a pause did not run on "
		      "the primed shell (used %lu)", s1.primed_used - s0.primed_used);
	ck_assert_msg(started + 20 >= begun + 500, "the primed shell started at %llu ms, during the "
		      "call before it (begun at %llu ms, busy for 500 ms)", (unsigned long long)started,
		      (unsigned long long)begun);
	/*
	 * The probe came after a pause too: its end primed a shell, which the
	 * write makes stale (or uses, when the write takes the shell route: a
	 * slow machine's round trip). The write waits 300 ms but counts as no
	 * pause (it primes nothing): a stale shell would be the only one there.
	 */
	ck_assert_uint_eq(s1.primed, s0.primed + 1);
	asp__chan_prime_pause(60000);
	fx_sleep_ms(300);
	begun = uptime_ms();
	ck_assert_int_eq(asp_write(sb, "primed.txt", "x", 1, NULL, &e), ASP_OK);
	s0 = stats();
	started = probe(sb);
	s1 = stats();
	asp__chan_prime_pause(0);
	ck_assert_msg(s1.primed_used == s0.primed_used && s1.primed == s0.primed,
		      "the command after the write: %lu primed shells used, %lu primed",
		      s1.primed_used - s0.primed_used, s1.primed - s0.primed);
	ck_assert_msg(started + 20 >= begun, "the command after the write ran on a shell started at "
		      "%llu ms, before the write began (%llu ms)", (unsigned long long)started,
		      (unsigned long long)begun);
	asp_close(sb);
}
END_TEST

/*
 * A primed shell starts its call's watchdog at its boot, so the call does
 * not fork it: the command finds the watchdog in its session, as old as
 * the shell (a watchdog forked by the call would be as young as the call).
 * The call's token is the one that watchdog was given: a kill of the call
 * reaches a process that left the session and lost its parent, which only
 * the token finds.
 */
#define WATCHDOG_AGE "read -r up _ < /proc/uptime; echo \"up:$up\"; for f in /proc/[0-9]*/stat; do " \
	"{ read -r l < \"$f\"; } 2>/dev/null || continue; set -- ${l##*) }; " \
	"[ \"$4\" = $$ ] && [ \"$f\" != /proc/$$/stat ] && echo \"wd:${20}\"; done; :"

START_TEST(test_warm_primed_shell_watchdog_started_at_boot)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_stats s0, s1;
	asp_exec_result *r;
	asp_sandbox *sb;
	const char *out, *wd;
	double up;
	unsigned long long ticks;
	long age_ms, pid;
	size_t len;
	/*
	 * The watchdog's processes are counted: a broken tick (the lifecycle
	 * suite's tick_broken_still_kills, run at once by another job as the
	 * same sandbox user) gives it a `sleep` child. Its lock keeps them apart.
	 */
	int n = 0, lock = test_lock("tick");

	server_up(NULL);
	sb = sb_open(fx.config);
	run_true(sb);
	fx_sleep_ms(300);
	run_true(sb); /* after a pause: its end primes a shell */
	fx_sleep_ms(1000);
	s0 = stats();
	r = run_opts(sb, WATCHDOG_AGE, NULL);
	s1 = stats();
	ck_assert_msg(s1.primed_used == s0.primed_used + 1, "the command did not run on the primed shell");
	assert_exited(r, 0);
	out = (const char *)asp_exec_result_output(r, ASP_STDOUT, &len);
	ck_assert_msg(sscanf(out, "up:%lf", &up) == 1, "the command printed: %.*s", (int)len, out);
	for (wd = strstr(out, "\nwd:"); wd; wd = strstr(wd + 1, "\nwd:"), n++)
		ck_assert_int_eq(sscanf(wd, "\nwd:%llu", &ticks), 1);
	ck_assert_msg(n == 1, "%d processes besides the shell in its session: %.*s", n, (int)len, out);
	age_ms = (long)(up * 1000) - (long)(ticks * 1000 / (unsigned long long)sysconf(_SC_CLK_TCK));
	ck_assert_msg(age_ms >= 400, "the watchdog is %ld ms old: started by the call, not at the "
		      "shell's boot (a pause of 1000 ms came before the call)", age_ms);
	asp_exec_result_free(r);

	fx_sleep_ms(300);
	run_true(sb);
	fx_sleep_ms(300);
	o.kill_after_ms = 1000;
	s0 = stats();
	r = run_opts(sb, "(setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!); sleep 300", &o);
	s1 = stats();
	ck_assert_msg(s1.primed_used == s0.primed_used + 1, "the killed command did not run on the primed shell");
	out = (const char *)asp_exec_result_output(r, ASP_STDOUT, &len);
	ck_assert_msg(sscanf(out, "%ld", &pid) == 1 && pid > 1, "the command printed: %.*s", (int)len, out);
	ck_assert_msg(asp_exec_result_timed_out(r), "the command was not killed by its timeout");
	ck_assert_msg(wait_gone((pid_t)pid, 5000), "the escaped process %ld outlived the killed call "
		      "(its token is not the one the call was killed by)", pid);
	asp_exec_result_free(r);
	asp_close(sb);
	close(lock);
}
END_TEST

/*
 * A primed shell killed in the sandbox before the next call: the command
 * runs once, on the warm channel; the dead shell is counted as closed.
 */
START_TEST(test_warm_primed_shell_killed)
{
	asp_exec_stats s0, s1;
	asp_sandbox *sb;
	pid_t pid = 0, pgrp;
	long long until;

	server_up(NULL);
	sb = sb_open(fx.config);
	run_true(sb);
	fx_sleep_ms(300);
	run_true(sb);
	for (until = fx_now_ms() + 5000; !(pid = find_process_under(PRIMED_NEEDLE, fx.pid)) && fx_now_ms() < until;)
		fx_sleep_ms(20);
	ck_assert_msg(pid > 0 && pid_alive(pid), "no primed shell runs in the sandbox");
	/* The shell or its watchdog (a fork of it, the same command line): the group is the shell's. */
	proc_ids(pid, NULL, &pgrp);
	ck_assert_int_gt(pgrp, 1);
	ck_assert_int_eq(kill(-pgrp, SIGKILL), 0);
	ck_assert_msg(wait_gone(pid, 5000), "the primed shell %d did not die", (int)pid);
	fx_sleep_ms(200); /* its channel's close reaches this side */
	s0 = stats();
	mark(sb, "primed-kill.txt", "after the primed shell was killed");
	s1 = stats();
	ck_assert_msg(s1.primed_closed == s0.primed_closed + 1 && s1.primed_used == s0.primed_used,
		      "the killed shell: closed %lu, used %lu", s1.primed_closed - s0.primed_closed,
		      s1.primed_used - s0.primed_used);
	ck_assert_int_eq(lines_in("primed-kill.txt"), 1);
	asp_close(sb);
}
END_TEST

/*
 * ChannelTimeout for channels that run something, shorter than the pause:
 * sshd closes each primed shell before the next call comes. Each command
 * still runs exactly once; after two such losses the connection primes no
 * more. sshd counts that timeout in whole seconds, so with 1 s any quiet
 * command may be closed as a second turns (seen over bench/delayproxy):
 * 2 s, and pauses of 3.5 s.
 */
START_TEST(test_warm_primed_shell_channel_timeout)
{
	asp_exec_stats s0, s1;
	asp_sandbox *sb;
	int i;

	server_up("LogLevel DEBUG1\nChannelTimeout session:command=2\n");
	sb = sb_open(fx.config);
	mark(sb, "primed-timeout.txt", "first call");
	fx_sleep_ms(300);
	mark(sb, "primed-timeout.txt", "a call after a pause");
	for (i = 0; i < 3; i++) {
		fx_sleep_ms(3500); /* longer than the timeout and sshd's whole-second rounding */
		s0 = stats();
		mark(sb, "primed-timeout.txt", "after a pause longer than ChannelTimeout");
		s1 = stats();
		ck_assert_msg(s1.primed_used == s0.primed_used, "pause %d: a primed shell was used", i + 1);
		ck_assert_msg(s1.primed_closed == s0.primed_closed + (i < 2),
			      "pause %d: %lu primed shells found closed", i + 1,
			      s1.primed_closed - s0.primed_closed);
		ck_assert_msg(s1.primed == s0.primed + (i < 1), "pause %d: %lu shells primed", i + 1,
			      s1.primed - s0.primed);
	}
	ck_assert_msg(log_count("seconds of inactivity") >= 2, "sshd closed no primed shell");
	ck_assert_int_eq(lines_in("primed-timeout.txt"), 5);
	asp_close(sb);
}
END_TEST

/* The routes the trace says small writes took, in order: 's' shell, 'f' SFTP. */
typedef struct route_log {
	pthread_mutex_t mu;
	char taken[64];
	size_t n;
} route_log;

static void route_log_fn(asp_log_level level, const char *msg, void *userdata)
{
	route_log *rl = userdata;

	if (strncmp(msg, "write ", 6) || !strstr(msg, ": ok in "))
		return;
	pthread_mutex_lock(&rl->mu);
	if (rl->n + 1 < sizeof(rl->taken))
		rl->taken[rl->n++] = strstr(msg, "via shell") ? 's' : strstr(msg, "via sftp") ? 'f' : '?';
	pthread_mutex_unlock(&rl->mu);
}

#define ROUTE_WRITES 16

/*
 * sshd_config text that makes every command's shell start dear: bash
 * imports an exported function `cd` that sleeps `secs` first, and the
 * wrapper and the shell route's scripts begin with a cd. ($BASH_ENV would
 * not do: bash run by sshd reads ~/.bashrc instead.) SFTP pays nothing.
 */
static void dear_starts(char *out, size_t size, const char *secs)
{
	snprintf(out, size, "SetEnv \"BASH_FUNC_cd%%%%=() { sleep %s; builtin cd \\\"$@\\\"; }\"\n", secs);
}

/* A fresh server with `extra` in its sshd_config, and a handle to it whose trace goes to rl. */
static asp_sandbox *open_traced(const char *extra, route_log *rl)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	int rc;

	memset(&fx, 0, sizeof(fx));
	server_up(extra);
	o.config_path = fx.config;
	o.log_fn = route_log_fn;
	o.log_userdata = rl;
	test_open_options(&o);
	rc = asp_open(&sb, &o, &e);
	ck_assert_msg(rc == ASP_OK, "asp_open: %s", e.message);
	return sb;
}

/*
 * Small writes follow what each route costs on the connection: with every
 * shell start in the sandbox made dear (0.3 s: dear_starts) writes that
 * began on the shell route (guessed, as on a long round trip) move to SFTP
 * and stay there but for a probe.
 */
START_TEST(test_warm_route_follows_cost_dear_starts)
{
	route_log rl = { .mu = PTHREAD_MUTEX_INITIALIZER };
	char extra[600], name[32], last[8];
	asp_sandbox *sb;
	size_t shell = 0;
	int i;

	dear_starts(extra, sizeof(extra), "0.3");
	sb = open_traced(extra, &rl);
	asp__route_prior_shell(1);
	for (i = 0; i < ROUTE_WRITES; i++) {
		snprintf(name, sizeof(name), "dear-%d.txt", i);
		put(sb, name, "4 KiB or less\n");
	}
	asp__route_prior_shell(0);
	asp_close(sb);
	rl.taken[rl.n] = '\0';
	fprintf(stderr, "warm: routes of %d small writes, process starts dear: %s\n", ROUTE_WRITES, rl.taken);
	ck_assert_msg(rl.n == ROUTE_WRITES, "%zu writes in the trace, not %d", rl.n, ROUTE_WRITES);
	for (i = 0; i < ROUTE_WRITES; i++)
		shell += rl.taken[i] == 's';
	ck_assert_msg(rl.taken[0] == 's', "the first write did not take the guessed shell route: %s", rl.taken);
	memcpy(last, rl.taken + ROUTE_WRITES - 6, 6);
	last[6] = '\0';
	ck_assert_msg(!strcmp(last, "ffffff"), "the last 6 writes were not all over SFTP: %s", rl.taken);
	ck_assert_msg(shell <= ASP_ROUTE_PROBE_FIRST * 2 + 1, "%zu of %d writes by shell: %s", shell,
		      ROUTE_WRITES, rl.taken);
}
END_TEST

/*
 * A fresh connection's first small write, guessed as on a far link (1 s
 * round trip), weighs the shell's start its commands measured: where a
 * shell's start is dearer than that round trip (1.2 s: dear_starts) the
 * write goes over SFTP after one command; on the plain server it
 * takes the shell route after one command. Without a command first both
 * take the shell route (test_warm_route_follows_cost_dear_starts).
 */
static char first_write_after_exec(const char *extra)
{
	route_log rl = { .mu = PTHREAD_MUTEX_INITIALIZER };
	asp_sandbox *sb = open_traced(extra, &rl);

	expect_stdout(sb, "echo started", "started\n");
	asp__route_prior_shell(1);
	put(sb, "guess.txt", "4 KiB or less\n");
	asp__route_prior_shell(0);
	asp_close(sb);
	fx_sshd_stop(&fx);
	ck_assert_msg(rl.n == 1, "%zu writes in the trace, not 1", rl.n);
	return rl.taken[0];
}

START_TEST(test_warm_route_guess_weighs_shell_start)
{
	char extra[600], dear, plain;

	dear_starts(extra, sizeof(extra), "1.2");
	dear = first_write_after_exec(extra);
	plain = first_write_after_exec(NULL);
	ck_assert_msg(dear == 'f', "shell starts of 1.2 s, far link guessed: the first write went '%c', not over SFTP",
		      dear);
	ck_assert_msg(plain == 's', "quick shell starts, far link guessed: the first write went '%c', not by shell",
		      plain);
}
END_TEST

Suite *suite_warm(void)
{
	TCase *slow;
	Suite *s = suite_create("warm");
	TCase *tc = tcase_create("warm");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_warm_channel_is_used);
	tcase_add_test(tc, test_warm_channel_outlives_channel_timeout);
	tcase_add_test(tc, test_warm_unused_connection_timeout);
	tcase_add_test(tc, test_warm_restart_between_calls);
	tcase_add_test(tc, test_warm_cut_between_calls);
	tcase_add_test(tc, test_warm_acknowledged_never_replayed);
	tcase_add_test(tc, test_warm_max_sessions_2);
	tcase_add_test(tc, test_warm_max_sessions_1);
	tcase_add_test(tc, test_warm_stdin_inline);
	tcase_add_test(tc, test_warm_small_files_over_exec);
	tcase_add_test(tc, test_warm_route_follows_cost_dear_starts);
	tcase_add_test(tc, test_warm_route_guess_weighs_shell_start);
	tcase_add_test(tc, test_warm_rtt_is_the_least_sample);
	tcase_add_test(tc, test_warm_confirmations_are_rtt_samples);
	tcase_add_test(tc, test_warm_read_one_flight);
	tcase_add_test(tc, test_warm_read_wrong_guess);
	tcase_add_test(tc, test_warm_primed_shell_after_pause);
	tcase_add_test(tc, test_warm_file_call_primes_nothing);
	tcase_add_test(tc, test_warm_primed_shell_killed);
	tcase_add_test(tc, test_warm_primed_shell_watchdog_started_at_boot);
	suite_add_tcase(s, tc);
	slow = slow_case(s, "warm-slow", FIXTURE_CHECKED, setup, teardown, 60);
	tcase_add_test(slow, test_warm_primed_shell_channel_timeout);
	return s;
}
