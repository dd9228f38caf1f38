/*
 * test_fs.c - the filesystem calls against a real sshd: awkward file names,
 * stat, mkdir, list, remove, rename.
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

static void fs_setup(void)
{
	suite_sshd_start(&fx);
}

static void fs_teardown(void)
{
	fx_sshd_stop(&fx);
}

/* A local path inside this suite's workspace. */
static const char *ws(const char *rel)
{
	return ws_path(fx.workspace, rel);
}

/* ============================================================ file names */

static const char *const odd_names[] = {
	"it's \"quoted\"",
	"with  spaces ",
	"$(touch name-pwned-1)",
	"`touch name-pwned-2`",
	"new\nline",
	"-leading-dash",
	"--rf",
	"\xff\xfe not utf-8 \x80",
	"semi;colon&amp|pipe>gt<lt*star?q[b]",
	"back\\slash",
	" ",
	"..dots..",
};

#define N_ODD (sizeof(odd_names) / sizeof(odd_names[0]))

static void odd_path(char *buf, size_t size, const char *dir, const char *name, const char *suffix)
{
	snprintf(buf, size, "%s/%s%s", dir, name, suffix);
}

START_TEST(test_odd_file_names)
{
	asp_sandbox *sb = sb_open(fx.config);
	char path[PATH_MAX], moved[PATH_MAX];
	asp_list *l;
	size_t i;

	mkdir_ok(sb, "names", 0755, 0);
	for (i = 0; i < N_ODD; i++) {
		asp_stat_info st;
		odd_path(path, sizeof(path), "names", odd_names[i], "");
		put(sb, path, odd_names[i]);
		assert_content(sb, path, odd_names[i], strlen(odd_names[i]));
		assert_local_content(ws(path), odd_names[i], strlen(odd_names[i]));
		st = stat_ok(sb, path);
		ck_assert_uint_eq(st.size, strlen(odd_names[i]));
		ck_assert_uint_eq(st.type, ASP_TYPE_FILE);
	}

	/* The listing has each name exactly, and nothing else. */
	l = list_ok(sb, "names");
	ck_assert_uint_eq(asp_list_count(l), N_ODD);
	for (i = 0; i < N_ODD; i++)
		ck_assert_msg(list_find(l, odd_names[i]) >= 0, "name %zu missing from the listing", i);
	asp_list_free(l);

	/* The sandbox's shell agrees, byte for byte. */
	{
		asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
		for (i = 0; i < N_ODD; i++) {
			char entry[300];
			const char *env[] = { entry, NULL };
			snprintf(entry, sizeof(entry), "F=%s", odd_names[i]);
			o.env = env;
			o.cwd = "names";
			expect_stdout_opts(sb, "cat -- \"$F\"", &o, odd_names[i], strlen(odd_names[i]));
		}
	}

	for (i = 0; i < N_ODD; i++) {
		odd_path(path, sizeof(path), "names", odd_names[i], "");
		odd_path(moved, sizeof(moved), "names", odd_names[i], " moved");
		rename_ok(sb, path, moved);
		ck_assert(!local_exists(ws(path)));
		assert_content(sb, moved, odd_names[i], strlen(odd_names[i]));
		assert_missing(sb, path);
		remove_ok(sb, moved, 0);
		ck_assert(!local_exists(ws(moved)));
		assert_missing(sb, moved);
	}
	l = list_ok(sb, "names");
	ck_assert_uint_eq(asp_list_count(l), 0);
	asp_list_free(l);

	/* Directories with odd names, removed recursively. */
	for (i = 0; i < N_ODD; i++) {
		odd_path(path, sizeof(path), "names", odd_names[i], "/sub");
		mkdir_ok(sb, path, 0755, 1);
		odd_path(path, sizeof(path), "names", odd_names[i], "");
		remove_ok(sb, path, 1);
		ck_assert_msg(!local_exists(ws(path)), "name %zu not removed", i);
	}
	ck_assert_int_eq(fx_run("[ -z \"$(ls -A '%s')\" ]", ws("names")), 0);
	assert_not_injected(fx.workspace, "name-pwned-");
	asp_close(sb);
}
END_TEST

/* ============================================================ filesystem */

START_TEST(test_stat)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	asp_stat_info st;
	unsigned char *data = random_bytes(12345, 3);
	int64_t now = (int64_t)time(NULL);

	o.mode = 0640;
	put_opts(sb, "st-file", data, 12345, &o);
	st = stat_ok(sb, "st-file");
	ck_assert_uint_eq(st.size, 12345);
	ck_assert_uint_eq(st.type, ASP_TYPE_FILE);
	ck_assert_uint_eq(st.mode, 0640);
	ck_assert_msg(st.mtime >= now - 60 && st.mtime <= now + 60, "mtime %lld, now %lld",
		      (long long)st.mtime, (long long)now);
	ck_assert_int_eq(st.mtime, (int64_t)local_lstat(ws("st-file")).st_mtime);

	/* An exact mtime and mode set by the sandbox. */
	expect_stdout(sb, "touch -d @1600000000 st-file && chmod 4711 st-file", "");
	st = stat_ok(sb, "st-file");
	ck_assert_int_eq(st.mtime, 1600000000);
	ck_assert_uint_eq(st.mode, 04711);

	mkdir_ok(sb, "st-dir", 0711, 0);
	st = stat_ok(sb, "st-dir");
	ck_assert_uint_eq(st.type, ASP_TYPE_DIR);
	ck_assert_uint_eq(st.mode, 0711);

	/* Symlinks are followed; a dangling one is ENOENT. */
	expect_stdout(sb, "ln -s st-file st-link && ln -s st-nowhere st-dangling && mkfifo st-fifo", "");
	st = stat_ok(sb, "st-link");
	ck_assert_uint_eq(st.type, ASP_TYPE_FILE);
	ck_assert_uint_eq(st.size, 12345);
	assert_missing(sb, "st-dangling");
	st = stat_ok(sb, "st-fifo");
	ck_assert_uint_eq(st.type, ASP_TYPE_OTHER);

	assert_missing(sb, "st-missing");

	/* The workspace itself. */
	st = stat_ok(sb, ".");
	ck_assert_uint_eq(st.type, ASP_TYPE_DIR);
	st = stat_ok(sb, fx.workspace);
	ck_assert_uint_eq(st.type, ASP_TYPE_DIR);
	free(data);
	asp_close(sb);
}
END_TEST

START_TEST(test_mkdir)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_error e = { 0 };
	int rc;

	/* Without parents: a missing parent is ENOENT. */
	rc = asp_mkdir(sb, "md/a/b/c", 0755, 0, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "md/a/b/c");
	ck_assert(!local_exists(ws("md")));

	mkdir_ok(sb, "md/a/b/c", 0755, 1);
	ck_assert(S_ISDIR(local_lstat(ws("md/a/b/c")).st_mode));
	/* Again with parents: fine. */
	mkdir_ok(sb, "md/a/b/c", 0755, 1);
	mkdir_ok(sb, "md/a", 0755, 1);

	/* Without parents: EEXIST. */
	memset(&e, 0, sizeof(e));
	rc = asp_mkdir(sb, "md/a/b", 0755, 0, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EEXIST, "md/a/b");

	/* Mode is applied; 0 means 0755 (less umask). */
	mkdir_ok(sb, "md/private", 0700, 0);
	ck_assert_uint_eq(local_lstat(ws("md/private")).st_mode & 07777, 0700);
	mkdir_ok(sb, "md/defmode", 0, 0);
	ck_assert_uint_eq(local_lstat(ws("md/defmode")).st_mode & 0700, 0700);

	/* A file in the way. */
	put(sb, "md/file", "f");
	memset(&e, 0, sizeof(e));
	rc = asp_mkdir(sb, "md/file", 0755, 0, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EEXIST, "md/file");
	memset(&e, 0, sizeof(e));
	rc = asp_mkdir(sb, "md/file", 0755, ASP_MKDIR_PARENTS, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EEXIST, "md/file");
	ck_assert(S_ISREG(local_lstat(ws("md/file")).st_mode));
	asp_close(sb);
}
END_TEST

START_TEST(test_list_dir)
{
	static const struct {
		const char *name;
		uint32_t type;
		uint64_t size;
	} want[] = {
		{ "A-upper", ASP_TYPE_FILE, 4 }, { "a", ASP_TYPE_FILE, 1 },  { "b", ASP_TYPE_FILE, 300 },
		{ "c", ASP_TYPE_DIR, 0 },       { "d", ASP_TYPE_SYMLINK, 1 }, { "e.hidden", ASP_TYPE_FILE, 0 },
	};
	asp_sandbox *sb = sb_open(fx.config);
	unsigned char *b = random_bytes(300, 9);
	asp_stat_info st;
	asp_list *l;
	asp_error e = { 0 };
	size_t i;
	int rc;

	/* Created out of order. */
	mkdir_ok(sb, "ls/c", 0750, 1);
	put_opts(sb, "ls/b", b, 300, NULL);
	put(sb, "ls/a", "1");
	put(sb, "ls/A-upper", "four");
	put(sb, "ls/e.hidden", "");
	expect_stdout(sb, "ln -s c ls/d", "");

	l = list_ok(sb, "ls");
	ck_assert_uint_eq(asp_list_count(l), sizeof(want) / sizeof(want[0]));
	for (i = 0; i < asp_list_count(l); i++) {
		ck_assert_str_eq(asp_list_name(l, i), want[i].name);
		ck_assert_int_eq(asp_list_stat(&st, l, i), ASP_OK);
		ck_assert_msg(st.type == want[i].type, "%s: type %u, expected %u", want[i].name,
			      st.type, want[i].type);
		if (want[i].type != ASP_TYPE_DIR)
			ck_assert_msg(st.size == want[i].size, "%s: size %llu, expected %llu",
				      want[i].name, (unsigned long long)st.size,
				      (unsigned long long)want[i].size);
	}
	ck_assert_int_eq(asp_list_stat(&st, l, 2), ASP_OK);
	ck_assert_uint_eq(st.mode, local_lstat(ws("ls/b")).st_mode & 07777);
	ck_assert_int_eq(asp_list_stat(&st, l, 3), ASP_OK);
	ck_assert_uint_eq(st.mode, 0750);
	/* Out of range. */
	ck_assert_ptr_null(asp_list_name(l, asp_list_count(l)));
	ck_assert_int_eq(asp_list_stat(&st, l, asp_list_count(l)), ASP_EINVAL);
	ck_assert_int_eq(asp_list_stat(NULL, l, 0), ASP_EINVAL);
	asp_list_free(l);

	/* Empty directory; the workspace by "." and by absolute path. */
	l = list_ok(sb, "ls/c");
	ck_assert_uint_eq(asp_list_count(l), 0);
	asp_list_free(l);
	l = list_ok(sb, ".");
	ck_assert_int_ge(list_find(l, "ls"), 0);
	ck_assert_int_lt(list_find(l, ".."), 0);
	ck_assert_int_lt(list_find(l, "."), 0);
	asp_list_free(l);
	l = list_ok(sb, ws("ls"));
	ck_assert_uint_eq(asp_list_count(l), sizeof(want) / sizeof(want[0]));
	asp_list_free(l);

	/* Missing. */
	rc = asp_list_dir(&l, sb, "ls/nope", NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "ls/nope");
	/* A file: not a directory, over SFTP too (whose servers say "no such file"). */
	put_opts(sb, "ls/plain", "x", 1, NULL);
	memset(&e, 0, sizeof(e));
	rc = asp_list_dir(&l, sb, "ls/plain", NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOTDIR, "ls/plain");
	ck_assert_msg(strncmp(e.message, "list /", 6) == 0 && strstr(e.message, "not a directory"), "%s",
		      e.message);
	free(b);
	asp_close(sb);
}
END_TEST

START_TEST(test_remove)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_error e = { 0 };
	int rc;

	/* A file. */
	put_opts(sb, "rm/file", "x", 1,
		 &(asp_write_options){ .version = ASP_WRITE_OPTIONS_VERSION, .flags = ASP_WRITE_PARENTS });
	remove_ok(sb, "rm/file", 0);
	ck_assert(!local_exists(ws("rm/file")));
	rc = asp_remove(sb, "rm/file", 0, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "rm/file");
	/* The message names the call, over SFTP as over shell commands. */
	ck_assert_msg(strncmp(e.message, "remove /", 8) == 0, "%s", e.message);

	/* An empty directory. */
	mkdir_ok(sb, "rm/empty", 0755, 1);
	remove_ok(sb, "rm/empty", 0);
	ck_assert(!local_exists(ws("rm/empty")));

	/* A tree: ENOTEMPTY without recursive, nothing lost. */
	mkdir_ok(sb, "rm/tree/a/b", 0755, 1);
	put(sb, "rm/tree/a/b/f", "f");
	put(sb, "rm/tree/top", "t");
	memset(&e, 0, sizeof(e));
	rc = asp_remove(sb, "rm/tree", 0, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOTEMPTY, "rm/tree");
	assert_content(sb, "rm/tree/a/b/f", "f", 1);
	assert_content(sb, "rm/tree/top", "t", 1);

	/* Recursive removes it all, without following a link out of the tree. */
	put_opts(sb, "rm/outside/keep", "keep", 4,
		 &(asp_write_options){ .version = ASP_WRITE_OPTIONS_VERSION, .flags = ASP_WRITE_PARENTS });
	expect_stdout(sb, "ln -s ../outside rm/tree/a/link-out && ln -s ../outside/keep rm/tree/klink", "");
	remove_ok(sb, "rm/tree", 1);
	ck_assert(!local_exists(ws("rm/tree")));
	assert_missing(sb, "rm/tree");
	assert_content(sb, "rm/outside/keep", "keep", 4);

	/* Recursive on a file, and on a missing path. */
	put(sb, "rm/one", "1");
	remove_ok(sb, "rm/one", 1);
	ck_assert(!local_exists(ws("rm/one")));
	memset(&e, 0, sizeof(e));
	rc = asp_remove(sb, "rm/not-there", ASP_REMOVE_RECURSIVE, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "rm/not-there");

	/* A symlink: the link goes, its target stays. */
	expect_stdout(sb, "ln -s outside/keep rm/link && ln -s outside rm/dirlink", "");
	remove_ok(sb, "rm/link", 0);
	remove_ok(sb, "rm/dirlink", 0);
	ck_assert(!local_exists(ws("rm/link")));
	ck_assert(!local_exists(ws("rm/dirlink")));
	assert_content(sb, "rm/outside/keep", "keep", 4);

	/* A file the user may not delete. */
	ck_assert_int_eq(fx_run("mkdir '%s' && touch '%s/f' && chown -R 0:0 '%s' && chmod 0755 '%s'",
				ws("rm/rootdir"), ws("rm/rootdir"), ws("rm/rootdir"), ws("rm/rootdir")),
			 0);
	memset(&e, 0, sizeof(e));
	rc = asp_remove(sb, "rm/rootdir/f", 0, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EACCES, "rm/rootdir/f");
	memset(&e, 0, sizeof(e));
	rc = asp_remove(sb, "rm/rootdir", ASP_REMOVE_RECURSIVE, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EACCES, "rm/rootdir");
	ck_assert(local_exists(ws("rm/rootdir/f")));
	asp_close(sb);
}
END_TEST

START_TEST(test_rename)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_error e = { 0 };
	int rc;

	put(sb, "rn-src", "source");
	put(sb, "rn-dst", "destination, longer");
	ck_assert_int_eq(fx_run("chmod 0600 '%s'", ws("rn-src")), 0);
	rename_ok(sb, "rn-src", "rn-dst");
	ck_assert(!local_exists(ws("rn-src")));
	assert_local_content(ws("rn-dst"), "source", 6);
	ck_assert_uint_eq(local_lstat(ws("rn-dst")).st_mode & 07777, 0600);

	/* A missing source: ENOENT naming it, the target untouched. */
	memset(&e, 0, sizeof(e));
	rc = asp_rename(sb, "rn-missing", "rn-dst", NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "rn-missing");
	assert_local_content(ws("rn-dst"), "source", 6);

	/* Into another directory, and a directory itself. */
	mkdir_ok(sb, "rn-dir/sub", 0755, 1);
	rename_ok(sb, "rn-dst", "rn-dir/sub/moved");
	assert_content(sb, "rn-dir/sub/moved", "source", 6);
	rename_ok(sb, "rn-dir", ws("rn-dir2"));
	ck_assert(!local_exists(ws("rn-dir")));
	assert_content(sb, "rn-dir2/sub/moved", "source", 6);

	/* A target directory that does not exist. */
	memset(&e, 0, sizeof(e));
	rc = asp_rename(sb, "rn-dir2/sub/moved", "rn-nodir/x", NULL, &e);
	ck_assert_msg(rc == ASP_ENOENT, "rename into a missing dir: %s: %s", asp_error_name(rc),
		      e.message);
	assert_content(sb, "rn-dir2/sub/moved", "source", 6);
	asp_close(sb);
}
END_TEST

/* ================================================================ suite */

/*
 * Every failing call gives the same code and the same message over SFTP
 * and over shell commands: under auto, which one a read or write takes
 * depends on the round trip the connection measured.
 */
#define NO_SUCH_CASE 1000

/* Failing call number i on sb; NO_SUCH_CASE past the last. */
static int failing_call(asp_sandbox *sb, int i, asp_error *e)
{
	unsigned char *buf = NULL;
	size_t len = 0;
	asp_stat_info st;
	asp_list *l = NULL;
	int rc;

	switch (i) {
	case 0: rc = asp_read(&buf, &len, sb, "xt/nope", 0, ASP_READ_ALL, NULL, e); break;
	case 1: rc = asp_read(&buf, &len, sb, "xt/d", 0, ASP_READ_ALL, NULL, e); break;
	case 2: rc = asp_read(&buf, &len, sb, "xt/secret", 0, ASP_READ_ALL, NULL, e); break;
	case 3: rc = asp_read(&buf, &len, sb, "xt/shut/x", 0, ASP_READ_ALL, NULL, e); break;
	case 4: rc = asp_write(sb, "xt/d", "y", 1, NULL, e); break;
	case 5: rc = asp_write(sb, "xt/nodir/x", "y", 1, NULL, e); break;
	case 6: rc = asp_write(sb, "xt/shut/x", "y", 1, NULL, e); break;
	case 7: rc = asp_stat(&st, sb, "xt/nope", NULL, e); break;
	case 8: rc = asp_list_dir(&l, sb, "xt/nope", NULL, e); break;
	case 9: rc = asp_list_dir(&l, sb, "xt/plain", NULL, e); break;
	case 10: rc = asp_list_dir(&l, sb, "xt/shut", NULL, e); break;
	case 11: rc = asp_mkdir(sb, "xt/d", 0, 0, NULL, e); break;
	case 12: rc = asp_mkdir(sb, "xt/a/b", 0, 0, NULL, e); break;
	case 13: rc = asp_remove(sb, "xt/nope", 0, NULL, e); break;
	case 14: rc = asp_remove(sb, "xt/full", 0, NULL, e); break;
	case 15: rc = asp_rename(sb, "xt/nope", "xt/other", NULL, e); break;
	default: return NO_SUCH_CASE;
	}
	asp_free(buf);
	asp_list_free(l);
	return rc;
}

START_TEST(test_errors_same_over_both_transports)
{
	asp_sandbox *sftp = sb_open_transport(fx.config, ASP_FILES_SFTP);
	asp_sandbox *sh = sb_open_transport(fx.config, ASP_FILES_EXEC);
	asp_exec_result *r;
	int i, rc1, rc2;

	mkdir_ok(sftp, "xt/d", 0755, 1);
	mkdir_ok(sftp, "xt/full/sub", 0755, 1);
	put(sftp, "xt/plain", "x");
	put(sftp, "xt/secret", "x");
	mkdir_ok(sftp, "xt/shut", 0755, 0);
	/* The fixture's login user is never root (asp-test when the tests run as root): modes bind. */
	r = run(sftp, "chmod 000 xt/secret xt/shut");
	assert_exited(r, 0);
	asp_exec_result_free(r);
	for (i = 0;; i++) {
		asp_error e1 = { 0 }, e2 = { 0 };
		if ((rc1 = failing_call(sftp, i, &e1)) == NO_SUCH_CASE)
			break;
		rc2 = failing_call(sh, i, &e2);
		ck_assert_msg(rc1 != ASP_OK, "case %d succeeded over SFTP", i);
		ck_assert_msg(rc1 == rc2 && !strcmp(e1.message, e2.message),
			      "case %d: SFTP %s \"%s\", shell %s \"%s\"", i, asp_error_name(rc1),
			      e1.message, asp_error_name(rc2), e2.message);
	}
	ck_assert_int_eq(i, 16);
	r = run(sftp, "chmod 755 xt/shut && chmod 644 xt/secret");
	asp_exec_result_free(r);
	asp_close(sftp);
	asp_close(sh);
}
END_TEST

Suite *suite_fs(void)
{
	Suite *s = suite_create("fs");
	TCase *tc = tcase_create("fs");

	tcase_add_unchecked_fixture(tc, fs_setup, fs_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_odd_file_names);
	tcase_add_test(tc, test_stat);
	tcase_add_test(tc, test_mkdir);
	tcase_add_test(tc, test_list_dir);
	tcase_add_test(tc, test_remove);
	tcase_add_test(tc, test_rename);
	tcase_add_test(tc, test_errors_same_over_both_transports);
	suite_add_tcase(s, tc);
	return s;
}
