/*
 * test_banner.c - the server's banner is sandbox text: escaped like every
 * other. A real sshd whose VersionAddendum holds an OSC title sequence, a
 * colour, a bell, a bidi override and a backslash: asp_sandbox_info_get's
 * server_banner and `asp-exec --check` (text and --json) show them as
 * \xNN, never raw.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asp.h"
#include "cli_run.h"
#include "helpers.h"

/* ESC ] 0 ; title BEL, ESC [ 31 m, U+202E (RIGHT-TO-LEFT OVERRIDE), a backslash. */
#define ADDENDUM "\x1b]0;pwned\x07\x1b[31mred\xe2\x80\xae-evil\\x"
#define SHOWN "\\x1b]0;pwned\\x07\\x1b[31mred\\xe2\\x80\\xae-evil\\x5cx"

/* cli_setup's server, started again with the hostile banner. */
static void hostile_banner(void)
{
	fx_sshd_stop(&fx);
	memset(&fx, 0, sizeof(fx));
	ck_assert_msg(fx_sshd_start_with(&fx, "VersionAddendum " ADDENDUM "\n") == 0,
		      "sshd with the hostile banner did not start");
}

START_TEST(test_banner_info_escaped)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox_info info = ASP_SANDBOX_INFO_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	int rc;

	hostile_banner();
	o.config_path = fx.config;
	rc = asp_open(&sb, &o, &e);
	ck_assert_msg(rc == ASP_OK, "%s: %s", asp_error_name(rc), e.message);
	ck_assert_int_eq(asp_sandbox_info_get(&info, sb, &e), 0);
	/* The positive control: the addendum did reach the client. */
	ck_assert_msg(strstr(info.server_banner, "pwned"), "banner without the addendum: %s",
		      info.server_banner);
	ck_assert_msg(text_is_clean(info.server_banner), "raw control bytes in server_banner");
	ck_assert_msg(strstr(info.server_banner, SHOWN), "not escaped as expected: %s", info.server_banner);
	asp_close(sb);
}
END_TEST

START_TEST(test_banner_check_escaped)
{
	result r;

	hostile_banner();
	r = CLI("--check");
	ck_assert_msg(r.status == 0, "%s", r.err);
	ck_assert_msg(strstr(r.out, "pwned"), "no banner in --check: %s", r.out);
	ck_assert_msg(!memchr(r.out, 0x1b, r.out_len) && !memchr(r.out, 0x07, r.out_len) &&
		      !strstr(r.out, "\xe2\x80\xae"), "raw control bytes in --check's output");
	ck_assert_msg(strstr(r.out, SHOWN), "not escaped as expected: %s", r.out);
	result_free(&r);
	r = CLI("--check", "--json");
	ck_assert_msg(r.status == 0, "%s", r.err);
	ck_assert_msg(strstr(r.out, "pwned") && !memchr(r.out, 0x1b, r.out_len) &&
		      !strstr(r.out, "\xe2\x80\xae"), "raw bytes in --check --json: %s", r.out);
	result_free(&r);
}
END_TEST

Suite *suite_banner(void);

Suite *suite_banner(void)
{
	Suite *s = suite_create("banner");
	TCase *tc = tcase_create("banner");

	tcase_add_unchecked_fixture(tc, cli_runner_setup, cli_runner_cleanup);
	tcase_add_checked_fixture(tc, cli_setup, cli_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_banner_info_escaped);
	tcase_add_test(tc, test_banner_check_escaped);
	suite_add_tcase(s, tc);
	return s;
}
