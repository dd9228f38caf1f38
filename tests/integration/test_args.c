/*
 * test_args.c - argument checks of every public entry point (NULL and
 * invalid arguments give ASP_EINVAL naming the argument), with a real sandbox.
 *
 * One sshd per suite (unchecked fixture); every test opens its own
 * sandbox, since check forks each test. Tests use distinct names in the
 * shared workspace so they do not depend on each other. Shared helpers:
 * tests/helpers.h.
 */
#include <check.h>
#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "asp.h"
#include "fixture/fixture.h"
#include "helpers.h"

static fx_sshd fx;

/* ---------------------------------------------------------------- fixture */

static void args_setup(void)
{
	suite_sshd_start(&fx);
}

static void args_teardown(void)
{
	fx_sshd_stop(&fx);
}

/* A local path inside this suite's workspace. */
static const char *ws(const char *rel)
{
	return ws_path(fx.workspace, rel);
}

/* ======================================================= argument checks */

#define ASSERT_EINVAL(call)                                                                  \
	do {                                                                                 \
		asp_error e_ = { 0 };                                                        \
		asp_error *err = &e_;                                                        \
		int rc_ = (call);                                                            \
		ck_assert_msg(rc_ == ASP_EINVAL, "%s: expected ASP_EINVAL, got %s", #call,   \
			      asp_error_name(rc_));                                          \
		ck_assert_msg(e_.code == ASP_EINVAL && e_.message[0],                        \
			      "%s: err not filled (code %d, \"%s\")", #call, e_.code,        \
			      e_.message);                                                   \
		err = NULL;                                                                  \
		ck_assert_msg((call) == ASP_EINVAL, "%s with err NULL", #call);              \
		(void)err;                                                                   \
	} while (0)

START_TEST(test_argument_checks)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_result *r = NULL;
	asp_list *l = NULL;
	unsigned char *buf = NULL;
	size_t len = 0;
	asp_stat_info st;
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_exec_options eo = ASP_EXEC_OPTIONS_INIT;
	asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *none = NULL;
	asp_sandbox_info info = ASP_SANDBOX_INFO_INIT;

	/* NULL sandbox, output and path arguments. */
	ASSERT_EINVAL(asp_read(NULL, &len, sb, "x", 0, ASP_READ_ALL, NULL, err));
	ASSERT_EINVAL(asp_read(&buf, NULL, sb, "x", 0, ASP_READ_ALL, NULL, err));
	ASSERT_EINVAL(asp_read(&buf, &len, NULL, "x", 0, ASP_READ_ALL, NULL, err));
	ASSERT_EINVAL(asp_read(&buf, &len, sb, NULL, 0, ASP_READ_ALL, NULL, err));
	ASSERT_EINVAL(asp_read(&buf, &len, sb, "", 0, ASP_READ_ALL, NULL, err));
	ASSERT_EINVAL(asp_write(NULL, "x", "d", 1, NULL, err));
	ASSERT_EINVAL(asp_write(sb, NULL, "d", 1, NULL, err));
	ASSERT_EINVAL(asp_write(sb, "", "d", 1, NULL, err));
	ASSERT_EINVAL(asp_write(sb, "arg-x", NULL, 5, NULL, err));
	ASSERT_EINVAL(asp_exec(NULL, sb, "true", NULL, err));
	ASSERT_EINVAL(asp_exec(&r, NULL, "true", NULL, err));
	ASSERT_EINVAL(asp_exec(&r, sb, NULL, NULL, err));
	ASSERT_EINVAL(asp_stat(NULL, sb, ".", NULL, err));
	ASSERT_EINVAL(asp_stat(&st, NULL, ".", NULL, err));
	ASSERT_EINVAL(asp_stat(&st, sb, NULL, NULL, err));
	ASSERT_EINVAL(asp_mkdir(NULL, "arg-d", 0755, 0, NULL, err));
	ASSERT_EINVAL(asp_mkdir(sb, NULL, 0755, 0, NULL, err));
	ASSERT_EINVAL(asp_mkdir(sb, "arg-d", 070000, 0, NULL, err));
	ASSERT_EINVAL(asp_remove(NULL, "arg-d", 0, NULL, err));
	ASSERT_EINVAL(asp_remove(sb, NULL, ASP_REMOVE_RECURSIVE, NULL, err));
	ASSERT_EINVAL(asp_remove(sb, "", ASP_REMOVE_RECURSIVE, NULL, err));

	/* Flag bits that mean nothing are refused, not ignored. */
	ASSERT_EINVAL(asp_mkdir(sb, "arg-d", 0755, ASP_MKDIR_PARENTS | 0x2u, NULL, err));
	ASSERT_EINVAL(asp_mkdir(sb, "arg-d", 0755, 0x80000000u, NULL, err));
	ASSERT_EINVAL(asp_remove(sb, "arg-d", ASP_REMOVE_RECURSIVE | 0x4u, NULL, err));
	eo.flags = 0x2u;
	ASSERT_EINVAL(asp_exec(&r, sb, "touch arg-ran", &eo, err));
	/* Asking for stdin_fd without one. */
	eo.flags = ASP_EXEC_STDIN_FD;
	eo.stdin_fd = -1;
	ASSERT_EINVAL(asp_exec(&r, sb, "touch arg-ran", &eo, err));
	eo = (asp_exec_options)ASP_EXEC_OPTIONS_INIT;
	oo.config_path = fx.config;
	oo.flags = ASP_OPEN_LAZY | 0x100u;
	ASSERT_EINVAL(asp_open(&none, &oo, err));
	ck_assert_ptr_null(none);
	oo = (asp_open_options)ASP_OPEN_OPTIONS_INIT;
	info.version = ASP_SANDBOX_INFO_VERSION + 1;
	ASSERT_EINVAL(asp_sandbox_info_get(&info, sb, err));
	ASSERT_EINVAL(asp_sandbox_info_get(NULL, sb, err));
	info.version = ASP_SANDBOX_INFO_VERSION;
	ASSERT_EINVAL(asp_sandbox_info_get(&info, NULL, err));
	ASSERT_EINVAL(asp_rename(NULL, "a", "b", NULL, err));
	ASSERT_EINVAL(asp_rename(sb, NULL, "b", NULL, err));
	ASSERT_EINVAL(asp_rename(sb, "a", NULL, NULL, err));
	ASSERT_EINVAL(asp_list_dir(NULL, sb, ".", NULL, err));
	ASSERT_EINVAL(asp_list_dir(&l, NULL, ".", NULL, err));
	ASSERT_EINVAL(asp_list_dir(&l, sb, NULL, NULL, err));
	ASSERT_EINVAL(asp_open(NULL, &oo, err));
	ASSERT_EINVAL(asp_cancel_new(NULL, err));
	ck_assert_ptr_null(r);
	ck_assert_ptr_null(l);
	ck_assert_ptr_null(buf);

	/* Wrong options versions. */
	wo.version = ASP_WRITE_OPTIONS_VERSION + 1;
	ASSERT_EINVAL(asp_write(sb, "arg-x", "d", 1, &wo, err));
	wo.version = 0;
	ASSERT_EINVAL(asp_write(sb, "arg-x", "d", 1, &wo, err));
	wo = (asp_write_options)ASP_WRITE_OPTIONS_INIT;
	wo.mode = 010000;
	ASSERT_EINVAL(asp_write(sb, "arg-x", "d", 1, &wo, err));
	eo.version = ASP_EXEC_OPTIONS_VERSION + 1;
	ASSERT_EINVAL(asp_exec(&r, sb, "touch arg-ran", &eo, err));
	eo.version = 0;
	ASSERT_EINVAL(asp_exec(&r, sb, "touch arg-ran", &eo, err));
	oo.version = ASP_OPEN_OPTIONS_VERSION + 1;
	oo.config_path = fx.config;
	ASSERT_EINVAL(asp_open(&none, &oo, err));
	ck_assert_ptr_null(none);
	ck_assert_int_eq(asp_write_options_init(&wo, 2), ASP_EINVAL);
	ck_assert_int_eq(asp_exec_options_init(&eo, 0), ASP_EINVAL);
	ck_assert_int_eq(asp_open_options_init(&oo, 99), ASP_EINVAL);
	ck_assert_int_eq(asp_write_options_init(NULL, ASP_WRITE_OPTIONS_VERSION), ASP_EINVAL);

	/* The init functions give the documented defaults. */
	ck_assert_int_eq(asp_write_options_init(&wo, ASP_WRITE_OPTIONS_VERSION), ASP_OK);
	ck_assert_uint_eq(wo.flags, 0);
	ck_assert_uint_eq(wo.mode, 0);
	ck_assert_int_eq(asp_exec_options_init(&eo, ASP_EXEC_OPTIONS_VERSION), ASP_OK);
	ck_assert_uint_eq(eo.flags, 0);
	ck_assert_ptr_null(eo.cwd);

	/* Nothing happened on the sandbox. */
	ck_assert(!local_exists(ws("arg-x")));
	ck_assert(!local_exists(ws("arg-d")));
	ck_assert(!local_exists(ws("arg-ran")));

	/* The sandbox still works. */
	expect_stdout(sb, "echo alive", "alive\n");
	asp_close(sb);
	asp_close(NULL);
	asp_free(NULL);
	asp_exec_result_free(NULL);
	asp_list_free(NULL);
}
END_TEST

/* ================================================================ suite */

Suite *suite_args(void)
{
	Suite *s = suite_create("args");
	TCase *tc = tcase_create("args");

	tcase_add_unchecked_fixture(tc, args_setup, args_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_argument_checks);
	suite_add_tcase(s, tc);
	return s;
}
