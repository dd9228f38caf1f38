/*
 * test_rw.c - read and write against a real sshd: binary, large, offset/limit,
 * error mapping, atomic write (modes, temp files, symlinks, non-atomic).
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

#define MiB (1024u * 1024u)

static fx_sshd fx;

/* ---------------------------------------------------------------- fixture */

static void rw_setup(void)
{
	suite_sshd_start(&fx);
}

static void rw_teardown(void)
{
	fx_sshd_stop(&fx);
}

/* A local path inside this suite's workspace. */
static const char *ws(const char *rel)
{
	return ws_path(fx.workspace, rel);
}

/* ============================================================ read/write */

START_TEST(test_rw_binary_roundtrip)
{
	asp_sandbox *sb = sb_open(fx.config);
	static const unsigned char nuls[] = { 0, 0, 'a', 0, 'b', 0, 0, 0xff, 0 };
	size_t len;
	unsigned char *data = all_bytes(4, &len);
	unsigned char zeros[4096] = { 0 };

	put_opts(sb, "rw-all256.bin", data, len, NULL);
	assert_content(sb, "rw-all256.bin", data, len);
	assert_local_content(ws("rw-all256.bin"), data, len);
	/* Absolute paths are used as given. */
	assert_content(sb, ws("rw-all256.bin"), data, len);

	put_opts(sb, "rw-nuls.bin", nuls, sizeof(nuls), NULL);
	assert_content(sb, "rw-nuls.bin", nuls, sizeof(nuls));
	put_opts(sb, ws("rw-zeros.bin"), zeros, sizeof(zeros), NULL);
	assert_content(sb, "rw-zeros.bin", zeros, sizeof(zeros));
	assert_local_content(ws("rw-zeros.bin"), zeros, sizeof(zeros));
	free(data);
	asp_close(sb);
}
END_TEST

START_TEST(test_rw_64mib_sha256)
{
	const size_t size = 64 * MiB;
	asp_sandbox *sb = sb_open(fx.config);
	unsigned char *data = random_bytes(size, 0x5eed64);
	unsigned char *back;
	char want[65], got[65];
	size_t len;
	asp_exec_result *r;
	asp_stat_info st;

	sha256_hex(data, size, want);
	put_opts(sb, "rw-big.bin", data, size, NULL);
	st = stat_ok(sb, "rw-big.bin");
	ck_assert_uint_eq(st.size, size);

	back = get(sb, "rw-big.bin", &len);
	ck_assert_uint_eq(len, size);
	sha256_hex(back, len, got);
	ck_assert_str_eq(got, want);
	ck_assert_msg(memcmp(back, data, size) == 0, "64 MiB read-back differs");
	asp_free(back);

	/* The sandbox's own view of the bytes. */
	r = run(sb, "sha256sum rw-big.bin");
	assert_exited(r, 0);
	{
		size_t olen;
		const unsigned char *out = asp_exec_result_output(r, ASP_STDOUT, &olen);
		ck_assert_msg(olen >= 64, "short sha256sum output");
		assert_bytes("remote sha256sum", out, 64, want, 64);
	}
	asp_exec_result_free(r);
	free(data);
	asp_close(sb);
}
END_TEST

START_TEST(test_read_offset_limit)
{
	static const struct {
		uint64_t offset, limit;
		size_t want_off, want_len;
	} cases[] = {
		{ 0, ASP_READ_ALL, 0, 200000 },
		{ 70000, 100000, 70000, 100000 }, /* middle, across 64 KiB chunks */
		{ 1, 10, 1, 10 },
		{ 199990, ASP_READ_ALL, 199990, 10 },
		{ 199990, 100, 199990, 10 },   /* limit past EOF: the rest */
		{ 200000, ASP_READ_ALL, 0, 0 }, /* offset at EOF */
		{ 300000, 10, 0, 0 },           /* offset past EOF */
		{ 5, 0, 0, 0 },                 /* limit 0 */
		{ UINT64_MAX - 5, 100, 0, 0 },  /* offset + limit would overflow */
	};
	asp_sandbox *sb = sb_open(fx.config);
	unsigned char *data = random_bytes(200000, 42);
	size_t i;

	put_opts(sb, "rw-slices.bin", data, 200000, NULL);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		unsigned char *buf = NULL;
		size_t len = 12345;
		asp_error e = { 0 };
		char what[96];
		int rc = asp_read(&buf, &len, sb, "rw-slices.bin", cases[i].offset, cases[i].limit, NULL, &e);

		snprintf(what, sizeof(what), "read offset %llu limit %llu",
			 (unsigned long long)cases[i].offset, (unsigned long long)cases[i].limit);
		ASSERT_OK(rc, e, what);
		ck_assert_ptr_nonnull(buf);
		assert_bytes(what, buf, len, data + cases[i].want_off, cases[i].want_len);
		ck_assert_msg(buf[len] == '\0', "%s: not NUL-terminated", what);
		asp_free(buf);
	}
	free(data);
	asp_close(sb);
}
END_TEST

START_TEST(test_write_empty)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options inplace = ASP_WRITE_OPTIONS_INIT;
	asp_stat_info st;

	put_opts(sb, "rw-empty", NULL, 0, NULL);
	ck_assert_int_eq(local_lstat(ws("rw-empty")).st_size, 0);
	ck_assert(S_ISREG(local_lstat(ws("rw-empty")).st_mode));
	st = stat_ok(sb, "rw-empty");
	ck_assert_uint_eq(st.size, 0);
	ck_assert_uint_eq(st.type, ASP_TYPE_FILE);
	assert_content(sb, "rw-empty", "", 0);

	/* Zero bytes over an existing file empties it, atomic or in place. */
	put(sb, "rw-empty", "not empty");
	put_opts(sb, "rw-empty", "", 0, NULL);
	assert_local_content(ws("rw-empty"), "", 0);
	put(sb, "rw-empty", "not empty");
	inplace.flags |= ASP_WRITE_IN_PLACE;
	put_opts(sb, "rw-empty", NULL, 0, &inplace);
	assert_local_content(ws("rw-empty"), "", 0);
	put_opts(sb, "rw-empty-new", NULL, 0, &inplace);
	assert_local_content(ws("rw-empty-new"), "", 0);
	asp_close(sb);
}
END_TEST

/* ========================================================= error mapping */

START_TEST(test_err_read_missing)
{
	asp_sandbox *sb = sb_open(fx.config);
	unsigned char *buf = NULL;
	size_t len = 0;
	asp_error e = { 0 };
	int rc;

	rc = asp_read(&buf, &len, sb, "err-no-such-file.txt", 0, ASP_READ_ALL, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "err-no-such-file.txt");
	/* The message names the call, not the protocol step: the same over SFTP and shell. */
	ck_assert_msg(strncmp(e.message, "read /", 6) == 0, "%s", e.message);
	ck_assert_ptr_null(buf);

	memset(&e, 0, sizeof(e));
	rc = asp_read(&buf, &len, sb, "err-no-such-dir/file.txt", 0, ASP_READ_ALL, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "err-no-such-dir/file.txt");
	asp_close(sb);
}
END_TEST

START_TEST(test_err_read_directory)
{
	asp_sandbox *sb = sb_open(fx.config);
	unsigned char *buf = NULL;
	size_t len = 0;
	asp_error e = { 0 };
	int rc;

	mkdir_ok(sb, "err-a-dir", 0755, 0);
	rc = asp_read(&buf, &len, sb, "err-a-dir", 0, ASP_READ_ALL, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EISDIR, "err-a-dir");
	memset(&e, 0, sizeof(e));
	rc = asp_read(&buf, &len, sb, ".", 0, ASP_READ_ALL, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EISDIR, NULL);
	memset(&e, 0, sizeof(e));
	rc = asp_read(&buf, &len, sb, "err-a-dir", 5, 1, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EISDIR, "err-a-dir");
	/*
	 * Reading nothing opens for reading and reads nothing: a directory
	 * passes, as open(2) lets it (a caller's access(R_OK) probe), on every
	 * route (check-shfs, check-routes).
	 */
	rc = asp_read(&buf, &len, sb, "err-a-dir", 0, 0, NULL, &e);
	ck_assert_msg(rc == ASP_OK && len == 0, "a 0-byte read of a directory: %s: %s",
		      asp_error_name(rc), e.message);
	asp_free(buf);
	buf = NULL;
	rc = asp_read(&buf, &len, sb, "err-a-dir", 7, 0, NULL, &e);
	ck_assert_msg(rc == ASP_OK && len == 0, "a 0-byte read of a directory at 7: %s: %s",
		      asp_error_name(rc), e.message);
	asp_free(buf);
	buf = NULL;
	/* The connection is still usable after the failed read. */
	put(sb, "err-after-eisdir", "ok");
	assert_content(sb, "err-after-eisdir", "ok", 2);
	asp_close(sb);
}
END_TEST

START_TEST(test_err_read_permission)
{
	asp_sandbox *sb = sb_open(fx.config);
	unsigned char *buf = NULL;
	size_t len = 0;
	asp_error e = { 0 };
	int rc;

	/* The test runs as root; the sandbox user is not root. */
	ck_assert_int_eq(fx_run("printf secret > '%s' && chown 0:0 '%s' && chmod 0600 '%s'",
				ws("err-root-only"), ws("err-root-only"), ws("err-root-only")), 0);
	rc = asp_read(&buf, &len, sb, "err-root-only", 0, ASP_READ_ALL, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EACCES, "err-root-only");
	ck_assert_ptr_null(buf);
	asp_close(sb);
}
END_TEST

START_TEST(test_err_write_permission)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options inplace = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	int rc;

	ck_assert_int_eq(fx_run("mkdir '%s' && chown 0:0 '%s' && chmod 0755 '%s'",
				ws("err-root-dir"), ws("err-root-dir"), ws("err-root-dir")), 0);
	rc = asp_write(sb, "err-root-dir/f.txt", "x", 1, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EACCES, "err-root-dir");

	memset(&e, 0, sizeof(e));
	inplace.flags |= ASP_WRITE_IN_PLACE;
	rc = asp_write(sb, "err-root-dir/f.txt", "x", 1, &inplace, &e);
	ASSERT_ERR(rc, e, ASP_EACCES, "err-root-dir");

	/* mkdirs cannot help either. */
	memset(&e, 0, sizeof(e));
	inplace.flags &= ~ASP_WRITE_IN_PLACE;
	inplace.flags |= ASP_WRITE_PARENTS;
	rc = asp_write(sb, "err-root-dir/sub/f.txt", "x", 1, &inplace, &e);
	ASSERT_ERR(rc, e, ASP_EACCES, "err-root-dir");

	ck_assert_int_eq(fx_run("[ -z \"$(ls -A '%s')\" ]", ws("err-root-dir")), 0);
	asp_close(sb);
}
END_TEST

START_TEST(test_write_parent_missing_and_mkdirs)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	int rc;

	rc = asp_write(sb, "mk-a/mk-b/mk-c/f.txt", "deep", 4, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "mk-a/mk-b/mk-c/f.txt");
	ck_assert(!local_exists(ws("mk-a")));

	memset(&e, 0, sizeof(e));
	o.flags |= ASP_WRITE_IN_PLACE;
	rc = asp_write(sb, "mk-a/mk-b/mk-c/f.txt", "deep", 4, &o, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "mk-a/mk-b/mk-c/f.txt");
	ck_assert(!local_exists(ws("mk-a")));

	o.flags &= ~ASP_WRITE_IN_PLACE;
	o.flags |= ASP_WRITE_PARENTS;
	put_opts(sb, "mk-a/mk-b/mk-c/f.txt", "deep", 4, &o);
	ck_assert(S_ISDIR(local_lstat(ws("mk-a")).st_mode));
	ck_assert(S_ISDIR(local_lstat(ws("mk-a/mk-b")).st_mode));
	ck_assert(S_ISDIR(local_lstat(ws("mk-a/mk-b/mk-c")).st_mode));
	assert_local_content(ws("mk-a/mk-b/mk-c/f.txt"), "deep", 4);

	/* In place, with some parents already there. */
	o.flags |= ASP_WRITE_IN_PLACE;
	put_opts(sb, "mk-a/mk-x/mk-y/g.txt", "in place", 8, &o);
	assert_local_content(ws("mk-a/mk-x/mk-y/g.txt"), "in place", 8);
	assert_no_temp_files(sb, fx.workspace, "mk-a/mk-b/mk-c");
	asp_close(sb);
}
END_TEST

START_TEST(test_write_to_directory)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options inplace = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	int rc;

	mkdir_ok(sb, "wd-dir/inner", 0755, 1);
	rc = asp_write(sb, "wd-dir/inner", "x", 1, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EISDIR, "wd-dir/inner");
	memset(&e, 0, sizeof(e));
	inplace.flags |= ASP_WRITE_IN_PLACE;
	rc = asp_write(sb, "wd-dir/inner", "x", 1, &inplace, &e);
	ASSERT_ERR(rc, e, ASP_EISDIR, "wd-dir/inner");
	ck_assert(S_ISDIR(local_lstat(ws("wd-dir/inner")).st_mode));
	/* A failed atomic write leaves no temporary file behind. */
	assert_no_temp_files(sb, fx.workspace, "wd-dir");
	asp_close(sb);
}
END_TEST

/* ============================================================ atomic write */

START_TEST(test_write_modes)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	mode_t m;

	/* Explicit mode on a new file. */
	o.mode = 0751;
	put_opts(sb, "wm-exec", "v1", 2, &o);
	ck_assert_uint_eq(local_lstat(ws("wm-exec")).st_mode & 07777, 0751);

	/* Default: an existing file keeps its mode, content is new. */
	put(sb, "wm-exec", "version two");
	ck_assert_uint_eq(local_lstat(ws("wm-exec")).st_mode & 07777, 0751);
	assert_local_content(ws("wm-exec"), "version two", 11);

	/* Same for a mode set outside libasp. */
	ck_assert_int_eq(fx_run("chmod 0604 '%s'", ws("wm-exec")), 0);
	put(sb, "wm-exec", "v3");
	ck_assert_uint_eq(local_lstat(ws("wm-exec")).st_mode & 07777, 0604);
	assert_local_content(ws("wm-exec"), "v3", 2);

	/* An explicit mode replaces the existing one. */
	o.mode = 0600;
	put_opts(sb, "wm-exec", "v4", 2, &o);
	ck_assert_uint_eq(local_lstat(ws("wm-exec")).st_mode & 07777, 0600);

	/* In place keeps it too, and applies an explicit one. */
	o.mode = 0;
	o.flags |= ASP_WRITE_IN_PLACE;
	put_opts(sb, "wm-exec", "v5", 2, &o);
	ck_assert_uint_eq(local_lstat(ws("wm-exec")).st_mode & 07777, 0600);
	o.mode = 0640;
	put_opts(sb, "wm-exec", "v6", 2, &o);
	ck_assert_uint_eq(local_lstat(ws("wm-exec")).st_mode & 07777, 0640);
	assert_local_content(ws("wm-exec"), "v6", 2);

	/*
	 * A mode the owner cannot read, on data large enough to go through
	 * stdin (over shell commands the temp file's bytes are counted by
	 * reading it back as the login user, before the mode is applied).
	 */
	{
		size_t big_len = 20000;
		char *big = malloc(big_len);
		ck_assert_ptr_nonnull(big);
		memset(big, 'b', big_len);
		o.mode = 0200;
		o.flags &= ~ASP_WRITE_IN_PLACE;
		put_opts(sb, "wm-wonly", big, big_len, &o);
		ck_assert_uint_eq(local_lstat(ws("wm-wonly")).st_mode & 07777, 0200);
		assert_local_content(ws("wm-wonly"), big, big_len);
		free(big);
	}

	/* A new file without a mode: 0644 less the server's umask. */
	put(sb, "wm-default", "d");
	m = local_lstat(ws("wm-default")).st_mode & 07777;
	ck_assert_msg((m & 0600) == 0600 && (m & ~(mode_t)0644) == 0, "new file mode %o", (unsigned)m);
	/* The file belongs to the login user, not to root. */
	ck_assert_uint_ne(local_lstat(ws("wm-default")).st_uid, 0);
	assert_no_temp_files(sb, fx.workspace, ".");
	asp_close(sb);
}
END_TEST

START_TEST(test_write_no_temp_files)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	unsigned char *big = random_bytes(3 * MiB + 17, 7);
	asp_error e = { 0 };
	int i;

	mkdir_ok(sb, "tmpchk/sub", 0755, 1);
	for (i = 0; i < 5; i++) {
		char text[32];
		snprintf(text, sizeof(text), "round %d", i);
		put(sb, "tmpchk/f.txt", text);
	}
	put_opts(sb, "tmpchk/big.bin", big, 3 * MiB + 17, NULL);
	o.mode = 0700;
	put_opts(sb, "tmpchk/moded", "m", 1, &o);
	ck_assert_int_eq(asp_write(sb, "tmpchk/sub", "x", 1, NULL, &e), ASP_EISDIR);
	assert_content(sb, "tmpchk/f.txt", "round 4", 7);
	assert_content(sb, "tmpchk/big.bin", big, 3 * MiB + 17);
	assert_no_temp_files(sb, fx.workspace, "tmpchk");
	assert_no_temp_files(sb, fx.workspace, "tmpchk/sub");
	free(big);
	asp_close(sb);
}
END_TEST

START_TEST(test_write_through_symlink)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	char target[PATH_MAX];
	ssize_t n;

	o.mode = 0640;
	o.flags |= ASP_WRITE_PARENTS;
	put_opts(sb, "sl/real/target.txt", "old target", 10, &o);
	mkdir_ok(sb, "sl/links", 0755, 1);
	expect_stdout(sb, "ln -s ../real/target.txt sl/links/link.txt && ln -s real/target.txt sl/l2", "");

	put(sb, "sl/links/link.txt", "new through link");
	ck_assert(S_ISLNK(local_lstat(ws("sl/links/link.txt")).st_mode));
	n = readlink(ws("sl/links/link.txt"), target, sizeof(target) - 1);
	ck_assert_int_ge(n, 0);
	target[n] = '\0';
	ck_assert_str_eq(target, "../real/target.txt");
	assert_local_content(ws("sl/real/target.txt"), "new through link", 16);
	ck_assert_uint_eq(local_lstat(ws("sl/real/target.txt")).st_mode & 07777, 0640);
	assert_content(sb, "sl/links/link.txt", "new through link", 16);

	/* In place as well. */
	o.mode = 0;
	o.flags |= ASP_WRITE_IN_PLACE;
	put_opts(sb, "sl/l2", "in place via link", 17, &o);
	ck_assert(S_ISLNK(local_lstat(ws("sl/l2")).st_mode));
	assert_local_content(ws("sl/real/target.txt"), "in place via link", 17);

	assert_no_temp_files(sb, fx.workspace, "sl/links");
	assert_no_temp_files(sb, fx.workspace, "sl/real");
	assert_no_temp_files(sb, fx.workspace, "sl");
	asp_close(sb);
}
END_TEST

START_TEST(test_write_non_atomic)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	ino_t ino;

	o.flags |= ASP_WRITE_IN_PLACE;
	put_opts(sb, "na.txt", "a fairly long first version", 27, &o);
	assert_content(sb, "na.txt", "a fairly long first version", 27);
	ino = local_lstat(ws("na.txt")).st_ino;

	/* Shorter content truncates; in place means the same inode. */
	put_opts(sb, "na.txt", "short", 5, &o);
	assert_local_content(ws("na.txt"), "short", 5);
	ck_assert_uint_eq(local_lstat(ws("na.txt")).st_ino, ino);

	/* The atomic default renames a new file over the target. */
	put(sb, "na.txt", "atomic");
	assert_local_content(ws("na.txt"), "atomic", 6);
	ck_assert_uint_ne(local_lstat(ws("na.txt")).st_ino, ino);
	asp_close(sb);
}
END_TEST

/*
 * A zero-initialised asp_write_options (C99 designated style, only the
 * version set) means the defaults, and the default is atomic: a read-only
 * (0444) file in a writable directory is replaced, since the rename needs
 * the directory's permission; an in-place write is refused.
 */
START_TEST(test_write_zero_options_atomic)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options zero = { .version = ASP_WRITE_OPTIONS_VERSION };
	asp_write_options inplace = zero;
	asp_error e = { 0 };
	int rc;

	put(sb, "zo-ro.txt", "old");
	ck_assert_int_eq(chmod(ws("zo-ro.txt"), 0444), 0);

	/* Control: in place, the sandbox user may not write the file. */
	inplace.flags |= ASP_WRITE_IN_PLACE;
	rc = asp_write(sb, "zo-ro.txt", "in place", 8, &inplace, &e);
	ASSERT_ERR(rc, e, ASP_EACCES, "zo-ro.txt");
	assert_local_content(ws("zo-ro.txt"), "old", 3);

	put_opts(sb, "zo-ro.txt", "new", 3, &zero);
	assert_local_content(ws("zo-ro.txt"), "new", 3);
	ck_assert_uint_eq(local_lstat(ws("zo-ro.txt")).st_mode & 07777, 0444);
	asp_close(sb);
}
END_TEST

/* ================================================================ suite */

Suite *suite_rw(void)
{
	Suite *s = suite_create("rw");
	TCase *tc = tcase_create("rw");

	tcase_add_unchecked_fixture(tc, rw_setup, rw_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_rw_binary_roundtrip);
	tcase_add_test(tc, test_rw_64mib_sha256);
	tcase_add_test(tc, test_read_offset_limit);
	tcase_add_test(tc, test_write_empty);
	tcase_add_test(tc, test_err_read_missing);
	tcase_add_test(tc, test_err_read_directory);
	tcase_add_test(tc, test_err_read_permission);
	tcase_add_test(tc, test_err_write_permission);
	tcase_add_test(tc, test_write_parent_missing_and_mkdirs);
	tcase_add_test(tc, test_write_to_directory);
	tcase_add_test(tc, test_write_modes);
	tcase_add_test(tc, test_write_no_temp_files);
	tcase_add_test(tc, test_write_through_symlink);
	tcase_add_test(tc, test_write_non_atomic);
	tcase_add_test(tc, test_write_zero_options_atomic);
	suite_add_tcase(s, tc);
	return s;
}
