/*
 * test_core.c - the core mechanism against a real sshd (DESIGN.md §5):
 * read/write (binary, large, offset/limit, atomic, modes, symlinks),
 * error mapping, exec (exit codes, signals, streams, stdin, env, cwd,
 * exact command text, large output, output cap, streaming, cancel),
 * awkward file names, stat/mkdir/list/remove/rename, argument checks.
 *
 * One sshd per suite (unchecked fixture); every test opens its own
 * sandbox, since check forks each test. Tests use distinct names in the
 * shared workspace so they do not depend on each other.
 */
#include <check.h>
#include <dirent.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "asp.h"
#include "fixture/fixture.h"

#define MiB (1024u * 1024u)

static fx_sshd fx;

/* ---------------------------------------------------------------- fixture */

static void core_setup(void)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	int rc;

	memset(&fx, 0, sizeof(fx));
	ck_assert_msg(fx_sshd_start(&fx) == 0, "the sshd fixture did not start");
	/* Fail early (and once) when the fixture's config cannot be opened. */
	o.config_path = fx.config;
	rc = asp_open(&sb, &o, &e);
	ck_assert_msg(rc == ASP_OK, "asp_open(%s): %s: %s", fx.config, asp_error_name(rc), e.message);
	asp_close(sb);
}

static void core_teardown(void)
{
	fx_sshd_stop(&fx);
}

/* ---------------------------------------------------------------- helpers */

#define ASSERT_OK(rc, e, what)                                                              \
	ck_assert_msg((rc) == ASP_OK, "%s: expected ASP_OK, got %s: %s", (what),             \
		      asp_error_name(rc), (e).message)

/* rc and err.code are `want`, and the message mentions `needle` (when not NULL). */
static void check_err(int line, int rc, const asp_error *e, int want, const char *needle)
{
	ck_assert_msg(rc == want, "line %d: expected %s, got %s (message: %s)", line,
		      asp_error_name(want), asp_error_name(rc), e->message);
	ck_assert_msg(e->code == want, "line %d: err.code is %s, expected %s", line,
		      asp_error_name(e->code), asp_error_name(want));
	ck_assert_msg(e->message[0] != '\0', "line %d: empty error message", line);
	if (needle)
		ck_assert_msg(strstr(e->message, needle) != NULL,
			      "line %d: message \"%s\" does not mention \"%s\"", line, e->message,
			      needle);
}

#define ASSERT_ERR(rc, e, want, needle) check_err(__LINE__, (rc), &(e), (want), (needle))

static asp_sandbox *sb_open(void)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	int rc;

	o.config_path = fx.config;
	rc = asp_open(&sb, &o, &e);
	ASSERT_OK(rc, e, "asp_open");
	ck_assert_ptr_nonnull(sb);
	return sb;
}

/* A local path inside the workspace; rotating static buffers (tests are single-threaded). */
static const char *ws(const char *rel)
{
	static char bufs[8][PATH_MAX];
	static unsigned int next;
	char *b = bufs[next++ % 8];
	int n = snprintf(b, PATH_MAX, "%s/%s", fx.workspace, rel);

	ck_assert(n > 0 && n < PATH_MAX);
	return b;
}

static int local_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static struct stat local_lstat(const char *path)
{
	struct stat st;

	ck_assert_msg(lstat(path, &st) == 0, "lstat %s failed", path);
	return st;
}

/* Exact byte comparison that reports where the first difference is. */
static void assert_bytes(const char *what, const void *got, size_t glen, const void *want,
			 size_t wlen)
{
	const unsigned char *g = got, *w = want;
	size_t i, n = glen < wlen ? glen : wlen;

	for (i = 0; i < n && g[i] == w[i]; i++)
		;
	if (i == n && glen == wlen)
		return;
	ck_abort_msg("%s: %zu bytes, expected %zu; first difference at offset %zu "
		     "(got 0x%02x, want 0x%02x)",
		     what, glen, wlen, i, i < glen ? g[i] : 0, i < wlen ? w[i] : 0);
}

static void sha256_hex(const void *data, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0, i;

	ck_assert_int_eq(EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL), 1);
	ck_assert_uint_eq(mdlen, 32);
	for (i = 0; i < mdlen; i++)
		sprintf(out + 2 * i, "%02x", md[i]);
	out[64] = '\0';
}

/* Deterministic pseudo-random bytes (xorshift64). */
static unsigned char *random_bytes(size_t len, uint64_t seed)
{
	unsigned char *p = malloc(len ? len : 1);
	uint64_t x = seed | 1;
	size_t i;

	ck_assert_ptr_nonnull(p);
	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char)(x >> 24);
	}
	return p;
}

/* `reps` copies of the bytes 0x00..0xff. */
static unsigned char *all_bytes(size_t reps, size_t *len)
{
	unsigned char *p = malloc(256 * reps);
	size_t i;

	ck_assert_ptr_nonnull(p);
	for (i = 0; i < 256 * reps; i++)
		p[i] = (unsigned char)i;
	*len = 256 * reps;
	return p;
}

/* -------------------------------------------------- sandbox operations */

static void put_opts(asp_sandbox *sb, const char *path, const void *data, size_t len,
		     const asp_write_options *o)
{
	asp_error e = { 0 };
	int rc = asp_write(sb, path, data, len, o, &e);

	ck_assert_msg(rc == ASP_OK, "write %s: %s: %s", path, asp_error_name(rc), e.message);
}

static void put(asp_sandbox *sb, const char *path, const char *text)
{
	put_opts(sb, path, text, strlen(text), NULL);
}

/* Read the whole file; checks the documented NUL terminator too. */
static unsigned char *get(asp_sandbox *sb, const char *path, size_t *len)
{
	unsigned char *buf = NULL;
	asp_error e = { 0 };
	int rc = asp_read(&buf, len, sb, path, 0, ASP_READ_ALL, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "read %s: %s: %s", path, asp_error_name(rc), e.message);
	ck_assert_ptr_nonnull(buf);
	ck_assert_msg(buf[*len] == '\0', "read %s: buffer is not NUL-terminated", path);
	return buf;
}

static void assert_content(asp_sandbox *sb, const char *path, const void *want, size_t wlen)
{
	size_t len;
	unsigned char *buf = get(sb, path, &len);

	assert_bytes(path, buf, len, want, wlen);
	asp_free(buf);
}

static void assert_local_content(const char *local, const void *want, size_t wlen)
{
	size_t len;
	char *buf = fx_read_file(local, &len);

	ck_assert_msg(buf != NULL, "cannot read %s locally", local);
	assert_bytes(local, buf, len, want, wlen);
	free(buf);
}

static asp_stat_info stat_ok(asp_sandbox *sb, const char *path)
{
	asp_stat_info st;
	asp_error e = { 0 };
	int rc;

	memset(&st, 0xa5, sizeof(st));
	rc = asp_stat(&st, sb, path, NULL, &e);
	ck_assert_msg(rc == ASP_OK, "stat %s: %s: %s", path, asp_error_name(rc), e.message);
	return st;
}

static void mkdir_ok(asp_sandbox *sb, const char *path, unsigned int mode, int parents)
{
	asp_error e = { 0 };
	int rc = asp_mkdir(sb, path, mode, parents ? ASP_MKDIR_PARENTS : 0, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "mkdir %s: %s: %s", path, asp_error_name(rc), e.message);
}

static void remove_ok(asp_sandbox *sb, const char *path, int recursive)
{
	asp_error e = { 0 };
	int rc = asp_remove(sb, path, recursive ? ASP_REMOVE_RECURSIVE : 0, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "remove %s: %s: %s", path, asp_error_name(rc), e.message);
}

static void rename_ok(asp_sandbox *sb, const char *from, const char *to)
{
	asp_error e = { 0 };
	int rc = asp_rename(sb, from, to, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "rename %s: %s: %s", from, asp_error_name(rc), e.message);
}

/* asp_stat says ENOENT, naming the path (control bytes, '\\' and, in these names, bytes >= 0x80 (not UTF-8) escaped as \\xNN). */
static void assert_missing(asp_sandbox *sb, const char *path)
{
	asp_stat_info st;
	asp_error e = { 0 };
	char shown[1024];
	size_t o = 0;
	int rc = asp_stat(&st, sb, path, NULL, &e);

	for (const unsigned char *p = (const unsigned char *)path; *p && o + 5 < sizeof(shown); p++)
		o += (size_t)snprintf(shown + o, sizeof(shown) - o,
				      *p < 0x20 || *p >= 0x7f || *p == '\\' ? "\\x%02x" : "%c", *p);
	shown[o] = '\0';
	ASSERT_ERR(rc, e, ASP_ENOENT, shown);
}

static asp_exec_result *run_opts(asp_sandbox *sb, const char *cmd, const asp_exec_options *o)
{
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	int rc = asp_exec(&r, sb, cmd, o, &e);

	ck_assert_msg(rc == ASP_OK, "exec `%s`: %s: %s", cmd, asp_error_name(rc), e.message);
	ck_assert_ptr_nonnull(r);
	return r;
}

static asp_exec_result *run(asp_sandbox *sb, const char *cmd)
{
	return run_opts(sb, cmd, NULL);
}

static void assert_stream(const asp_exec_result *r, asp_stream stream, const void *want, size_t wlen)
{
	size_t len = 0;
	const unsigned char *d = asp_exec_result_output(r, stream, &len);

	ck_assert_msg(d != NULL || len == 0, "output pointer is NULL with %zu bytes", len);
	assert_bytes(stream == ASP_STDOUT ? "stdout" : "stderr", d, len, want, wlen);
	ck_assert_uint_eq(asp_exec_result_output_total(r, stream), wlen);
	ck_assert_int_eq(asp_exec_result_truncated(r, stream), 0);
}

static void assert_exited(const asp_exec_result *r, int code)
{
	size_t len = 0;
	const unsigned char *err = asp_exec_result_output(r, ASP_STDERR, &len);

	ck_assert_msg(asp_exec_result_exit_code(r) == code && asp_exec_result_signal(r) == 0,
		      "exit code %d signal %d, expected exit %d (stderr: %.*s)",
		      asp_exec_result_exit_code(r), asp_exec_result_signal(r), code,
		      (int)(len > 300 ? 300 : len), err ? (const char *)err : "");
}

/* Run with options; expect exit 0, exactly `want` on stdout and nothing on stderr. */
static void expect_stdout_opts(asp_sandbox *sb, const char *cmd, const asp_exec_options *o,
			       const void *want, size_t wlen)
{
	asp_exec_result *r = run_opts(sb, cmd, o);

	assert_exited(r, 0);
	assert_stream(r, ASP_STDOUT, want, wlen);
	assert_stream(r, ASP_STDERR, "", 0);
	asp_exec_result_free(r);
}

static void expect_stdout(asp_sandbox *sb, const char *cmd, const char *want)
{
	expect_stdout_opts(sb, cmd, NULL, want, strlen(want));
}

/* Does the listing of `dir` contain exactly `name`? Returns its index or -1. */
static long list_find(const asp_list *l, const char *name)
{
	size_t i;

	for (i = 0; i < asp_list_count(l); i++)
		if (!strcmp(asp_list_name(l, i), name))
			return (long)i;
	return -1;
}

static asp_list *list_ok(asp_sandbox *sb, const char *path)
{
	asp_list *l = NULL;
	asp_error e = { 0 };
	int rc = asp_list_dir(&l, sb, path, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "list %s: %s: %s", path, asp_error_name(rc), e.message);
	ck_assert_ptr_nonnull(l);
	return l;
}

/* No atomic-write temporary file (".asp-") is left in `dir`, checked remotely and locally. */
static void assert_no_temp_files(asp_sandbox *sb, const char *dir)
{
	asp_list *l = list_ok(sb, dir);
	struct dirent *de;
	DIR *d;
	size_t i;

	for (i = 0; i < asp_list_count(l); i++)
		ck_assert_msg(!strstr(asp_list_name(l, i), ".asp-"), "temp file left in %s: %s", dir,
			      asp_list_name(l, i));
	asp_list_free(l);
	d = opendir(ws(dir));
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)) != NULL)
		ck_assert_msg(!strstr(de->d_name, ".asp-"), "temp file left in %s: %s", dir, de->d_name);
	closedir(d);
}

/* No file named prefix1..prefix4 appeared anywhere in the workspace (injection probes). */
static void assert_not_injected(const char *prefix)
{
	ck_assert_int_eq(fx_run("[ -z \"$(find '%s' -name '%s[0-9]')\" ]", fx.workspace, prefix), 0);
}

/* ============================================================ read/write */

START_TEST(test_rw_binary_roundtrip)
{
	asp_sandbox *sb = sb_open();
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
	asp_sandbox *sb = sb_open();
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
	asp_sandbox *sb = sb_open();
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
	asp_sandbox *sb = sb_open();
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
	inplace.in_place = 1;
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
	asp_sandbox *sb = sb_open();
	unsigned char *buf = NULL;
	size_t len = 0;
	asp_error e = { 0 };
	int rc;

	rc = asp_read(&buf, &len, sb, "err-no-such-file.txt", 0, ASP_READ_ALL, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "err-no-such-file.txt");
	ck_assert_ptr_null(buf);

	memset(&e, 0, sizeof(e));
	rc = asp_read(&buf, &len, sb, "err-no-such-dir/file.txt", 0, ASP_READ_ALL, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "err-no-such-dir/file.txt");
	asp_close(sb);
}
END_TEST

START_TEST(test_err_read_directory)
{
	asp_sandbox *sb = sb_open();
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
	/* The connection is still usable after the failed read. */
	put(sb, "err-after-eisdir", "ok");
	assert_content(sb, "err-after-eisdir", "ok", 2);
	asp_close(sb);
}
END_TEST

START_TEST(test_err_read_permission)
{
	asp_sandbox *sb = sb_open();
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
	asp_sandbox *sb = sb_open();
	asp_write_options inplace = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	int rc;

	ck_assert_int_eq(fx_run("mkdir '%s' && chown 0:0 '%s' && chmod 0755 '%s'",
				ws("err-root-dir"), ws("err-root-dir"), ws("err-root-dir")), 0);
	rc = asp_write(sb, "err-root-dir/f.txt", "x", 1, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EACCES, "err-root-dir");

	memset(&e, 0, sizeof(e));
	inplace.in_place = 1;
	rc = asp_write(sb, "err-root-dir/f.txt", "x", 1, &inplace, &e);
	ASSERT_ERR(rc, e, ASP_EACCES, "err-root-dir");

	/* mkdirs cannot help either. */
	memset(&e, 0, sizeof(e));
	inplace.in_place = 0;
	inplace.mkdirs = 1;
	rc = asp_write(sb, "err-root-dir/sub/f.txt", "x", 1, &inplace, &e);
	ASSERT_ERR(rc, e, ASP_EACCES, "err-root-dir");

	ck_assert_int_eq(fx_run("[ -z \"$(ls -A '%s')\" ]", ws("err-root-dir")), 0);
	asp_close(sb);
}
END_TEST

START_TEST(test_write_parent_missing_and_mkdirs)
{
	asp_sandbox *sb = sb_open();
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	int rc;

	rc = asp_write(sb, "mk-a/mk-b/mk-c/f.txt", "deep", 4, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "mk-a/mk-b/mk-c/f.txt");
	ck_assert(!local_exists(ws("mk-a")));

	memset(&e, 0, sizeof(e));
	o.in_place = 1;
	rc = asp_write(sb, "mk-a/mk-b/mk-c/f.txt", "deep", 4, &o, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "mk-a/mk-b/mk-c/f.txt");
	ck_assert(!local_exists(ws("mk-a")));

	o.in_place = 0;
	o.mkdirs = 1;
	put_opts(sb, "mk-a/mk-b/mk-c/f.txt", "deep", 4, &o);
	ck_assert(S_ISDIR(local_lstat(ws("mk-a")).st_mode));
	ck_assert(S_ISDIR(local_lstat(ws("mk-a/mk-b")).st_mode));
	ck_assert(S_ISDIR(local_lstat(ws("mk-a/mk-b/mk-c")).st_mode));
	assert_local_content(ws("mk-a/mk-b/mk-c/f.txt"), "deep", 4);

	/* In place, with some parents already there. */
	o.in_place = 1;
	put_opts(sb, "mk-a/mk-x/mk-y/g.txt", "in place", 8, &o);
	assert_local_content(ws("mk-a/mk-x/mk-y/g.txt"), "in place", 8);
	assert_no_temp_files(sb, "mk-a/mk-b/mk-c");
	asp_close(sb);
}
END_TEST

START_TEST(test_write_to_directory)
{
	asp_sandbox *sb = sb_open();
	asp_write_options inplace = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	int rc;

	mkdir_ok(sb, "wd-dir/inner", 0755, 1);
	rc = asp_write(sb, "wd-dir/inner", "x", 1, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EISDIR, "wd-dir/inner");
	memset(&e, 0, sizeof(e));
	inplace.in_place = 1;
	rc = asp_write(sb, "wd-dir/inner", "x", 1, &inplace, &e);
	ASSERT_ERR(rc, e, ASP_EISDIR, "wd-dir/inner");
	ck_assert(S_ISDIR(local_lstat(ws("wd-dir/inner")).st_mode));
	/* A failed atomic write leaves no temporary file behind. */
	assert_no_temp_files(sb, "wd-dir");
	asp_close(sb);
}
END_TEST

/* ============================================================ atomic write */

START_TEST(test_write_modes)
{
	asp_sandbox *sb = sb_open();
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
	o.in_place = 1;
	put_opts(sb, "wm-exec", "v5", 2, &o);
	ck_assert_uint_eq(local_lstat(ws("wm-exec")).st_mode & 07777, 0600);
	o.mode = 0640;
	put_opts(sb, "wm-exec", "v6", 2, &o);
	ck_assert_uint_eq(local_lstat(ws("wm-exec")).st_mode & 07777, 0640);
	assert_local_content(ws("wm-exec"), "v6", 2);

	/* A new file without a mode: 0644 less the server's umask. */
	put(sb, "wm-default", "d");
	m = local_lstat(ws("wm-default")).st_mode & 07777;
	ck_assert_msg((m & 0600) == 0600 && (m & ~(mode_t)0644) == 0, "new file mode %o", (unsigned)m);
	/* The file belongs to the login user, not to root. */
	ck_assert_uint_ne(local_lstat(ws("wm-default")).st_uid, 0);
	assert_no_temp_files(sb, ".");
	asp_close(sb);
}
END_TEST

START_TEST(test_write_no_temp_files)
{
	asp_sandbox *sb = sb_open();
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
	assert_no_temp_files(sb, "tmpchk");
	assert_no_temp_files(sb, "tmpchk/sub");
	free(big);
	asp_close(sb);
}
END_TEST

START_TEST(test_write_through_symlink)
{
	asp_sandbox *sb = sb_open();
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	char target[PATH_MAX];
	ssize_t n;

	o.mode = 0640;
	o.mkdirs = 1;
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
	o.in_place = 1;
	put_opts(sb, "sl/l2", "in place via link", 17, &o);
	ck_assert(S_ISLNK(local_lstat(ws("sl/l2")).st_mode));
	assert_local_content(ws("sl/real/target.txt"), "in place via link", 17);

	assert_no_temp_files(sb, "sl/links");
	assert_no_temp_files(sb, "sl/real");
	assert_no_temp_files(sb, "sl");
	asp_close(sb);
}
END_TEST

START_TEST(test_write_non_atomic)
{
	asp_sandbox *sb = sb_open();
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	ino_t ino;

	o.in_place = 1;
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
	asp_sandbox *sb = sb_open();
	asp_write_options zero = { .version = ASP_WRITE_OPTIONS_VERSION };
	asp_write_options inplace = zero;
	asp_error e = { 0 };
	int rc;

	put(sb, "zo-ro.txt", "old");
	ck_assert_int_eq(chmod(ws("zo-ro.txt"), 0444), 0);

	/* Control: in place, the sandbox user may not write the file. */
	inplace.in_place = 1;
	rc = asp_write(sb, "zo-ro.txt", "in place", 8, &inplace, &e);
	ASSERT_ERR(rc, e, ASP_EACCES, "zo-ro.txt");
	assert_local_content(ws("zo-ro.txt"), "old", 3);

	put_opts(sb, "zo-ro.txt", "new", 3, &zero);
	assert_local_content(ws("zo-ro.txt"), "new", 3);
	ck_assert_uint_eq(local_lstat(ws("zo-ro.txt")).st_mode & 07777, 0444);
	asp_close(sb);
}
END_TEST

/* ================================================================== exec */

START_TEST(test_exec_exit_codes)
{
	static const struct {
		const char *cmd;
		int code;
	} cases[] = {
		{ "true", 0 }, { "false", 1 }, { "exit 1", 1 }, { "exit 255", 255 },
		{ "exit 42", 42 }, { "sh -c 'exit 7'", 7 }, { "no-such-command-xyz", 127 },
	};
	asp_sandbox *sb = sb_open();
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		asp_exec_result *r = run(sb, cases[i].cmd);
		ck_assert_msg(asp_exec_result_exit_code(r) == cases[i].code,
			      "`%s`: exit code %d, expected %d", cases[i].cmd,
			      asp_exec_result_exit_code(r), cases[i].code);
		ck_assert_int_eq(asp_exec_result_signal(r), 0);
		ck_assert_int_eq(asp_exec_result_timed_out(r), 0);
		ck_assert_int_eq(asp_exec_result_cancelled(r), 0);
		asp_exec_result_free(r);
	}
	asp_close(sb);
}
END_TEST

/*
 * The wrapper ends with a line of its own on a saved copy of stdout. It
 * never shows: not after `exit` or `exec` (no end line, and exit 0 is
 * real), not in a file the command sent its stdout to, not when a
 * background job writes after it, not when output ends like its start.
 */
START_TEST(test_exec_end_line_never_shows)
{
	static const struct {
		const char *cmd, *out;
	} cases[] = {
		{ "exit 0", "" },
		{ "echo a; exit", "a\n" },
		{ "exec true", "" },
		{ "exec echo replaced", "replaced\n" },
		{ "trap 'echo bye' EXIT; echo hi", "hi\nbye\n" },
		{ "(sleep 0.3; echo late) & echo early", "early\nlate\n" },
		{ "printf asp-", "asp-" },
		{ "printf 'x\\nasp-0'", "x\nasp-0" },
		{ "exec 3>&1; echo own-fd3 >&3", "own-fd3\n" },
		{ "exec >redirected.txt; echo into-file", "" },
	};
	asp_sandbox *sb = sb_open();
	asp_exec_result *r;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_stdout(sb, cases[i].cmd, cases[i].out);
	assert_local_content(ws("redirected.txt"), "into-file\n", 10);
	/* The saved copy is closed for the command. */
	r = run(sb, "echo x >&3");
	ck_assert_int_ne(asp_exec_result_exit_code(r), 0);
	assert_stream(r, ASP_STDOUT, "", 0);
	asp_exec_result_free(r);
	asp_close(sb);
}
END_TEST

START_TEST(test_exec_signals)
{
	static const struct {
		const char *cmd;
		int sig;
	} cases[] = {
		{ "kill -TERM $$", 15 },
		{ "ulimit -c 0; kill -SEGV $$", 11 },
		{ "kill -KILL $$", 9 },
		{ "kill -INT $$", 2 },
	};
	asp_sandbox *sb = sb_open();
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		asp_exec_result *r = run(sb, cases[i].cmd);
		ck_assert_msg(asp_exec_result_signal(r) == cases[i].sig &&
				      asp_exec_result_exit_code(r) == -1,
			      "`%s`: signal %d exit %d, expected signal %d exit -1", cases[i].cmd,
			      asp_exec_result_signal(r), asp_exec_result_exit_code(r), cases[i].sig);
		ck_assert_int_eq(asp_exec_result_timed_out(r), 0);
		ck_assert_int_eq(asp_exec_result_cancelled(r), 0);
		asp_exec_result_free(r);
	}
	asp_close(sb);
}
END_TEST

START_TEST(test_exec_stdout_stderr)
{
	asp_sandbox *sb = sb_open();
	asp_exec_result *r;
	size_t len;

	r = run(sb, "printf out1; printf err1 >&2; printf 'out2\\n'; printf 'err2\\n' >&2; exit 3");
	assert_exited(r, 3);
	assert_stream(r, ASP_STDOUT, "out1out2\n", 9);
	assert_stream(r, ASP_STDERR, "err1err2\n", 9);
	asp_exec_result_free(r);

	r = run(sb, "true");
	assert_stream(r, ASP_STDOUT, "", 0);
	assert_stream(r, ASP_STDERR, "", 0);
	asp_exec_result_free(r);

	/* The accessors reject a stream that does not exist. */
	r = run(sb, "echo x");
	len = 99;
	ck_assert_ptr_null(asp_exec_result_output(r, 3, &len));
	ck_assert_uint_eq(len, 0);
	ck_assert_uint_eq(asp_exec_result_output_total(r, 0), 0);
	ck_assert_int_eq(asp_exec_result_truncated(r, 3), 0);
	asp_exec_result_free(r);
	asp_close(sb);
}
END_TEST

START_TEST(test_exec_stdin_binary)
{
	asp_sandbox *sb = sb_open();
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	size_t len;
	unsigned char *data = all_bytes(4096 + 1, &len); /* 1 MiB + 256, every byte value */
	char want[65], line[80];
	static const unsigned char small[] = { 'a', 0, 'b', 0, 0, '\n', 0xff };

	o.stdin_data = data;
	o.stdin_len = len;
	/* Round trip: the bytes come back exactly while stdin is still being fed. */
	expect_stdout_opts(sb, "cat", &o, data, len);

	/* The sandbox's own view. */
	sha256_hex(data, len, want);
	snprintf(line, sizeof(line), "%s  -\n", want);
	expect_stdout_opts(sb, "sha256sum", &o, line, strlen(line));
	snprintf(line, sizeof(line), "%zu\n", len);
	expect_stdout_opts(sb, "wc -c | tr -d ' '", &o, line, strlen(line));

	o.stdin_data = small;
	o.stdin_len = sizeof(small);
	expect_stdout_opts(sb, "od -An -tx1 | tr -s ' \\n' ' '", &o, " 61 00 62 00 00 0a ff ", 22);

	/* No stdin: immediate EOF, the command does not hang. */
	o.stdin_data = NULL;
	o.stdin_len = 0;
	expect_stdout_opts(sb, "cat; echo done", &o, "done\n", 5);
	free(data);
	asp_close(sb);
}
END_TEST

/*
 * A zero-initialised asp_exec_options (C99 designated style: version and a
 * timeout) does not forward the harness's own fd 0. Here fd 0 is a pipe
 * holding data with its write end closed: forwarded, the data would come
 * back; not forwarded, cat sees EOF at once.
 */
START_TEST(test_exec_zero_options_keep_fd0)
{
	asp_sandbox *sb = sb_open();
	asp_exec_options zero = { .version = ASP_EXEC_OPTIONS_VERSION, .timeout_ms = 60000 };
	asp_exec_options fwd = zero;
	int p[2], saved = dup(0);

	ck_assert_int_ge(saved, 0);
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(write(p[1], "from fd 0\n", 10), 10);
	close(p[1]);
	ck_assert_int_eq(dup2(p[0], 0), 0);
	close(p[0]);

	expect_stdout_opts(sb, "cat; echo eof", &zero, "eof\n", 4);

	/* Control: asked for, fd 0 (still holding its data) is forwarded. */
	fwd.flags = ASP_EXEC_STDIN_FD;
	fwd.stdin_fd = 0;
	expect_stdout_opts(sb, "cat; echo eof", &fwd, "from fd 0\neof\n", 14);

	ck_assert_int_eq(dup2(saved, 0), 0);
	close(saved);
	asp_close(sb);
}
END_TEST

START_TEST(test_exec_env_exact)
{
	static const char *const values[] = {
		"it's",
		"say \"hi\"",
		"$(touch env-pwned-1)",
		"`touch env-pwned-2`",
		"${HOME}$HOME$$",
		"line one\nline two\n",
		"  spaced   out  ",
		"\xff\xfe\x80 not utf-8 \xc3",
		"",
		"a=b=c",
		"back\\slash\\n\\",
		"%s%n%d",
		"'; touch env-pwned-3; '",
		"\"; touch env-pwned-4; \"",
		"\t\r\x01\x7f",
	};
	asp_sandbox *sb = sb_open();
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	size_t i;

	for (i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		char entry[256];
		const char *env[] = { "OTHER=1", entry, NULL };
		snprintf(entry, sizeof(entry), "ASP_V=%s", values[i]);
		o.env = env;
		expect_stdout_opts(sb, "printf '%s' \"$ASP_V\"", &o, values[i], strlen(values[i]));
	}
	/* Several at once, and a later one overrides an earlier one. */
	{
		const char *env[] = { "A=1", "B=two words", "A=3", "_x9=z", NULL };
		o.env = env;
		expect_stdout_opts(sb, "printf '%s|%s|%s' \"$A\" \"$B\" \"$_x9\"", &o, "3|two words|z", 13);
	}
	/* Nothing was injected. */
	assert_not_injected("env-pwned-");
	asp_close(sb);
}
END_TEST

START_TEST(test_exec_env_invalid)
{
	static const char *const bad[] = {
		"1ABC=x", "A-B=x", "=x", "NOEQUALS", "A B=x", "A;touch env-bad-ran=x", "É=x",
	};
	asp_sandbox *sb = sb_open();
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *env[] = { "GOOD=1", bad[i], NULL };
		asp_exec_result *r = NULL;
		asp_error e = { 0 };
		int rc;

		o.env = env;
		rc = asp_exec(&r, sb, "touch env-bad-ran", &o, &e);
		ASSERT_ERR(rc, e, ASP_EINVAL, "env[1]");
		ck_assert_ptr_null(r);
	}
	ck_assert(!local_exists(ws("env-bad-ran")));
	asp_close(sb);
}
END_TEST

START_TEST(test_exec_cwd_special)
{
	static const char name[] = "cwd 'sq' \"dq\" $(touch cwd-pwned-1) `touch cwd-pwned-2`\nnl; x";
	asp_sandbox *sb = sb_open();
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	char want[PATH_MAX];

	mkdir_ok(sb, name, 0755, 1);
	ck_assert(S_ISDIR(local_lstat(ws(name)).st_mode));
	snprintf(want, sizeof(want), "%s/%s\n", fx.workspace, name);

	o.cwd = name;
	expect_stdout_opts(sb, "pwd", &o, want, strlen(want));
	o.cwd = ws(name);
	expect_stdout_opts(sb, "pwd", &o, want, strlen(want));
	assert_not_injected("cwd-pwned-");
	asp_close(sb);
}
END_TEST

START_TEST(test_exec_cwd_resolution)
{
	asp_sandbox *sb = sb_open();
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	char want[PATH_MAX];
	int rc;

	/* Default: the workspace. */
	snprintf(want, sizeof(want), "%s\n", fx.workspace);
	expect_stdout(sb, "pwd", want);
	ck_assert_str_eq(asp_sandbox_workspace(sb), fx.workspace);
	o.cwd = ".";
	expect_stdout_opts(sb, "pwd", &o, want, strlen(want));

	/* Relative: against the workspace. */
	mkdir_ok(sb, "cwd-rel/deeper", 0755, 1);
	o.cwd = "cwd-rel/deeper";
	snprintf(want, sizeof(want), "%s/cwd-rel/deeper\n", fx.workspace);
	expect_stdout_opts(sb, "pwd", &o, want, strlen(want));

	/* Absolute: as given. */
	o.cwd = "/";
	expect_stdout_opts(sb, "pwd", &o, "/\n", 2);

	/* Missing: ENOENT naming it, and the command does not run. */
	o.cwd = "cwd-missing/dir";
	rc = asp_exec(&r, sb, "touch cwd-ran", &o, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "cwd-missing/dir");
	ck_assert_ptr_null(r);
	ck_assert(!local_exists(ws("cwd-ran")));
	ck_assert(!local_exists(ws("cwd-missing/cwd-ran")));
	asp_close(sb);
}
END_TEST

START_TEST(test_exec_command_text_exact)
{
	asp_sandbox *sb = sb_open();

	expect_stdout(sb, "printf '%s\\n' \"a'b\" '$(x)' '`y`' \"q\\\"q\"",
		      "a'b\n$(x)\n`y`\nq\"q\n");
	/* Several lines, a here-document, comments. */
	expect_stdout(sb, "echo one # comment\necho 'two\nlines'\ncat <<'EOF'\n$HOME `x` $(y)\nEOF",
		      "one\ntwo\nlines\n$HOME `x` $(y)\n");
	/* Non-UTF-8 bytes in the command text. */
	expect_stdout(sb, "printf '\xff\xfe\x80'", "\xff\xfe\x80");
	/* The command sees its own positional state untouched by the wrapper. */
	expect_stdout(sb, "echo \"$#\"", "0\n");
	/* Text starting with '-' is a command, not options to the wrapper's eval. */
	expect_stdout(sb, "-n 2>/dev/null; echo \"after $?\"", "after 127\n");
	asp_close(sb);
}
END_TEST

/* Every byte of d is c. */
static int all_equal(const unsigned char *d, size_t len, unsigned char c)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (d[i] != c)
			return 0;
	return 1;
}

START_TEST(test_exec_large_both_streams)
{
	static const char *const cmds[] = {
		/* Both streams at once. */
		"head -c 8388608 /dev/zero | tr '\\0' a & head -c 8388608 /dev/zero | tr '\\0' b >&2; wait",
		/* All of stderr before any stdout: needs stderr drained while stdout is idle. */
		"head -c 8388608 /dev/zero | tr '\\0' b >&2; head -c 8388608 /dev/zero | tr '\\0' a",
	};
	asp_sandbox *sb = sb_open();
	size_t i;

	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		asp_exec_result *r = run(sb, cmds[i]);
		size_t olen, elen;
		const unsigned char *out = asp_exec_result_output(r, ASP_STDOUT, &olen);
		const unsigned char *err = asp_exec_result_output(r, ASP_STDERR, &elen);

		assert_exited(r, 0);
		ck_assert_uint_eq(olen, 8 * MiB);
		ck_assert_uint_eq(elen, 8 * MiB);
		ck_assert_uint_eq(asp_exec_result_output_total(r, ASP_STDOUT), 8 * MiB);
		ck_assert_uint_eq(asp_exec_result_output_total(r, ASP_STDERR), 8 * MiB);
		ck_assert_msg(all_equal(out, olen, 'a'), "stdout has foreign bytes");
		ck_assert_msg(all_equal(err, elen, 'b'), "stderr has foreign bytes");
		asp_exec_result_free(r);
	}
	asp_close(sb);
}
END_TEST

/* What `seq 1 n` prints. */
static char *seq_text(int n, size_t *len)
{
	size_t cap = (size_t)n * 8 + 1, off = 0;
	char *s = malloc(cap);
	int i;

	ck_assert_ptr_nonnull(s);
	for (i = 1; i <= n; i++)
		off += (size_t)snprintf(s + off, cap - off, "%d\n", i);
	*len = off;
	return s;
}

START_TEST(test_exec_max_output)
{
	asp_sandbox *sb = sb_open();
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r;
	size_t full_len, len;
	char *full = seq_text(100000, &full_len);
	const unsigned char *d;

	o.max_output = 1000;
	r = run_opts(sb, "seq 1 100000; seq 1 100000 >&2; echo small >&2", &o);
	assert_exited(r, 0);
	/* stdout: the first 500 and the last 500 bytes. */
	d = asp_exec_result_output(r, ASP_STDOUT, &len);
	ck_assert_uint_eq(len, 1000);
	assert_bytes("stdout head", d, 500, full, 500);
	assert_bytes("stdout tail", d + 500, 500, full + full_len - 500, 500);
	ck_assert_uint_eq(asp_exec_result_output_total(r, ASP_STDOUT), full_len);
	ck_assert_int_ne(asp_exec_result_truncated(r, ASP_STDOUT), 0);
	/* stderr is capped on its own. */
	d = asp_exec_result_output(r, ASP_STDERR, &len);
	ck_assert_uint_eq(len, 1000);
	assert_bytes("stderr head", d, 500, full, 500);
	assert_bytes("stderr tail", d + 500, 494, full + full_len - 494, 494);
	assert_bytes("stderr end", d + 994, 6, "small\n", 6);
	ck_assert_uint_eq(asp_exec_result_output_total(r, ASP_STDERR), full_len + 6);
	ck_assert_int_ne(asp_exec_result_truncated(r, ASP_STDERR), 0);
	asp_exec_result_free(r);

	/* Exactly at the cap, and under it: nothing dropped. */
	r = run_opts(sb, "seq 1 100000 | head -c 1000; printf tiny >&2", &o);
	assert_stream(r, ASP_STDOUT, full, 1000);
	assert_stream(r, ASP_STDERR, "tiny", 4);
	asp_exec_result_free(r);

	/* One byte over the cap. */
	r = run_opts(sb, "seq 1 100000 | head -c 1001", &o);
	d = asp_exec_result_output(r, ASP_STDOUT, &len);
	ck_assert_uint_eq(len, 1000);
	assert_bytes("1001 head", d, 500, full, 500);
	assert_bytes("1001 tail", d + 500, 500, full + 501, 500);
	ck_assert_uint_eq(asp_exec_result_output_total(r, ASP_STDOUT), 1001);
	ck_assert_int_ne(asp_exec_result_truncated(r, ASP_STDOUT), 0);
	asp_exec_result_free(r);
	free(full);
	asp_close(sb);
}
END_TEST

typedef struct collected {
	unsigned char *data[3];
	size_t len[3];
	size_t calls;
	int bad_stream;
	const char *cancel_on; /* cancel once stdout contains this */
	int returned_nonzero;
	int pids[3];   /* from a "pids A B C" line before cancel_on, if any */
	int npids;
	int seen_alive; /* how many of them were alive when the cancel was asked */
} collected;

/* A local process (the fixture's sandbox is this machine) exists and is not a zombie. */
static int pid_alive(int pid)
{
	char path[64], *stat;
	const char *paren;
	int alive;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (!(stat = fx_read_file(path, NULL)))
		return 0;
	paren = strrchr(stat, ')');
	alive = paren && paren[2] != 'Z' && paren[2] != 'X';
	free(stat);
	return alive;
}

static int wait_gone(int pid, long ms)
{
	for (long long end = fx_now_ms() + ms; fx_now_ms() < end; fx_sleep_ms(10))
		if (!pid_alive(pid))
			return 1;
	return !pid_alive(pid);
}

/* Positive control for a kill check: the "pids" line's processes, seen alive now. */
static void see_pids_alive(collected *c)
{
	const char *line = strstr((char *)c->data[ASP_STDOUT], "pids ");

	if (!line)
		return;
	c->npids = sscanf(line, "pids %d %d %d", &c->pids[0], &c->pids[1], &c->pids[2]);
	for (int i = 0; i < c->npids; i++)
		c->seen_alive += c->pids[i] > 1 && pid_alive(c->pids[i]);
}

static int collect_cb(asp_stream stream, const unsigned char *data, size_t len, void *userdata)
{
	collected *c = userdata;

	c->calls++;
	if (stream != ASP_STDOUT && stream != ASP_STDERR) {
		c->bad_stream = 1;
		return 0;
	}
	c->data[stream] = realloc(c->data[stream], c->len[stream] + len + 1);
	if (!c->data[stream])
		abort();
	memcpy(c->data[stream] + c->len[stream], data, len);
	c->len[stream] += len;
	c->data[stream][c->len[stream]] = '\0';
	if (c->cancel_on && stream == ASP_STDOUT && strstr((char *)c->data[stream], c->cancel_on)) {
		see_pids_alive(c);
		c->returned_nonzero = 1;
		return 1;
	}
	return 0;
}

START_TEST(test_exec_streaming_callback)
{
	asp_sandbox *sb = sb_open();
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	collected c;
	asp_exec_result *r;
	size_t out_len, err_len;
	const unsigned char *out, *err;

	memset(&c, 0, sizeof(c));
	o.on_output = collect_cb;
	o.userdata = &c;
	r = run_opts(sb,
		     "i=0; while [ $i -lt 3000 ]; do echo \"out $i\"; echo \"err $i\" >&2; "
		     "i=$((i+1)); done; head -c 300000 /dev/zero | tr '\\0' z",
		     &o);
	assert_exited(r, 0);
	out = asp_exec_result_output(r, ASP_STDOUT, &out_len);
	err = asp_exec_result_output(r, ASP_STDERR, &err_len);
	ck_assert_int_eq(c.bad_stream, 0);
	ck_assert_uint_gt(c.calls, 1);
	assert_bytes("streamed stdout", c.data[ASP_STDOUT], c.len[ASP_STDOUT], out, out_len);
	assert_bytes("streamed stderr", c.data[ASP_STDERR], c.len[ASP_STDERR], err, err_len);
	ck_assert_msg(!strncmp((char *)out, "out 0\nout 1\n", 12), "stdout starts wrong");
	ck_assert_msg(!strncmp((char *)err, "err 0\nerr 1\n", 12), "stderr starts wrong");
	ck_assert_msg(memmem(err, err_len, "err 2999\n", 9) != NULL, "stderr misses its end");
	ck_assert_uint_gt(out_len, 300000);
	ck_assert_msg(all_equal(out + out_len - 300000, 300000, 'z'), "stdout tail wrong");
	ck_assert_int_eq(asp_exec_result_cancelled(r), 0);
	asp_exec_result_free(r);
	free(c.data[1]);
	free(c.data[2]);
	asp_close(sb);
}
END_TEST

START_TEST(test_exec_streaming_cancel)
{
	asp_sandbox *sb = sb_open();
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	collected c;
	asp_exec_result *r;
	char cmd[160];
	time_t t0 = time(NULL);

	memset(&c, 0, sizeof(c));
	c.cancel_on = "ready\n";
	o.on_output = collect_cb;
	o.userdata = &c;
	o.kill_grace_ms = 500;
	/* A background child too: cancel kills the whole process group. The sleep
	 * lengths are unique to this process, so other runs on the host do not interfere.
	 * The shell and both sleeps name themselves, to be seen alive, then gone. */
	snprintf(cmd, sizeof(cmd),
		 "sleep 31.%d & a=$!; sleep 30.%d & b=$!; echo \"pids $$ $a $b\"; echo ready; "
		 "wait $b; echo never; wait",
		 (int)getpid(), (int)getpid());
	r = run_opts(sb, cmd, &o);
	ck_assert_int_eq(c.returned_nonzero, 1);
	ck_assert_msg(c.npids == 3 && c.seen_alive == 3,
		      "saw %d of the %d pids of the shell and its sleeps alive before the cancel",
		      c.seen_alive, c.npids);
	ck_assert_int_ne(asp_exec_result_cancelled(r), 0);
	ck_assert_int_eq(asp_exec_result_timed_out(r), 0);
	ck_assert_msg(time(NULL) - t0 < 15, "cancel took %lld s", (long long)(time(NULL) - t0));
	ck_assert_msg(asp_exec_result_duration_ms(r) < 15000, "duration %llu ms",
		      (unsigned long long)asp_exec_result_duration_ms(r));
	ck_assert_msg(asp_exec_result_signal(r) != 0 || asp_exec_result_exit_code(r) != 0,
		      "a cancelled command reported success");
	{
		size_t len;
		const unsigned char *out = asp_exec_result_output(r, ASP_STDOUT, &len);
		ck_assert_msg(!memmem(out, len, "never", 5), "the command ran on after cancel");
	}
	asp_exec_result_free(r);
	/* Nothing of it survives: the shell, its sleeps (seen alive above). */
	for (int i = 0; i < c.npids; i++)
		ck_assert_msg(wait_gone(c.pids[i], 10000), "process %d of the cancelled command survived",
			      c.pids[i]);
	snprintf(cmd, sizeof(cmd), "ps -eo args | grep -c -e '^sleep 3[01]\\.%d$' || true", (int)getpid());
	expect_stdout(sb, cmd, "0\n");
	free(c.data[1]);
	free(c.data[2]);
	asp_close(sb);
}
END_TEST

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
	asp_sandbox *sb = sb_open();
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
	assert_not_injected("name-pwned-");
	asp_close(sb);
}
END_TEST

/* ============================================================ filesystem */

START_TEST(test_stat)
{
	asp_sandbox *sb = sb_open();
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
	asp_sandbox *sb = sb_open();
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
	asp_sandbox *sb = sb_open();
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
	free(b);
	asp_close(sb);
}
END_TEST

START_TEST(test_remove)
{
	asp_sandbox *sb = sb_open();
	asp_error e = { 0 };
	int rc;

	/* A file. */
	put_opts(sb, "rm/file", "x", 1, &(asp_write_options){ .version = ASP_WRITE_OPTIONS_VERSION, .mkdirs = 1 });
	remove_ok(sb, "rm/file", 0);
	ck_assert(!local_exists(ws("rm/file")));
	rc = asp_remove(sb, "rm/file", 0, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "rm/file");

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
		 &(asp_write_options){ .version = ASP_WRITE_OPTIONS_VERSION, .mkdirs = 1 });
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
	asp_sandbox *sb = sb_open();
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
	asp_sandbox *sb = sb_open();
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
	ck_assert_int_eq(wo.in_place, 0);
	ck_assert_int_eq(wo.mkdirs, 0);
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

Suite *suite_core(void)
{
	Suite *s = suite_create("core");
	TCase *tc = tcase_create("core");

	tcase_add_unchecked_fixture(tc, core_setup, core_teardown);
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
	tcase_add_test(tc, test_exec_exit_codes);
	tcase_add_test(tc, test_exec_end_line_never_shows);
	tcase_add_test(tc, test_exec_signals);
	tcase_add_test(tc, test_exec_stdout_stderr);
	tcase_add_test(tc, test_exec_stdin_binary);
	tcase_add_test(tc, test_exec_zero_options_keep_fd0);
	tcase_add_test(tc, test_exec_env_exact);
	tcase_add_test(tc, test_exec_env_invalid);
	tcase_add_test(tc, test_exec_cwd_special);
	tcase_add_test(tc, test_exec_cwd_resolution);
	tcase_add_test(tc, test_exec_command_text_exact);
	tcase_add_test(tc, test_exec_large_both_streams);
	tcase_add_test(tc, test_exec_max_output);
	tcase_add_test(tc, test_exec_streaming_callback);
	tcase_add_test(tc, test_exec_streaming_cancel);
	tcase_add_test(tc, test_odd_file_names);
	tcase_add_test(tc, test_stat);
	tcase_add_test(tc, test_mkdir);
	tcase_add_test(tc, test_list_dir);
	tcase_add_test(tc, test_remove);
	tcase_add_test(tc, test_rename);
	tcase_add_test(tc, test_argument_checks);
	suite_add_tcase(s, tc);
	return s;
}
