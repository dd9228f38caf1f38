/*
 * test_shfs.c - file calls without SFTP (asp_open_options.file_transport),
 * against real sshd servers on loopback:
 *  - detection under auto: a server with no sftp Subsystem (sshd refuses
 *    the request), one whose subsystem program exits at once
 *    (/bin/false), one whose program never answers INIT (sleep): each
 *    connection falls back to shell commands and says so in
 *    asp_sandbox_info; forced sftp on them is ASP_EPROTO naming the way
 *    out; forced exec on a normal server sends no subsystem request
 *    (sshd's log), where auto does;
 *  - contents: all 256 byte values, sizes 0, 1, 4095, 4096, 65537 and
 *    1 MiB + 1, atomic and in place, whole and in ranges;
 *  - a cancel or the call's deadline stops the remote command (seen alive
 *    first, then gone) and a stopped write leaves no temp file; a cancel
 *    seen only after the write's script exited 0 is too late (ASP_OK);
 *  - login shells dash and BusyBox sh (users asp-shfs-dash, asp-shfs-bb,
 *    created and removed here; needs root).
 * The other suites run in exec mode too (ASP_TEST_FILE_TRANSPORT=exec,
 * `make check-shfs`): error codes, hostile names, caps, debris.
 */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asp.h"
#include "chan.h"
#include "exec.h"
#include "fixture/fixture.h"
#include "helpers.h"
#include "tiers.h"

static fx_sshd fx; /* a normal server, for the whole suite */

/* The users of the login-shell tests may log in too (sshd keeps the first AllowUsers). */
static void shfs_setup(void)
{
	char users[128];

	memset(&fx, 0, sizeof(fx));
	snprintf(users, sizeof(users), "AllowUsers %s asp-shfs-dash asp-shfs-bb\n",
		 geteuid() == 0 ? "asp-test" : getpwuid(geteuid())->pw_name);
	ck_assert_msg(fx_sshd_start_with(&fx, users) == 0, "the sshd fixture did not start");
}

/*
 * The login-shell users are machine-wide: this suite may run in several
 * processes at once (make check-deep runs it plain, on far routes and under
 * ASan in parallel). Whoever makes, uses or removes them holds their lock.
 */
static int users_lock(void)
{
	return test_lock("shfs-users");
}

static void shfs_teardown(void)
{
	/* The login-shell users, also when a test failed before removing its own. */
	if (geteuid() == 0) {
		int lock = users_lock();

		fx_run("for u in asp-shfs-dash asp-shfs-bb; do ! id $u >/dev/null 2>&1 || userdel $u; done");
		close(lock);
	}
	fx_sshd_stop(&fx);
}

static asp_sandbox *open_with(const char *config, unsigned int transport, unsigned int io_timeout_ms)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	int rc;

	o.config_path = config;
	o.file_transport = transport;
	o.io_timeout_ms = io_timeout_ms;
	rc = asp_open(&sb, &o, &e);
	ck_assert_msg(rc == ASP_OK, "asp_open(%s): %s: %s", config, asp_error_name(rc), e.message);
	return sb;
}

static int transport_of(asp_sandbox *sb)
{
	asp_sandbox_info info = ASP_SANDBOX_INFO_INIT;
	asp_error e = { 0 };
	int rc = asp_sandbox_info_get(&info, sb, &e);

	ASSERT_OK(rc, e, "asp_sandbox_info_get");
	return info.file_transport;
}

/* The calls every transport must do: write, read, stat, list, mkdir, rename, remove. */
static void exercise(asp_sandbox *sb, const char *workspace, const char *dir)
{
	char p[256], q[256];
	asp_stat_info st;
	asp_list *l;
	asp_error e = { 0 };
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	int rc;

	snprintf(p, sizeof(p), "%s/sub/a b's $(x).txt", dir);
	o.flags |= ASP_WRITE_PARENTS;
	put_opts(sb, p, "hello\n", 6, &o);
	assert_content(sb, p, "hello\n", 6);
	assert_local_content(ws_path(workspace, p), "hello\n", 6);
	st = stat_ok(sb, p);
	ck_assert_uint_eq(st.type, ASP_TYPE_FILE);
	ck_assert_uint_eq(st.size, 6);
	snprintf(q, sizeof(q), "%s/sub", dir);
	l = list_ok(sb, q);
	ck_assert_uint_eq(asp_list_count(l), 1);
	ck_assert_int_ge(list_find(l, "a b's $(x).txt"), 0);
	asp_list_free(l);
	snprintf(q, sizeof(q), "%s/made/deep", dir);
	mkdir_ok(sb, q, 0700, 1);
	ck_assert_uint_eq(stat_ok(sb, q).type, ASP_TYPE_DIR);
	snprintf(q, sizeof(q), "%s/made/deep/moved", dir);
	rename_ok(sb, p, q);
	assert_missing(sb, p);
	assert_content(sb, q, "hello\n", 6);
	snprintf(q, sizeof(q), "%s/made", dir);
	rc = asp_remove(sb, q, 0, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOTEMPTY, "made");
	remove_ok(sb, q, 1);
	assert_missing(sb, q);
	snprintf(q, sizeof(q), "%s/nope", dir);
	memset(&e, 0, sizeof(e));
	rc = asp_stat(&st, sb, q, NULL, &e);
	ASSERT_ERR(rc, e, ASP_ENOENT, "nope");
}

/* ------------------------------------------------------------ detection */

/* A server configured with `extra`; auto falls back, forced sftp says why and how. */
static void detect_case(const char *extra, const char *why, unsigned int io_timeout_ms)
{
	fx_sshd s;
	asp_sandbox *sb;
	asp_error e = { 0 };
	unsigned char *d = NULL;
	size_t n = 0;
	int rc;

	memset(&s, 0, sizeof(s));
	ck_assert_msg(fx_sshd_start_with(&s, extra) == 0, "sshd with [%s] did not start", extra);

	/* Forced SFTP: a clear ASP_EPROTO, and the handle still runs commands. */
	sb = open_with(s.config, ASP_FILES_SFTP, io_timeout_ms);
	rc = asp_read(&d, &n, sb, "anything", 0, ASP_READ_ALL, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EPROTO, "no SFTP subsystem");
	ck_assert_msg(strstr(e.message, why) && strstr(e.message, "file_transport"),
		      "message \"%s\" should say \"%s\" and name file_transport", e.message, why);
	ck_assert_ptr_null(d);
	expect_stdout(sb, "echo still here", "still here\n");
	asp_close(sb);

	/* Auto: undecided until the first file call, then exec, and everything works. */
	sb = open_with(s.config, ASP_FILES_AUTO, io_timeout_ms);
	ck_assert_int_eq(transport_of(sb), ASP_FILES_AUTO);
	exercise(sb, s.workspace, "auto");
	ck_assert_int_eq(transport_of(sb), ASP_FILES_EXEC);
	asp_close(sb);
	fx_sshd_stop(&s);
}

START_TEST(test_auto_without_subsystem)
{
	/* The fixture adds its own Subsystem line unless the extra text names one. */
	detect_case("# Subsystem: none on this server\n", "refused the sftp subsystem", 0);
}
END_TEST

START_TEST(test_auto_subsystem_exits)
{
	detect_case("Subsystem sftp /bin/false\n", "ended without answering", 0);
}
END_TEST

START_TEST(test_auto_subsystem_silent)
{
	/* A program that never answers INIT: given up on after io_timeout_ms, without losing the link. */
	detect_case("Subsystem sftp /bin/sleep 600\n", "did not answer INIT", 3000);
}
END_TEST

/* Forced exec never asks for the subsystem; auto on the same server does (the check can fail). */
START_TEST(test_forced_exec_sends_no_subsystem_request)
{
	fx_sshd s;
	asp_sandbox *sb;

	memset(&s, 0, sizeof(s));
	ck_assert_int_eq(fx_sshd_start(&s), 0);
	sb = open_with(s.config, ASP_FILES_EXEC, 0);
	ck_assert_int_eq(transport_of(sb), ASP_FILES_EXEC);
	exercise(sb, s.workspace, "forced");
	asp_close(sb);
	ck_assert_msg(fx_log_contains(&s, "Accepted publickey"), "sshd's log shows no login");
	ck_assert_msg(!fx_log_contains(&s, "subsystem 'sftp'"),
		      "forced exec sent a subsystem request (sshd's log %s)", s.log);

	sb = open_with(s.config, ASP_FILES_AUTO, 0);
	exercise(sb, s.workspace, "auto");
	ck_assert_int_eq(transport_of(sb), ASP_FILES_SFTP);
	asp_close(sb);
	ck_assert_msg(fx_log_contains(&s, "subsystem 'sftp'"),
		      "auto on a normal server sent no subsystem request: the log check proves nothing");
	fx_sshd_stop(&s);
}
END_TEST

/* ------------------------------------------------------------ contents */

/* all 256 byte values, then pseudo-random bytes, len bytes in all. */
static unsigned char *content(size_t len, uint64_t seed)
{
	unsigned char *d = random_bytes(len ? len : 1, seed);
	size_t i;

	for (i = 0; i < len && i < 256 * 4; i++)
		d[i] = (unsigned char)i;
	return d;
}

static void sizes_on(asp_sandbox *sb, const char *workspace, const char *prefix)
{
	static const size_t sizes[] = { 0, 1, 4095, 4096, 65537, (1u << 20) + 1 };
	size_t i;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		asp_write_options o = ASP_WRITE_OPTIONS_INIT;
		unsigned char *d = content(sizes[i], i + 1), *got = NULL;
		size_t n = 0;
		char path[128];
		asp_error e = { 0 };
		int rc, in_place;

		for (in_place = 0; in_place < 2; in_place++) {
			snprintf(path, sizeof(path), "%s-%zu-%d.bin", prefix, sizes[i], in_place);
			o.flags = in_place ? ASP_WRITE_IN_PLACE : 0;
			put_opts(sb, path, d, sizes[i], &o);
			assert_local_content(ws_path(workspace, path), d, sizes[i]);
			assert_content(sb, path, d, sizes[i]);
			/* Overwrite with other bytes: the old content goes whole. */
			d[sizes[i] / 2] ^= 0x5a;
			put_opts(sb, path, d, sizes[i], &o);
			assert_local_content(ws_path(workspace, path), d, sizes[i]);
		}
		/* Ranges: inside, across the end, past the end. */
		if (sizes[i] > 10) {
			uint64_t off = sizes[i] / 3, lim = sizes[i] / 2;
			rc = asp_read(&got, &n, sb, path, off, lim, NULL, &e);
			ASSERT_OK(rc, e, "asp_read range");
			assert_bytes(path, got, n, d + off, lim);
			asp_free(got);
			rc = asp_read(&got, &n, sb, path, sizes[i] - 3, 100, NULL, &e);
			ASSERT_OK(rc, e, "asp_read across the end");
			assert_bytes(path, got, n, d + sizes[i] - 3, 3);
			asp_free(got);
		}
		rc = asp_read(&got, &n, sb, path, sizes[i] + 5, 100, NULL, &e);
		ASSERT_OK(rc, e, "asp_read past the end");
		ck_assert_uint_eq(n, 0);
		asp_free(got);
		free(d);
	}
	assert_no_temp_files(sb, workspace, ".");
}

START_TEST(test_binary_contents_and_sizes)
{
	asp_sandbox *sb = open_with(fx.config, ASP_FILES_EXEC, 0);

	sizes_on(sb, fx.workspace, "bin");
	ck_assert_int_eq(transport_of(sb), ASP_FILES_EXEC);
	asp_close(sb);
}
END_TEST

/* ------------------------------------------------------------ cancel and deadline */

typedef struct canceller {
	asp_cancel *token;
	const char *needle;
	pid_t seen;
} canceller;

/* Wait for the remote command to run (its pid alive), then cancel the call. */
static void *cancel_when_running(void *arg)
{
	canceller *k = arg;
	long long deadline = fx_now_ms() + 20000;

	while (!(k->seen = find_process(k->needle)) && fx_now_ms() < deadline)
		fx_sleep_ms(20);
	asp_cancel_trigger(k->token);
	return NULL;
}

START_TEST(test_cancel_and_deadline_stop_the_command)
{
	asp_sandbox *sb = open_with(fx.config, ASP_FILES_EXEC, 0);
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	canceller k = { NULL, "shfs-fifo-cancel", 0 };
	unsigned char *d = NULL;
	size_t n = 0;
	asp_error e = { 0 };
	pthread_t th;
	int rc;

	/* A FIFO with no writer: the read's shell blocks opening it. */
	ck_assert_int_eq(fx_run("mkfifo '%s' '%s' && chmod 0666 '%s' '%s'",
				ws_path(fx.workspace, "shfs-fifo-cancel"), ws_path(fx.workspace, "shfs-fifo-deadline"),
				ws_path(fx.workspace, "shfs-fifo-cancel"),
				ws_path(fx.workspace, "shfs-fifo-deadline")), 0);
	ck_assert_int_eq(asp_cancel_new(&k.token, &e), ASP_OK);
	co.cancel = k.token;
	ck_assert_int_eq(pthread_create(&th, NULL, cancel_when_running, &k), 0);
	rc = asp_read(&d, &n, sb, "shfs-fifo-cancel", 0, ASP_READ_ALL, &co, &e);
	pthread_join(th, NULL);
	ck_assert_msg(k.seen > 0, "the remote read never showed up as a process");
	ASSERT_ERR(rc, e, ASP_ECANCELLED, NULL);
	ck_assert_msg(wait_gone(k.seen, 10000), "the cancelled read's shell (pid %d) still runs", (int)k.seen);

	/* The call's deadline: the same, as ASP_ETIMEOUT naming the deadline. */
	co.cancel = NULL;
	co.timeout_ms = 3000;
	memset(&e, 0, sizeof(e));
	rc = asp_read(&d, &n, sb, "shfs-fifo-deadline", 0, ASP_READ_ALL, &co, &e);
	ASSERT_ERR(rc, e, ASP_ETIMEOUT, "deadline");
	ck_assert_msg(!find_process("shfs-fifo-deadline") || wait_gone(find_process("shfs-fifo-deadline"), 10000),
		      "the timed-out read's shell still runs");
	/* The handle goes on. */
	put(sb, "shfs-after-stop", "ok");
	assert_content(sb, "shfs-after-stop", "ok", 2);
	asp_cancel_free(k.token);
	asp_close(sb);
}
END_TEST

typedef struct write_canceller {
	asp_cancel *token;
	const char *dir;
} write_canceller;

/* Is there a temp file of shfs-big.bin in dir holding more than min bytes? */
static int temp_grown(const char *dir, off_t min)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int grown = 0;

	while (d && !grown && (e = readdir(d)) != NULL) {
		char path[700];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		grown = !strncmp(e->d_name, ".shfs-big.bin.asp-", 18) && stat(path, &st) == 0 &&
			st.st_size >= min;
	}
	if (d)
		closedir(d);
	return grown;
}

/* Cancel once the write's temp file holds some bytes. */
static void *cancel_when_temp_grows(void *arg)
{
	write_canceller *k = arg;
	long long deadline = fx_now_ms() + 20000;

	while (fx_now_ms() < deadline && !temp_grown(k->dir, 1))
		fx_sleep_ms(2);
	asp_cancel_trigger(k->token);
	return NULL;
}

START_TEST(test_cancelled_write_leaves_nothing)
{
	asp_sandbox *sb = open_with(fx.config, ASP_FILES_EXEC, 0);
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	size_t len = 256u << 20;
	unsigned char *big = random_bytes(len, 9);
	write_canceller k = { NULL, fx.workspace };
	asp_error e = { 0 };
	pthread_t th;
	int rc;

	put(sb, "shfs-big.bin", "old");
	ck_assert_int_eq(asp_cancel_new(&k.token, &e), ASP_OK);
	o.call.cancel = k.token;
	ck_assert_int_eq(pthread_create(&th, NULL, cancel_when_temp_grows, &k), 0);
	rc = asp_write(sb, "shfs-big.bin", big, len, &o, &e);
	pthread_join(th, NULL);
	ASSERT_ERR(rc, e, ASP_ECANCELLED, NULL);
	/* Gone when the call returns, not only after the handle's next call (which removes orphans). */
	ck_assert_msg(!temp_grown(fx.workspace, 0), "the cancelled write left its temp file");
	assert_local_content(ws_path(fx.workspace, "shfs-big.bin"), "old", 3);
	assert_no_temp_files(sb, fx.workspace, ".");
	asp_cancel_free(k.token);
	free(big);
	asp_close(sb);
}
END_TEST

/*
 * Over exec channels an atomic write's rename is the script's mv: a
 * cancel that is seen only after the script ended on its own (mv done,
 * exit 0 on its way) is too late, and the write says ASP_OK, as over
 * SFTP. The hook runs in the calling thread once the script's exec
 * request is sent: it holds the client there until the target holds the
 * new content and the script has ended, then triggers the cancel, so the
 * client's first look sees the token and the script's end together
 * (a hook in the command loop's waits would not do: a loaded client can
 * find the script's whole reply without waiting at all).
 */
/* Processes whose command line holds `text` (the script's shell has the whole script in its own). */
static int processes_naming(const char *text)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL) {
		char path[300], *cmd;
		size_t len = 0;
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		if ((cmd = fx_read_file(path, &len)) != NULL) {
			n += memmem(cmd, len, text, strlen(text)) != NULL;
			free(cmd);
		}
	}
	closedir(d);
	return n;
}

typedef struct late_cancel {
	asp_cancel *token;
	const char *target;
	int fired, replaced;
} late_cancel;

static void cancel_once_replaced(void *arg)
{
	late_cancel *l = arg;

	if (l->fired)
		return;
	l->fired = 1;
	l->replaced = fx_wait_file(l->target, "new", 3, 10000);
	/* And until the script has ended: no process names the file in its command line. */
	for (int i = 0; i < 1000 && processes_naming("shfs-late.txt") > 0; i++)
		fx_sleep_ms(10);
	asp_cancel_trigger(l->token);
}

START_TEST(test_cancel_after_mv_is_too_late)
{
	asp_sandbox *sb = open_with(fx.config, ASP_FILES_EXEC, 0);
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	late_cancel l = { NULL, ws_path(fx.workspace, "shfs-late.txt"), 0, 0 };
	asp_error e = { 0 };
	int rc;

	asp__chan_prime_pause(600000); /* the script goes as an exec request: its shell's command line holds it */
	put(sb, "shfs-late.txt", "old");
	ck_assert_int_eq(asp_cancel_new(&l.token, &e), ASP_OK);
	o.call.cancel = l.token;
	asp__chan_on_exec_sent(cancel_once_replaced, &l);
	rc = asp_write(sb, "shfs-late.txt", "new", 3, &o, &e);
	asp__chan_on_exec_sent(NULL, NULL);
	ck_assert_msg(l.fired && l.replaced, "the write's script never replaced the target");
	ck_assert_msg(rc == ASP_OK, "a cancel after the script's mv: %s: %s", asp_error_name(rc), e.message);
	assert_local_content(ws_path(fx.workspace, "shfs-late.txt"), "new", 3);
	asp__chan_prime_pause(0);
	asp_cancel_free(l.token);
	asp_close(sb);
}
END_TEST

/* ------------------------------------------------------------ login shells */

/* A user whose login shell is `shell`, with a workspace of its own; 0 when users cannot be made. */
static int make_user(const char *name, const char *shell, char *ws, size_t wslen)
{
	if (geteuid() != 0)
		return 0;
	snprintf(ws, wslen, "%s/ws-%s", fx.dir, name);
	fx_run("userdel %s >/dev/null 2>&1", name); /* a leftover of an interrupted run */
	ck_assert_int_eq(fx_run("useradd -M -N -g asp-test -p '*' -d '%s' -s '%s' %s", ws, shell, name), 0);
	ck_assert_int_eq(fx_run("mkdir -p '%s' && chown %s '%s' && chmod 0755 '%s'", ws, name, ws, ws), 0);
	return 1;
}

static void shell_case(const char *name, const char *shell, const char *exe)
{
	char ws[400], cfg[400], wsrel[16];
	asp_sandbox *sb;
	asp_list *l;
	asp_error e = { 0 };
	unsigned char *d = NULL;
	size_t n = 0;
	int rc, lock = geteuid() == 0 ? users_lock() : -1;

	if (!make_user(name, shell, ws, sizeof(ws))) {
		ck_assert_msg(!getenv("ASP_TEST_NO_SKIP"), "login shells need root (ASP_TEST_NO_SKIP)");
		fprintf(stderr, "SKIP shfs: login shell %s: users can be created by root only\n", shell);
		return;
	}
	snprintf(cfg, sizeof(cfg), "%s/asp-%s.json", fx.dir, name);
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .user = name, .workspace = ws }), 0);
	sb = open_with(cfg, ASP_FILES_EXEC, 0);
	/* The login shell is the one under test. */
	{
		char want[64];
		snprintf(want, sizeof(want), "%s\n", exe);
		expect_stdout(sb, "readlink /proc/$$/exe", want);
	}
	exercise(sb, ws, "calls");
	snprintf(wsrel, sizeof(wsrel), "sizes");
	mkdir_ok(sb, wsrel, 0, 0);
	sizes_on(sb, ws, "sizes/f");
	/* Hostile names listed back byte for byte. */
	{
		asp_write_options o = ASP_WRITE_OPTIONS_INIT;
		o.flags |= ASP_WRITE_PARENTS;
		put_opts(sb, "names/\x01 new\nline '$(touch pwned)'", "x", 1, &o);
	}
	l = list_ok(sb, "names");
	ck_assert_int_ge(list_find(l, "\x01 new\nline '$(touch pwned)'"), 0);
	asp_list_free(l);
	assert_not_injected(ws, "pwned");
	rc = asp_read(&d, &n, sb, "names", 0, ASP_READ_ALL, NULL, &e);
	ASSERT_ERR(rc, e, ASP_EISDIR, "names");
	ck_assert_int_eq(transport_of(sb), ASP_FILES_EXEC);
	asp_close(sb);
	/* userdel refuses while the user's sshd session is still winding down. */
	{
		long long deadline = fx_now_ms() + 10000;
		while (fx_run("userdel %s 2>/dev/null", name) != 0 && fx_now_ms() < deadline)
			fx_sleep_ms(100);
		ck_assert_msg(fx_run("id %s >/dev/null 2>&1", name) != 0, "user %s could not be removed", name);
	}
	if (lock >= 0)
		close(lock);
}

START_TEST(test_login_shell_dash)
{
	shell_case("asp-shfs-dash", "/usr/bin/dash", "/usr/bin/dash");
}
END_TEST

START_TEST(test_login_shell_busybox)
{
	char sh[400];

	/* BusyBox runs its shell when called as "sh" (sshd passes the shell's base name). */
	snprintf(sh, sizeof(sh), "%s/bb/sh", fx.dir);
	ck_assert_int_eq(fx_run("mkdir -p '%s/bb' && chmod 0755 '%s/bb' && ln -sf /usr/bin/busybox '%s'",
				fx.dir, fx.dir, sh), 0);
	shell_case("asp-shfs-bb", sh, "/usr/bin/busybox");
}
END_TEST

Suite *suite_shfs(void);

Suite *suite_shfs(void)
{
	Suite *s = suite_create("shfs");
	TCase *tc = tcase_create("detect");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_auto_without_subsystem);
	tcase_add_test(tc, test_auto_subsystem_exits);
	tcase_add_test(tc, test_forced_exec_sends_no_subsystem_request);
	suite_add_tcase(s, tc);

	tc = tcase_create("exec");
	tcase_add_unchecked_fixture(tc, shfs_setup, shfs_teardown);
	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, test_binary_contents_and_sizes);
	tcase_add_test(tc, test_cancel_and_deadline_stop_the_command);
	tcase_add_test(tc, test_cancelled_write_leaves_nothing);
	tcase_add_test(tc, test_cancel_after_mv_is_too_late);
	tcase_add_test(tc, test_login_shell_dash);
	tcase_add_test(tc, test_login_shell_busybox);
	suite_add_tcase(s, tc);

	tc = tcase_create("detect-slow"); /* waits out a silent subsystem's timer */
	tcase_set_tags(tc, SLOW_TAG);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_auto_subsystem_silent);
	suite_add_tcase(s, tc);
	return s;
}
