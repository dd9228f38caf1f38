/*
 * test_cli_bg.c - asp-exec's --bg options end to end, through a master and
 * without one (the loop's two rows): start with a name (a hostile one),
 * list (text and JSON), output from offsets, wait with a timeout (124),
 * signal (the group gone), wait's exit status, remove, and usage errors.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "helpers.h"
#include "integration/cli_run.h"

/* "ID\n" from --bg; the id, malloc'd. */
static char *started(result *r)
{
	char *id;

	ck_assert_msg(r->status == 0, "--bg: status %d: %s", r->status, r->err);
	ck_assert_msg(r->out_len > 3 && r->out[r->out_len - 1] == '\n', "--bg printed '%s'", r->out);
	id = strndup(r->out, r->out_len - 1);
	ck_assert_uint_eq(strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-"), strlen(id));
	result_free(r);
	return id;
}

START_TEST(test_bg_cli)
{
	char *id, *kid, want[64];
	pid_t p;
	result r;

	use_master = _i == 0;
	fx_run("rm -f '%s/cli-bg-pid'", fx.workspace);
	r = CLI("--bg", "--name", "it's $(touch clibginj1)\tx", "--", "echo one; echo two >&2; exit 3");
	id = started(&r);
	r = CLI("--bg-wait", id, "-t", "30");
	ck_assert_msg(r.status == 3, "--bg-wait: status %d: %s", r.status, r.err);
	result_free(&r);
	r = CLI("--bg-output", id);
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "one\ntwo\n");
	result_free(&r);
	r = CLI("--bg-output", id, "--offset", "4", "--limit", "2");
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "tw");
	result_free(&r);
	r = CLI("--bg-output", id, "--offset", "4", "--json");
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(strstr(r.out, "\"offset\":4") && strstr(r.out, "\"next\":8") &&
		      strstr(r.out, "\"data\":\"two\\n\"") && strstr(r.out, "\"exit_code\":3"), "%s", r.out);
	result_free(&r);
	/* The list: the name escaped on a line of its own, verbatim in JSON. */
	r = CLI("--bg-list");
	ck_assert_int_eq(r.status, 0);
	snprintf(want, sizeof(want), "%s\texited\t3\t", id);
	ck_assert_msg(strstr(r.out, want), "no '%s' in %s", want, r.out);
	ck_assert_msg(strstr(r.out, "\tit's $(touch clibginj1)\\x09x\n"), "%s", r.out);
	result_free(&r);
	r = CLI("--bg-list", "--json");
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(strstr(r.out, "\"name\":\"it's $(touch clibginj1)\\tx\""), "%s", r.out);
	result_free(&r);

	/* A running one: wait times out (124), a signal ends its group, wait says 143. */
	r = CLI("--bg", "--", "sh", "-c", "echo $$ > cli-bg-pid; exec sleep 300");
	kid = started(&r);
	for (long long until = fx_now_ms() + 20000 * fx_slowdown(); !(p = 0);) {
		char path[400], *t;
		snprintf(path, sizeof(path), "%s/cli-bg-pid", fx.workspace);
		if ((t = fx_read_file(path, NULL)) && (p = atoi(t)) > 0) {
			free(t);
			break;
		}
		free(t);
		ck_assert_msg(fx_now_ms() < until, "the command never wrote its pid");
		fx_sleep_ms(20);
	}
	ck_assert_msg(pid_alive(p), "%d is not running", p);
	r = CLI("--bg-wait", kid, "-t", "0.1");
	ck_assert_int_eq(r.status, 124);
	result_free(&r);
	r = CLI("--bg-remove", kid);
	ck_assert_int_eq(r.status, 1);
	assert_one_error_line(&r, "still running");
	result_free(&r);
	r = CLI("--bg-signal", kid, "--signal", "TERM");
	ck_assert_msg(r.status == 0, "--bg-signal: %s", r.err);
	result_free(&r);
	ck_assert_msg(wait_gone(p, 20000 * fx_slowdown()), "%d outlived --bg-signal", p);
	r = CLI("--bg-wait", kid);
	ck_assert_int_eq(r.status, 128 + SIGTERM);
	result_free(&r);

	r = CLI("--bg-remove", id);
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	r = CLI("--bg-remove", kid);
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	r = CLI("--bg-output", id);
	ck_assert_int_eq(r.status, 1);
	assert_one_error_line(&r, "no background process");
	result_free(&r);
	assert_not_injected(fx.workspace, "clibginj");
	fx_run("rm -f '%s/cli-bg-pid'", fx.workspace);
	free(id);
	free(kid);
}
END_TEST

START_TEST(test_bg_usage)
{
	const char *const *const bad[] = {
		ARGS("--bg"),
		ARGS("--bg-list", "true"),
		ARGS("--bg-output", "x", "--signal", "KILL"),
		ARGS("--bg-list", "--name", "n"),
		ARGS("--name", "n", "true"),
		ARGS("--bg-wait", "x", "--read", "f"),
		ARGS("--bg-output", "x", "--offset", "-1"),
		ARGS("--bg-signal", "x", "-t", "3"),
	};
	result r;
	size_t i;

	use_master = 0;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = cli_in(NULL, 0, bad[i]);
		ck_assert_msg(r.status == 2, "case %zu: status %d", i, r.status);
		result_free(&r);
	}
	r = CLI("--bg-signal", "bg-0000000000000000", "--signal", "NOPE");
	ck_assert_int_eq(r.status, 2);
	assert_one_error_line(&r, "not a signal name");
	result_free(&r);
	r = CLI("--bg-wait", "../etc");
	ck_assert_int_eq(r.status, 1);
	assert_one_error_line(&r, "is not an id");
	result_free(&r);
}
END_TEST

Suite *suite_cli_bg(void);

Suite *suite_cli_bg(void)
{
	Suite *s = suite_create("cli_bg");
	TCase *both = tcase_create("cli-bg");

	tcase_add_unchecked_fixture(both, cli_runner_setup, cli_runner_cleanup);
	tcase_add_checked_fixture(both, cli_setup, cli_teardown);
	tcase_set_timeout(both, 120);
	tcase_add_loop_test(both, test_bg_cli, 0, 2);
	tcase_add_test(both, test_bg_usage);
	suite_add_tcase(s, both);
	return s;
}
