/*
 * test_deadline.c - the per-call deadline and cancel token of the file calls,
 * against a real sshd.
 *
 * The trickling server: an sshd whose SFTP subsystem answers INIT, then
 * starts a reply of 64 KiB and sends one byte of it every 300 ms (and sshd
 * sends a keepalive request every second of client silence,
 * ClientAliveInterval 1). Bytes keep arriving while a file call waits for
 * its reply, so the silence timer (io_timeout_ms, set far below the call's
 * deadline) never fires: only the call's own deadline or cancel token can
 * end the wait. The script counts what it sent (one line per byte in
 * `ticks`), which proves bytes flowed during each wait.
 *
 * A normal server (the fixture's defaults) gets a stuck file call from a
 * FIFO in the workspace: sftp-server blocks in open() until a writer comes.
 *
 * Recursive remove runs `rm -rf` as a command; the tests find that rm among
 * the login user's processes, stop it (SIGSTOP: an rm stuck on a hung file
 * system looks the same), and check the call's cancel token and deadline
 * kill it.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asp.h"
#include "fixture/fixture.h"
#include "sftp.h"
#include "tiers.h"

#define IO_TIMEOUT_MS 1500 /* the silence timer: far below every call deadline here */

static fx_sshd trickle; /* SFTP that never answers, a byte every 300 ms */
static fx_sshd normal;
static char scripts[64]; /* a 0755 directory for the subsystem script */
static char ticks[128];  /* one line per byte the trickling server sent */

/* ---------------------------------------------------------------- fixtures */

static void trickle_setup(void)
{
	char script[128], extra[512];

	memset(&trickle, 0, sizeof(trickle));
	strcpy(scripts, "/tmp/asp-deadline-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(scripts));
	ck_assert_int_eq(chmod(scripts, 0755), 0);
	snprintf(script, sizeof(script), "%s/trickle.sh", scripts);
	snprintf(ticks, sizeof(ticks), "%s/ticks", scripts);
	ck_assert_int_eq(fx_run(": > '%s' && chmod 666 '%s'", ticks, ticks), 0);
	/*
	 * Swallow INIT, answer VERSION 3 with posix-rename@openssh.com (so that
	 * rename sends its request), then start a reply of 65536 bytes and send
	 * one byte of it every 300 ms (a line to `ticks` for each), reading and
	 * never answering every request meanwhile.
	 */
	ck_assert_int_eq(fx_run("printf '%%s\\n' 'head -c 9 >/dev/null; "
				"printf \"\\0\\0\\0\\46\\2\\0\\0\\0\\3\\0\\0\\0\\30"
				"posix-rename@openssh.com\\0\\0\\0\\0011\\0\\1\\0\\0\"; "
				"(while :; do printf x; echo >> %s; sleep 0.3; done) & "
				"cat >/dev/null' > '%s' && chmod 755 '%s'", ticks, script, script), 0);
	snprintf(extra, sizeof(extra),
		 "ClientAliveInterval 1\n"
		 "ClientAliveCountMax 1000\n"
		 "Subsystem sftp /bin/sh %s\n", script);
	ck_assert_msg(fx_sshd_start_with(&trickle, extra) == 0, "the trickling sshd did not start");
}

static void trickle_teardown(void)
{
	fx_sshd_stop(&trickle);
	fx_run("rm -rf '%s'", scripts);
}

static void normal_setup(void)
{
	memset(&normal, 0, sizeof(normal));
	ck_assert_msg(fx_sshd_start(&normal) == 0, "the sshd fixture did not start");
}

static void normal_teardown(void)
{
	fx_sshd_stop(&normal);
}

/* ---------------------------------------------------------------- helpers */

static asp_sandbox *open_sb(const fx_sshd *fx, unsigned int op_timeout_ms)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	int rc;

	o.config_path = fx->config;
	/*
	 * The trickling server's SFTP is what never answers. With auto, small
	 * reads and writes would go as shell commands when the connection
	 * measured a round trip of 10 ms or more (asp__route_files_faster), which
	 * a loaded machine (sanitizers, CI) can: they would finish at once.
	 */
	if (fx == &trickle)
		o.file_transport = ASP_FILES_SFTP;
	o.io_timeout_ms = IO_TIMEOUT_MS;
	o.op_timeout_ms = op_timeout_ms;
	rc = asp_open(&sb, &o, &e);
	ck_assert_msg(rc == ASP_OK, "asp_open: %s: %s", asp_error_name(rc), e.message);
	return sb;
}

/* Bytes the trickling server has sent so far. */
static int trickled(void)
{
	size_t n = 0;
	char *t = fx_read_file(ticks, &n);

	ck_assert_ptr_nonnull(t);
	free(t);
	return (int)n;
}

/* Logins the server accepted so far (one per connection). */
static int logins(const fx_sshd *fx)
{
	char *log = fx_read_file(fx->log, NULL), *p;
	int n = 0;

	ck_assert_ptr_nonnull(log);
	for (p = log; (p = strstr(p, "Accepted publickey for ")); p++)
		n++;
	free(log);
	return n;
}

enum { OP_READ, OP_WRITE, OP_STAT, OP_LIST, OP_MKDIR, OP_RENAME, OP_REMOVE, OP_REMOVE_TREE, OP_N };
static const char *const op_names[OP_N] = { "read", "write", "stat", "list", "mkdir", "rename",
					    "remove", "remove -r" };

/* Run file call `op` with a cancel token and a deadline (0: the handle's op_timeout_ms). */
static int run_op(int op, asp_sandbox *sb, asp_cancel *cancel, unsigned int timeout_ms,
		  int null_opts, asp_error *e)
{
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	const asp_call_options *cop = null_opts ? NULL : &co;
	unsigned char *data = NULL;
	asp_stat_info st;
	asp_list *l = NULL;
	size_t n = 0;
	int rc = ASP_ERROR;

	co.cancel = cancel;
	co.timeout_ms = timeout_ms;
	wo.call.cancel = cancel;
	wo.call.timeout_ms = timeout_ms;
	switch (op) {
	case OP_READ:
		rc = asp_read(&data, &n, sb, "f.txt", 0, ASP_READ_ALL, cop, e);
		asp_free(data);
		break;
	case OP_WRITE:
		rc = asp_write(sb, "f.txt", "hello", 5, null_opts ? NULL : &wo, e);
		break;
	case OP_STAT:
		rc = asp_stat(&st, sb, "f.txt", cop, e);
		break;
	case OP_LIST:
		rc = asp_list_dir(&l, sb, ".", cop, e);
		asp_list_free(l);
		break;
	case OP_MKDIR:
		rc = asp_mkdir(sb, "d", 0755, ASP_MKDIR_PARENTS, cop, e);
		break;
	case OP_RENAME:
		rc = asp_rename(sb, "a", "b", cop, e);
		break;
	case OP_REMOVE:
		rc = asp_remove(sb, "f.txt", 0, cop, e);
		break;
	case OP_REMOVE_TREE:
		rc = asp_remove(sb, "d", ASP_REMOVE_RECURSIVE, cop, e);
		break;
	}
	return rc;
}

/* A thread that triggers a cancel token after a pause, and notes whether the call had ended. */
typedef struct trigger {
	asp_cancel *cancel;
	long after_ms;
	atomic_int call_done;
	int call_done_at_trigger;
	pthread_t th;
} trigger;

static void *trigger_main(void *arg)
{
	trigger *t = arg;

	fx_sleep_ms(t->after_ms);
	t->call_done_at_trigger = t->call_done;
	asp_cancel_trigger(t->cancel);
	return NULL;
}

static void trigger_start(trigger *t, asp_cancel *cancel, long after_ms)
{
	memset(t, 0, sizeof(*t));
	t->cancel = cancel;
	t->after_ms = after_ms;
	ck_assert_int_eq(pthread_create(&t->th, NULL, trigger_main, t), 0);
}

static void trigger_join(trigger *t)
{
	t->call_done = 1;
	pthread_join(t->th, NULL);
	ck_assert_msg(!t->call_done_at_trigger, "the call ended before the cancel token was triggered "
		      "(nothing was stuck, the test proves nothing)");
}

/* ---------------------------------------------------------------- trickling server */

/*
 * Every file call, with timeout_ms far above io_timeout_ms, against a server
 * that never answers but keeps sending bytes: ASP_ETIMEOUT naming the
 * deadline, not the silence timer; bytes arrived while it waited.
 */
START_TEST(test_trickle_call_deadline)
{
	asp_sandbox *sb = open_sb(&trickle, 600000);
	asp_error e = { 0 };
	int op = _i, before, rc;

	before = trickled();
	rc = run_op(op, sb, NULL, 5000, 0, &e);
	ck_assert_msg(rc == ASP_ETIMEOUT, "%s: %s: %s", op_names[op], asp_error_name(rc), e.message);
	ck_assert_msg(strstr(e.message, "deadline of 5000 ms"), "%s: message [%s] does not name the "
		      "call's deadline", op_names[op], e.message);
	ck_assert_msg(!strstr(e.message, "no answer from the server"), "%s: the silence timer ended "
		      "the wait, not the deadline: [%s]", op_names[op], e.message);
	/* Not the pool's wait, nor a retry after the deadline: the wait for the reply ended. */
	ck_assert_msg(strstr(e.message, "the call's deadline passed") &&
		      !strstr(e.message, "free connection"), "%s: [%s]", op_names[op], e.message);
	/* Bytes came in during the wait, more than one per io_timeout_ms. */
	ck_assert_msg(trickled() - before > 5000 / IO_TIMEOUT_MS, "%s: only %d bytes trickled during "
		      "the call", op_names[op], trickled() - before);
	asp_close(sb);
}
END_TEST

/* asp_open_options.op_timeout_ms is the deadline of a call that sets none (NULL options too). */
START_TEST(test_trickle_open_default_deadline)
{
	asp_sandbox *sb = open_sb(&trickle, 4000);
	asp_error e = { 0 };
	int before = trickled(), rc;

	rc = run_op(OP_STAT, sb, NULL, 0, 1, &e);
	ck_assert_msg(rc == ASP_ETIMEOUT && strstr(e.message, "deadline of 4000 ms"), "stat: %s: %s",
		      asp_error_name(rc), e.message);
	rc = run_op(OP_WRITE, sb, NULL, 0, 0, &e);
	ck_assert_msg(rc == ASP_ETIMEOUT && strstr(e.message, "deadline of 4000 ms"), "write: %s: %s",
		      asp_error_name(rc), e.message);
	ck_assert_int_ge(trickled() - before, 2);
	asp_close(sb);
}
END_TEST

/* A cancel token triggered from another thread ends a stuck call with ASP_ECANCELLED. */
START_TEST(test_trickle_cancel_from_thread)
{
	asp_sandbox *sb = open_sb(&trickle, 600000);
	asp_cancel *cancel = NULL;
	asp_error e = { 0 };
	trigger t;
	int op = _i, before, rc;

	ck_assert_int_eq(asp_cancel_new(&cancel, &e), ASP_OK);
	before = trickled();
	trigger_start(&t, cancel, 2500);
	rc = run_op(op, sb, cancel, 0, 0, &e);
	trigger_join(&t);
	ck_assert_msg(rc == ASP_ECANCELLED, "%s: %s: %s", op_names[op], asp_error_name(rc), e.message);
	ck_assert_msg(strstr(e.message, "cancel"), "%s: [%s]", op_names[op], e.message);
	ck_assert_msg(trickled() - before >= 2, "%s: nothing trickled while the call waited",
		      op_names[op]);
	ck_assert_msg(!strstr(e.message, "waiting for a connection"), "%s: [%s]", op_names[op],
		      e.message);
	asp_close(sb);
	asp_cancel_free(cancel);
}
END_TEST

/* A token triggered before the call: ASP_ECANCELLED at once (else the 600 s deadline, and check's timeout). */
START_TEST(test_trickle_cancel_before_call)
{
	asp_sandbox *sb = open_sb(&trickle, 600000);
	asp_cancel *cancel = NULL;
	asp_error e = { 0 };
	int op = _i, rc;

	ck_assert_int_eq(asp_cancel_new(&cancel, &e), ASP_OK);
	asp_cancel_trigger(cancel);
	rc = run_op(op, sb, cancel, 0, 0, &e);
	ck_assert_msg(rc == ASP_ECANCELLED, "%s: %s: %s", op_names[op], asp_error_name(rc), e.message);
	asp_close(sb);
	asp_cancel_free(cancel);
}
END_TEST

/*
 * exec: the call's deadline bounds the command's start only. With
 * op_timeout_ms = 1000 a 3 s command runs to completion and its connection
 * stays in use, its own timeout_ms still cuts a longer one, and a file call
 * on the same handle is cut at 1000 ms.
 */
START_TEST(test_exec_not_cut_by_op_deadline)
{
	asp_sandbox *sb = open_sb(&trickle, 1000);
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	const unsigned char *out;
	asp_error e = { 0 };
	size_t n = 0;
	int rc, conns = logins(&trickle);

	rc = asp_exec(&r, sb, "sleep 3; echo done", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "exec: %s: %s", asp_error_name(rc), e.message);
	out = asp_exec_result_output(r, ASP_STDOUT, &n);
	ck_assert_msg(asp_exec_result_exit_code(r) == 0 && !asp_exec_result_timed_out(r) &&
		      n == 5 && !memcmp(out, "done\n", 5), "exit %d, timed out %d, stdout %zu bytes",
		      asp_exec_result_exit_code(r), asp_exec_result_timed_out(r), n);
	asp_exec_result_free(r);
	/* Its connection was not given up for the passed call deadline: the next command reuses it. */
	rc = asp_exec(&r, sb, "true", NULL, &e);
	ck_assert_msg(rc == ASP_OK && asp_exec_result_exit_code(r) == 0, "exec true: %s: %s",
		      asp_error_name(rc), e.message);
	asp_exec_result_free(r);
	ck_assert_msg(logins(&trickle) == conns, "%d new logins: the connection of the command that "
		      "outlived op_timeout_ms was dropped", logins(&trickle) - conns);

	o.kill_after_ms = 1500;
	rc = asp_exec(&r, sb, "sleep 30; echo never", &o, &e);
	ck_assert_msg(rc == ASP_OK, "exec: %s: %s", asp_error_name(rc), e.message);
	ck_assert_msg(asp_exec_result_timed_out(r), "the command's own timeout_ms did not cut it");
	out = asp_exec_result_output(r, ASP_STDOUT, &n);
	ck_assert_msg(!n, "stdout [%.*s]", (int)n, out);
	asp_exec_result_free(r);

	/* The same handle's file call is bounded by op_timeout_ms (positive control). */
	rc = run_op(OP_STAT, sb, NULL, 0, 0, &e);
	ck_assert_msg(rc == ASP_ETIMEOUT && strstr(e.message, "deadline of 1000 ms"), "stat: %s: %s",
		      asp_error_name(rc), e.message);
	asp_close(sb);
}
END_TEST

/* ---------------------------------------------------------------- normal server */

static void ws_path(char *out, size_t n, const char *rel)
{
	snprintf(out, n, "%s/%s", normal.workspace, rel);
}

/*
 * A read of a FIFO blocks sftp-server in open(): a real stuck call. Cancel
 * ends it; the cut connection is replaced and the handle keeps working.
 */
START_TEST(test_cancel_stuck_read_then_handle_works)
{
	asp_sandbox *sb = open_sb(&normal, 600000);
	asp_cancel *cancel = NULL;
	asp_error e = { 0 };
	unsigned char *data = NULL;
	asp_stat_info st;
	char fifo[400];
	size_t n = 0;
	trigger t;
	int rc, wfd;

	ws_path(fifo, sizeof(fifo), "stuck.fifo");
	ck_assert_int_eq(mkfifo(fifo, 0666), 0);
	ck_assert_int_eq(chmod(fifo, 0666), 0);
	ck_assert_int_eq(asp_cancel_new(&cancel, &e), ASP_OK);
	{
		asp_call_options co = ASP_CALL_OPTIONS_INIT;
		co.cancel = cancel;
		trigger_start(&t, cancel, 1500);
		rc = asp_read(&data, &n, sb, "stuck.fifo", 0, ASP_READ_ALL, &co, &e);
		trigger_join(&t);
	}
	ck_assert_msg(rc == ASP_ECANCELLED, "read: %s: %s", asp_error_name(rc), e.message);
	ck_assert_ptr_null(data);

	/* The handle works on: write, read back, stat, a fresh token on a quick call. */
	rc = asp_write(sb, "after.txt", "after", 5, NULL, &e);
	ck_assert_msg(rc == ASP_OK, "write after cancel: %s: %s", asp_error_name(rc), e.message);
	rc = asp_read(&data, &n, sb, "after.txt", 0, ASP_READ_ALL, NULL, &e);
	ck_assert_msg(rc == ASP_OK && n == 5 && !memcmp(data, "after", 5), "read after cancel: %s: %s",
		      asp_error_name(rc), e.message);
	asp_free(data);
	asp_cancel_reset(cancel);
	{
		asp_call_options co = ASP_CALL_OPTIONS_INIT;
		co.cancel = cancel;
		rc = asp_stat(&st, sb, "after.txt", &co, &e);
	}
	ck_assert_msg(rc == ASP_OK && st.size == 5, "stat after cancel: %s: %s", asp_error_name(rc),
		      e.message);

	/* Let the blocked sftp-server go: a writer opens and closes the FIFO. */
	if ((wfd = open(fifo, O_WRONLY | O_NONBLOCK)) >= 0)
		close(wfd);
	asp_close(sb);
	asp_cancel_free(cancel);
}
END_TEST

/* A token triggered before the call on a normal server: ASP_ECANCELLED, then the handle works. */
START_TEST(test_cancel_before_call_then_handle_works)
{
	asp_sandbox *sb = open_sb(&normal, 600000);
	asp_cancel *cancel = NULL;
	asp_error e = { 0 };
	int op = _i, rc;

	ck_assert_int_eq(asp_cancel_new(&cancel, &e), ASP_OK);
	ck_assert_int_eq(asp_mkdir(sb, "d", 0755, ASP_MKDIR_PARENTS, NULL, &e), ASP_OK);
	ck_assert_int_eq(asp_write(sb, "f.txt", "x", 1, NULL, &e), ASP_OK);
	ck_assert_int_eq(asp_write(sb, "a", "x", 1, NULL, &e), ASP_OK);
	asp_cancel_trigger(cancel);
	rc = run_op(op, sb, cancel, 0, 0, &e);
	ck_assert_msg(rc == ASP_ECANCELLED, "%s: %s: %s", op_names[op], asp_error_name(rc), e.message);
	asp_cancel_reset(cancel);
	rc = run_op(op, sb, cancel, 0, 0, &e);
	ck_assert_msg(rc == ASP_OK, "%s after reset: %s: %s", op_names[op], asp_error_name(rc), e.message);
	asp_close(sb);
	asp_cancel_free(cancel);
	fx_run("rm -rf '%s'/* ", normal.workspace);
}
END_TEST

/*
 * A cancel that comes once the rename of an atomic write was sent is too
 * late: the target may already have changed, and a call that said
 * ASP_ECANCELLED would say "untouched" of a replaced file. The hook runs
 * on the sending thread when the rename left, waits until the server has
 * replaced the target, and triggers the cancel; the write must say
 * ASP_OK. The same cancel before the rename (the data is still going)
 * leaves the target as it was.
 */
typedef struct late {
	asp_cancel *cancel;
	const char *target;  /* the local path of the target */
	const char *when;    /* the request whose sending triggers: a string in its bytes */
	int fired;
	int replaced;        /* the target held the new content when the cancel was triggered */
} late;

static void cancel_on_send(const void *data, size_t n, void *arg)
{
	late *l = arg;

	if (l->fired || !memmem(data, n, l->when, strlen(l->when)))
		return;
	l->fired = 1;
	if (!strcmp(l->when, "posix-rename@openssh.com"))
		l->replaced = fx_wait_file(l->target, "new", 3, 10000);
	asp_cancel_trigger(l->cancel);
}

static void write_cancelled_at(const char *when, int want)
{
	asp_sandbox *sb = NULL;
	asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	char target[400], *now;
	size_t len = 0;
	late l = { 0 };
	int rc;

	oo.config_path = normal.config;
	oo.file_transport = ASP_FILES_SFTP; /* the hook watches SFTP requests */
	oo.io_timeout_ms = IO_TIMEOUT_MS;
	ck_assert_int_eq(asp_open(&sb, &oo, &e), ASP_OK);
	ws_path(target, sizeof(target), "late.txt");
	ck_assert_int_eq(asp_write(sb, "late.txt", "old", 3, NULL, &e), ASP_OK);
	ck_assert_int_eq(asp_cancel_new(&l.cancel, &e), ASP_OK);
	l.target = target;
	l.when = when;
	wo.call.cancel = l.cancel;
	asp__sftp_on_sent(cancel_on_send, &l);
	rc = asp_write(sb, "late.txt", "new", 3, &wo, &e);
	asp__sftp_on_sent(NULL, NULL);
	ck_assert_msg(l.fired, "the write sent no request with %s (it returned %s)", when, asp_error_name(rc));
	now = fx_read_file(target, &len);
	ck_assert_ptr_nonnull(now);
	if (want == ASP_OK) {
		ck_assert_msg(l.replaced, "the server did not replace the target after the rename was sent");
		ck_assert_msg(rc == ASP_OK, "a cancel after the rename was sent: %s: %s (the target holds %.*s)",
			      asp_error_name(rc), e.message, (int)len, now);
		ck_assert_msg(len == 3 && !memcmp(now, "new", 3), "the target holds %.*s", (int)len, now);
	} else {
		ck_assert_msg(rc == want, "a cancel before the rename: %s: %s", asp_error_name(rc), e.message);
		ck_assert_msg(len == 3 && !memcmp(now, "old", 3), "the target holds %.*s", (int)len, now);
	}
	free(now);
	/* The handle works on. */
	ck_assert_int_eq(asp_write(sb, "late.txt", "end", 3, NULL, &e), ASP_OK);
	asp_cancel_free(l.cancel);
	asp_close(sb);
	fx_run("rm -rf '%s'/* ", normal.workspace);
}

START_TEST(test_cancel_after_rename_sent_is_too_late)
{
	write_cancelled_at("posix-rename@openssh.com", ASP_OK);
}
END_TEST

START_TEST(test_cancel_before_rename_leaves_target)
{
	write_cancelled_at("new", ASP_ECANCELLED);
}
END_TEST

/* ---------------------------------------------------------------- recursive remove */

/* Watches for the login user's `rm` on a path, stops it (SIGSTOP), then optionally cancels. */
typedef struct rm_watch {
	uid_t uid;
	char needle[400];       /* the tree's absolute path, in rm's command line */
	asp_cancel *cancel;     /* triggered once rm is stopped, or NULL */
	atomic_int call_done;
	pid_t pid;              /* the rm seen alive and stopped, or 0 */
	char state;             /* its state after SIGSTOP ('T' stopped) */
	pthread_t th;
} rm_watch;

/* The state letter of /proc/PID/stat, or 0 when the process is gone. */
static char proc_state(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r")))
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	if (!(p = strrchr(buf, ')')) || p[1] != ' ')
		return 0;
	return p[2];
}

static pid_t find_rm(const rm_watch *w)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	pid_t found = 0;

	if (!d)
		return 0;
	while (!found && (de = readdir(d))) {
		char path[300], cmd[512];
		struct stat st;
		size_t n;
		FILE *f;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s", de->d_name);
		if (stat(path, &st) || st.st_uid != w->uid)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		n = fread(cmd, 1, sizeof(cmd) - 1, f);
		fclose(f);
		cmd[n] = '\0';
		/* argv[0] "rm", and the tree's name in a later argument */
		if (!strcmp(cmd, "rm") && memmem(cmd, n, w->needle, strlen(w->needle)))
			found = (pid_t)atoi(de->d_name);
	}
	closedir(d);
	return found;
}

static void *rm_watch_main(void *arg)
{
	rm_watch *w = arg;

	while (!w->call_done) {
		pid_t pid = find_rm(w);
		if (pid && kill(pid, SIGSTOP) == 0) {
			for (int i = 0; i < 200 && (w->state = proc_state(pid)) != 'T'; i++)
				fx_sleep_ms(5);
			w->pid = pid;
			if (w->cancel)
				asp_cancel_trigger(w->cancel);
			return NULL;
		}
		fx_sleep_ms(2);
	}
	return NULL;
}

/* A tree of 60 directories of 1000 files each, made in the sandbox (owned by the login user). */
static void make_tree(asp_sandbox *sb, const char *name)
{
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	char cmd[512];
	int rc;

	fx_run("rm -rf '%s/%s'", normal.workspace, name); /* left by an earlier failed run */
	snprintf(cmd, sizeof(cmd), "mkdir %s && cd %s && seq 1 60 | xargs mkdir && "
		 "for d in $(seq 1 60); do (cd $d && seq 1 1000 | xargs touch); done", name, name);
	rc = asp_exec(&r, sb, cmd, NULL, &e);
	ck_assert_msg(rc == ASP_OK && asp_exec_result_exit_code(r) == 0, "making the tree: %s: %s",
		      asp_error_name(rc), e.message);
	asp_exec_result_free(r);
}

/* Remove a tree with cancel (by_cancel) or a deadline; rm is seen alive, stopped, then gone. */
static void remove_tree_stopped(int by_cancel)
{
	asp_sandbox *sb = open_sb(&normal, 600000);
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	asp_cancel *cancel = NULL;
	asp_error e = { 0 };
	struct passwd *pw = getpwnam(normal.user);
	const char *tree = by_cancel ? "tree-cancel" : "tree-deadline";
	rm_watch w;
	char left[400];
	struct stat st;
	char state;
	int rc;

	ck_assert_ptr_nonnull(pw);
	make_tree(sb, tree);
	memset(&w, 0, sizeof(w));
	w.uid = pw->pw_uid;
	ws_path(w.needle, sizeof(w.needle), tree); /* this fixture's, not an rm of another run */
	if (by_cancel) {
		ck_assert_int_eq(asp_cancel_new(&cancel, &e), ASP_OK);
		w.cancel = cancel;
		co.cancel = cancel;
	} else {
		co.timeout_ms = 4000;
	}
	ck_assert_int_eq(pthread_create(&w.th, NULL, rm_watch_main, &w), 0);
	rc = asp_remove(sb, tree, ASP_REMOVE_RECURSIVE, &co, &e);
	w.call_done = 1;
	pthread_join(w.th, NULL);

	/* Positive control: the remote rm was alive and stopped while the call ran. */
	ck_assert_msg(w.pid > 0, "no rm of the tree was seen running (%s: %s)", asp_error_name(rc),
		      e.message);
	ck_assert_msg(w.state == 'T', "rm %d did not stop (state %c)", (int)w.pid, w.state ? w.state : '-');
	ck_assert_msg(rc == (by_cancel ? ASP_ECANCELLED : ASP_ETIMEOUT), "remove: %s: %s",
		      asp_error_name(rc), e.message);
	ck_assert_msg(strstr(e.message, "remote rm was stopped"), "[%s]", e.message);
	if (!by_cancel)
		ck_assert_msg(strstr(e.message, "deadline of 4000 ms"), "[%s]", e.message);
	/* The rm is gone (or a zombie: no longer running); wait a little for its reaper. */
	for (int i = 0; i < 500 && (state = proc_state(w.pid)) && state != 'Z'; i++)
		fx_sleep_ms(10);
	state = proc_state(w.pid);
	ck_assert_msg(!state || state == 'Z', "rm %d still there after the call (state %c)", (int)w.pid,
		      state);
	/* It was stopped early: part of the tree is left. */
	ws_path(left, sizeof(left), tree);
	ck_assert_msg(stat(left, &st) == 0, "the tree is gone: rm was not stopped");

	/* The handle works on, and a plain remove of the rest succeeds. */
	rc = asp_remove(sb, tree, ASP_REMOVE_RECURSIVE, NULL, &e);
	ck_assert_msg(rc == ASP_OK, "remove the rest: %s: %s", asp_error_name(rc), e.message);
	ck_assert_msg(stat(left, &st) != 0, "the tree is still there");
	asp_close(sb);
	asp_cancel_free(cancel);
}

START_TEST(test_remove_tree_cancel_kills_rm)
{
	remove_tree_stopped(1);
}
END_TEST

START_TEST(test_remove_tree_deadline_kills_rm)
{
	remove_tree_stopped(0);
}
END_TEST

Suite *suite_deadline(void)
{
	TCase *slow_tc, *slow_tn;
	Suite *s = suite_create("deadline");
	TCase *tc = tcase_create("trickle");
	TCase *tn = tcase_create("normal");

	tcase_add_unchecked_fixture(tc, trickle_setup, trickle_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_loop_test(tc, test_trickle_call_deadline, 0, OP_N);
	tcase_add_loop_test(tc, test_trickle_cancel_from_thread, 0, OP_N);
	tcase_add_loop_test(tc, test_trickle_cancel_before_call, 0, OP_N);
	suite_add_tcase(s, tc);

	tcase_add_unchecked_fixture(tn, normal_setup, normal_teardown);
	tcase_set_timeout(tn, 60);
	tcase_add_test(tn, test_cancel_stuck_read_then_handle_works);
	tcase_add_loop_test(tn, test_cancel_before_call_then_handle_works, 0, OP_N);
	tcase_add_test(tn, test_cancel_after_rename_sent_is_too_late);
	tcase_add_test(tn, test_cancel_before_rename_leaves_target);
	suite_add_tcase(s, tn);
	slow_tc = slow_case(s, "trickle-slow", FIXTURE_UNCHECKED, trickle_setup, trickle_teardown, 30);
	tcase_add_test(slow_tc, test_trickle_open_default_deadline);
	tcase_add_test(slow_tc, test_exec_not_cut_by_op_deadline);

	slow_tn = slow_case(s, "normal-slow", FIXTURE_UNCHECKED, normal_setup, normal_teardown, 60);
	tcase_add_test(slow_tn, test_remove_tree_cancel_kills_rm);
	tcase_add_test(slow_tn, test_remove_tree_deadline_kills_rm);
	return s;
}
