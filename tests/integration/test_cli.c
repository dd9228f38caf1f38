/*
 * test_cli.c - asp-exec, the command-line client, run as a program against
 * the real sshd fixture: exit codes, signals, streaming, quoting, timeouts,
 * Ctrl-C, a closed stdout, --json, and the example shell harness. Most tests
 * run twice: through the master and with --no-master, and must see the same
 * results.
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

/* ---------------------------------------------------------------- commands */

START_TEST(test_exit_codes)
{
	result r;

	use_master = _i == 0;
	r = CLI("true");
	ck_assert_int_eq(r.status, 0);
	ck_assert_uint_eq(r.out_len + r.err_len, 0);
	result_free(&r);

	r = CLI("echo hi; exit 7");
	ck_assert_int_eq(r.status, 7);
	ck_assert_str_eq(r.out, "hi\n");
	result_free(&r);

	r = CLI("--", "sh", "-c", "echo to-stderr >&2; exit 255");
	ck_assert_int_eq(r.status, 255);
	ck_assert_str_eq(r.err, "to-stderr\n");
	result_free(&r);

	/* The command's process group leader killed by a signal: 128 + N. */
	r = CLI("kill -TERM $$");
	ck_assert_int_eq(r.status, 143);
	result_free(&r);
	r = CLI("kill -KILL $$");
	ck_assert_int_eq(r.status, 137);
	result_free(&r);
}
END_TEST

START_TEST(test_cwd_env_and_workspace)
{
	char dir[400];
	result r;

	use_master = _i == 0;
	r = CLI("pwd");
	ck_assert_int_eq(r.status, 0);
	ck_assert_int_eq(strncmp(r.out, fx.workspace, strlen(fx.workspace)), 0);
	result_free(&r);

	snprintf(dir, sizeof(dir), "%s/d i'r$(x)", fx.workspace);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	r = CLI("--cwd", "d i'r$(x)", "--env", "V=$(echo no)`x` 'q' \"d\"", "--env", "W=2",
		"printf '%s|%s|%s' \"$V\" \"$W\" \"$(basename \"$PWD\")\"");
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "$(echo no)`x` 'q' \"d\"|2|d i'r$(x)");
	result_free(&r);

	r = CLI("-C", "no-such-dir", "true");
	ck_assert_int_eq(r.status, 1);
	assert_one_error_line(&r, "no-such-dir");
	result_free(&r);
}
END_TEST

START_TEST(test_hostile_arguments)
{
	static const char *const hostile[] = {
		"it's", "$(echo pwned)", "`echo pwned`", "a\nb", "-n", "--", "\xff\xfe\x80",
		"", "*", "\\", "\"", "$HOME", " lead", "trail ", "\t", ";exit 9", "'\"'\"'",
	};
	const char *args[32] = { "--", "printf", "[%s]\\n" };
	char expect[512] = "";
	size_t n = 3;
	result r;

	use_master = _i == 0;
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
		args[n++] = hostile[i];
		strcat(expect, "[");
		strcat(expect, hostile[i]);
		strcat(expect, "]\n");
	}
	args[n] = NULL;
	r = cli_in(NULL, 0, args);
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, expect);
	result_free(&r);

	/* A leading dash after -- is the command, not an option of asp-exec. */
	r = CLI("--", "-n");
	ck_assert_int_eq(r.status, 127);
	result_free(&r);

	/* One argument is shell text. */
	r = CLI("echo $((6 * 7)) | tr 4 X");
	ck_assert_str_eq(r.out, "X2\n");
	result_free(&r);
}
END_TEST

/* 20 MiB of pseudo-random bytes through the remote sha256sum. */
/*
 * asp-exec COMMAND with 20 MiB on stdin. Its hang detector is 120 s (times
 * fx_slowdown), not RUN_TIMEOUT_MS: a few seconds here, but once, under
 * ASan on a loaded CI machine, past 90 s; a failure says how far it got.
 */
static result big_run(const unsigned char *data, size_t len, const char *command)
{
	long long t0 = fx_now_ms();
	proc p;
	result r;

	spawn(&p, cli_argv(ARGS(command)), -1);
	r = finish(&p, data, len, 120000);
	ck_assert_msg(r.status == 0, "asp-exec%s %s with %zu bytes of stdin: status %d after %lld ms, "
		      "%zu bytes of stdout; stderr: %s", use_master ? "" : " --no-master", command, len,
		      r.status, fx_now_ms() - t0, r.out_len, r.err);
	return r;
}

START_TEST(test_stdin_streaming_large)
{
	size_t len = 20u << 20;
	unsigned char *data = malloc(len);
	unsigned int x = 12345;
	char hex[80];
	result r;

	use_master = _i == 0;
	ck_assert_ptr_nonnull(data);
	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		data[i] = (unsigned char)(x >> 16);
	}
	sha256_hex(data, len, hex);
	strcat(hex, "  -\n");
	r = big_run(data, len, "sha256sum");
	ck_assert_str_eq(r.out, hex);
	result_free(&r);

	/* And out again: 20 MiB of stdout, byte for byte. */
	r = big_run(data, len, "cat");
	ck_assert_uint_eq(r.out_len, len);
	ck_assert(memcmp(r.out, data, len) == 0);
	result_free(&r);
	free(data);
}
END_TEST

/* Output arrives as it is produced, each stream on its own descriptor. */
START_TEST(test_streaming_output)
{
	proc p;
	result r;
	char *line;
	int st;

	use_master = _i == 0;
	spawn(&p, cli_argv(ARGS("echo out1; echo err1 >&2; sleep 3; echo out2; echo err2 >&2")), -1);
	close(p.in);
	p.in = -1;
	line = read_line(p.out, 2500);
	ck_assert_msg(line && !strcmp(line, "out1"), "stdout's first line did not arrive early");
	free(line);
	line = read_line(p.err, 2500);
	ck_assert_msg(line && !strcmp(line, "err1"), "stderr's first line did not arrive early");
	free(line);
	ck_assert_int_eq(waitpid(p.pid, &st, WNOHANG), 0); /* still running */
	r = finish(&p, NULL, 0, 10000);
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "out2\n");
	ck_assert_str_eq(r.err, "err2\n");
	result_free(&r);
}
END_TEST

/* stdin is forwarded as it comes, not only at EOF: an interactive exchange works. */
START_TEST(test_stdin_interactive)
{
	proc p;
	result r;
	char *line;

	use_master = _i == 0;
	spawn(&p, cli_argv(ARGS("read a; echo got:$a; read b; echo got:$b")), -1);
	ck_assert_int_eq(write(p.in, "one\n", 4), 4);
	line = read_line(p.out, 5000);
	ck_assert_msg(line && !strcmp(line, "got:one"), "no answer before EOF");
	free(line);
	ck_assert_int_eq(write(p.in, "two\n", 4), 4);
	r = finish(&p, NULL, 0, 10000);
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "got:two\n");
	result_free(&r);
}
END_TEST

/*
 * EOF that comes after the last input byte (stdin closed later) reaches the
 * command at once, even when the command prints nothing until then.
 */
START_TEST(test_stdin_late_eof)
{
	proc p;
	result r;
	long long closed;

	use_master = _i == 0;
	spawn(&p, cli_argv(ARGS("wc -c")), -1);
	fcntl(p.in, F_SETFL, 0);
	ck_assert_int_eq(write(p.in, "hello\n", 6), 6);
	fx_sleep_ms(1000);
	close(p.in);
	p.in = -1;
	closed = fx_now_ms();
	r = finish(&p, NULL, 0, 20000);
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "6\n");
	ck_assert_msg(fx_now_ms() - closed < 3000, "EOF took %lld ms to reach the command",
		      fx_now_ms() - closed);
	result_free(&r);
}
END_TEST

START_TEST(test_timeout_kills_group)
{
	proc p;
	result r;
	pid_t shell, child;
	long long t0 = fx_now_ms();

	use_master = _i == 0;
	/* 3 s: time to see both alive first, under ASan on two busy cores. */
	spawn(&p, cli_argv(ARGS("--timeout", "3", "--", "sh", "-c",
				"echo $$; sleep 60 & echo $!; wait")), -1);
	shell = read_pid(p.out);
	child = read_pid(p.out);
	assert_alive(shell, "the command");
	assert_alive(child, "a child of the command");
	r = finish(&p, NULL, 0, 20000);
	ck_assert_int_eq(r.status, 124);
	ck_assert_int_ge(fx_now_ms() - t0, 2900);
	ck_assert_int_lt(fx_now_ms() - t0, 15000);
	ck_assert_msg(wait_gone(shell, 10000), "the command survived its timeout");
	ck_assert_msg(wait_gone(child, 10000), "a child of the command survived its timeout");
	result_free(&r);
}
END_TEST

/* SIGINT/SIGTERM to asp-exec cancel the remote command; 128 + the signal. */
static void check_signal_cancels(int sig)
{
	proc p;
	result r;
	pid_t shell, child;

	spawn(&p, cli_argv(ARGS("--", "sh", "-c", "echo $$; sleep 60 & echo $!; wait")), -1);
	shell = read_pid(p.out);
	child = read_pid(p.out);
	assert_alive(shell, "the command");
	assert_alive(child, "a child of the command");
	ck_assert_int_eq(kill(p.pid, sig), 0);
	r = finish(&p, NULL, 0, 10000);
	ck_assert_int_eq(r.status, 128 + sig);
	ck_assert_msg(wait_gone(shell, 10000), "the command survived the signal");
	ck_assert_msg(wait_gone(child, 10000), "a child of the command survived the signal");
	result_free(&r);
}

START_TEST(test_ctrl_c_cancels)
{
	use_master = _i == 0;
	check_signal_cancels(SIGINT);
	check_signal_cancels(SIGTERM);
}
END_TEST

/* A client that dies without a word (SIGKILL): the master cancels its command. */
START_TEST(test_closed_stdout)
{
	proc p;
	result r;
	char *line;
	pid_t shell, child;
	long long t0 = fx_now_ms();

	use_master = _i == 0;
	spawn(&p, cli_argv(ARGS("echo $$; sleep 60 & echo $!; while :; do echo y; done")), -1);
	shell = read_pid(p.out);
	child = read_pid(p.out);
	assert_alive(shell, "the command");
	assert_alive(child, "a child of the command");
	line = read_line(p.out, 5000);
	ck_assert_ptr_nonnull(line);
	free(line);
	close(p.out);
	p.out = open("/dev/null", O_RDONLY);
	r = finish(&p, NULL, 0, 10000);
	ck_assert_int_eq(r.status, 128 + SIGPIPE);
	ck_assert_int_lt(fx_now_ms() - t0, 8000);
	ck_assert_msg(wait_gone(shell, 10000), "the command survived its closed stdout");
	ck_assert_msg(wait_gone(child, 10000), "a child of the command survived its closed stdout");
	result_free(&r);
}
END_TEST

/* ---------------------------------------------------------------- --json */

static cJSON *parse_json(const result *r)
{
	cJSON *j;

	ck_assert_msg(r->out_len > 0 && r->out[r->out_len - 1] == '\n', "not one line: %s", r->out);
	ck_assert_ptr_null(memchr(r->out, '\n', r->out_len - 1));
	j = cJSON_Parse(r->out);
	ck_assert_msg(j != NULL, "not JSON: %s", r->out);
	return j;
}

static const cJSON *field(const cJSON *j, const char *name)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, name);

	ck_assert_msg(f != NULL, "no field %s", name);
	return f;
}

static void assert_json_string(const cJSON *j, const char *name, const char *value)
{
	const cJSON *f = field(j, name);

	ck_assert(cJSON_IsString(f));
	ck_assert_str_eq(f->valuestring, value);
}

START_TEST(test_json_shape)
{
	unsigned char decoded[16];
	const cJSON *f;
	cJSON *j;
	result r;

	use_master = _i == 0;
	r = CLI("--json", "--", "sh", "-c", "printf 'hi \\342\\234\\223\\n'; printf '\\377\\376\\0x' >&2; exit 3");
	ck_assert_int_eq(r.status, 3);
	ck_assert_uint_eq(r.err_len, 0);
	j = parse_json(&r);
	ck_assert_int_eq(cJSON_GetArraySize(j), 9);
	ck_assert(cJSON_IsNumber(field(j, "exit_code")) && field(j, "exit_code")->valueint == 3);
	ck_assert(cJSON_IsNull(field(j, "signal")));
	ck_assert(cJSON_IsFalse(field(j, "timed_out")));
	ck_assert(cJSON_IsFalse(field(j, "cancelled")));
	assert_json_string(j, "stdout", "hi \xe2\x9c\x93\n");
	assert_json_string(j, "stdout_encoding", "utf-8");
	assert_json_string(j, "stderr_encoding", "base64");
	f = field(j, "stderr");
	ck_assert_int_eq(EVP_DecodeBlock(decoded, (const unsigned char *)f->valuestring,
					 (int)strlen(f->valuestring)), 6);
	ck_assert(memcmp(decoded, "\xff\xfe\0x", 4) == 0); /* 4 bytes, then padding */
	ck_assert_str_eq(f->valuestring, "//4AeA==");
	ck_assert(cJSON_IsNumber(field(j, "duration_ms")));
	cJSON_Delete(j);
	result_free(&r);

	r = CLI("--json", "kill -TERM $$");
	ck_assert_int_eq(r.status, 143);
	j = parse_json(&r);
	ck_assert(cJSON_IsNull(field(j, "exit_code")));
	ck_assert_int_eq(field(j, "signal")->valueint, 15);
	assert_json_string(j, "stdout", "");
	cJSON_Delete(j);
	result_free(&r);

	r = CLI("--json", "--timeout", "2", "echo started; sleep 30");
	ck_assert_int_eq(r.status, 124);
	j = parse_json(&r);
	ck_assert(cJSON_IsTrue(field(j, "timed_out")));
	assert_json_string(j, "stdout", "started\n");
	cJSON_Delete(j);
	result_free(&r);
}
END_TEST

/* Cancelled with --json: the object still comes, saying so, with the output so far. */
START_TEST(test_json_cancelled)
{
	char pidfile[400], *text = NULL;
	proc p;
	result r;
	cJSON *j;
	pid_t shell = 0;

	use_master = _i == 0;
	snprintf(pidfile, sizeof(pidfile), "%s/pid", fx.workspace);
	spawn(&p, cli_argv(ARGS("--json", "echo partial; echo $$ > pid.tmp; mv pid.tmp pid; exec sleep 60")), -1);
	for (long long end = fx_now_ms() + 10000; !text && fx_now_ms() < end; fx_sleep_ms(20))
		text = fx_read_file(pidfile, NULL);
	ck_assert_ptr_nonnull(text);
	shell = atoi(text);
	free(text);
	assert_alive(shell, "the command");
	kill(p.pid, SIGTERM);
	r = finish(&p, NULL, 0, 10000);
	ck_assert_int_eq(r.status, 143);
	j = parse_json(&r);
	ck_assert(cJSON_IsTrue(field(j, "cancelled")));
	assert_json_string(j, "stdout", "partial\n");
	cJSON_Delete(j);
	result_free(&r);
	ck_assert_msg(wait_gone(shell, 10000), "the cancelled command survived");
}
END_TEST

/* ---------------------------------------------------------------- the example harness */

START_TEST(test_example_agent)
{
	char script[PATH_MAX + 32];
	result r;

	snprintf(script, sizeof(script), "%s/examples/shell/agent.sh", top);
	setenv("ASP_CONFIG", fx.config, 1);
	setenv("ASP_EXEC", bin, 1);
	r = run_argv(NULL, 0, ARGS("/bin/sh", script));
	ck_assert_msg(r.status == 0, "agent.sh: %d\n%s\n%s", r.status, r.out, r.err);
	ck_assert_ptr_nonnull(strstr(r.out, "     1\t#!/bin/sh\n"));
	ck_assert_ptr_nonnull(strstr(r.out, "hello, shell harness, from Linux"));
	ck_assert_ptr_nonnull(strstr(r.out, "(exit 124)"));
	ck_assert_ptr_nonnull(strstr(r.out, "agent: plan done"));
	result_free(&r);
}
END_TEST

/*
 * examples/c/fleet: one command in 13 sandboxes from one thread, one of
 * them a missing config. Sandbox 0's command waits for a file that sandbox
 * 12's command makes, so it can end only while the last one runs: all run
 * at once, and results print as commands end, not in start order.
 */
START_TEST(test_example_fleet)
{
	char fleet[PATH_MAX], cmd[512], missing[] = "/nonexistent/fleet/.asp.json", go[64], line[64];
	const char *argv[16];
	ssize_t n = readlink("/proc/self/exe", fleet, sizeof(fleet) - 32);
	const char *end0, *end12;
	result r;

	ck_assert_int_gt(n, 0);
	fleet[n] = '\0';
	*strrchr(fleet, '/') = '\0';
	*strrchr(fleet, '/') = '\0';
	strcat(fleet, "/examples/fleet"); /* BUILD/tests/test-integration -> BUILD/examples/fleet */
	ck_assert_msg(access(fleet, X_OK) == 0, "%s is not built (make tests)", fleet);
	snprintf(go, sizeof(go), "fleet-go-%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "i=$FLEET_INDEX; t=0; if [ $i = 0 ]; then while [ ! -e %s ]; do "
		 "t=$((t + 1)); [ $t -lt 600 ] || exit 9; sleep 0.05; done; fi; if [ $i = 12 ]; then : > %s; fi; "
		 "echo \"hi $i\"; if [ $i = 3 ]; then exit 3; fi", go, go);
	argv[0] = fleet;
	argv[1] = cmd;
	for (int i = 0; i < 13; i++)
		argv[2 + i] = i == 5 ? missing : fx.config;
	argv[15] = NULL;
	r = run_argv(NULL, 0, argv);
	ck_assert_msg(r.status == 1, "fleet: %d\n%s\n%s", r.status, r.out, r.err);
	for (int i = 0; i < 13; i++) {
		if (i == 5)
			continue;
		snprintf(line, sizeof(line), "[%d] hi %d\n", i, i);
		ck_assert_msg(strstr(r.out, line), "no \"%s\" in:\n%s", line, r.out);
		snprintf(line, sizeof(line), "[%d] exit %d\n", i, i == 3 ? 3 : 0);
		ck_assert_msg(strstr(r.out, line), "no \"%s\" in:\n%s", line, r.out);
	}
	snprintf(line, sizeof(line), "[5] %s", missing);
	ck_assert_msg(strstr(r.out, line), "the missing config is not named:\n%s", r.out);
	ck_assert_ptr_null(strstr(r.out, "[5] hi"));
	end0 = strstr(r.out, "[0] exit 0\n");
	end12 = strstr(r.out, "[12] exit 0\n");
	ck_assert_msg(end12 < end0, "sandbox 0 ended before the one it waited for:\n%s", r.out);
	result_free(&r);
	r = run_argv(NULL, 0, ARGS(fleet, "true"));
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "usage: fleet COMMAND CONFIG..."));
	result_free(&r);
}
END_TEST

/* ---------------------------------------------------------------- suite */

Suite *suite_cli(void);

Suite *suite_cli(void)
{
	Suite *s = suite_create("cli");
	TCase *both = tcase_create("cli-both-modes");
	TCase *one = tcase_create("cli");

	tcase_add_unchecked_fixture(both, cli_runner_setup, cli_runner_cleanup);
	tcase_add_checked_fixture(both, cli_setup, cli_teardown);
	tcase_set_timeout(both, 120);
	tcase_add_loop_test(both, test_exit_codes, 0, 2);
	tcase_add_loop_test(both, test_cwd_env_and_workspace, 0, 2);
	tcase_add_loop_test(both, test_hostile_arguments, 0, 2);
	tcase_add_loop_test(both, test_stdin_streaming_large, 0, 2);
	tcase_add_loop_test(both, test_streaming_output, 0, 2);
	tcase_add_loop_test(both, test_stdin_interactive, 0, 2);
	tcase_add_loop_test(both, test_stdin_late_eof, 0, 2);
	tcase_add_loop_test(both, test_timeout_kills_group, 0, 2);
	tcase_add_loop_test(both, test_ctrl_c_cancels, 0, 2);
	tcase_add_loop_test(both, test_closed_stdout, 0, 2);
	tcase_add_loop_test(both, test_json_shape, 0, 2);
	tcase_add_loop_test(both, test_json_cancelled, 0, 2);
	suite_add_tcase(s, both);

	tcase_add_unchecked_fixture(one, cli_runner_setup, cli_runner_cleanup);
	tcase_add_checked_fixture(one, cli_setup, cli_teardown);
	tcase_set_timeout(one, 120);
	tcase_add_test(one, test_example_agent);
	tcase_add_test(one, test_example_fleet);
	suite_add_tcase(s, one);
	return s;
}
