/*
 * test_hostile.c - hostile names and contents against a real sshd: every
 * byte 1..255 in exec env values, command text, file names; leading dashes
 * ("-rf", "--help", a cwd "-x"); newlines, quotes, non-UTF-8; very long
 * names and paths (a 300-byte name is ASP_EINVAL "file name too long", a
 * 4000-byte nested path works, longer ones fail cleanly; over 32 KiB of exec
 * shell text is ASP_EINVAL pointing to stdin_data); empty files; and
 * sizes and offsets at the edges of 32 and 64 bits (a sparse 5 GiB file,
 * offsets near 2^63 and limits near 2^64).
 *
 * A NUL byte cannot be in a C string, so the C API cannot be handed one; the
 * bindings reject NUL in paths, commands and env entries, and their own tests
 * check it (bindings/python/tests, bindings/node/test).
 *
 * One sshd for the suite (unchecked fixture); each test opens its own
 * sandbox and works in its own directory of the shared workspace.
 */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asp.h"
#include "fixture/fixture.h"
#include "helpers.h"
#include "tiers.h"

#define GiB (1024ull * 1024ull * 1024ull)

static fx_sshd fx;

static void hostile_setup(void)
{
	memset(&fx, 0, sizeof(fx));
	ck_assert_msg(fx_sshd_start(&fx) == 0, "the sshd fixture did not start");
}

static void hostile_teardown(void)
{
	fx_sshd_stop(&fx);
}

/* ---------------------------------------------------------------- helpers */

/* A printable rendering of bytes for failure messages. */
static const char *show(const void *data, size_t len)
{
	static char buf[4][400];
	static int next;
	char *b = buf[next++ % 4];
	const unsigned char *d = data;
	size_t o = 0;

	for (size_t i = 0; i < len && o + 5 < sizeof(buf[0]); i++)
		o += (size_t)snprintf(b + o, sizeof(buf[0]) - o,
				      d[i] >= 0x20 && d[i] < 0x7f && d[i] != '\\' ? "%c" : "\\x%02x", d[i]);
	b[o] = '\0';
	return b;
}

static void put_shown(asp_sandbox *sb, const char *path, const void *data, size_t len)
{
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	int rc;

	wo.flags |= ASP_WRITE_PARENTS;
	rc = asp_write(sb, path, data, len, &wo, &e);
	ck_assert_msg(rc == ASP_OK, "write %s: %s: %s", show(path, strlen(path)), asp_error_name(rc),
		      e.message);
}

static void expect_content(asp_sandbox *sb, const char *path, const void *want, size_t wlen)
{
	unsigned char *d = NULL;
	size_t n = 0;
	asp_error e = { 0 };
	int rc = asp_read(&d, &n, sb, path, 0, ASP_READ_ALL, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "read %s: %s: %s", show(path, strlen(path)), asp_error_name(rc),
		      e.message);
	ck_assert_msg(n == wlen && !memcmp(d, want, wlen), "read %s: got [%s], want [%s]",
		      show(path, strlen(path)), show(d, n), show(want, wlen));
	ck_assert(d[n] == '\0');
	asp_free(d);
}

/* Read [offset, +limit) and expect exactly `want` (wlen bytes). */
static void expect_range(asp_sandbox *sb, const char *path, uint64_t offset, uint64_t limit,
			 const void *want, size_t wlen)
{
	unsigned char *d = NULL;
	size_t n = 12345;
	asp_error e = { 0 };
	int rc = asp_read(&d, &n, sb, path, offset, limit, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "read %s at %llu limit %llu: %s: %s", path, (unsigned long long)offset,
		      (unsigned long long)limit, asp_error_name(rc), e.message);
	ck_assert_msg(n == wlen && (!wlen || !memcmp(d, want, wlen)),
		      "read %s at %llu limit %llu: %zu bytes [%s], want %zu [%s]", path,
		      (unsigned long long)offset, (unsigned long long)limit, n, show(d, n < 64 ? n : 64),
		      wlen, show(want, wlen < 64 ? wlen : 64));
	ck_assert_ptr_nonnull(d);
	ck_assert(d[n] == '\0');
	asp_free(d);
}

static asp_exec_result *run_shown(asp_sandbox *sb, const char *cmd, const asp_exec_options *o)
{
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	int rc = asp_exec(&r, sb, cmd, o, &e);

	ck_assert_msg(rc == ASP_OK, "exec [%s]: %s: %s", show(cmd, strlen(cmd)), asp_error_name(rc),
		      e.message);
	return r;
}

/* Run cmd; expect exit 0 and exactly `want` on stdout. */
static void expect_stdout_shown(asp_sandbox *sb, const char *cmd, const asp_exec_options *o,
			  const void *want, size_t wlen)
{
	asp_exec_result *r = run_shown(sb, cmd, o);
	size_t n = 0, en = 0;
	const unsigned char *out = asp_exec_result_output(r, ASP_STDOUT, &n);
	const unsigned char *err = asp_exec_result_output(r, ASP_STDERR, &en);

	ck_assert_msg(asp_exec_result_exit_code(r) == 0 && n == wlen && (!wlen || !memcmp(out, want, wlen)),
		      "exec [%s]: exit %d, stdout [%s], want [%s]; stderr [%s]", show(cmd, strlen(cmd)),
		      asp_exec_result_exit_code(r), show(out, n), show(want, wlen), show(err, en));
	asp_exec_result_free(r);
}

static int ws_exists(const char *rel)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", fx.workspace, rel);
	return lstat(path, &st) == 0;
}

static void expect_err(int line, int rc, const asp_error *e, int want, const char *needle)
{
	ck_assert_msg(rc == want, "line %d: expected %s, got %s: %s", line, asp_error_name(want),
		      asp_error_name(rc), e->message);
	ck_assert_msg(e->code == want, "line %d: err.code %d", line, e->code);
	ck_assert_msg(!needle || strstr(e->message, needle), "line %d: message \"%s\" lacks \"%s\"",
		      line, e->message, needle);
	ck_assert_msg(strlen(e->message) < ASP_ERROR_MESSAGE_MAX, "line %d: message not terminated", line);
}

#define EXPECT_ERR(rc, e, want, needle) expect_err(__LINE__, (rc), &(e), (want), (needle))

/* ---------------------------------------------------------------- exec: every byte */

/* Every byte 1..255 in an env value, alone and between other text, arrives exactly. */
START_TEST(test_exec_env_value_every_byte)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;

	for (int b = 1; b < 256; b++) {
		char entry[32], want[16];
		const char *env[] = { "ASP_OTHER=x", entry, NULL };
		int wl = snprintf(want, sizeof(want), "%c<%c%c>%c", b, b, b, b);

		snprintf(entry, sizeof(entry), "ASP_V=%s", want);
		o.env = env;
		expect_stdout_shown(sb, "printf '%s' \"$ASP_V\"", &o, want, (size_t)wl);
	}
	ck_assert(!ws_exists("pwned"));
	asp_close(sb);
}
END_TEST

/* Every byte that cannot be in a variable name makes the name invalid: EINVAL, nothing runs. */
START_TEST(test_exec_env_name_every_byte)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;

	for (int b = 1; b < 256; b++) {
		char entry[32];
		const char *env[] = { entry, NULL };
		asp_exec_result *r = NULL;
		asp_error e = { 0 };
		int valid = (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9') || b == '_';
		int rc;

		if (b == '=')
			continue; /* "A=B=x" is the name A with the value "B=x" */
		snprintf(entry, sizeof(entry), "A%cB=x", b);
		o.env = env;
		rc = asp_exec(&r, sb, "touch env-name-ran", &o, &e);
		if (valid) {
			ck_assert_msg(rc == ASP_OK, "env name A%cB: %s", b, e.message);
			asp_exec_result_free(r);
			continue;
		}
		EXPECT_ERR(rc, e, ASP_EINVAL, "env[0]");
		ck_assert_ptr_null(r);
	}
	asp_close(sb);
}
END_TEST

/* Quote a byte string for the POSIX shell (single quotes). */
static void sq(char *out, const unsigned char *s, size_t n)
{
	size_t o = 0;

	out[o++] = '\'';
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\'') {
			memcpy(out + o, "'\\''", 4);
			o += 4;
		} else {
			out[o++] = (char)s[i];
		}
	}
	out[o++] = '\'';
	out[o] = '\0';
}

/* Every byte 1..255 in the command text reaches the shell unchanged. */
START_TEST(test_exec_command_every_byte)
{
	asp_sandbox *sb = sb_open(fx.config);

	for (int b = 1; b < 256; b++) {
		unsigned char word[3] = { 'a', (unsigned char)b, 'z' };
		char q[32], cmd[128], want[8];

		/* As a quoted word. */
		sq(q, word, 3);
		snprintf(cmd, sizeof(cmd), "printf '%%s' %s", q);
		expect_stdout_shown(sb, cmd, NULL, word, 3);
		/* Raw, in a here-document with a quoted delimiter (no expansion at all). */
		snprintf(cmd, sizeof(cmd), "cat <<'ASP_EOF'\nA%cZ\nASP_EOF", b);
		snprintf(want, sizeof(want), "A%cZ\n", b);
		expect_stdout_shown(sb, cmd, NULL, want, 4);
	}
	asp_close(sb);
}
END_TEST

/* Output with NUL bytes, and a command named like an option, pass through. */
START_TEST(test_exec_output_nul_and_dash_command)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_result *r;
	const unsigned char *d;
	size_t n;

	expect_stdout_shown(sb, "printf 'a\\000b\\000'", NULL, "a\0b\0", 4);
	r = run_shown(sb, "printf '\\000x' >&2", NULL);
	d = asp_exec_result_output(r, ASP_STDERR, &n);
	ck_assert_msg(n == 2 && d[0] == 0 && d[1] == 'x', "stderr [%s]", show(d, n));
	asp_exec_result_free(r);

	put_shown(sb, "dashcmd/sentinel", "keep", 4);
	{
		asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
		o.cwd = "dashcmd";
		r = run_shown(sb, "-rf *", &o); /* a command named "-rf": not found, nothing removed */
		ck_assert_int_eq(asp_exec_result_exit_code(r), 127);
		asp_exec_result_free(r);
	}
	ck_assert(ws_exists("dashcmd/sentinel"));
	asp_close(sb);
}
END_TEST

/* ---------------------------------------------------------------- leading dashes */

static const char *const dash_names[] = { "-rf", "--help", "-", "--", "-n", "-e", "-x y", "--version" };
#define N_DASH (sizeof(dash_names) / sizeof(dash_names[0]))

START_TEST(test_leading_dash_names)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_stat_info st;
	asp_error e = { 0 };
	asp_list *l = NULL;
	char path[256], moved[256];

	put_shown(sb, "dash/sentinel", "keep", 4);
	for (size_t i = 0; i < N_DASH; i++) {
		snprintf(path, sizeof(path), "dash/%s", dash_names[i]);
		put_shown(sb, path, dash_names[i], strlen(dash_names[i]));
		expect_content(sb, path, dash_names[i], strlen(dash_names[i]));
		ck_assert_int_eq(asp_stat(&st, sb, path, NULL, &e), ASP_OK);
		ck_assert_uint_eq(st.size, strlen(dash_names[i]));
	}
	ck_assert_int_eq(asp_list_dir(&l, sb, "dash", NULL, &e), ASP_OK);
	ck_assert_uint_eq(asp_list_count(l), N_DASH + 1);
	asp_list_free(l);

	/* The shell sees the same files (named through env; a redirection, since cat takes "-" as stdin). */
	o.cwd = "dash";
	for (size_t i = 0; i < N_DASH; i++) {
		char entry[64];
		const char *env[] = { entry, NULL };
		snprintf(entry, sizeof(entry), "F=%s", dash_names[i]);
		o.env = env;
		expect_stdout_shown(sb, "cat < \"$F\"", &o, dash_names[i], strlen(dash_names[i]));
	}

	/* Rename and remove each; the directory and its sentinel survive. */
	for (size_t i = 0; i < N_DASH; i++) {
		snprintf(path, sizeof(path), "dash/%s", dash_names[i]);
		snprintf(moved, sizeof(moved), "dash/%s.moved", dash_names[i]);
		ck_assert_msg(asp_rename(sb, path, moved, NULL, &e) == ASP_OK, "rename %s: %s", path, e.message);
		ck_assert_msg(asp_remove(sb, moved, 0, NULL, &e) == ASP_OK, "remove %s: %s", moved, e.message);
	}
	ck_assert(ws_exists("dash/sentinel"));

	/* Directories named like rm's options, removed recursively: only they go. */
	put_shown(sb, "dash/-rf/inner/file", "x", 1);
	put_shown(sb, "dash/--no-preserve-root/file", "x", 1);
	ck_assert_int_eq(asp_remove(sb, "dash/-rf", ASP_REMOVE_RECURSIVE, NULL, &e), ASP_OK);
	ck_assert_int_eq(asp_remove(sb, "dash/--no-preserve-root", ASP_REMOVE_RECURSIVE, NULL, &e), ASP_OK);
	ck_assert(!ws_exists("dash/-rf"));
	ck_assert(!ws_exists("dash/--no-preserve-root"));
	ck_assert(ws_exists("dash/sentinel"));
	asp_close(sb);
}
END_TEST

/* An exec cwd that looks like an option (relative, so it resolves under the workspace). */
START_TEST(test_exec_cwd_leading_dash)
{
	static const char *const cwds[] = { "-x", "--help", "-", "-P", "-L" };
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_error e = { 0 };

	for (size_t i = 0; i < sizeof(cwds) / sizeof(cwds[0]); i++) {
		char dir[64], want[PATH_MAX];
		snprintf(dir, sizeof(dir), "cwddash/%s", cwds[i]);
		ck_assert_int_eq(asp_mkdir(sb, dir, 0, ASP_MKDIR_PARENTS, NULL, &e), ASP_OK);
		snprintf(want, sizeof(want), "%s/%s\n", fx.workspace, dir);
		o.cwd = dir;
		expect_stdout_shown(sb, "pwd", &o, want, strlen(want));
	}
	/* A bare relative "-x" too. */
	ck_assert_int_eq(asp_mkdir(sb, "-x", 0, ASP_MKDIR_PARENTS, NULL, &e), ASP_OK);
	o.cwd = "-x";
	{
		char want[PATH_MAX];
		snprintf(want, sizeof(want), "%s/-x\n", fx.workspace);
		expect_stdout_shown(sb, "pwd", &o, want, strlen(want));
	}
	asp_close(sb);
}
END_TEST

/* ---------------------------------------------------------------- names */

/* A file name holding each byte 1..255 but '/', plus awkward whole names. */
START_TEST(test_names_every_byte)
{
	static const char *const awkward[] = {
		"\n", "\r\n", "\t", " ", "  two  ", "'", "\"", "\\", "`", "$HOME", "$(id)", "*", "?", "[a]",
		"~", "~root", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\x80", "\xff\xfe", "caf\xc3\xa9",
		"a\nb\nc", "end\n", ".hidden", "...", "-", "semi;colon", "a|b", "a&b", "<x>", "#hash",
	};
	asp_sandbox *sb = sb_open(fx.config);
	asp_error e = { 0 };
	asp_list *l = NULL;
	char path[64];
	int seen[256] = { 0 };
	size_t i, n_awk = sizeof(awkward) / sizeof(awkward[0]);

	for (int b = 1; b < 256; b++) {
		if (b == '/')
			continue;
		snprintf(path, sizeof(path), "bytes/n%cn", b);
		put_shown(sb, path, path, strlen(path));
	}
	ck_assert_int_eq(asp_list_dir(&l, sb, "bytes", NULL, &e), ASP_OK);
	ck_assert_uint_eq(asp_list_count(l), 254);
	for (i = 0; i < asp_list_count(l); i++) {
		const char *name = asp_list_name(l, i);
		ck_assert_msg(strlen(name) == 3 && name[0] == 'n' && name[2] == 'n', "odd entry [%s]",
			      show(name, strlen(name)));
		seen[(unsigned char)name[1]]++;
	}
	asp_list_free(l);
	for (int b = 1; b < 256; b++) {
		ck_assert_msg(seen[b] == (b == '/' ? 0 : 1), "byte 0x%02x listed %d times", b, seen[b]);
		if (b == '/')
			continue;
		snprintf(path, sizeof(path), "bytes/n%cn", b);
		expect_content(sb, path, path, strlen(path));
	}

	for (i = 0; i < n_awk; i++) {
		snprintf(path, sizeof(path), "awk/%s", awkward[i]);
		put_shown(sb, path, awkward[i], strlen(awkward[i]));
		expect_content(sb, path, awkward[i], strlen(awkward[i]));
	}
	ck_assert_int_eq(asp_list_dir(&l, sb, "awk", NULL, &e), ASP_OK);
	ck_assert_uint_eq(asp_list_count(l), n_awk);
	asp_list_free(l);
	/* The shell agrees on every name. */
	{
		asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
		o.cwd = "awk";
		for (i = 0; i < n_awk; i++) {
			char entry[64];
			const char *env[] = { entry, NULL };
			snprintf(entry, sizeof(entry), "F=%s", awkward[i]);
			o.env = env;
			expect_stdout_shown(sb, "cat < \"$F\"", &o, awkward[i], strlen(awkward[i]));
		}
	}
	ck_assert_int_eq(asp_remove(sb, "bytes", ASP_REMOVE_RECURSIVE, NULL, &e), ASP_OK);
	ck_assert_int_eq(asp_remove(sb, "awk", ASP_REMOVE_RECURSIVE, NULL, &e), ASP_OK);
	ck_assert(!ws_exists("bytes") && !ws_exists("awk"));
	ck_assert(!ws_exists("pwned"));
	asp_close(sb);
}
END_TEST

/* ---------------------------------------------------------------- long names and paths */

static char *repeat_char(char c, size_t n)
{
	char *s = malloc(n + 1);

	ck_assert_ptr_nonnull(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* A relative path of `total` bytes made of `comp`-byte components. */
static char *nested_path(size_t total, size_t comp)
{
	char *s = malloc(total + 1);
	size_t o = 0;

	ck_assert_ptr_nonnull(s);
	while (o < total) {
		size_t k = comp;
		if (o) {
			s[o++] = '/';
			if (o == total) {
				s[o - 1] = 'y';
				break;
			}
		}
		if (k > total - o)
			k = total - o;
		memset(s + o, 'd', k);
		o += k;
	}
	s[total] = '\0';
	return s;
}

/* A 300-byte name is more than any Linux file system allows: a clear EINVAL everywhere. */
START_TEST(test_name_too_long)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_exec_options xo = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_stat_info st;
	asp_error e = { 0 };
	asp_list *l = NULL;
	unsigned char *d = NULL;
	size_t n;
	char *name = repeat_char('n', 300), *ok = repeat_char('k', 255), path[600];
	int rc;

	snprintf(path, sizeof(path), "long/%s", name);
	ck_assert_int_eq(asp_mkdir(sb, "long", 0, ASP_MKDIR_PARENTS, NULL, &e), ASP_OK);
	rc = asp_write(sb, path, "x", 1, NULL, &e);
	EXPECT_ERR(rc, e, ASP_EINVAL, "file name too long");
	wo.flags |= ASP_WRITE_IN_PLACE;
	rc = asp_write(sb, path, "x", 1, &wo, &e);
	EXPECT_ERR(rc, e, ASP_EINVAL, "file name too long");
	rc = asp_read(&d, &n, sb, path, 0, ASP_READ_ALL, NULL, &e);
	EXPECT_ERR(rc, e, ASP_EINVAL, "file name too long");
	ck_assert_ptr_null(d);
	rc = asp_stat(&st, sb, path, NULL, &e);
	EXPECT_ERR(rc, e, ASP_EINVAL, "file name too long");
	rc = asp_mkdir(sb, path, 0, 0, NULL, &e);
	EXPECT_ERR(rc, e, ASP_EINVAL, "file name too long");
	rc = asp_mkdir(sb, path, 0, ASP_MKDIR_PARENTS, NULL, &e);
	EXPECT_ERR(rc, e, ASP_EINVAL, "file name too long");
	rc = asp_list_dir(&l, sb, path, NULL, &e);
	EXPECT_ERR(rc, e, ASP_EINVAL, "file name too long");
	rc = asp_remove(sb, path, ASP_REMOVE_RECURSIVE, NULL, &e);
	EXPECT_ERR(rc, e, ASP_EINVAL, "file name too long");
	xo.cwd = path;
	rc = asp_exec(&r, sb, "touch cwd-too-long-ran", &xo, &e);
	EXPECT_ERR(rc, e, ASP_ENOENT, "too long");
	ck_assert(!ws_exists("cwd-too-long-ran"));

	/* 255 bytes is the limit, and works. */
	snprintf(path, sizeof(path), "long/%s", ok);
	put_shown(sb, path, "ok", 2);
	expect_content(sb, path, "ok", 2);
	ck_assert_int_eq(asp_remove(sb, path, 0, NULL, &e), ASP_OK);
	free(name);
	free(ok);
	asp_close(sb);
}
END_TEST

/* A 4000-byte path of nested directories works end to end. */
START_TEST(test_path_4000_bytes)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_options xo = ASP_EXEC_OPTIONS_INIT;
	asp_stat_info st;
	asp_error e = { 0 };
	asp_list *l = NULL;
	char *rel = nested_path(4000 - strlen(fx.workspace) - 1 - strlen("deep/"), 100), *path, *dir;
	size_t plen;

	ck_assert_int_gt(asprintf(&path, "deep/%s", rel), 0);
	plen = strlen(fx.workspace) + 1 + strlen(path);
	ck_assert_uint_eq(plen, 4000);
	put_shown(sb, path, "deep content", 12);
	expect_content(sb, path, "deep content", 12);
	ck_assert_int_eq(asp_stat(&st, sb, path, NULL, &e), ASP_OK);
	ck_assert_uint_eq(st.size, 12);
	dir = strdup(path);
	*strrchr(dir, '/') = '\0';
	ck_assert_msg(asp_list_dir(&l, sb, dir, NULL, &e) == ASP_OK, "list: %s", e.message);
	ck_assert_uint_eq(asp_list_count(l), 1);
	asp_list_free(l);
	/* The shell can go there too. */
	xo.cwd = dir;
	expect_stdout_shown(sb, "cat ./*", &xo, "deep content", 12);
	ck_assert_int_eq(asp_remove(sb, "deep", ASP_REMOVE_RECURSIVE, NULL, &e), ASP_OK);
	ck_assert(!ws_exists("deep"));
	free(rel);
	free(path);
	free(dir);
	asp_close(sb);
}
END_TEST

/* Longer than PATH_MAX (5000 bytes, 64 KiB, 300 KiB): a clean error, never a crash or a hang. */
START_TEST(test_path_longer_than_path_max)
{
	static const size_t sizes[] = { 5000, 64 * 1024, 300 * 1024 };
	asp_sandbox *sb = sb_open(fx.config);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char *path = nested_path(sizes[i], 200);
		asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
		asp_exec_options xo = ASP_EXEC_OPTIONS_INIT;
		asp_exec_result *r = NULL;
		asp_stat_info st;
		asp_error e = { 0 };
		unsigned char *d = NULL;
		size_t n;
		int rc;

		wo.flags |= ASP_WRITE_PARENTS;
		rc = asp_write(sb, path, "x", 1, &wo, &e);
		EXPECT_ERR(rc, e, ASP_EINVAL, "too long");
		rc = asp_read(&d, &n, sb, path, 0, ASP_READ_ALL, NULL, &e);
		EXPECT_ERR(rc, e, ASP_EINVAL, "too long");
		rc = asp_stat(&st, sb, path, NULL, &e);
		EXPECT_ERR(rc, e, ASP_EINVAL, "too long");
		xo.cwd = path;
		rc = asp_exec(&r, sb, "true", &xo, &e);
		ck_assert_msg(rc == ASP_ENOENT || rc == ASP_EINVAL, "exec with a %zu-byte cwd: %s: %s",
			      sizes[i], asp_error_name(rc), e.message);
		ck_assert_ptr_null(r);
		free(path);
	}
	/* The handle still works, and nothing was created. */
	expect_stdout_shown(sb, "echo fine", NULL, "fine\n", 5);
	ck_assert(!ws_exists("dddd"));
	asp_close(sb);
}
END_TEST

/*
 * An exec request has a size limit (libssh2 cannot send one over about
 * 34.7 KB): up to 32 KiB of shell text works; more is a clear ASP_EINVAL
 * that points to stdin_data, sent before anything reaches the server.
 */
START_TEST(test_exec_long_command)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	char *cmd = malloc(64 * 1024), *val = repeat_char('v', 40000), *env_entry;
	const char *env[2];
	size_t n;
	int rc;

	/* 30000 bytes of command text: fine, exactly. */
	n = (size_t)sprintf(cmd, "printf '%%s' '");
	memset(cmd + n, 'c', 30000);
	strcpy(cmd + n + 30000, "' | wc -c");
	expect_stdout_shown(sb, cmd, NULL, "30000\n", 6);

	/* 40000 bytes: ASP_EINVAL, and the handle keeps working. */
	memset(cmd + n, 'c', 40000);
	strcpy(cmd + n + 40000, "' > long-cmd-ran");
	rc = asp_exec(&r, sb, cmd, NULL, &e);
	EXPECT_ERR(rc, e, ASP_EINVAL, "stdin_data");
	ck_assert_ptr_null(r);
	ck_assert(!ws_exists("long-cmd-ran"));

	/* The same through an env value. */
	ck_assert_int_gt(asprintf(&env_entry, "BIG=%s", val), 0);
	env[0] = env_entry;
	env[1] = NULL;
	o.env = env;
	rc = asp_exec(&r, sb, "touch long-env-ran", &o, &e);
	EXPECT_ERR(rc, e, ASP_EINVAL, "stdin_data");
	ck_assert(!ws_exists("long-env-ran"));

	/* Long text goes through stdin instead. */
	o.env = NULL;
	o.stdin_data = (const unsigned char *)val;
	o.stdin_len = 40000;
	expect_stdout_shown(sb, "wc -c", &o, "40000\n", 6);
	free(env_entry);
	free(val);
	free(cmd);
	asp_close(sb);
}
END_TEST

/* ---------------------------------------------------------------- sizes and offsets */

START_TEST(test_zero_byte_files)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_stat_info st;
	asp_error e = { 0 };
	asp_list *l = NULL;

	put_shown(sb, "empty/a", NULL, 0);
	put_shown(sb, "empty/b", "", 0);
	wo.flags |= ASP_WRITE_IN_PLACE;
	ck_assert_int_eq(asp_write(sb, "empty/c", NULL, 0, &wo, &e), ASP_OK);
	/* Shrinking a file to nothing, both ways. */
	put_shown(sb, "empty/d", "not yet empty", 13);
	put_shown(sb, "empty/d", NULL, 0);
	put_shown(sb, "empty/e", "not yet empty", 13);
	ck_assert_int_eq(asp_write(sb, "empty/e", "", 0, &wo, &e), ASP_OK);
	for (const char *p = "abcde"; *p; p++) {
		char path[16];
		snprintf(path, sizeof(path), "empty/%c", *p);
		expect_range(sb, path, 0, ASP_READ_ALL, "", 0);
		expect_range(sb, path, 10, 5, "", 0);
		expect_range(sb, path, 0, 0, "", 0);
		ck_assert_int_eq(asp_stat(&st, sb, path, NULL, &e), ASP_OK);
		ck_assert_uint_eq(st.size, 0);
		ck_assert_uint_eq(st.type, ASP_TYPE_FILE);
	}
	ck_assert_int_eq(asp_list_dir(&l, sb, "empty", NULL, &e), ASP_OK);
	ck_assert_uint_eq(asp_list_count(l), 5);
	for (size_t i = 0; i < 5; i++) {
		ck_assert_int_eq(asp_list_stat(&st, l, i), ASP_OK);
		ck_assert_uint_eq(st.size, 0);
	}
	asp_list_free(l);
	expect_stdout_shown(sb, "cat empty/a empty/b empty/c empty/d empty/e | wc -c", NULL, "0\n", 2);
	asp_close(sb);
}
END_TEST

/* Offsets near 2^63 and limits near 2^64: no overflow, just the bytes that exist. */
START_TEST(test_read_extreme_offsets)
{
	const uint64_t i63 = (uint64_t)INT64_MAX, u64 = UINT64_MAX;
	asp_sandbox *sb = sb_open(fx.config);

	put_shown(sb, "edge/ten", "0123456789", 10);
	expect_range(sb, "edge/ten", i63 - 5, 10, "", 0);
	expect_range(sb, "edge/ten", i63, u64 - 1, "", 0);
	expect_range(sb, "edge/ten", i63 + 1, 1, "", 0);
	expect_range(sb, "edge/ten", i63 + 1, ASP_READ_ALL, "", 0);
	expect_range(sb, "edge/ten", u64 - 1, u64, "", 0);
	expect_range(sb, "edge/ten", u64, u64, "", 0);
	expect_range(sb, "edge/ten", u64, 1, "", 0);
	expect_range(sb, "edge/ten", 3, u64 - 1, "3456789", 7);   /* offset + limit wraps */
	expect_range(sb, "edge/ten", 3, u64 - 2, "3456789", 7);   /* ... to exactly 2^64 */
	expect_range(sb, "edge/ten", 2, u64 - 2, "23456789", 8);  /* ... to 2^64 - 1 */
	expect_range(sb, "edge/ten", 0, i63 + 1, "0123456789", 10);
	expect_range(sb, "edge/ten", 9, 1, "9", 1);
	expect_range(sb, "edge/ten", 10, 5, "", 0);
	expect_range(sb, "edge/ten", 11, u64 - 11, "", 0);
	expect_range(sb, "edge/ten", 4294967296ull, 10, "", 0);
	asp_close(sb);
}
END_TEST

/* A sparse 5 GiB file: sizes and offsets past 2^32. */
START_TEST(test_sparse_5gib)
{
	const uint64_t size = 5 * GiB;
	static unsigned char zeros[16];
	asp_sandbox *sb = sb_open(fx.config);
	asp_stat_info st;
	asp_error e = { 0 };
	asp_list *l = NULL;
	asp_exec_result *r;

	ck_assert_int_eq(asp_mkdir(sb, "sparse", 0, ASP_MKDIR_PARENTS, NULL, &e), ASP_OK);
	r = run_shown(sb, "truncate -s 5G sparse/big && printf 0123456789 | "
		    "dd of=sparse/big bs=1 seek=$((5*1024*1024*1024-10)) conv=notrunc status=none && "
		    "printf ab | dd of=sparse/big bs=1 seek=$((4*1024*1024*1024-1)) conv=notrunc status=none",
		NULL);
	ck_assert_msg(asp_exec_result_exit_code(r) == 0, "could not make the sparse file");
	asp_exec_result_free(r);

	ck_assert_int_eq(asp_stat(&st, sb, "sparse/big", NULL, &e), ASP_OK);
	ck_assert_uint_eq(st.size, size);
	ck_assert_int_eq(asp_list_dir(&l, sb, "sparse", NULL, &e), ASP_OK);
	ck_assert_int_eq(asp_list_stat(&st, l, 0), ASP_OK);
	ck_assert_uint_eq(st.size, size);
	asp_list_free(l);

	expect_range(sb, "sparse/big", size - 10, 100, "0123456789", 10);
	expect_range(sb, "sparse/big", size - 10, ASP_READ_ALL, "0123456789", 10);
	expect_range(sb, "sparse/big", size - 10, UINT64_MAX - 1, "0123456789", 10);
	expect_range(sb, "sparse/big", size - 3, 2, "78", 2);
	expect_range(sb, "sparse/big", size, 100, "", 0);
	expect_range(sb, "sparse/big", size + 1, ASP_READ_ALL, "", 0);
	expect_range(sb, "sparse/big", (uint64_t)INT64_MAX - 1, UINT64_MAX, "", 0);
	/* Across the 4 GiB boundary: "a" at 2^32 - 1, "b" at 2^32. */
	expect_range(sb, "sparse/big", 4 * GiB - 2, 4, "\0ab\0", 4);
	expect_range(sb, "sparse/big", 4 * GiB + 5, 16, zeros, 16);
	expect_range(sb, "sparse/big", 2 * GiB - 8, 16, zeros, 16);
	ck_assert_int_eq(asp_remove(sb, "sparse", ASP_REMOVE_RECURSIVE, NULL, &e), ASP_OK);
	asp_close(sb);
}
END_TEST

/* ---------------------------------------------------------------- suite */

Suite *suite_hostile(void)
{
	TCase *slow;
	Suite *s = suite_create("hostile");
	TCase *tc = tcase_create("hostile");

	tcase_add_unchecked_fixture(tc, hostile_setup, hostile_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_exec_env_name_every_byte);
	tcase_add_test(tc, test_exec_output_nul_and_dash_command);
	tcase_add_test(tc, test_leading_dash_names);
	tcase_add_test(tc, test_exec_cwd_leading_dash);
	tcase_add_test(tc, test_names_every_byte);
	tcase_add_test(tc, test_name_too_long);
	tcase_add_test(tc, test_path_4000_bytes);
	tcase_add_test(tc, test_path_longer_than_path_max);
	tcase_add_test(tc, test_exec_long_command);
	tcase_add_test(tc, test_zero_byte_files);
	tcase_add_test(tc, test_read_extreme_offsets);
	tcase_add_test(tc, test_sparse_5gib);
	suite_add_tcase(s, tc);
	slow = slow_case(s, "hostile-slow", FIXTURE_UNCHECKED, hostile_setup, hostile_teardown, 120);
	tcase_add_test(slow, test_exec_env_value_every_byte);
	tcase_add_test(slow, test_exec_command_every_byte);
	return s;
}
