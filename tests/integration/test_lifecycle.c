/*
 * test_lifecycle.c - a command dies with the connection that carries it.
 *
 * A harness (here a child process of the test, linking libasp) runs a
 * command that starts a background sleep and a sleep that left the group
 * with setsid, writes the three pids to a file in the workspace and waits.
 * The test sees all three alive, kills the harness with SIGKILL (no
 * cleanup, no kill channel: only the closed TCP connection tells the
 * sandbox), and waits for all three to be gone. The wait is a hang
 * detector, not a timing: the sandbox's watchdog polls twice a second.
 * Rows: OpenSSH and Dropbear (whose shell runs in a session that another
 * of its processes leads), and OpenSSH with the login shells dash, BusyBox
 * sh and zsh; and the command in a primed shell (which got the watchdog
 * with its exec request) under OpenSSH and each of those shells.
 *
 * Between two polls the watchdog waits on its tick (a FIFO, ~/.asp/tick,
 * read with bash's `read -t`), which starts no process; other shells, or
 * a tick that is not a FIFO, sleep as before. The tick rows count the
 * `sleep 0.5` processes in a running command's session: none under bash,
 * some under dash and with a broken tick (a directory in its place: which
 * shows the count sees them), and a broken tick still kills on connection
 * loss. A regular file in its place is replaced by the next watchdog.
 */
#include <check.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec.h"
#include "fixture/servers.h"
#include "helpers.h"

static fx_sshd fx;

#define PIDS_FILE "lifecycle-pids"
#define HARNESS_CMD "sleep 300 & a=$!; setsid sleep 301 & b=$!; " \
		    "echo \"$$ $a $b\" > " PIDS_FILE ".tmp; mv " PIDS_FILE ".tmp " PIDS_FILE "; wait; echo never"

/* The first output of the harness's command: say whether it ran in a primed shell. */
static int prime_report_fd = -1;

static int report_primed(asp_stream stream, const unsigned char *data, size_t len, void *userdata)
{
	asp_exec_stats st;
	char line[64];
	int n;

	if (prime_report_fd < 0)
		return 0;
	asp__exec_stats(&st);
	n = snprintf(line, sizeof(line), "%lu\n", st.primed_used);
	if (write(prime_report_fd, line, (size_t)n) != n)
		_exit(4);
	close(prime_report_fd);
	prime_report_fd = -1;
	return 0;
}

/*
 * The harness: open, run the command, never return (it is killed). With
 * report_fd >= 0, the command runs in a primed shell (calls with pauses
 * before it: the second one's end primes the shell), which has the
 * watchdog from its exec request instead of from the wrapper, and the
 * harness writes the primed-shell use count to report_fd.
 */
static void harness(int report_fd)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_exec_options xo = ASP_EXEC_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_exec_result *r = NULL;
	asp_error e = { 0 };

	o.config_path = fx.config;
	if (asp_open(&sb, &o, &e)) {
		fprintf(stderr, "harness: %s\n", e.message);
		_exit(3);
	}
	if (report_fd >= 0) {
		for (int i = 0; i < 2; i++) {
			if (asp_exec(&r, sb, "true", NULL, &e)) {
				fprintf(stderr, "harness: %s\n", e.message);
				_exit(3);
			}
			asp_exec_result_free(r);
			usleep(400000); /* a pause longer than the round trip and the priming pause */
		}
		prime_report_fd = report_fd;
		xo.on_output = report_primed;
	}
	if (asp_exec(&r, sb, "echo started; " HARNESS_CMD, &xo, &e))
		fprintf(stderr, "harness: %s\n", e.message);
	_exit(3);
}

/* Read the three pids the command wrote, waiting for the file (the harness must still run). */
static void read_pids(pid_t harness_pid, int pids[3])
{
	char path[4200];
	long long until = fx_now_ms() + 20000 * fx_slowdown();

	snprintf(path, sizeof(path), "%s/" PIDS_FILE, fx.workspace);
	for (;;) {
		FILE *f = fopen(path, "r");
		int n = f ? fscanf(f, "%d %d %d", &pids[0], &pids[1], &pids[2]) : 0;
		int st;

		if (f)
			fclose(f);
		if (n == 3)
			return;
		ck_assert_msg(waitpid(harness_pid, &st, WNOHANG) == 0, "the harness ended before the command "
			      "wrote its pids (status %d)", st);
		ck_assert_msg(fx_now_ms() < until, "the command never wrote its pids");
		usleep(20000);
	}
}

static void harness_killed_as(int primed)
{
	int pids[3], i, st, fds[2] = { -1, -1 };
	pid_t h;

	if (primed)
		ck_assert_int_eq(pipe(fds), 0);
	h = fork();
	ck_assert_int_ge(h, 0);
	if (!h) {
		if (primed)
			close(fds[0]);
		harness(fds[1]);
	}
	if (primed)
		close(fds[1]);
	read_pids(h, pids);
	if (primed) {
		char line[64] = { 0 };
		struct pollfd pf = { .fd = fds[0], .events = POLLIN };
		ssize_t n = poll(&pf, 1, 20000 * fx_slowdown()) == 1 ? read(fds[0], line, sizeof(line) - 1) : -1;

		close(fds[0]);
		ck_assert_msg(n > 0 && strtoul(line, NULL, 10) >= 1,
			      "the command did not run in a primed shell (primed shells used: %s)",
			      n > 0 ? line : "no report");
	}
	for (i = 0; i < 3; i++)
		ck_assert_msg(pids[i] > 1 && pid_alive(pids[i]), "process %d of the command is not running",
			      pids[i]);
	ck_assert_int_eq(kill(h, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h, &st, 0), h);
	ck_assert(WIFSIGNALED(st));
	for (i = 0; i < 3; i++)
		ck_assert_msg(wait_gone(pids[i], 20000), "process %d (%s) outlived its connection", pids[i],
			      i == 0 ? "the wrapper shell" : i == 1 ? "a sleep in its group" : "a setsid sleep");
}

static void harness_killed(void)
{
	harness_killed_as(0);
}

START_TEST(openssh_harness_killed)
{
	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	harness_killed();
	fx_sshd_stop(&fx);
}
END_TEST

START_TEST(dropbear_harness_killed)
{
	ck_assert_msg(fx_server_start(&fx, FX_DROPBEAR, NULL) == 0, "dropbear did not start");
	harness_killed();
	fx_sshd_stop(&fx);
}
END_TEST

/* The login shells of the interop suite (tests/integration/test_interop.c), under OpenSSH. */
static const char *const shell_users[] = { "asp-sh-dash", "asp-sh-busybox", "asp-sh-zsh" };

/* OpenSSH with `user`'s login shell; primed: the command in a primed shell. */
static void shell_case(const char *user, int primed)
{
	char extra[64];

	snprintf(extra, sizeof(extra), "AllowUsers %s\n", user);
	ck_assert_int_eq(fx_sshd_start_with(&fx, extra), 0);
	snprintf(fx.user, sizeof(fx.user), "%s", user);
	ck_assert_int_eq(fx_run("chown %s: '%s'", user, fx.workspace), 0);
	ck_assert_int_eq(fx_write_config(&fx, fx.config, NULL), 0);
	harness_killed_as(primed);
	fx_sshd_stop(&fx);
}

START_TEST(shell_harness_killed)
{
	shell_case(shell_users[_i], 0);
}
END_TEST

/* The same through a primed shell, whose watchdog came with its exec request. */
START_TEST(openssh_primed_harness_killed)
{
	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	harness_killed_as(1);
	fx_sshd_stop(&fx);
}
END_TEST

START_TEST(shell_primed_harness_killed)
{
	shell_case(shell_users[_i], 1);
}
END_TEST

/* The watchdog is no child of the command's shell: a `wait` there does not wait for it. */
START_TEST(wait_returns)
{
	asp_sandbox *sb;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	sb = sb_open(fx.config);
	expect_stdout(sb, "sleep 0.2 & wait; echo waited", "waited\n");
	asp_close(sb);
	fx_sshd_stop(&fx);
}
END_TEST

/* Processes "sleep 0.5" in session sid: the watchdog's waits when it has no tick. */
static int poll_sleeps_in(pid_t sid)
{
	static const char want[] = "sleep\0" "0.5";
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		char path[300], buf[512], *rp;
		long session = 0;
		size_t len;
		FILE *f;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = '\0';
		/* "PID (comm) STATE PPID PGRP SESSION ..." */
		if (!(rp = strrchr(buf, ')')) || sscanf(rp + 1, " %*c %*d %*d %ld", &session) != 1 || session != sid)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		len = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		if (len == sizeof(want) && !memcmp(buf, want, sizeof(want)))
			n++;
	}
	closedir(d);
	return n;
}

/*
 * Run `sleep 3` (with a handle) and count, for 1.5 s, the samples in which
 * its session had a watchdog `sleep 0.5`; the command writes its $$ (the
 * session's leader under OpenSSH) first.
 */
static int watchdog_sleep_samples(void)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_result *r = NULL;
	asp_proc *p = NULL;
	asp_error e = { 0 };
	char path[4200];
	long long end;
	int sid = 0, seen = 0;

	snprintf(path, sizeof(path), "%s/tick-sid", fx.workspace);
	unlink(path);
	ck_assert_msg(asp_proc_start(&p, sb, "echo $$ > tick-sid.tmp; mv tick-sid.tmp tick-sid; sleep 3", NULL,
				     &e) == 0, "%s", e.message);
	for (end = fx_now_ms() + 20000 * fx_slowdown(); !sid && fx_now_ms() < end; fx_sleep_ms(20)) {
		FILE *f = fopen(path, "r");

		if (f && fscanf(f, "%d", &sid) != 1)
			sid = 0;
		if (f)
			fclose(f);
	}
	ck_assert_msg(sid > 1 && pid_alive(sid), "the command did not report its pid");
	for (end = fx_now_ms() + 1500; fx_now_ms() < end; fx_sleep_ms(20))
		seen += poll_sleeps_in(sid) > 0;
	ck_assert_msg(pid_alive(sid), "the command ended before the count did");
	ck_assert_int_eq(asp_proc_wait(&r, p, -1, &e), 0);
	asp_exec_result_free(r);
	asp_proc_free(p);
	asp_close(sb);
	return seen;
}

/*
 * The tick is the sandbox user's, ~/.asp/tick, and that user is machine-wide:
 * make check-deep runs this suite plain, on far routes, under ASan and under
 * valgrind at once, and tick_broken_still_kills puts a directory in the
 * tick's place, which sends every watchdog of the user back to `sleep` while
 * it is there (a failed run, when it was a regular file: 43 samples of
 * `sleep 0.5` in tick_bash_starts_nothing on far routes). The tests that
 * depend on the tick's state hold its lock (test_lock("tick"), as does the
 * warm suite's primed-shell watchdog test). One that failed before putting
 * the FIFO back left the directory: the test that needs the FIFO removes
 * what is not one first.
 */

/* Under bash the watchdog waits on its tick: no process between polls. */
START_TEST(tick_bash_starts_nothing)
{
	asp_sandbox *sb;
	int seen, lock = test_lock("tick");

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	ck_assert_int_eq(fx_run("t=~%s/.asp/tick; [ ! -e $t ] || [ -p $t ] || rm -rf $t", fx.user), 0);
	/* The first watchdog makes the tick when it is missing (in the background): one call first. */
	sb = sb_open(fx.config);
	expect_stdout(sb, "true", "");
	asp_close(sb);
	seen = watchdog_sleep_samples();
	ck_assert_msg(seen == 0, "the watchdog started `sleep 0.5` in %d samples under bash", seen);
	fx_sshd_stop(&fx);
	close(lock);
}
END_TEST

/* dash has no `read -t`: the watchdog sleeps, and the count sees it. */
START_TEST(tick_dash_sleeps)
{
	char extra[64];
	int seen;

	snprintf(extra, sizeof(extra), "AllowUsers %s\n", shell_users[0]);
	ck_assert_int_eq(fx_sshd_start_with(&fx, extra), 0);
	snprintf(fx.user, sizeof(fx.user), "%s", shell_users[0]);
	ck_assert_int_eq(fx_run("chown %s: '%s'", fx.user, fx.workspace), 0);
	ck_assert_int_eq(fx_write_config(&fx, fx.config, NULL), 0);
	seen = watchdog_sleep_samples();
	ck_assert_msg(seen > 0, "no `sleep 0.5` seen in the session of a command under dash");
	fx_sshd_stop(&fx);
}
END_TEST

/*
 * Puts `what` in the tick's place: made beside it and renamed over it, since
 * another job's new watchdog can put a FIFO back at any moment (a CI
 * failure: an `rm` followed by `echo x >` wrote into the FIFO made between
 * them, 30 of 200 such replacements beside a loop making it; none renamed).
 * A directory cannot be renamed over a FIFO: the FIFO goes first, in a loop
 * until the directory wins the race.
 */
static void put_in_tick(const char *what)
{
	if (!strcmp(what, "file"))
		ck_assert_int_eq(fx_run("d=~%s/.asp; mkdir -p $d && echo x > $d/tick.broken && chown -R %s: $d && "
					"mv -f $d/tick.broken $d/tick", fx.user, fx.user), 0);
	else
		ck_assert_int_eq(fx_run("d=~%s/.asp; mkdir -p $d && chown %s: $d && for i in $(seq 100); do "
					"[ -d $d/tick ] || { rm -f $d/tick; mkdir $d/tick 2>/dev/null; }; done; "
					"[ -d $d/tick ] && chown %s: $d/tick", fx.user, fx.user, fx.user), 0);
}

/*
 * A regular file in the tick's place (an open with `<>` creates one where the
 * FIFO was removed from outside) is a FIFO again after the next command:
 * its watchdog renames a new FIFO over it (or that of a command another
 * job runs as the same user, which a CI run under valgrind saw do it before
 * this test's own command started).
 */
START_TEST(tick_file_is_replaced)
{
	asp_sandbox *sb;
	int seen, lock = test_lock("tick");

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	put_in_tick("file"); /* another job's next watchdog may replace it first: the same claim */
	sb = sb_open(fx.config);
	expect_stdout(sb, "true", "");
	asp_close(sb);
	seen = watchdog_sleep_samples();
	ck_assert_msg(seen == 0, "the watchdog started `sleep 0.5` in %d samples after a file in the tick's "
		      "place", seen);
	ck_assert_int_eq(fx_run("[ -p ~%s/.asp/tick ]", fx.user), 0);
	fx_sshd_stop(&fx);
	close(lock);
}
END_TEST

/* A tick that cannot be a FIFO (a directory in its place): sleeps again, and still kills. */
START_TEST(tick_broken_still_kills)
{
	int seen, lock = test_lock("tick");

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	put_in_tick("directory");
	seen = watchdog_sleep_samples();
	harness_killed();
	ck_assert_int_eq(fx_run("rm -rf ~%s/.asp/tick", fx.user), 0); /* the next watchdog makes the FIFO */
	ck_assert_msg(seen > 0, "no `sleep 0.5` seen with a directory in the tick's place");
	fx_sshd_stop(&fx);
	close(lock);
}
END_TEST

Suite *suite_lifecycle(void)
{
	Suite *s = suite_create("lifecycle");
	TCase *tc = tcase_create("harness_dies");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, openssh_harness_killed);
	tcase_add_test(tc, dropbear_harness_killed);
	tcase_add_test(tc, wait_returns);
	tcase_add_loop_test(tc, shell_harness_killed, 0, (int)(sizeof(shell_users) / sizeof(shell_users[0])));
	tcase_add_test(tc, openssh_primed_harness_killed);
	tcase_add_loop_test(tc, shell_primed_harness_killed, 0,
			    (int)(sizeof(shell_users) / sizeof(shell_users[0])));
	tcase_add_test(tc, tick_bash_starts_nothing);
	tcase_add_test(tc, tick_dash_sleeps);
	tcase_add_test(tc, tick_file_is_replaced);
	tcase_add_test(tc, tick_broken_still_kills);
	suite_add_tcase(s, tc);
	return s;
}
