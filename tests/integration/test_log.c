/*
 * test_log.c - the trace (asp_open_options.log_fn, $ASP_DEBUG, asp-exec -v):
 * what a connection and each call say, the level filter, an older options
 * version, and what the trace never holds (key text, passphrase, user name).
 * The real sshd fixture; the trace is collected by helpers.c's trace_on.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "asp.h"
#include "cli_run.h"
#include "helpers.h"

/* The trace holds `needle`; else fail showing the whole trace. */
#define ASSERT_TRACE(needle)                                                                  \
	ck_assert_msg(strstr(trace_text(), (needle)), "line %d: the trace lacks \"%s\":\n%s", \
		      __LINE__, (needle), trace_text())
#define ASSERT_NO_TRACE(needle)                                                               \
	ck_assert_msg(!strstr(trace_text(), (needle)), "line %d: the trace shows \"%s\":\n%s", \
		      __LINE__, (needle), trace_text())

static asp_sandbox *open_traced(asp_open_options *o)
{
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	int rc;

	o->config_path = fx.config;
	trace_on(o);
	rc = asp_open(&sb, o, &e);
	ck_assert_msg(rc == ASP_OK, "asp_open: %s: %s", asp_error_name(rc), e.message);
	return sb;
}

/* Every line is "LEVEL: text": no raw control byte, no line without a level. */
static void assert_lines_well_formed(void)
{
	char *copy = strdup(trace_text()), *save = NULL;

	ck_assert_ptr_nonnull(copy);
	for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		ck_assert_msg(!strncmp(l, "debug: ", 7) || !strncmp(l, "info: ", 6) || !strncmp(l, "warn: ", 6),
			      "a line without a level: %s", l);
		ck_assert_msg(text_is_clean(l), "a line with raw control bytes: %s", l);
	}
	free(copy);
}

/* Connect (host, port, time, host key, trust, auth), pool growth, and each call's route and result. */
START_TEST(test_trace_connect_and_calls)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_exec_result *r;
	asp_sandbox *sb;
	char want[600], fp[128];

	o.file_transport = ASP_FILES_SFTP;
	sb = open_traced(&o);
	snprintf(want, sizeof(want), "info: connected to 127.0.0.1:%d in ", fx.port);
	ASSERT_TRACE(want);
	ck_assert_int_eq(fx_host_fingerprint(&fx, fp, sizeof(fp)), 0);
	snprintf(want, sizeof(want), "host key ssh-ed25519 %s (pinned), auth publickey (connection.identity)", fp);
	ASSERT_TRACE(want);
	ASSERT_TRACE("info: pool: opening connection 1 of at most 4");

	put(sb, "traced.txt", "hello");
	assert_content(sb, "traced.txt", "hello", 5);
	snprintf(want, sizeof(want), "debug: write %s/traced.txt: ok in ", fx.workspace);
	ASSERT_TRACE(want);
	snprintf(want, sizeof(want), "debug: read %s/traced.txt: ok in ", fx.workspace);
	ASSERT_TRACE(want);
	ASSERT_TRACE(" ms via sftp\n");
	assert_missing(sb, "no-such-file");
	snprintf(want, sizeof(want), "debug: stat %s/no-such-file: ASP_ENOENT in ", fx.workspace);
	ASSERT_TRACE(want);

	r = run(sb, "echo secret-command-text; exit 3");
	asp_exec_result_free(r);
	snprintf(want, sizeof(want), "debug: exec in %s: ok in ", fx.workspace);
	ASSERT_TRACE(want);
	ASSERT_TRACE(" ms via exec channel\n");
	ASSERT_TRACE("debug: exec: exit status 3, signal 0, 20 bytes of stdout, 0 of stderr, ran ");
	/* A command may hold a secret: its text is never traced. */
	ASSERT_NO_TRACE("secret-command-text");
	asp_close(sb);
	ASSERT_TRACE("info: closing connection to 127.0.0.1:");
	assert_lines_well_formed();
}
END_TEST

/* Shell commands as the file route: the trace says so. */
START_TEST(test_trace_shell_route)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb;
	char want[600];

	o.file_transport = ASP_FILES_EXEC;
	sb = open_traced(&o);
	put(sb, "shell.txt", "x");
	snprintf(want, sizeof(want), "debug: write %s/shell.txt: ok in ", fx.workspace);
	ASSERT_TRACE(want);
	ASSERT_TRACE(" ms via shell\n");
	ASSERT_NO_TRACE("via sftp");
	asp_close(sb);
}
END_TEST

/* log_level filters; a level that is not one is refused, naming the field. */
START_TEST(test_trace_levels)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };

	o.log_level = ASP_LOG_INFO;
	sb = open_traced(&o);
	put(sb, "levels.txt", "x");
	asp_close(sb);
	ASSERT_TRACE("info: connected to ");
	ASSERT_NO_TRACE("debug: ");

	memset(&o, 0, sizeof(o));
	ck_assert_int_eq(asp_open_options_init(&o, ASP_OPEN_OPTIONS_VERSION), ASP_OK);
	o.log_level = ASP_LOG_WARN;
	sb = open_traced(&o);
	put(sb, "levels.txt", "y");
	asp_close(sb);
	ck_assert_msg(!strcmp(trace_text(), ""), "warn only, and nothing went wrong, yet:\n%s", trace_text());

	memset(&o, 0, sizeof(o));
	ck_assert_int_eq(asp_open_options_init(&o, ASP_OPEN_OPTIONS_VERSION), ASP_OK);
	o.config_path = fx.config;
	o.log_level = ASP_LOG_WARN + 1;
	ck_assert_int_eq(asp_open(&sb, &o, &e), ASP_EINVAL);
	ck_assert_msg(strstr(e.message, "asp_open_options.log_level"), "%s", e.message);
}
END_TEST

/*
 * A dead idle connection is replaced, and the trace says so: closed (by the
 * pool's maintenance thread, or found dead at checkout: warn), then a new connect.
 */
START_TEST(test_trace_reconnect)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb;

	sb = open_traced(&o);
	put(sb, "before.txt", "x");
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	put(sb, "after.txt", "y");
	asp_close(sb);
	{
		const char *first = strstr(trace_text(), "info: connected to "), *second, *closed;

		ck_assert_ptr_nonnull(first);
		second = strstr(first + 1, "info: connected to ");
		closed = strstr(first, "info: closing connection to ");
		ck_assert_msg(second && closed && closed < second, "no close and reconnect:\n%s", trace_text());
	}
}
END_TEST

/* A failed connect is a warn line, with the reason the error gives. */
START_TEST(test_trace_connect_failure)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	char cfg[400], want[300];
	int port = fx_free_port();

	ck_assert_int_gt(port, 0);
	snprintf(cfg, sizeof(cfg), "%s/closed.asp.json", fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .port = port }), 0);
	o.config_path = cfg;
	trace_on(&o);
	ck_assert_int_eq(asp_open(&sb, &o, &e), ASP_ECONNECT);
	snprintf(want, sizeof(want), "warn: connect to 127.0.0.1:%d failed after ", port);
	ASSERT_TRACE(want);
}
END_TEST

/*
 * A caller built against version 2 of asp_open_options: the bytes after
 * version 2's size are not read (here garbage that would crash as a
 * callback), and no trace is made.
 */
START_TEST(test_trace_older_options_version)
{
	unsigned char *mem = malloc(sizeof(asp_open_options));
	asp_open_options *o = (asp_open_options *)mem;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	size_t v2 = offsetof(asp_open_options, log_fn);

	ck_assert_ptr_nonnull(mem);
	memset(mem, 0xa5, sizeof(*o));
	ck_assert_int_eq(asp_open_options_init(o, 2), ASP_OK);
	for (size_t i = v2; i < sizeof(*o); i++)
		ck_assert_msg(mem[i] == 0xa5, "asp_open_options_init(2) wrote byte %zu, past version 2", i);
	o->config_path = fx.config;
	unsetenv("ASP_DEBUG");
	ck_assert_msg(asp_open(&sb, o, &e) == ASP_OK, "a version 2 caller: %s", e.message);
	put(sb, "v2.txt", "x");
	asp_close(sb);
	free(mem);
}
END_TEST

/*
 * Nothing secret: a passphrase-protected key handed over as text in an
 * environment variable, and the user name (a provider may put a token
 * there). The positive control: the trace did say connect and auth.
 */
START_TEST(test_trace_no_secrets)
{
	static const char pass[] = "trace-passphrase-7f3a";
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	char key[400], cfg[400], *text, *line, *save = NULL;

	snprintf(key, sizeof(key), "%s/id_traced", fx.dir);
	ck_assert_int_eq(fx_run("ssh-keygen -q -t ed25519 -N '%s' -C '' -f '%s' </dev/null >/dev/null && "
				"cat '%s.pub' >> '%s/authorized_keys'", pass, key, key, fx.dir), 0);
	ck_assert_ptr_nonnull(text = fx_read_file(key, NULL));
	setenv("ASP_TRACE_KEY", text, 1);
	setenv("ASP_IDENTITY_PASSPHRASE", pass, 1);
	snprintf(cfg, sizeof(cfg), "%s/secret.asp.json", fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = "ASP_TRACE_KEY" }), 0);
	o.config_path = cfg;
	trace_on(&o);
	ck_assert_msg(asp_open(&sb, &o, &e) == ASP_OK, "%s", e.message);
	put(sb, "s.txt", "x");
	asp_close(sb);
	unsetenv("ASP_TRACE_KEY");
	unsetenv("ASP_IDENTITY_PASSPHRASE");
	ASSERT_TRACE("auth publickey (connection.identity)");
	ASSERT_NO_TRACE(pass);
	ASSERT_NO_TRACE("-----BEGIN");
	ASSERT_NO_TRACE("PRIVATE KEY");
	ASSERT_NO_TRACE(fx.user);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		for (size_t i = 0; line[0] != '-' && i + 16 <= strlen(line); i += 8) {
			char piece[17];

			memcpy(piece, line + i, 16);
			piece[16] = '\0';
			ASSERT_NO_TRACE(piece);
		}
	free(text);
}
END_TEST

/* ASP_DEBUG=1 with no callback: the library writes the trace to stderr ("asp: LEVEL: ..."). */
START_TEST(test_asp_debug_env)
{
	result r;
	char want[200];

	setenv("ASP_DEBUG", "1", 1);
	use_master = 0;
	r = CLI("echo", "hi");
	unsetenv("ASP_DEBUG");
	ck_assert_msg(r.status == 0, "%s", r.err);
	ck_assert_str_eq(r.out, "hi\n");
	snprintf(want, sizeof(want), "asp: info: connected to 127.0.0.1:%d in ", fx.port);
	ck_assert_msg(strstr(r.err, want), "no connect line on stderr:\n%s", r.err);
	ck_assert_msg(strstr(r.err, "asp: debug: exec "), "no call line on stderr:\n%s", r.err);
	ck_assert_msg(!strstr(r.err, fx.user), "the user name on stderr:\n%s", r.err);
	result_free(&r);

	/* ASP_DEBUG=0 is off. */
	setenv("ASP_DEBUG", "0", 1);
	r = CLI("echo", "hi");
	unsetenv("ASP_DEBUG");
	ck_assert_msg(r.status == 0 && !strstr(r.err, "asp: "), "ASP_DEBUG=0 traced:\n%s", r.err);
	result_free(&r);
}
END_TEST

/* asp-exec -v: connect lines; -vv: each call too. Both on stderr; stdout is the command's. */
START_TEST(test_cli_verbose)
{
	result r;
	char want[200];

	unsetenv("ASP_DEBUG");
	snprintf(want, sizeof(want), "asp-exec: info: connected to 127.0.0.1:%d in ", fx.port);
	r = CLI("-v", "echo", "hi");
	ck_assert_msg(r.status == 0, "%s", r.err);
	ck_assert_str_eq(r.out, "hi\n");
	ck_assert_msg(strstr(r.err, want), "-v: no connect line:\n%s", r.err);
	ck_assert_msg(!strstr(r.err, "debug: "), "-v shows debug lines:\n%s", r.err);
	result_free(&r);

	r = CLI("-vv", "--read", "missing-file");
	ck_assert_msg(r.status == 1, "%s", r.err);
	ck_assert_msg(strstr(r.err, want), "-vv: no connect line:\n%s", r.err);
	ck_assert_msg(strstr(r.err, "asp-exec: debug: read ") && strstr(r.err, "missing-file: ASP_ENOENT in "),
		      "-vv: no call line:\n%s", r.err);
	ck_assert_msg(!strstr(r.err, fx.user), "the user name on stderr:\n%s", r.err);
	result_free(&r);

	/* Without -v: nothing of the trace. */
	r = CLI("echo", "hi");
	ck_assert_msg(r.status == 0 && !strstr(r.err, "connected to"), "traced without -v:\n%s", r.err);
	result_free(&r);
}
END_TEST

Suite *suite_log(void);

Suite *suite_log(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("log");

	tcase_add_unchecked_fixture(tc, cli_runner_setup, cli_runner_cleanup);
	tcase_add_checked_fixture(tc, cli_setup, cli_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_trace_connect_and_calls);
	tcase_add_test(tc, test_trace_shell_route);
	tcase_add_test(tc, test_trace_levels);
	tcase_add_test(tc, test_trace_reconnect);
	tcase_add_test(tc, test_trace_connect_failure);
	tcase_add_test(tc, test_trace_older_options_version);
	tcase_add_test(tc, test_trace_no_secrets);
	tcase_add_test(tc, test_asp_debug_env);
	tcase_add_test(tc, test_cli_verbose);
	suite_add_tcase(s, tc);
	return s;
}
