/*
 * test_cli_usage.c - asp-exec's failures and usage: exit codes per failure,
 * usage errors, config discovery (and an untrusted one), --check.
 *
 * Each test gets its own sshd and its own XDG_RUNTIME_DIR, so masters of
 * different tests never meet; teardown stops them. Running asp-exec:
 * tests/integration/cli_run.h.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "helpers.h"
#include "integration/cli_run.h"

/* ---------------------------------------------------------------- failures and usage */

/* Both modes fail the same way: same status, same message. */
static void check_failure(const char *config, int status, const char *needle)
{
	const char *const args[] = { bin, "--config", config, "true", NULL };
	const char *const direct[] = { bin, "--config", config, "--no-master", "true", NULL };
	result a = run_argv(NULL, 0, args), b = run_argv(NULL, 0, direct);

	ck_assert_msg(a.status == status, "got %d: %s", a.status, a.err);
	assert_one_error_line(&a, needle);
	ck_assert_int_eq(b.status, a.status);
	ck_assert_str_eq(b.err, a.err);
	result_free(&a);
	result_free(&b);
}

START_TEST(test_failure_exit_codes)
{
	char path[400], key[400];

	snprintf(path, sizeof(path), "%s/other.json", fx.dir);
	check_failure("/nonexistent/asp.json", 251, NULL);

	ck_assert_int_eq(fx_run("echo '{\"version\": \"0\"}' > '%s'", path), 0);
	check_failure(path, 251, path);

	/* A pinned key that is not the server's: the client key's public half. */
	snprintf(key, sizeof(key), "%s.pub", fx.client_key);
	{
		char *line = fx_read_file(key, NULL);

		ck_assert_ptr_nonnull(line);
		*strchr(line, '\n') = '\0';
		ck_assert_int_eq(fx_write_config(&fx, path, &(fx_config_opts){ .host_key = line }), 0);
		free(line);
	}
	check_failure(path, 252, NULL);

	snprintf(key, sizeof(key), "%s/stranger_key", fx.dir);
	ck_assert_int_eq(fx_run("ssh-keygen -q -t ed25519 -N '' -f '%s'", key), 0);
	ck_assert_int_eq(fx_write_config(&fx, path, &(fx_config_opts){ .identity = key }), 0);
	check_failure(path, 253, NULL);

	ck_assert_int_eq(fx_write_config(&fx, path, &(fx_config_opts){ .port = 1 }), 0);
	check_failure(path, 254, NULL);
}
END_TEST

START_TEST(test_usage_errors)
{
	const char *const *cases[] = {
		ARGS("--bogus", "true"), ARGS(NULL), ARGS("--json", "--read", "x"),
		ARGS("--read", "a", "--write", "b"), ARGS("--read", "a", "extra"),
		ARGS("--timeout", "soon", "true"), ARGS("--env", "1X=2", "true"),
		ARGS("--env", "NOEQUALS", "true"), ARGS("--mkdirs", "true"), ARGS("--persist", "0", "true"),
	};
	result r;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *argv[16] = { bin };

		for (int k = 0; cases[i][k]; k++)
			argv[k + 1] = cases[i][k];
		r = run_argv(NULL, 0, argv);
		ck_assert_msg(r.status == 2, "case %zu: status %d", i, r.status);
		ck_assert_msg(!strncmp(r.err, "asp-exec: ", 10), "case %zu: %s", i, r.err);
		result_free(&r);
	}
	r = run_argv(NULL, 0, ARGS(bin, "--help"));
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "usage: asp-exec"));
	result_free(&r);
}
END_TEST

/* Discovery: $ASP_CONFIG, or .asp.json from the working directory up, as libasp does it. */
START_TEST(test_discovery)
{
	char deep[400], shadow[400];
	result r;

	/* Upwards from a subdirectory: the front finds it and uses a master. */
	snprintf(deep, sizeof(deep), "%s/a/b", fx.dir);
	ck_assert_int_eq(fx_run("mkdir -p '%s'", deep), 0);
	snprintf(run_cwd, sizeof(run_cwd), "%s", deep);
	r = run_argv(NULL, 0, ARGS(bin, "echo up"));
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "up\n");
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 1);

	/* Something unusable named .asp.json on the way stops the search (libasp's rule). */
	snprintf(shadow, sizeof(shadow), "%s/a/.asp.json", fx.dir);
	ck_assert_int_eq(mkdir(shadow, 0755), 0);
	r = run_argv(NULL, 0, ARGS(bin, "echo up"));
	ck_assert_int_eq(r.status, 251);
	assert_one_error_line(&r, shadow);
	result_free(&r);
	run_cwd[0] = '\0';

	/* $ASP_CONFIG wins, relative to the working directory. */
	snprintf(run_cwd, sizeof(run_cwd), "%s", fx.dir);
	setenv("ASP_CONFIG", ".asp.json", 1);
	r = run_argv(NULL, 0, ARGS(bin, "echo env"));
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "env\n");
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 1); /* the same file, the same master */
	run_cwd[0] = '\0';

	setenv("ASP_CONFIG", fx.config, 1);
	r = run_argv(NULL, 0, ARGS(bin, "echo found"));
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "found\n");
	result_free(&r);
	setenv("ASP_CONFIG", "/nonexistent/.asp.json", 1);
	r = run_argv(NULL, 0, ARGS(bin, "true"));
	ck_assert_int_eq(r.status, 251);
	assert_one_error_line(&r, NULL);
	result_free(&r);
}
END_TEST

/*
 * A .asp.json another user could have written or planted, found by
 * discovery, is refused by the front and the core alike (the front runs
 * libasp's own discovery code), before anything it says runs: same exit
 * status, same message naming the file, its owner and the remedies. The
 * parent's trusted .asp.json (fx.dir) is not used instead. loop: 0 another
 * user's file in a sticky 1777 directory, 1 a group-writable file, 2 a
 * file in a group-writable directory, 3 a symlink to another user's file.
 */
START_TEST(test_discovery_untrusted)
{
	char dir[300], file[320], target[320], owner[128], marker[320], extra[600], safe[400];
	const char *const direct[] = { bin, "--no-master", "echo hi", NULL };
	struct passwd *pw = getpwnam(_i == 3 ? "nobody" : "asp-test");
	result r, d;

	ck_assert_ptr_nonnull(pw);
	unsetenv("ASP_SAFE_DIRS");
	snprintf(dir, sizeof(dir), "%s/shared", fx.dir);
	snprintf(file, sizeof(file), "%s/.asp.json", dir);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(owner, sizeof(owner), "owned by root (uid 0)");
	if (_i == 3) {
		snprintf(target, sizeof(target), "%s/foreign.json", fx.dir);
		ck_assert_int_eq(fx_write_config(&fx, target, NULL), 0);
		ck_assert_int_eq(chown(target, pw->pw_uid, (gid_t)-1), 0);
		ck_assert_int_eq(symlink(target, file), 0);
	} else {
		ck_assert_int_eq(fx_write_config(&fx, file, NULL), 0);
	}
	if (_i == 0) {
		ck_assert_int_eq(chmod(dir, 01777), 0);
		ck_assert_int_eq(chown(file, pw->pw_uid, (gid_t)-1), 0);
	} else if (_i == 1) {
		ck_assert_int_eq(chmod(file, 0664), 0);
	} else if (_i == 2) {
		ck_assert_int_eq(chmod(dir, 0775), 0);
	}
	if (_i == 0 || _i == 3)
		snprintf(owner, sizeof(owner), "owned by %s (uid %u)", pw->pw_name,
			 (unsigned int)pw->pw_uid);
	snprintf(safe, sizeof(safe), "add %s to ASP_SAFE_DIRS", dir);

	snprintf(run_cwd, sizeof(run_cwd), "%s", dir);
	r = run_argv(NULL, 0, ARGS(bin, "echo hi"));
	d = run_argv(NULL, 0, direct);
	ck_assert_msg(r.status == 251, "status %d: %s", r.status, r.err);
	assert_one_error_line(&r, file);
	assert_one_error_line(&r, "not trusted");
	assert_one_error_line(&r, owner);
	assert_one_error_line(&r, "ASP_CONFIG");
	assert_one_error_line(&r, safe);
	ck_assert_int_eq(d.status, r.status);
	ck_assert_str_eq(d.err, r.err);
	ck_assert_str_eq(r.out, "");
	result_free(&r);
	result_free(&d);
	ck_assert_int_eq(find_masters(NULL, 0), 0);

	/* Listed in ASP_SAFE_DIRS, it is used (through a master, as any discovered file). */
	setenv("ASP_SAFE_DIRS", dir, 1);
	r = run_argv(NULL, 0, ARGS(bin, "echo hi"));
	ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
	ck_assert_str_eq(r.out, "hi\n");
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 1);
	unsetenv("ASP_SAFE_DIRS");

	/* Named explicitly, by --config or ASP_CONFIG, it is the caller's choice. */
	r = run_argv(NULL, 0, ARGS(bin, "--config", file, "--no-master", "echo hi"));
	ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
	ck_assert_str_eq(r.out, "hi\n");
	result_free(&r);
	setenv("ASP_CONFIG", file, 1);
	r = run_argv(NULL, 0, ARGS(bin, "--no-master", "echo hi"));
	ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
	result_free(&r);
	unsetenv("ASP_CONFIG");
	if (_i != 0) {
		run_cwd[0] = '\0';
		return;
	}

	/* What a planted file says never runs: its proxy command would run as us. */
	snprintf(marker, sizeof(marker), "%s/proxy-ran", fx.dir);
	snprintf(extra, sizeof(extra), "\"x-asp-proxy-command\": \"touch %s\"", marker);
	ck_assert_int_eq(fx_write_config(&fx, file, &(fx_config_opts){ .extra = extra }), 0);
	ck_assert_int_eq(chown(file, pw->pw_uid, (gid_t)-1), 0);
	r = run_argv(NULL, 0, ARGS(bin, "echo hi"));
	d = run_argv(NULL, 0, direct);
	ck_assert_int_eq(r.status, 251);
	ck_assert_int_eq(d.status, 251);
	result_free(&r);
	result_free(&d);
	ck_assert_msg(access(marker, F_OK) != 0, "the planted proxy command ran");
	run_cwd[0] = '\0';
}
END_TEST

START_TEST(test_check)
{
	char fpr[128], path[400];
	result r;

	ck_assert_int_eq(fx_host_fingerprint(&fx, fpr, sizeof(fpr)), 0);
	r = CLI("--check");
	ck_assert_msg(r.status == 0, "%s", r.err);
	ck_assert_ptr_nonnull(strstr(r.out, fpr));
	ck_assert_ptr_nonnull(strstr(r.out, "pinned by connection.host_key"));
	ck_assert_ptr_nonnull(strstr(r.out, "publickey"));
	ck_assert_ptr_nonnull(strstr(r.out, "round trip:"));
	ck_assert_ptr_nonnull(strstr(r.out, "\nok\n"));
	result_free(&r);

	/* Trust on first use, in a known_hosts file of our own. */
	snprintf(path, sizeof(path), "%s/tofu.json", fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, path, &(fx_config_opts){ .host_key = FX_OMIT }), 0);
	{
		char kh[400];

		snprintf(kh, sizeof(kh), "%s/known_hosts", fx.dir);
		setenv("ASP_KNOWN_HOSTS", kh, 1);
		r = run_argv(NULL, 0, ARGS(bin, "--config", path, "--check"));
		ck_assert_msg(r.status == 0, "%s", r.err);
		ck_assert_ptr_nonnull(strstr(r.out, "first use"));
		result_free(&r);
		r = run_argv(NULL, 0, ARGS(bin, "--config", path, "--check"));
		ck_assert_ptr_nonnull(strstr(r.out, "known, recorded in"));
		result_free(&r);
	}

	ck_assert_int_eq(fx_write_config(&fx, path, &(fx_config_opts){ .port = 1 }), 0);
	r = run_argv(NULL, 0, ARGS(bin, "--config", path, "--check"));
	ck_assert_int_eq(r.status, 254);
	assert_one_error_line(&r, NULL);
	result_free(&r);
}
END_TEST

/* --check names what the key exchange agreed on, plainly and as JSON (what to compare across servers). */
START_TEST(test_check_methods)
{
	static const char *const keys[] = { "server_banner", "kex", "cipher", "mac", "host_key_type",
					    "trust", "auth", "workspace", "file_transport" };
	char path[400];
	cJSON *j;
	result r;

	r = CLI("--check");
	ck_assert_msg(r.status == 0, "%s", r.err);
	ck_assert_msg(strstr(r.out, "\nserver:     SSH-2.0-OpenSSH_"), "%s", r.out);
	ck_assert_msg(strstr(r.out, "\nkex:        curve25519-sha256"), "%s", r.out);
	ck_assert_msg(strstr(r.out, "\ncipher:     aes"), "%s", r.out);
	ck_assert_msg(strstr(r.out, "\nmac:        hmac-sha2-"), "%s", r.out);
	ck_assert_msg(strstr(r.out, "\nfiles:      sftp\n"), "%s", r.out);
	result_free(&r);

	r = CLI("--check", "--json");
	ck_assert_msg(r.status == 0, "%s", r.err);
	ck_assert_msg((j = cJSON_Parse(r.out)) != NULL, "not JSON: %s", r.out);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		ck_assert_msg(cJSON_IsString(cJSON_GetObjectItem(j, keys[i])) &&
			      *cJSON_GetObjectItem(j, keys[i])->valuestring, "no %s in %s", keys[i], r.out);
	ck_assert_str_eq(cJSON_GetObjectItem(j, "kex")->valuestring, "curve25519-sha256");
	ck_assert_str_eq(cJSON_GetObjectItem(j, "file_transport")->valuestring, "sftp");
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")));
	ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "exec_ms")));
	cJSON_Delete(j);
	result_free(&r);

	/* A failure is JSON too, with the error's name and message. */
	snprintf(path, sizeof(path), "%s/refused.json", fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, path, &(fx_config_opts){ .port = 1 }), 0);
	r = run_argv(NULL, 0, ARGS(bin, "--config", path, "--check", "--json"));
	ck_assert_int_eq(r.status, 254);
	ck_assert_msg((j = cJSON_Parse(r.out)) != NULL, "not JSON: %s", r.out);
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "ok")));
	ck_assert_str_eq(cJSON_GetObjectItem(j, "error")->valuestring, "ASP_ECONNECT");
	ck_assert_msg(strstr(cJSON_GetObjectItem(j, "message")->valuestring, "cannot connect"), "%s", r.out);
	cJSON_Delete(j);
	result_free(&r);
}
END_TEST

/* ---------------------------------------------------------------- suite */

Suite *suite_cli_usage(void);

Suite *suite_cli_usage(void)
{
	Suite *s = suite_create("cli_usage");
	TCase *one = tcase_create("cli");

	tcase_add_unchecked_fixture(one, cli_runner_setup, cli_runner_cleanup);
	tcase_add_checked_fixture(one, cli_setup, cli_teardown);
	tcase_set_timeout(one, 120);
	tcase_add_test(one, test_failure_exit_codes);
	tcase_add_test(one, test_usage_errors);
	tcase_add_test(one, test_discovery);
	tcase_add_loop_test(one, test_discovery_untrusted, 0, 4);
	tcase_add_test(one, test_check);
	tcase_add_test(one, test_check_methods);
	suite_add_tcase(s, one);
	return s;
}
