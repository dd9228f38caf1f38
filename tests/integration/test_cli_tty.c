/*
 * test_cli_tty.c - asp-exec --tty end to end, on a real pseudo-terminal
 * this test opens (posix_openpt) and makes asp-exec's controlling terminal,
 * with stdin and stdout on it and stderr on a pipe: the remote command
 * sees a terminal of the local size and TERM, a local resize (SIGWINCH)
 * reaches it, Ctrl-C is a byte that interrupts the remote program (not
 * asp-exec: the local terminal is raw meanwhile), SIGTERM to asp-exec
 * kills the remote process group, the local terminal's modes are the same
 * after as before, the exit status passes through; --tty without a
 * terminal warns and runs without one, --tty --tty forces one, and the
 * options --tty cannot go with are refused.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "helpers.h"
#include "integration/cli_run.h"
#include "tiers.h"

/* Long enough only to detect a hang. */
static long hang_ms(void)
{
	return RUN_TIMEOUT_MS * fx_slowdown();
}

/* asp-exec on a pseudo-terminal: we hold its master side and a slave descriptor (to read its modes). */
typedef struct term {
	pid_t pid;
	int master, slave, err;
	char *out;      /* what came out of the terminal so far */
	size_t out_len;
	struct termios before;
} term;

/* Start asp-exec (cli_argv(args)) with TERM=term_env on a new terminal of rows x cols. */
static void spawn_tty(term *t, const char *const *args, unsigned short rows, unsigned short cols,
		      const char *term_env)
{
	const char *const *argv = cli_argv(args);
	struct winsize ws = { rows, cols, 0, 0 };
	int err[2];
	char *name;

	memset(t, 0, sizeof(*t));
	t->out = calloc(1, 1);
	t->master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	ck_assert_int_ge(t->master, 0);
	ck_assert(grantpt(t->master) == 0 && unlockpt(t->master) == 0);
	ck_assert_ptr_nonnull(name = ptsname(t->master));
	t->slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	ck_assert_int_ge(t->slave, 0);
	ck_assert_int_eq(ioctl(t->slave, TIOCSWINSZ, &ws), 0);
	ck_assert_int_eq(tcgetattr(t->slave, &t->before), 0);
	ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
	fflush(NULL);
	t->pid = fork();
	ck_assert_int_ge(t->pid, 0);
	if (t->pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		/* A session of its own, the terminal its controlling one: as a login shell runs it. */
		if (setsid() < 0 || ioctl(t->slave, TIOCSCTTY, 0) < 0 || dup2(t->slave, 0) < 0 ||
		    dup2(t->slave, 1) < 0 || dup2(err[1], 2) < 0)
			_exit(127);
		if (term_env)
			setenv("TERM", term_env, 1);
		else
			unsetenv("TERM");
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(err[1]);
	t->err = err[0];
}

/* Take in what the terminal has for us within ms; 0 when it had nothing (or the slave side is gone). */
static int take_output(term *t, int ms)
{
	struct pollfd f = { t->master, POLLIN, 0 };
	char buf[4096];
	ssize_t n;

	if (poll(&f, 1, ms) <= 0 || (n = read(t->master, buf, sizeof(buf))) <= 0)
		return 0;
	t->out = realloc(t->out, t->out_len + (size_t)n + 1);
	ck_assert_ptr_nonnull(t->out);
	memcpy(t->out + t->out_len, buf, (size_t)n);
	t->out_len += (size_t)n;
	t->out[t->out_len] = '\0';
	return 1;
}

/* Read until the output holds needle; fails on a hang. */
static void wait_output(term *t, const char *needle)
{
	long long until = fx_now_ms() + hang_ms();

	while (!strstr(t->out, needle)) {
		ck_assert_msg(fx_now_ms() < until, "no \"%s\" on the terminal; so far: %s", needle, t->out);
		take_output(t, 100);
	}
}

/* The end: asp-exec's exit status (-1: it hung and was killed); its stderr in *err (malloc'd). */
static int finish_tty(term *t, char **err)
{
	long long until = fx_now_ms() + hang_ms();
	char buf[4096];
	size_t len = 0;
	ssize_t n;
	int st, status = -1;

	*err = calloc(1, 1);
	for (;;) {
		pid_t w = waitpid(t->pid, &st, WNOHANG);

		if (w == t->pid) {
			status = decode_status(st);
			break;
		}
		if (fx_now_ms() > until) {
			kill(t->pid, SIGKILL);
			waitpid(t->pid, &st, 0);
			break;
		}
		take_output(t, 50);
	}
	while (take_output(t, 0))
		;
	while ((n = read(t->err, buf, sizeof(buf))) > 0) {
		*err = realloc(*err, len + (size_t)n + 1);
		memcpy(*err + len, buf, (size_t)n);
		len += (size_t)n;
		(*err)[len] = '\0';
	}
	return status;
}

/* The terminal's modes are as they were before asp-exec ran (stty -g before and after). */
static void assert_modes_restored(const term *t)
{
	struct termios now;

	ck_assert_int_eq(tcgetattr(t->slave, &now), 0);
	ck_assert_msg(now.c_iflag == t->before.c_iflag && now.c_oflag == t->before.c_oflag &&
		      now.c_lflag == t->before.c_lflag && now.c_cflag == t->before.c_cflag &&
		      !memcmp(now.c_cc, t->before.c_cc, sizeof(now.c_cc)),
		      "the terminal's modes were not restored: lflag %#x (was %#x), iflag %#x (was %#x), "
		      "oflag %#x (was %#x)", (unsigned)now.c_lflag, (unsigned)t->before.c_lflag,
		      (unsigned)now.c_iflag, (unsigned)t->before.c_iflag, (unsigned)now.c_oflag,
		      (unsigned)t->before.c_oflag);
}

/* asp-exec has put the terminal in raw mode: no local signals, line editing or echo. */
static void wait_raw(const term *t)
{
	long long until = fx_now_ms() + hang_ms();
	struct termios now;

	for (;;) {
		ck_assert_int_eq(tcgetattr(t->slave, &now), 0);
		if (!(now.c_lflag & (ISIG | ICANON | ECHO)) && !(now.c_oflag & OPOST))
			return;
		ck_assert_msg(fx_now_ms() < until, "the terminal never went raw: lflag %#x",
			      (unsigned)now.c_lflag);
		fx_sleep_ms(20);
	}
}

static void term_free(term *t)
{
	close(t->master);
	close(t->slave);
	close(t->err);
	free(t->out);
}

/* A process of this test (its unique sleep argument) under the suite's sshd. */
static pid_t find_sleep(const char *arg)
{
	pid_t pid = wait_sleep_under(arg, fx.pid, hang_ms());

	ck_assert_msg(pid, "no process \"sleep %s\" appeared", arg);
	return pid;
}

/* ---------------------------------------------------------------- tests */

START_TEST(test_tty_terminal)
{
	char *err;
	term t;
	int status;

	/* Through the master's path: --tty takes its own connection and starts no master. */
	spawn_tty(&t, ARGS("--tty", "-e", "X=a b", "--", "test -t 0 && test -t 1 && tty; stty size; "
			   "echo \"T=$TERM X=$X\"; exit 7"), 37, 101, "vt100");
	status = finish_tty(&t, &err);
	ck_assert_msg(status == 7, "status %d; stderr: %s; terminal: %s", status, err, t.out);
	ck_assert_msg(strstr(t.out, "/dev/pts/"), "the command saw no terminal: %s", t.out);
	ck_assert_msg(strstr(t.out, "37 101\r\n"), "stty size is not the local 37 101: %s", t.out);
	ck_assert_msg(strstr(t.out, "T=vt100 X=a b\r\n"), "TERM or --env did not arrive: %s", t.out);
	ck_assert_msg(!err[0], "stderr: %s", err);
	assert_modes_restored(&t);
	ck_assert_int_eq(find_masters(NULL, 0), 0);
	free(err);
	term_free(&t);

	/* No TERM here: libasp's default. */
	spawn_tty(&t, ARGS("--tty", "echo \"T=$TERM\""), 24, 80, NULL);
	status = finish_tty(&t, &err);
	ck_assert_msg(status == 0, "status %d; stderr: %s", status, err);
	ck_assert_msg(strstr(t.out, "T=xterm-256color\r\n"), "TERM: %s", t.out);
	free(err);
	term_free(&t);
}
END_TEST

START_TEST(test_tty_resize)
{
	struct winsize ws = { 50, 120, 0, 0 };
	char *err;
	term t;
	int status;

	/* bash runs a trap between commands (its read goes on through a SIGWINCH): short sleeps. */
	spawn_tty(&t, ARGS("--tty", "trap 'stty size; exit 5' WINCH; stty size; echo ready; "
			   "while :; do sleep 0.1; done"), 30, 90, "xterm");
	wait_output(&t, "ready");
	ck_assert_msg(strstr(t.out, "30 90\r\n"), "the size before: %s", t.out);
	/* The kernel sends SIGWINCH to asp-exec, the terminal's foreground process group. */
	ck_assert_int_eq(ioctl(t.slave, TIOCSWINSZ, &ws), 0);
	wait_output(&t, "50 120\r\n");
	status = finish_tty(&t, &err);
	ck_assert_msg(status == 5, "status %d; stderr: %s; terminal: %s", status, err, t.out);
	assert_modes_restored(&t);
	free(err);
	term_free(&t);
}
END_TEST

START_TEST(test_tty_ctrl_c)
{
	char cmd[96], arg[32], *err;
	term t;
	pid_t pid;
	int status;

	snprintf(arg, sizeof(arg), "38.%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "sleep %s; echo after", arg);
	spawn_tty(&t, ARGS("--tty", cmd), 24, 80, "xterm");
	pid = find_sleep(arg);
	assert_alive(pid, "the remote sleep");
	/* Raw: the byte below is not turned into a SIGINT for asp-exec by the local terminal. */
	wait_raw(&t);
	ck_assert_int_eq(write(t.master, "\x03", 1), 1);
	ck_assert_msg(wait_gone(pid, hang_ms()), "Ctrl-C left the remote sleep running");
	status = finish_tty(&t, &err);
	ck_assert_msg(status == 130, "status %d after Ctrl-C; stderr: %s; terminal: %s", status, err, t.out);
	ck_assert_msg(!strstr(t.out, "after"), "the shell went on after Ctrl-C: %s", t.out);
	ck_assert_msg(!err[0], "stderr: %s", err);
	assert_modes_restored(&t);
	free(err);
	term_free(&t);
}
END_TEST

/*
 * A remote trap proves Ctrl-C went as a byte: a local cancel would have sent SIGTERM (status 130 too).
 * The shell waits in short sleeps, not in `read`: a shell only notes a signal in its handler and runs
 * the trap at its next command, so a SIGINT that lands after "ready" but before the shell blocks in
 * read(2) (the shell off the CPU there, as on a loaded machine) left it reading for good, the trap
 * never run. A sleep ends, and the trap runs after it.
 */
START_TEST(test_tty_ctrl_c_is_a_byte)
{
	char *err;
	term t;
	int status;

	spawn_tty(&t, ARGS("--tty", "trap 'echo got-int; exit 9' INT; echo ready; while :; do sleep 0.2; done"),
		  24, 80, "xterm");
	wait_output(&t, "ready");
	wait_raw(&t);
	ck_assert_int_eq(write(t.master, "\x03", 1), 1);
	status = finish_tty(&t, &err);
	ck_assert_msg(status == 9, "status %d; stderr: %s; terminal: %s", status, err, t.out);
	ck_assert_msg(strstr(t.out, "got-int"), "no trap output: %s", t.out);
	assert_modes_restored(&t);
	free(err);
	term_free(&t);
}
END_TEST

START_TEST(test_tty_sigterm)
{
	char cmd[64], arg[32], *err;
	term t;
	pid_t pid;
	int status;

	snprintf(arg, sizeof(arg), "39.%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "sleep %s", arg);
	spawn_tty(&t, ARGS("--tty", cmd), 24, 80, "xterm");
	pid = find_sleep(arg);
	assert_alive(pid, "the remote sleep");
	wait_raw(&t);
	ck_assert_int_eq(kill(t.pid, SIGTERM), 0);
	ck_assert_msg(wait_gone(pid, hang_ms()), "SIGTERM to asp-exec left the remote sleep running");
	status = finish_tty(&t, &err);
	ck_assert_msg(status == 143, "status %d after SIGTERM; stderr: %s", status, err);
	assert_modes_restored(&t);
	free(err);
	term_free(&t);
}
END_TEST

START_TEST(test_tty_no_terminal)
{
	result r;

	/* Pipes, as a harness runs it: one warning, then the command as without --tty. */
	r = CLI("--tty", "test -t 0 || echo no-tty; exit 3");
	ck_assert_msg(r.status == 3, "status %d: %s", r.status, r.err);
	ck_assert_str_eq(r.out, "no-tty\n");
	assert_one_error_line(&r, "stdin is not a terminal");
	result_free(&r);
	/* Twice: a terminal anyway (its "\r\n" shows it). */
	r = CLI("--tty", "--tty", "test -t 0 && test -t 1 && echo tty; exit 4");
	ck_assert_msg(r.status == 4, "status %d: %s", r.status, r.err);
	ck_assert_str_eq(r.out, "tty\r\n");
	ck_assert_str_eq(r.err, "");
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 0);
}
END_TEST

START_TEST(test_tty_usage)
{
	const struct {
		const char *const *args;
		const char *says;
	} bad[] = {
		{ ARGS("--tty", "--json", "true"), "--json" },
		{ ARGS("--tty", "--read", "f"), "commands only" },
		{ ARGS("--tty", "--write", "f"), "commands only" },
		{ ARGS("--tty", "--check"), "commands only" },
		{ ARGS("--tty", "--stop"), "commands only" },
		{ ARGS("--tty", "--bg", "true"), "commands only" },
		{ ARGS("--tty", "--bg-list"), "commands only" },
		{ ARGS("--tty"), "no command" },
	};
	result r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = cli_in(NULL, 0, bad[i].args);
		ck_assert_msg(r.status == 2, "case %zu: status %d", i, r.status);
		ck_assert_msg(strstr(r.err, bad[i].says), "case %zu: %s", i, r.err);
		result_free(&r);
	}
}
END_TEST

/* --timeout kills the remote process group of a --tty command (waits a real second). */
START_TEST(test_tty_timeout)
{
	char cmd[64], arg[32], *err;
	term t;
	pid_t pid;
	int status;

	snprintf(arg, sizeof(arg), "40.%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "sleep %s", arg);
	spawn_tty(&t, ARGS("--tty", "-t", "1", cmd), 24, 80, "xterm");
	pid = find_sleep(arg);
	assert_alive(pid, "the remote sleep");
	status = finish_tty(&t, &err);
	ck_assert_msg(status == 124, "status %d; stderr: %s", status, err);
	ck_assert_msg(wait_gone(pid, hang_ms()), "--timeout left the remote sleep running");
	assert_modes_restored(&t);
	free(err);
	term_free(&t);
}
END_TEST

Suite *suite_cli_tty(void);

Suite *suite_cli_tty(void)
{
	Suite *s = suite_create("cli_tty");
	TCase *tc = tcase_create("cli-tty");
	TCase *slow;

	tcase_add_unchecked_fixture(tc, cli_runner_setup, cli_runner_cleanup);
	tcase_add_checked_fixture(tc, cli_setup, cli_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_tty_terminal);
	tcase_add_test(tc, test_tty_resize);
	tcase_add_test(tc, test_tty_ctrl_c);
	tcase_add_test(tc, test_tty_ctrl_c_is_a_byte);
	tcase_add_test(tc, test_tty_sigterm);
	tcase_add_test(tc, test_tty_no_terminal);
	tcase_add_test(tc, test_tty_usage);
	suite_add_tcase(s, tc);
	slow = slow_case(s, "cli-tty-slow", FIXTURE_CHECKED, cli_setup, cli_teardown, 120);
	tcase_add_unchecked_fixture(slow, cli_runner_setup, cli_runner_cleanup);
	tcase_add_test(slow, test_tty_timeout);
	return s;
}
