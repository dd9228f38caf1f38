/*
 * test_calloptions.c - the call options embedded in asp_exec_options and
 * asp_write_options, exec's kill timer beside the call's deadline, and the
 * write flags, against the real sshd fixture.
 *
 * exec's call.timeout_ms: 0 bounds the start only (a command outlives the
 * handle's op_timeout_ms); non-zero bounds the whole call: the command's
 * process group is killed and asp_exec fails with ASP_ETIMEOUT, which is
 * not the kill timer (kill_after_ms), whose kill is a result with
 * timed_out set. The fixture's sandbox is this machine, so the tests see
 * the command's processes alive while it runs and gone after.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asp.h"
#include "chan.h"
#include "fixture/fixture.h"
#include "helpers.h"

static fx_sshd fx;

static void co_setup(void)
{
	suite_sshd_start(&fx);
}

static void co_teardown(void)
{
	fx_sshd_stop(&fx);
}

static asp_sandbox *open_with_op_timeout(unsigned int op_timeout_ms)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;

	test_open_options(&o);
	o.config_path = fx.config;
	o.op_timeout_ms = op_timeout_ms;
	return sb_open_opts(&o);
}

/* What a command printed as "pids A B" (its shell and its background sleep), seen alive then. */
typedef struct pids_seen {
	char out[256];
	size_t len;
	int pids[2];
	int n;
	int alive; /* how many were alive when the line came: the positive control */
} pids_seen;

static int pids_cb(asp_stream stream, const unsigned char *data, size_t len, void *userdata)
{
	pids_seen *p = userdata;
	const char *line;

	if (stream != ASP_STDOUT || p->len + len >= sizeof(p->out))
		return 0;
	memcpy(p->out + p->len, data, len);
	p->len += len;
	p->out[p->len] = '\0';
	if (!p->n && (line = strstr(p->out, "pids ")) && strchr(line, '\n')) {
		p->n = sscanf(line, "pids %d %d", &p->pids[0], &p->pids[1]);
		for (int i = 0; i < p->n; i++)
			p->alive += p->pids[i] > 1 && pid_alive(p->pids[i]);
	}
	return 0;
}

/* The shell and its background sleep (a name unique to this process) print their pids, then wait. */
static void long_command(char *cmd, size_t n, const char *tag)
{
	snprintf(cmd, n, "sleep 47.%d & echo \"pids $$ $!\"; wait; echo %s", (int)getpid(), tag);
}

static void assert_command_gone(asp_sandbox *sb, const pids_seen *p)
{
	char cmd[160];

	ck_assert_msg(p->n == 2 && p->alive == 2, "saw %d of %d pids alive while the command ran "
		      "(stdout [%s])", p->alive, p->n, p->out);
	for (int i = 0; i < p->n; i++)
		ck_assert_msg(wait_gone(p->pids[i], 10000), "process %d of the command survived", p->pids[i]);
	snprintf(cmd, sizeof(cmd), "ps -eo args | grep -c -e '^sleep 47\\.%d$' || true", (int)getpid());
	expect_stdout(sb, cmd, "0\n");
}

/*
 * call.timeout_ms 0: the handle's op_timeout_ms (1000 ms here) bounds only
 * the start, so a 3 s command runs to its end. The same length as
 * call.timeout_ms bounds the whole call: the command is killed, the call
 * fails with ASP_ETIMEOUT naming call.timeout_ms and returns no result.
 */
START_TEST(test_exec_call_deadline_bounds_the_run)
{
	asp_sandbox *sb = open_with_op_timeout(1000);
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	pids_seen p;
	asp_error e = { 0 };
	char cmd[128];
	int rc;

	rc = asp_exec(&r, sb, "sleep 3; echo done", &o, &e);
	ck_assert_msg(rc == ASP_OK, "call.timeout_ms 0: %s: %s", asp_error_name(rc), e.message);
	assert_exited(r, 0);
	assert_stream(r, ASP_STDOUT, "done\n", 5);
	asp_exec_result_free(r);
	r = NULL;

	memset(&p, 0, sizeof(p));
	o.call.timeout_ms = 1000;
	o.kill_grace_ms = 500;
	o.on_output = pids_cb;
	o.userdata = &p;
	long_command(cmd, sizeof(cmd), "never");
	rc = asp_exec(&r, sb, cmd, &o, &e);
	ck_assert_msg(rc == ASP_ETIMEOUT, "call.timeout_ms 1000 on a 47 s command: %s: %s",
		      asp_error_name(rc), e.message);
	ck_assert_ptr_null(r);
	ck_assert_msg(strstr(e.message, "call.timeout_ms") && strstr(e.message, "killed"), "%s", e.message);
	ck_assert_msg(!strstr(p.out, "never"), "the command ran on: [%s]", p.out);
	assert_command_gone(sb, &p);
	asp_close(sb);
}
END_TEST

/*
 * The kill timer is the command's: it kills and reports timed_out in a
 * result (ASP_OK), also when a longer call deadline is set beside it.
 */
START_TEST(test_exec_kill_timer_is_a_result)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	pids_seen p;
	asp_error e = { 0 };
	char cmd[128];
	int rc;

	memset(&p, 0, sizeof(p));
	o.call.timeout_ms = 600000;
	o.kill_after_ms = 1000;
	o.kill_grace_ms = 500;
	o.on_output = pids_cb;
	o.userdata = &p;
	long_command(cmd, sizeof(cmd), "never");
	rc = asp_exec(&r, sb, cmd, &o, &e);
	ck_assert_msg(rc == ASP_OK, "kill_after_ms: %s: %s", asp_error_name(rc), e.message);
	ck_assert_int_ne(asp_exec_result_timed_out(r), 0);
	ck_assert_int_eq(asp_exec_result_cancelled(r), 0);
	ck_assert_msg(!strstr(p.out, "never"), "the command ran on: [%s]", p.out);
	asp_exec_result_free(r);
	assert_command_gone(sb, &p);
	asp_close(sb);
}
END_TEST

/* The embedded call.cancel is the exec's token: a triggered one cancels the command. */
START_TEST(test_exec_call_cancel)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_cancel *c = NULL;
	asp_error e = { 0 };
	int rc;

	ck_assert_int_eq(asp_cancel_new(&c, &e), ASP_OK);
	asp_cancel_trigger(c);
	o.call.cancel = c;
	rc = asp_exec(&r, sb, "echo ran", &o, &e);
	ck_assert_msg(rc == ASP_ECANCELLED || (rc == ASP_OK && asp_exec_result_cancelled(r)),
		      "exec with a triggered call.cancel: %s: %s", asp_error_name(rc), e.message);
	asp_exec_result_free(r);
	asp_cancel_free(c);
	asp_close(sb);
}
END_TEST

/*
 * A cancel that comes once the exec request was sent, before its answer
 * was read: the command may be running, so it is the run's to stop (its
 * group killed, a result that says cancelled), not a reason to give the
 * connection up (ASP_ECONNLOST, "may have run in part"). The hook runs on
 * the calling thread just after the request went out. The same for a
 * proc: its start succeeds and its wait reports the cancel.
 */
static void cancel_now(void *arg)
{
	asp_cancel_trigger(arg);
}

/* The command was stopped before its end: its last line ("never") never came. */
static void expect_not_ended(const asp_exec_result *r)
{
	size_t len = 0;
	const unsigned char *out = asp_exec_result_output(r, ASP_STDOUT, &len);

	ck_assert_msg(!memmem(out, len, "never", 5), "the command ran to its end: [%.*s]", (int)len, out);
}

START_TEST(test_exec_cancel_while_start_is_answered)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_proc_options po = ASP_PROC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_proc *proc = NULL;
	asp_cancel *c = NULL;
	asp_error e = { 0 };
	char cmd[128];
	int rc;

	asp__chan_prime_pause(600000); /* no primed shell: each command goes as an exec request */
	expect_stdout(sb, "echo warm", "warm\n"); /* the connection is up: the next request is the command's */
	ck_assert_int_eq(asp_cancel_new(&c, &e), ASP_OK);
	o.call.cancel = c;
	o.kill_grace_ms = 500;
	long_command(cmd, sizeof(cmd), "never");
	asp__chan_on_exec_sent(cancel_now, c);
	rc = asp_exec(&r, sb, cmd, &o, &e);
	asp__chan_on_exec_sent(NULL, NULL);
	ck_assert_msg(asp_cancel_is_triggered(c), "the hook did not run");
	ck_assert_msg(rc == ASP_OK, "exec cancelled while its start was answered: %s: %s", asp_error_name(rc),
		      e.message);
	ck_assert_int_ne(asp_exec_result_cancelled(r), 0);
	expect_not_ended(r);
	asp_exec_result_free(r);
	r = NULL;

	asp_cancel_reset(c);
	po.call.cancel = c;
	po.kill_grace_ms = 500;
	asp__chan_on_exec_sent(cancel_now, c);
	rc = asp_proc_start(&proc, sb, cmd, &po, &e);
	asp__chan_on_exec_sent(NULL, NULL);
	ck_assert_msg(asp_cancel_is_triggered(c), "the hook did not run for the proc");
	ck_assert_msg(rc == ASP_OK, "proc cancelled while its start was answered: %s: %s", asp_error_name(rc),
		      e.message);
	ASSERT_OK(asp_proc_wait(&r, proc, 20000, &e), e, "asp_proc_wait");
	ck_assert_int_ne(asp_exec_result_cancelled(r), 0);
	expect_not_ended(r);
	asp_exec_result_free(r);
	asp_proc_free(proc);

	/* Nothing of either command is left, and the handle runs the next one. */
	{
		char ps[160];
		snprintf(ps, sizeof(ps), "ps -eo args | grep -c -e '^sleep 47\\.%d$' || true", (int)getpid());
		expect_stdout(sb, ps, "0\n");
	}
	asp__chan_prime_pause(0);
	asp_cancel_free(c);
	asp_close(sb);
}
END_TEST

/* Unknown write flag bits and an embedded call version other than 0 or 1 are refused. */
START_TEST(test_options_refused)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_exec_options eo = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	int rc;

	wo.flags = ASP_WRITE_PARENTS | 0x4u;
	rc = asp_write(sb, "co-flags/x", "d", 1, &wo, &e);
	ck_assert_msg(rc == ASP_EINVAL && strstr(e.message, "asp_write_options.flags"), "%s: %s",
		      asp_error_name(rc), e.message);
	wo.flags = 0x80000000u;
	ck_assert_int_eq(asp_write(sb, "co-flags-x", "d", 1, &wo, &e), ASP_EINVAL);
	ck_assert_msg(!local_exists(ws_path(fx.workspace, "co-flags-x")) &&
		      !local_exists(ws_path(fx.workspace, "co-flags")), "a refused write wrote");

	wo = (asp_write_options)ASP_WRITE_OPTIONS_INIT;
	wo.call.version = 2;
	rc = asp_write(sb, "co-flags-x", "d", 1, &wo, &e);
	ck_assert_msg(rc == ASP_EINVAL && strstr(e.message, "asp_write_options.call.version"), "%s: %s",
		      asp_error_name(rc), e.message);
	eo.call.version = 2;
	rc = asp_exec(&r, sb, "touch co-ran", &eo, &e);
	ck_assert_msg(rc == ASP_EINVAL && strstr(e.message, "asp_exec_options.call.version"), "%s: %s",
		      asp_error_name(rc), e.message);
	ck_assert_ptr_null(r);
	ck_assert(!local_exists(ws_path(fx.workspace, "co-ran")));
	/* 0 and 1 are both fine. */
	eo.call.version = ASP_CALL_OPTIONS_VERSION;
	expect_stdout_opts(sb, "echo ok", &eo, "ok\n", 3);
	asp_close(sb);
}
END_TEST

/* ASP_WRITE_PARENTS creates the parents; ASP_WRITE_IN_PLACE keeps the file (its inode). */
START_TEST(test_write_flags)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	struct stat before, after;
	int rc;

	rc = asp_write(sb, "co-a/b/c/file", "one", 3, &wo, &e);
	ck_assert_msg(rc == ASP_ENOENT, "no ASP_WRITE_PARENTS: %s: %s", asp_error_name(rc), e.message);
	wo.flags = ASP_WRITE_PARENTS;
	rc = asp_write(sb, "co-a/b/c/file", "one", 3, &wo, &e);
	ck_assert_msg(rc == ASP_OK, "ASP_WRITE_PARENTS: %s: %s", asp_error_name(rc), e.message);
	assert_local_content(ws_path(fx.workspace, "co-a/b/c/file"), "one", 3);

	before = local_lstat(ws_path(fx.workspace, "co-a/b/c/file"));
	wo.flags = ASP_WRITE_IN_PLACE;
	rc = asp_write(sb, "co-a/b/c/file", "two!", 4, &wo, &e);
	ck_assert_msg(rc == ASP_OK, "ASP_WRITE_IN_PLACE: %s: %s", asp_error_name(rc), e.message);
	after = local_lstat(ws_path(fx.workspace, "co-a/b/c/file"));
	ck_assert_msg(before.st_ino == after.st_ino, "ASP_WRITE_IN_PLACE replaced the file");
	assert_local_content(ws_path(fx.workspace, "co-a/b/c/file"), "two!", 4);

	wo.flags = 0; /* atomic: a new file takes the name */
	rc = asp_write(sb, "co-a/b/c/file", "three", 5, &wo, &e);
	ck_assert_msg(rc == ASP_OK, "atomic: %s: %s", asp_error_name(rc), e.message);
	after = local_lstat(ws_path(fx.workspace, "co-a/b/c/file"));
	ck_assert_msg(before.st_ino != after.st_ino, "an atomic write kept the inode");
	asp_close(sb);
}
END_TEST

Suite *suite_calloptions(void)
{
	Suite *s = suite_create("calloptions");
	TCase *tc = tcase_create("calloptions");

	tcase_add_unchecked_fixture(tc, co_setup, co_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_exec_call_deadline_bounds_the_run);
	tcase_add_test(tc, test_exec_kill_timer_is_a_result);
	tcase_add_test(tc, test_exec_call_cancel);
	tcase_add_test(tc, test_exec_cancel_while_start_is_answered);
	tcase_add_test(tc, test_options_refused);
	tcase_add_test(tc, test_write_flags);
	suite_add_tcase(s, tc);
	return s;
}
