/*
 * test_exec.c - exec against a real sshd: exit codes, signals, streams, stdin,
 * env, cwd, exact command text, large output, output cap, streaming, cancel,
 * output taken in while the other stream was read.
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
#include "exec.h"
#include "ssh.h"
#include "fixture/fixture.h"
#include "helpers.h"

#define MiB (1024u * 1024u)

static fx_sshd fx;

/* ---------------------------------------------------------------- fixture */

static void exec_setup(void)
{
	suite_sshd_start(&fx);
}

static void exec_teardown(void)
{
	fx_sshd_stop(&fx);
}

/* A local path inside this suite's workspace. */
static const char *ws(const char *rel)
{
	return ws_path(fx.workspace, rel);
}

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
	asp_sandbox *sb = sb_open(fx.config);
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
	asp_sandbox *sb = sb_open(fx.config);
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
	asp_sandbox *sb = sb_open(fx.config);
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
	asp_sandbox *sb = sb_open(fx.config);
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
	asp_sandbox *sb = sb_open(fx.config);
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
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_options zero = { .version = ASP_EXEC_OPTIONS_VERSION, .kill_after_ms = 60000 };
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
	asp_sandbox *sb = sb_open(fx.config);
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
	assert_not_injected(fx.workspace, "env-pwned-");
	asp_close(sb);
}
END_TEST

START_TEST(test_exec_env_invalid)
{
	static const char *const bad[] = {
		"1ABC=x", "A-B=x", "=x", "NOEQUALS", "A B=x", "A;touch env-bad-ran=x", "É=x",
	};
	asp_sandbox *sb = sb_open(fx.config);
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
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	char want[PATH_MAX];

	mkdir_ok(sb, name, 0755, 1);
	ck_assert(S_ISDIR(local_lstat(ws(name)).st_mode));
	snprintf(want, sizeof(want), "%s/%s\n", fx.workspace, name);

	o.cwd = name;
	expect_stdout_opts(sb, "pwd", &o, want, strlen(want));
	o.cwd = ws(name);
	expect_stdout_opts(sb, "pwd", &o, want, strlen(want));
	assert_not_injected(fx.workspace, "cwd-pwned-");
	asp_close(sb);
}
END_TEST

START_TEST(test_exec_cwd_resolution)
{
	asp_sandbox *sb = sb_open(fx.config);
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
	asp_sandbox *sb = sb_open(fx.config);

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
	asp_sandbox *sb = sb_open(fx.config);
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
	asp_sandbox *sb = sb_open(fx.config);
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
	asp_sandbox *sb = sb_open(fx.config);
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
	asp_sandbox *sb = sb_open(fx.config);
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

/* ============================================================ late output */

/*
 * libssh2 queues what one read takes in from the socket, whichever stream
 * and channel it is for. The hook (asp__exec_stream_gap) sleeps once
 * between the reads of a channel's two streams, so that the second read
 * takes in what the first stream is waiting for: the rest of a command's
 * stdout, or all of a helper script's stderr, with the channel's EOF.
 * Nothing more comes on the socket after that: a loop that then slept on
 * the socket would sleep until its time limit (the command's timeout, the
 * reply timeout; keepalives are an hour apart here) and only then find
 * what it had. asp__ssh_waits_ran_out counts waits that slept until their
 * limit: none may during these calls.
 *
 * A command's loop makes progress in its first round whatever comes (it
 * sends the EOF of an empty stdin), so the sleep is in its second round,
 * and lasts until the command is done (it leaves a mark file); a helper
 * script's loop can wait in its first round.
 */
static int gap_site, gap_round, gap_rounds;
static const char *gap_mark;

static void gap_once(int helper)
{
	if (helper != gap_site || gap_rounds <= 0 || ++gap_round < gap_rounds)
		return;
	gap_rounds = 0;
	for (int i = 0; gap_mark && i < 200 && access(gap_mark, F_OK); i++)
		fx_sleep_ms(50);
	fx_sleep_ms(gap_mark ? 100 : 300);
}

static void gap_arm(int helper, int round, const char *mark)
{
	gap_site = helper;
	gap_round = 0;
	gap_rounds = round;
	gap_mark = mark;
	asp__exec_stream_gap(gap_once);
}

static asp_sandbox *open_quiet_keepalive(void)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;

	o.config_path = fx.config;
	o.keepalive_s = 3600;
	o.io_timeout_ms = 20000;
	return sb_open_opts(&o);
}

/* A command's stdout arrives while its stderr is read. */
START_TEST(test_exec_stdout_taken_in_with_stderr)
{
	asp_sandbox *sb = open_quiet_keepalive();
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	const char *mark = ws("gap-mark");

	o.kill_after_ms = 20000;
	for (int i = 0; i < 3; i++) {
		asp_exec_result *r;
		unsigned long before;

		unlink(mark);
		gap_arm(0, 2, mark);
		before = asp__ssh_waits_ran_out();
		r = run_opts(sb, "sleep 0.3; printf late; : > gap-mark", &o);
		ck_assert_msg(!gap_rounds, "the command's loop did not go round twice");
		ck_assert_msg(asp__ssh_waits_ran_out() == before, "run %d: the output was there, yet the call "
			      "slept on the socket until its time limit", i);
		ck_assert(!asp_exec_result_timed_out(r));
		assert_exited(r, 0);
		assert_stream(r, ASP_STDOUT, "late", 4);
		asp_exec_result_free(r);
	}
	asp__exec_stream_gap(NULL);
	asp_close(sb);
}
END_TEST

/*
 * A helper script's stderr arrives while its stdout is read: the check run
 * after a command that ended by `exec` (it says "gone" on stderr).
 */
START_TEST(test_exec_helper_stderr_taken_in_with_stdout)
{
	asp_sandbox *sb = open_quiet_keepalive();

	for (int i = 0; i < 3; i++) {
		asp_exec_result *r = NULL;
		asp_error e = { 0 };
		unsigned long before;
		int rc;

		gap_arm(1, 1, NULL);
		before = asp__ssh_waits_ran_out();
		rc = asp_exec(&r, sb, "exec true", NULL, &e);
		ck_assert_msg(!gap_rounds, "the helper script's loop did not run");
		ck_assert_msg(rc == ASP_OK, "run %d: %s: %s", i, asp_error_name(rc), e.message);
		ck_assert_msg(asp__ssh_waits_ran_out() == before, "run %d: the helper's output was there, yet "
			      "the call slept on the socket until its time limit", i);
		assert_exited(r, 0);
		asp_exec_result_free(r);
	}
	asp__exec_stream_gap(NULL);
	asp_close(sb);
}
END_TEST

/* ================================================================ suite */

Suite *suite_exec(void)
{
	Suite *s = suite_create("exec");
	TCase *tc = tcase_create("exec");

	tcase_add_unchecked_fixture(tc, exec_setup, exec_teardown);
	tcase_set_timeout(tc, 60);
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
	tcase_add_test(tc, test_exec_stdout_taken_in_with_stderr);
	tcase_add_test(tc, test_exec_helper_stderr_taken_in_with_stdout);
	suite_add_tcase(s, tc);
	return s;
}
