/*
 * test_rundir.c - another local user cannot turn off a user's connection
 * sharing by squatting the name of its runtime directory.
 *
 * asp-exec runs as the fixture's login user (asp-test, uid U; the tests
 * run as root) without XDG_RUNTIME_DIR, with its own HOME. /tmp/asp-U,
 * where masters of that user once listened, is made first by another user
 * (nobody, mode 0700). Two calls still share one connection: sshd logs one
 * authentication for both, and no call says "not sharing connections".
 * The master's directory is under HOME (~/.cache/asp/run), private.
 */
#include <check.h>
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_run.h"

#define LOGIN "asp-test"

static char squat[64]; /* /tmp/asp-U, made by this test (or an earlier run of it) */

static void rundir_teardown(void)
{
	if (squat[0])
		rmdir(squat);
	squat[0] = '\0';
	cli_teardown();
}

/* asp-exec as LOGIN, HOME=home, no XDG_RUNTIME_DIR: ARGS after the binary. */
#define AS_LOGIN(home, ...)                                                                     \
	run_argv(NULL, 0, ARGS("/usr/bin/setpriv", "--reuid=" LOGIN, "--regid=" LOGIN,         \
			       "--clear-groups", "/usr/bin/env", "-u", "XDG_RUNTIME_DIR",        \
			       "-u", "ASP_CONFIG", home, bin, __VA_ARGS__))

START_TEST(test_squatted_tmp_name_does_not_stop_sharing)
{
	char home[128], homeenv[140], key[160], cfg[160], run[200];
	struct passwd *pw = getpwnam(LOGIN);
	struct stat st;
	int before;
	result r;

	if (geteuid() != 0 || !pw) {
		/* Only root can run a call as another user. */
		fprintf(stderr, "SKIP test_squatted_tmp_name_does_not_stop_sharing: needs root and "
				"the user " LOGIN "\n");
		ck_assert_msg(!getenv("ASP_TEST_NO_SKIP"), "skipped under ASP_TEST_NO_SKIP");
		return;
	}
	/* The old shared name, taken by another user before the first call. */
	snprintf(squat, sizeof(squat), "/tmp/asp-%u", (unsigned)pw->pw_uid);
	if (mkdir(squat, 0700) < 0) {
		/* Left by an earlier run of this test that failed: still nobody's, still a squat. */
		ck_assert_msg(errno == EEXIST && lstat(squat, &st) == 0 && st.st_uid == NOBODY_UID,
			      "%s exists and is not nobody's: cannot set up the squat", squat);
	} else {
		ck_assert_int_eq(chown(squat, NOBODY_UID, NOBODY_GID), 0);
	}

	/* LOGIN's home, key and configuration, in this test's directory (its masters' pattern). */
	ck_assert_int_eq(chmod(rundir, 0755), 0);
	snprintf(home, sizeof(home), "%s/home", rundir);
	snprintf(homeenv, sizeof(homeenv), "HOME=%s", home);
	snprintf(key, sizeof(key), "%s/id", home);
	snprintf(cfg, sizeof(cfg), "%s/asp.json", home);
	ck_assert_int_eq(fx_run("mkdir -m 700 '%s' && cp '%s' '%s' && chmod 600 '%s'", home,
				fx.client_key, key, key), 0);
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = key }), 0);
	ck_assert_int_eq(fx_run("chown -R " LOGIN ": '%s'", home), 0);

	before = count_in_log("Accepted publickey");
	r = AS_LOGIN(homeenv, "--config", cfg, "--persist", "30", "--", "echo", "one");
	ck_assert_msg(r.status == 0 && !strcmp(r.out, "one\n"), "status %d: %s", r.status, r.err);
	ck_assert_msg(!strstr(r.err, "not sharing"), "the first call did not share: %s", r.err);
	result_free(&r);
	r = AS_LOGIN(homeenv, "--config", cfg, "--", "echo", "two");
	ck_assert_msg(r.status == 0 && !strcmp(r.out, "two\n"), "status %d: %s", r.status, r.err);
	ck_assert_msg(!strstr(r.err, "not sharing"), "the second call did not share: %s", r.err);
	result_free(&r);
	/* One authentication for two calls: the second went through the master. */
	ck_assert_int_eq(count_in_log("Accepted publickey"), before + 1);

	snprintf(run, sizeof(run), "%s/.cache/asp/run", home);
	ck_assert_msg(lstat(run, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == pw->pw_uid &&
		      (st.st_mode & 07777) == 0700, "%s is not LOGIN's private directory", run);
	r = AS_LOGIN(homeenv, "--config", cfg, "--stop");
	ck_assert_msg(r.status == 0, "--stop: status %d: %s", r.status, r.err);
	result_free(&r);
}
END_TEST

Suite *suite_rundir(void);

Suite *suite_rundir(void)
{
	Suite *s = suite_create("rundir");
	TCase *tc = tcase_create("rundir");

	tcase_add_unchecked_fixture(tc, cli_runner_setup, cli_runner_cleanup);
	tcase_add_checked_fixture(tc, cli_setup, rundir_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_squatted_tmp_name_does_not_stop_sharing);
	suite_add_tcase(s, tc);
	return s;
}
