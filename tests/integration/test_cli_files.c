/*
 * test_cli_files.c - asp-exec --read and --write against the real sshd fixture:
 * binary round trips, errors, reads in ranges, a cancelled read, progress on a
 * terminal. Each test runs
 * twice: through the master and with --no-master.
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

/* ---------------------------------------------------------------- --read / --write */

START_TEST(test_read_write_binary)
{
	unsigned char data[1024];
	char path[400], *local;
	size_t len;
	result r;

	use_master = _i == 0;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 7 + i / 256); /* every byte value, four times */
	r = cli_in(data, sizeof(data), ARGS("--write", "sub/dir/bytes.bin", "--mkdirs"));
	ck_assert_msg(r.status == 0, "write: %s", r.err);
	ck_assert_uint_eq(r.out_len + r.err_len, 0);
	result_free(&r);
	snprintf(path, sizeof(path), "%s/sub/dir/bytes.bin", fx.workspace);
	local = fx_read_file(path, &len);
	ck_assert_ptr_nonnull(local);
	ck_assert_uint_eq(len, sizeof(data));
	ck_assert(memcmp(local, data, len) == 0);
	free(local);
	/* Atomic: nothing but the file in its directory (no temp file left). */
	ck_assert_int_eq(fx_run("test \"$(ls -A '%s/sub/dir')\" = bytes.bin", fx.workspace), 0);

	r = CLI("--read", "sub/dir/bytes.bin");
	ck_assert_int_eq(r.status, 0);
	ck_assert_uint_eq(r.out_len, sizeof(data));
	ck_assert(memcmp(r.out, data, sizeof(data)) == 0);
	result_free(&r);

	/* An empty file, and an absolute path. */
	r = cli_in(NULL, 0, ARGS("--write", path));
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	r = CLI("--read", path);
	ck_assert_int_eq(r.status, 0);
	ck_assert_uint_eq(r.out_len, 0);
	result_free(&r);
}
END_TEST

START_TEST(test_read_write_errors)
{
	result r;

	use_master = _i == 0;
	r = CLI("--read", "missing.txt");
	ck_assert_int_eq(r.status, 1);
	ck_assert_uint_eq(r.out_len, 0);
	assert_one_error_line(&r, "missing.txt");
	result_free(&r);

	r = cli_in("x", 1, ARGS("--write", "no/such/parent/f.txt"));
	ck_assert_int_eq(r.status, 1);
	assert_one_error_line(&r, "no/such/parent");
	result_free(&r);

	r = CLI("--read", ".");
	ck_assert_int_eq(r.status, 1);
	assert_one_error_line(&r, NULL);
	result_free(&r);
}
END_TEST

/* --read streams a file larger than one range (8 MiB) in ranges, byte for byte. */
START_TEST(test_read_streams_in_ranges)
{
	char path[400], *local;
	size_t len;
	result r;

	use_master = _i == 0;
	snprintf(path, sizeof(path), "%s/big.bin", fx.workspace);
	ck_assert_int_eq(fx_run("head -c 20000000 /dev/urandom > '%s' && chmod 644 '%s'", path, path), 0);
	local = fx_read_file(path, &len);
	ck_assert_ptr_nonnull(local);
	ck_assert_uint_eq(len, 20000000);
	r = CLI("--read", "big.bin");
	ck_assert_msg(r.status == 0, "asp-exec%s --read of 20 MB: status %d (-1: the hang detector killed it), "
		      "%zu bytes of stdout; stderr: %s", use_master ? "" : " --no-master", r.status, r.out_len, r.err);
	ck_assert_uint_eq(r.out_len, len);
	ck_assert(memcmp(r.out, local, len) == 0);
	result_free(&r);
	free(local);
}
END_TEST

/*
 * --read of a file that never answers (the SFTP server blocks opening a
 * FIFO) is cancelled by SIGINT like a command: exit 130.
 */
START_TEST(test_read_cancelled)
{
	char path[400];
	proc p;
	result r;

	use_master = _i == 0;
	snprintf(path, sizeof(path), "%s/fifo", fx.workspace);
	ck_assert_int_eq(fx_run("rm -f '%s' && mkfifo -m 666 '%s'", path, path), 0);
	spawn(&p, cli_argv(ARGS("--read", "fifo")), -1);
	fx_sleep_ms(500);
	ck_assert_msg(pid_alive(p.pid), "asp-exec --read of a FIFO ended on its own");
	ck_assert_int_eq(kill(p.pid, SIGINT), 0);
	r = finish(&p, NULL, 0, 10000);
	ck_assert_int_eq(r.status, 130);
	result_free(&r);
	/* Release the server still blocked opening the FIFO. */
	ck_assert_int_eq(fx_run("exec 3<>'%s'; exec 3>&-; rm -f '%s'", path, path), 0);
}
END_TEST

/* ---------------------------------------------------------------- progress */

/*
 * asp-exec with extra args, its stderr a pseudo-terminal (script(1)) and
 * `redirect` shell text after it (e.g. "> /dev/null"): what the terminal
 * showed comes back in out.
 */
static result on_terminal(const char *const *args, const char *redirect)
{
	const char *const *argv = cli_argv(args);
	char cmd[4096] = "";
	size_t n = 0;

	for (int i = 0; argv[i]; i++) {
		ck_assert_msg(!strchr(argv[i], '\''), "a quote in %s", argv[i]);
		n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, "'%s' ", argv[i]);
		ck_assert(n < sizeof(cmd));
	}
	snprintf(cmd + n, sizeof(cmd) - n, "%s", redirect);
	return run_argv(NULL, 0, ARGS("/usr/bin/script", "-q", "-e", "-c", cmd, "/dev/null"));
}

/*
 * --read and --write of a 4 MiB file show their progress on a terminal
 * (stderr), finished with the totals; never when stderr is not a terminal,
 * nor with --quiet, nor for a file under 1 MiB.
 */
START_TEST(test_progress_on_terminal)
{
	char path[400], redirect[512], *local, *remote;
	size_t len, rlen;
	result r;

	use_master = _i == 0;
	snprintf(path, sizeof(path), "%s/big.bin", fx.workspace);
	ck_assert_int_eq(fx_run("head -c 4194304 /dev/urandom > '%s' && chmod 644 '%s' && "
				"head -c 1000 /dev/urandom > '%s/small.bin' && chmod 644 '%s/small.bin'",
				path, path, fx.workspace, fx.workspace), 0);

	r = on_terminal(ARGS("--read", "big.bin"), "> /dev/null");
	ck_assert_msg(r.status == 0, "read on a terminal: status %d: %s%s", r.status, r.out, r.err);
	ck_assert_msg(strstr(r.out, "asp-exec: read big.bin: 4.0 MiB in "), "no progress: %s", r.out);
	ck_assert_msg(strstr(r.out, "MiB/s\033[K\r\n"), "not finished with a newline: %s", r.out);
	result_free(&r);

	r = on_terminal(ARGS("--read", "big.bin", "--quiet"), "> /dev/null");
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(r.out_len == 0, "--quiet drew: %s", r.out);
	result_free(&r);

	r = on_terminal(ARGS("--read", "small.bin"), "> /dev/null");
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(r.out_len == 0, "a 1000-byte read drew: %s", r.out);
	result_free(&r);

	r = CLI("--read", "big.bin");
	ck_assert_int_eq(r.status, 0);
	ck_assert_uint_eq(r.out_len, 4194304);
	ck_assert_msg(r.err_len == 0, "progress on a pipe: %s", r.err);
	result_free(&r);

	snprintf(redirect, sizeof(redirect), "< '%s'", path);
	r = on_terminal(ARGS("--write", "up.bin"), redirect);
	ck_assert_msg(r.status == 0, "write on a terminal: %s", r.out);
	ck_assert_msg(strstr(r.out, "asp-exec: write up.bin: 4.0 MiB in "), "no progress: %s", r.out);
	result_free(&r);
	local = fx_read_file(path, &len);
	snprintf(path, sizeof(path), "%s/up.bin", fx.workspace);
	remote = fx_read_file(path, &rlen);
	ck_assert(local && remote && len == rlen && memcmp(local, remote, len) == 0);
	free(remote);

	r = on_terminal(ARGS("--write", "up2.bin", "--quiet"), redirect);
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(r.out_len == 0, "--quiet drew: %s", r.out);
	result_free(&r);

	r = cli_in(local, len, ARGS("--write", "up3.bin"));
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(r.err_len == 0, "progress on a pipe: %s", r.err);
	result_free(&r);
	free(local);

	/* --quiet is for file transfers only. */
	r = CLI("--quiet", "true");
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "--quiet applies to --read and --write only"), "stderr: %s", r.err);
	result_free(&r);
}
END_TEST

/* ---------------------------------------------------------------- suite */

Suite *suite_cli_files(void);

Suite *suite_cli_files(void)
{
	Suite *s = suite_create("cli_files");
	TCase *both = tcase_create("cli-both-modes");

	tcase_add_unchecked_fixture(both, cli_runner_setup, cli_runner_cleanup);
	tcase_add_checked_fixture(both, cli_setup, cli_teardown);
	tcase_set_timeout(both, 120);
	tcase_add_loop_test(both, test_read_write_binary, 0, 2);
	tcase_add_loop_test(both, test_read_write_errors, 0, 2);
	tcase_add_loop_test(both, test_read_streams_in_ranges, 0, 2);
	tcase_add_loop_test(both, test_read_cancelled, 0, 2);
	tcase_add_loop_test(both, test_progress_on_terminal, 0, 2);
	suite_add_tcase(s, both);
	return s;
}
