/*
 * test_provision_usage.c - asf-provision's usage, without an engine: every
 * subcommand answers --help (and -h) with its own usage on stdout, status 0;
 * a missing required option of up/manifest says "required" and names it,
 * status 2, before anything is looked at or created.
 */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "integration/cli_run.h"

static char asf[PATH_MAX];
static char state[64];

/* build/bin/asf-provision, next to this test binary's build/tests. */
static void asf_setup(void)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	ck_assert_int_gt(n, 0);
	self[n] = '\0';
	ck_assert_ptr_nonnull(slash = strrchr(self, '/'));
	*slash = '\0';
	ck_assert_int_lt(snprintf(asf, sizeof(asf), "%s/../bin/asf-provision", self), (int)sizeof(asf));
	ck_assert_msg(access(asf, X_OK) == 0, "%s is missing: run make tools", asf);
	snprintf(state, sizeof(state), "/tmp/asf-usage.%d.XXXXXX", (int)getpid());
	ck_assert_ptr_nonnull(mkdtemp(state));
}

static void asf_teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state);
	ck_assert_int_eq(system(cmd), 0);
}

static const char *const subcommands[] = { "up", "manifest", "verify", "status", "list", "down" };

START_TEST(test_subcommand_help)
{
	const char *sub = subcommands[_i / 2];
	const char *flag = _i % 2 ? "-h" : "--help";
	result r = run_argv(NULL, 0, ARGS(asf, "--state-dir", state, sub, flag));
	char want[64];

	ck_assert_msg(r.status == 0, "asf-provision %s %s: status %d: %s", sub, flag, r.status, r.err);
	ck_assert_msg(r.err_len == 0, "asf-provision %s %s wrote to stderr: %s", sub, flag, r.err);
	snprintf(want, sizeof(want), "usage: asf-provision [OPTIONS] %s", sub);
	ck_assert_msg(strstr(r.out, want), "asf-provision %s %s: no \"%s\" in:\n%s", sub, flag, want, r.out);
	result_free(&r);
}
END_TEST

/* The option a missing-option test leaves out, and what the message must name. */
static const struct {
	const char *args[8];
	const char *names;
} missing[] = {
	{ { "up", "--workspace", "/usr", "--image", "x" }, "--name" },
	{ { "up", "--name", "a", "--image", "x" }, "--workspace" },
	{ { "up", "--name", "a", "--workspace", "/usr" }, "--image" },
	{ { "manifest", "--backend", "kubernetes", "--workspace", "/usr", "--image", "x" }, "--name" },
};

START_TEST(test_missing_required_option)
{
	const char *argv[16] = { asf, "--state-dir", state };
	int n = 3, k;
	result r;

	for (k = 0; missing[_i].args[k]; k++)
		argv[n++] = missing[_i].args[k];
	r = run_argv(NULL, 0, argv);
	ck_assert_msg(r.status == 2, "%s without %s: status %d: %s", missing[_i].args[0], missing[_i].names,
		      r.status, r.err);
	ck_assert_msg(strstr(r.err, "required") && strstr(r.err, missing[_i].names),
		      "%s without %s: the message does not say \"required\" naming it: %s", missing[_i].args[0],
		      missing[_i].names, r.err);
	ck_assert_msg(strncmp(r.err, "asf-provision: ", 15) == 0 && strchr(r.err, '\n') == r.err + r.err_len - 1,
		      "not one asf-provision: line: %s", r.err);
	result_free(&r);
}
END_TEST

Suite *suite_provision_usage(void);

Suite *suite_provision_usage(void)
{
	Suite *s = suite_create("provision_usage");
	TCase *tc = tcase_create("usage");

	tcase_add_checked_fixture(tc, asf_setup, asf_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_subcommand_help, 0, 2 * (int)(sizeof(subcommands) / sizeof(subcommands[0])));
	tcase_add_loop_test(tc, test_missing_required_option, 0, (int)(sizeof(missing) / sizeof(missing[0])));
	suite_add_tcase(s, tc);
	return s;
}
