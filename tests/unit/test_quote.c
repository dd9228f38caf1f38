/*
 * test_quote.c - the shell text quote.c builds, run by a real /bin/sh:
 * the x-asp-proxy-command line (asp__proxy_script) passes host and user
 * through byte for byte, and the cut-channel check (asp__cut_check_script)
 * tells a live process group from a gone one and stops the live one.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "quote.h"

/* Run script with sh -c; what it writes to fd `which` (1 or 2) goes into out. */
static size_t run_sh(const char *script, int which, char *out, size_t cap)
{
	int p[2];
	pid_t pid;
	size_t got = 0;
	ssize_t n;

	ck_assert_int_eq(pipe(p), 0);
	if ((pid = fork()) == 0) {
		dup2(p[1], which);
		close(p[0]);
		execl("/bin/sh", "sh", "-c", script, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_gt(pid, 0);
	close(p[1]);
	while (got < cap - 1 && (n = read(p[0], out + got, cap - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(p[0]);
	waitpid(pid, NULL, 0);
	return got;
}

/* ------------------------------------------------------------ proxy */

START_TEST(test_proxy_script_quotes_host_and_user)
{
	static const char *host = "h'; echo INJECTED; '";
	static const char *user = "u$(echo INJECTED) `echo INJECTED` * \"q\"\\";
	asp_buf b = { 0 };
	char out[1024], want[1024];

	ck_assert_int_eq(asp__proxy_script(&b, "for a in %h %p %r; do printf '%%s\\n' \"$a\"; done; "
					   "echo 100%%",
					   host, 2222, user), 0);
	run_sh((const char *)b.data, 1, out, sizeof(out));
	snprintf(want, sizeof(want), "%s\n2222\n%s\n100%%\n", host, user);
	ck_assert_str_eq(out, want);
	asp__buf_free(&b);
}
END_TEST

START_TEST(test_proxy_script_escapes)
{
	asp_buf b = { 0 };

	/* %% is one '%'; a '%' at the very end stays. */
	ck_assert_int_eq(asp__proxy_script(&b, "a%%b %", "h", 22, "u"), 0);
	ck_assert_str_eq((const char *)b.data, "a%b %");
	asp__buf_free(&b);
	/* Any other escape is refused, whatever came before it. */
	ck_assert_int_eq(asp__proxy_script(&b, "nc %h %x", "h", 22, "u"), ASP_EINVAL);
	asp__buf_free(&b);
	ck_assert_int_eq(asp__proxy_script(&b, "%n", "h", 22, "u"), ASP_EINVAL);
	asp__buf_free(&b);
}
END_TEST

/* ------------------------------------------------------------ cut check */

START_TEST(test_cut_check_stops_a_live_group)
{
	asp_buf b = { 0 };
	char out[256];
	int status;
	pid_t pid;

	/* A process that leads its own group, as the wrapper's shell does under sshd. */
	if ((pid = fork()) == 0) {
		setpgid(0, 0);
		execl("/bin/sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	ck_assert_int_gt(pid, 0);
	setpgid(pid, pid);
	ck_assert_int_eq(kill(pid, 0), 0); /* alive before the check */
	ck_assert_int_eq(asp__cut_check_script(&b, pid, 1000), 0);
	run_sh((const char *)b.data, 2, out, sizeof(out));
	ck_assert_str_eq(out, "running\n");
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status));
	ck_assert_int_eq(WTERMSIG(status), SIGTERM);
	asp__buf_free(&b);
}
END_TEST

START_TEST(test_cut_check_says_gone)
{
	asp_buf b = { 0 };
	char out[256];
	pid_t pid;

	if ((pid = fork()) == 0)
		_exit(0);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid); /* reaped: the pid names nothing now */
	ck_assert_int_eq(asp__cut_check_script(&b, pid, 1000), 0);
	run_sh((const char *)b.data, 2, out, sizeof(out));
	ck_assert_str_eq(out, "gone\n");
	asp__buf_free(&b);
}
END_TEST

Suite *suite_quote(void);

Suite *suite_quote(void)
{
	Suite *s = suite_create("quote");
	TCase *tc = tcase_create("quote");

	tcase_add_test(tc, test_proxy_script_quotes_host_and_user);
	tcase_add_test(tc, test_proxy_script_escapes);
	tcase_add_test(tc, test_cut_check_stops_a_live_group);
	tcase_add_test(tc, test_cut_check_says_gone);
	suite_add_tcase(s, tc);
	return s;
}
