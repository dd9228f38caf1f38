/*
 * test_interop.c - the same core calls against every kind of server and
 * login shell a sandbox may have, each started on 127.0.0.1 by the test:
 *
 *   OpenSSH + sftp-server, OpenSSH + internal-sftp, OpenSSH without SFTP,
 *   Dropbear + sftp-server, Dropbear without SFTP, tinysshd;
 *   OpenSSH with the login shell bash, dash, BusyBox sh, zsh (and fish,
 *   which is not POSIX: a clear ASP_EPROTO naming it).
 *
 * Core calls: exec (streams, exit code), write (atomic and in place), read,
 * stat, list, mkdir, rename, remove, an exec timeout and a cancel that kill
 * the command's whole process group (each process seen alive first).
 * Every row uses the default file transport (AUTO), as a user's would: SFTP
 * where the server has it, shell commands on exec channels where it does
 * not (asp_sandbox_info.file_transport says which was used).
 *
 * The negotiation cases restrict a real OpenSSH (Ciphers, MACs,
 * KexAlgorithms, an RSA-only host key) and run tinysshd, whose only cipher
 * is chacha20-poly1305: the error must name the category, the server's
 * offer and the fix. When the libssh2 in use can do the server's
 * algorithms, the same cases expect success instead.
 */
#include <check.h>
#include <libssh2.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "helper.h"
#include "fixture/servers.h"
#include "helpers.h"

/* ------------------------------------------------------------ rows */

typedef struct row {
	const char *name;
	fx_server_kind kind;  /* 0: OpenSSH */
	const char *extra;    /* OpenSSH: sshd_config lines */
	const char *user;     /* NULL: asp-test (bash) */
	int sftp;             /* the server has SFTP */
} row;

/* The fixture writes its own Subsystem line unless the extra text names one. */
#define NO_SFTP "# Subsystem sftp: none, this server has no SFTP\n"

static const row rows[] = {
	{ "openssh-sftp-server", 0, NULL, NULL, 1 },
	{ "openssh-internal-sftp", 0, "Subsystem sftp internal-sftp\n", NULL, 1 },
	{ "openssh-no-sftp", 0, NO_SFTP, NULL, 0 },
	{ "dropbear", FX_DROPBEAR, NULL, NULL, 1 },
	{ "dropbear-exec-only", FX_DROPBEAR_EXEC_ONLY, NULL, NULL, 0 },
	{ "shell-dash", 0, "AllowUsers asp-sh-dash\n", "asp-sh-dash", 1 },
	{ "shell-busybox", 0, "AllowUsers asp-sh-busybox\n", "asp-sh-busybox", 1 },
	{ "shell-zsh", 0, "AllowUsers asp-sh-zsh\n", "asp-sh-zsh", 1 },
};
#define NROWS (int)(sizeof(rows) / sizeof(rows[0]))

static fx_sshd fx;

/* Start the row's server; for another login user, hand the workspace and config to it. */
static void start_row(const row *r)
{
	if (r->kind) {
		ck_assert_msg(fx_server_start(&fx, r->kind, r->user) == 0, "%s did not start", r->name);
		return;
	}
	ck_assert_msg(fx_sshd_start_with(&fx, r->extra) == 0, "sshd for %s did not start", r->name);
	if (r->user) {
		snprintf(fx.user, sizeof(fx.user), "%s", r->user);
		ck_assert_int_eq(fx_run("chown %s: '%s'", r->user, fx.workspace), 0);
		ck_assert_int_eq(fx_write_config(&fx, fx.config, NULL), 0);
	}
}

static void stop_row(void)
{
	fx_sshd_stop(&fx);
}

/* ------------------------------------------------------------ core calls */

static void core_exec(asp_sandbox *sb)
{
	asp_exec_result *r = run(sb, "printf 'out\\n'; printf 'err\\n' >&2; exit 3");
	char pwd[400];

	assert_exited(r, 3);
	assert_stream(r, ASP_STDOUT, "out\n", 4);
	assert_stream(r, ASP_STDERR, "err\n", 4);
	asp_exec_result_free(r);
	/* The command runs in the workspace. */
	snprintf(pwd, sizeof(pwd), "%s\n", asp_sandbox_workspace(sb));
	expect_stdout(sb, "pwd", pwd);
}

static void core_files(asp_sandbox *sb)
{
	const char *ws = asp_sandbox_workspace(sb);
	asp_write_options inplace = ASP_WRITE_OPTIONS_INIT, mk = ASP_WRITE_OPTIONS_INIT;
	size_t binlen;
	unsigned char *bin = all_bytes(4, &binlen);
	asp_stat_info st;
	asp_list *l;

	mk.flags |= ASP_WRITE_PARENTS;
	put_opts(sb, "a/b/bytes.bin", bin, 1024, &mk);
	assert_content(sb, "a/b/bytes.bin", bin, 1024);
	assert_local_content(ws_path(ws, "a/b/bytes.bin"), bin, 1024);
	st = stat_ok(sb, "a/b/bytes.bin");
	ck_assert_uint_eq(st.size, 1024);
	ck_assert_int_eq(st.type, ASP_TYPE_FILE);
	/* An atomic replace leaves no temporary behind. */
	put(sb, "a/b/bytes.bin", "replaced\n");
	assert_content(sb, "a/b/bytes.bin", "replaced\n", 9);
	assert_no_temp_files(sb, ws, "a/b");
	inplace.flags |= ASP_WRITE_IN_PLACE;
	put_opts(sb, "a/b/bytes.bin", "in place\n", 9, &inplace);
	assert_content(sb, "a/b/bytes.bin", "in place\n", 9);
	mkdir_ok(sb, "a/c", 0755, 0);
	ck_assert_int_eq(stat_ok(sb, "a/c").type, ASP_TYPE_DIR);
	l = list_ok(sb, "a");
	ck_assert_uint_eq(asp_list_count(l), 2);
	ck_assert_int_ge(list_find(l, "b"), 0);
	ck_assert_int_ge(list_find(l, "c"), 0);
	asp_list_free(l);
	rename_ok(sb, "a/b/bytes.bin", "a/c/moved.txt");
	assert_missing(sb, "a/b/bytes.bin");
	assert_content(sb, "a/c/moved.txt", "in place\n", 9);
	remove_ok(sb, "a/c/moved.txt", 0);
	assert_missing(sb, "a/c/moved.txt");
	remove_ok(sb, "a", 1);
	assert_missing(sb, "a");
	ck_assert(!local_exists(ws_path(ws, "a")));
	free(bin);
}

/* Stops the command once its "pids A B" line is in, having seen them alive. */
typedef struct watch {
	char out[256];
	size_t len;
	int pids[2], npids, seen_alive;
	asp_cancel *cancel; /* triggered once the pids are seen, when set */
} watch;

static int watch_cb(asp_stream stream, const unsigned char *data, size_t len, void *userdata)
{
	watch *w = userdata;

	if (stream != ASP_STDOUT || w->npids == 2)
		return 0;
	if (len > sizeof(w->out) - 1 - w->len)
		len = sizeof(w->out) - 1 - w->len;
	memcpy(w->out + w->len, data, len);
	w->len += len;
	w->out[w->len] = 0;
	if (strchr(w->out, '\n') && sscanf(w->out, "pids %d %d", &w->pids[0], &w->pids[1]) == 2) {
		w->npids = 2;
		for (int i = 0; i < 2; i++)
			w->seen_alive += w->pids[i] > 1 && pid_alive(w->pids[i]);
		if (w->cancel)
			asp_cancel_trigger(w->cancel);
	}
	return 0;
}

/* A shell and a background sleep, both in the command's process group. */
#define TWO_PIDS "sleep 300 & echo \"pids $$ $!\"; wait; echo never"

static void assert_group_gone(const watch *w, const asp_exec_result *r)
{
	size_t n;
	const unsigned char *out = asp_exec_result_output(r, ASP_STDOUT, &n);

	ck_assert_msg(w->npids == 2, "no pids line came: %s", w->out);
	ck_assert_msg(w->seen_alive == 2, "only %d of the 2 processes were alive before the kill",
		      w->seen_alive);
	for (int i = 0; i < 2; i++)
		ck_assert_msg(wait_gone(w->pids[i], 15000), "process %d survived the kill", w->pids[i]);
	ck_assert_msg(!memmem(out, n, "never", 5), "the command ran on");
}

static void core_timeout(asp_sandbox *sb)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r;
	watch w = { 0 };

	o.kill_after_ms = 3000;
	o.kill_grace_ms = 500;
	o.on_output = watch_cb;
	o.userdata = &w;
	r = run_opts(sb, TWO_PIDS, &o);
	ck_assert_int_ne(asp_exec_result_timed_out(r), 0);
	assert_group_gone(&w, r);
	asp_exec_result_free(r);
}

static void core_cancel(asp_sandbox *sb)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r;
	asp_error e = { 0 };
	watch w = { 0 };

	ck_assert_int_eq(asp_cancel_new(&w.cancel, &e), ASP_OK);
	o.call.cancel = w.cancel;
	o.kill_grace_ms = 500;
	o.on_output = watch_cb;
	o.userdata = &w;
	r = run_opts(sb, TWO_PIDS, &o);
	ck_assert_int_ne(asp_exec_result_cancelled(r), 0);
	assert_group_gone(&w, r);
	asp_exec_result_free(r);
	asp_cancel_free(w.cancel);
}

/* How the file calls went: SFTP where the server has it, else shell commands (AUTO). */
static void assert_transport(asp_sandbox *sb, const row *r)
{
	asp_sandbox_info info = ASP_SANDBOX_INFO_INIT;
	asp_error e = { 0 };

	ASSERT_OK(asp_sandbox_info_get(&info, sb, &e), e, "asp_sandbox_info_get");
	ck_assert_msg(info.file_transport == (r->sftp ? ASP_FILES_SFTP : ASP_FILES_EXEC),
		      "%s: file_transport %d", r->name, info.file_transport);
}

/*
 * Without SFTP, forcing it says why, at once: OpenSSH refuses the
 * subsystem; Dropbear's channel ends (its sftp-server is missing), which
 * is seen as such only when the channel's stderr does not hide the EOF.
 */
static void forced_sftp(const row *r)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_stat_info st;
	asp_error e = { 0 };

	o.config_path = fx.config;
	o.file_transport = ASP_FILES_SFTP;
	ASSERT_OK(asp_open(&sb, &o, &e), e, "asp_open with file_transport sftp");
	ASSERT_ERR(asp_stat(&st, sb, ".", NULL, &e), e, ASP_EPROTO,
		   r->kind ? "the server has no SFTP subsystem (its sftp subsystem ended without answering)"
			   : "the server has no SFTP subsystem (it refused the sftp subsystem)");
	asp_close(sb);
}

/*
 * A background process through the bg helper (its first request rides
 * behind its exec request, before the server answers it): started, its
 * output read, signalled, waited for, removed, with no call falling back
 * to the exec route.
 */
static void core_bg(asp_sandbox *sb, const row *r)
{
	asp_helper_stats h0, h;
	asp_bg_status st;
	asp_error e = { 0 };
	unsigned char *b = NULL;
	long long until = fx_now_ms() + 20000;
	size_t len = 0;
	char *id = NULL;

	asp__helper_stats(&h0);
	ASSERT_OK(asp_bg_start(&id, sb, "echo hi; exec sleep 300", NULL, &e), e, "asp_bg_start");
	while (!len) {
		asp_free(b);
		b = NULL;
		ASSERT_OK(asp_bg_read(&b, &len, &st, sb, id, 0, 0, NULL, &e), e, "asp_bg_read");
		ck_assert_msg(len || fx_now_ms() < until, "%s: no output from the background process", r->name);
	}
	assert_bytes("its output", b, len, "hi\n", 3);
	asp_free(b);
	ASSERT_OK(asp_bg_signal(sb, id, SIGKILL, NULL, &e), e, "asp_bg_signal");
	ASSERT_OK(asp_bg_wait(&st, sb, id, 20000, NULL, &e), e, "asp_bg_wait");
	ck_assert_int_eq(st.signal, SIGKILL);
	ASSERT_OK(asp_bg_remove(sb, id, NULL, &e), e, "asp_bg_remove");
	asp__helper_stats(&h);
	ck_assert_msg(h.boots > h0.boots && h.none == h0.none && h.lost == h0.lost,
		      "%s: %lu helpers started, %lu calls without one, %lu lost", r->name, h.boots - h0.boots,
		      h.none - h0.none, h.lost - h0.lost);
	asp_free(id);
}

START_TEST(test_core)
{
	const row *r = &rows[_i];
	asp_sandbox *sb;

	start_row(r);
	sb = sb_open(fx.config);
	core_exec(sb);
	core_files(sb);
	assert_transport(sb, r);
	core_timeout(sb);
	core_cancel(sb);
	core_bg(sb, r);
	asp_close(sb);
	if (!r->sftp)
		forced_sftp(r);
	stop_row();
}
END_TEST

/* The login shell really was the row's: $0 of the command's shell. */
START_TEST(test_login_shell_is_the_rows)
{
	static const struct { const char *user, *shell; } want[] = {
		{ "asp-test", "bash" }, { "asp-sh-dash", "dash" }, { "asp-sh-busybox", "sh" },
		{ "asp-sh-zsh", "zsh" } };
	const row *r = &rows[_i];
	asp_sandbox *sb;
	asp_exec_result *res;
	size_t n;
	const unsigned char *out;

	start_row(r);
	sb = sb_open(fx.config);
	res = run(sb, "ps -o comm= -p $$; readlink /proc/$$/exe");
	assert_exited(res, 0);
	out = asp_exec_result_output(res, ASP_STDOUT, &n);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (!strcmp(want[i].user, fx.user))
			ck_assert_msg(memmem(out, n, want[i].shell, strlen(want[i].shell)),
				      "%s: the command's shell is %.*s, not %s", r->name, (int)n, out,
				      want[i].shell);
	if (!strcmp(fx.user, "asp-sh-busybox"))
		ck_assert_msg(memmem(out, n, "busybox", 7), "not BusyBox: %.*s", (int)n, out);
	asp_exec_result_free(res);
	asp_close(sb);
	stop_row();
}
END_TEST

/*
 * fish is not POSIX: the error names it, and says what to do; files still
 * work. With file_transport auto, small reads and writes go as shell
 * commands on a link of 10 ms or more (asp__route_files_faster): forced
 * here on a fresh handle, they find that the login shell cannot run them
 * and go over SFTP, which sshd starts through the login shell too.
 */
START_TEST(test_fish_named)
{
	row r = { "shell-fish", 0, "AllowUsers asp-sh-fish\n", "asp-sh-fish", 1 };
	asp_exec_result *res = NULL;
	asp_sandbox *sb;
	asp_error e = { 0 };
	int rc;

	start_row(&r);
	sb = sb_open(fx.config);
	asp__route_force_files(1);
	put(sb, "routed.txt", "routed\n");
	assert_content(sb, "routed.txt", "routed\n", 7);
	asp__route_force_files(0);
	rc = asp_exec(&res, sb, "echo hi", NULL, &e);
	ASSERT_ERR(rc, e, ASP_EPROTO, "the login shell /usr/bin/fish did not run the command wrapper");
	ck_assert_msg(strstr(e.message, "POSIX"), "%s", e.message);
	ck_assert_ptr_null(res);
	/* sshd starts the SFTP server through the login shell too: fish can do that. */
	put(sb, "f.txt", "fish\n");
	assert_content(sb, "f.txt", "fish\n", 5);
	asp_close(sb);
	stop_row();
}
END_TEST

/* ------------------------------------------------------------ negotiation */

/* libssh2 in use can do `name` (a cipher, MAC, kex or host key algorithm). */
static int libssh2_has(int method, const char *name)
{
	LIBSSH2_SESSION *s = libssh2_session_init();
	const char **algs = NULL;
	int n, found = 0;

	ck_assert_ptr_nonnull(s);
	n = libssh2_session_supported_algs(s, method, &algs);
	for (int i = 0; i < n; i++)
		found |= !strcmp(algs[i], name);
	if (n > 0)
		libssh2_free(s, algs);
	libssh2_session_free(s);
	return found;
}

/*
 * Opening fails with ASP_ECONNECT and a message with every needle in it,
 * unless this libssh2 has `name`: then it opens and runs a command.
 */
static void expect_negotiation(const char *config, int method, const char *name,
			       const char *const needles[])
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	int rc;

	o.config_path = config;
	rc = asp_open(&sb, &o, &e);
	if (libssh2_has(method, name)) {
		ck_assert_msg(rc == ASP_OK, "libssh2 %s has %s, yet: %s", libssh2_version(0), name,
			      e.message);
		expect_stdout(sb, "echo ok", "ok\n");
		asp_close(sb);
		return;
	}
	ASSERT_ERR(rc, e, ASP_ECONNECT, "SSH handshake failed: no ");
	for (int i = 0; needles[i]; i++)
		ck_assert_msg(strstr(e.message, needles[i]), "no \"%s\" in: %s", needles[i], e.message);
	fprintf(stderr, "interop: %s\n", e.message);
}

START_TEST(test_negotiation_cipher)
{
	static const char *const needles[] = {
		"no cipher in common: the server offers chacha20-poly1305@openssh.com;",
		"libssh2 ", " supports aes128-ctr", "sshd_config Ciphers", NULL };

	ck_assert_int_eq(fx_sshd_start_with(&fx, "Ciphers chacha20-poly1305@openssh.com\n"), 0);
	expect_negotiation(fx.config, LIBSSH2_METHOD_CRYPT_CS, "chacha20-poly1305@openssh.com", needles);
	stop_row();
}
END_TEST

START_TEST(test_negotiation_mac)
{
	static const char *const needles[] = {
		"no MAC in common: the server offers umac-128-etm@openssh.com, "
		"hmac-sha2-256-etm@openssh.com;",
		" supports hmac-sha2-256", "sshd_config MACs", NULL };

	/* AEAD ciphers carry their own MAC: keep to one that uses the MAC list. */
	ck_assert_int_eq(fx_sshd_start_with(&fx, "Ciphers aes128-ctr\n"
					    "MACs umac-128-etm@openssh.com,hmac-sha2-256-etm@openssh.com\n"),
			 0);
	expect_negotiation(fx.config, LIBSSH2_METHOD_MAC_CS, "hmac-sha2-256-etm@openssh.com", needles);
	stop_row();
}
END_TEST

START_TEST(test_negotiation_kex)
{
	static const char *const needles[] = {
		"no key exchange method in common: the server offers "
		"sntrup761x25519-sha512@openssh.com;",
		" supports ", "sshd_config KexAlgorithms", NULL };

	ck_assert_int_eq(fx_sshd_start_with(&fx, "KexAlgorithms sntrup761x25519-sha512@openssh.com\n"),
			 0);
	expect_negotiation(fx.config, LIBSSH2_METHOD_KEX, "sntrup761x25519-sha512@openssh.com",
			   needles);
	stop_row();
}
END_TEST

/* An RSA-only server: OpenSSH >= 8.8 signs with rsa-sha2-256/512 only. */
START_TEST(test_negotiation_host_key)
{
	static const char *const needles[] = {
		"no host key algorithm in common: the server offers rsa-sha2-512, rsa-sha2-256;",
		/* the pinned key's type first, each name once */
		" supports ssh-ed25519, ecdsa-sha2-nistp256, ", "ssh-keygen -t ed25519", NULL };
	/* Named like the fixture's dirs: if the test dies here, the fixture's sweep removes it. */
	char dir[] = "/tmp/asp-fx.XXXXXX", extra[400];

	ck_assert_ptr_nonnull(mkdtemp(dir));
	chmod(dir, 0755);
	ck_assert_int_eq(fx_run("ssh-keygen -q -t rsa -b 2048 -N '' -C '' -f %s/rsa", dir), 0);
	snprintf(extra, sizeof(extra), "HostKey %s/rsa\nHostKeyAlgorithms rsa-sha2-512,rsa-sha2-256\n",
		 dir);
	ck_assert_int_eq(fx_sshd_start_with(&fx, extra), 0);
	expect_negotiation(fx.config, LIBSSH2_METHOD_HOSTKEY, "rsa-sha2-256", needles);
	stop_row();
	fx_run("rm -rf %s", dir);
}
END_TEST

static const char *const tinysshd_needles[] = {
	"no cipher in common: the server offers chacha20-poly1305@openssh.com;",
	"no chacha20-poly1305", "sshd_config Ciphers", NULL };

START_TEST(test_negotiation_tinysshd)
{
	ck_assert_int_eq(fx_server_start(&fx, FX_TINYSSHD, NULL), 0);
	expect_negotiation(fx.config, LIBSSH2_METHOD_CRYPT_CS, "chacha20-poly1305@openssh.com",
			   tinysshd_needles);
	stop_row();
}
END_TEST

/* The KEXINIT is read from the bytes libssh2 receives, whatever carries them. */
START_TEST(test_negotiation_tinysshd_proxy_command)
{
	char cfg[300];

	ck_assert_int_eq(fx_server_start(&fx, FX_TINYSSHD, NULL), 0);
	snprintf(cfg, sizeof(cfg), "%s/proxied.asp.json", fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){
		.extra = "\"x-asp-proxy-command\": \"exec bash -c 'exec 3<>/dev/tcp/%h/%p; "
			 "cat <&3 & exec cat >&3'\"" }), 0);
	expect_negotiation(cfg, LIBSSH2_METHOD_CRYPT_CS, "chacha20-poly1305@openssh.com",
			   tinysshd_needles);
	stop_row();
}
END_TEST

/* What a successful open records: what --check prints. */
START_TEST(test_negotiated_methods_recorded)
{
	asp_sandbox_info info = ASP_SANDBOX_INFO_INIT;
	asp_sandbox *sb;
	asp_error e = { 0 };

	ck_assert_int_eq(fx_server_start(&fx, FX_DROPBEAR, NULL), 0);
	sb = sb_open(fx.config);
	ASSERT_OK(asp_sandbox_info_get(&info, sb, &e), e, "asp_sandbox_info_get");
	ck_assert_msg(!strncmp(info.server_banner, "SSH-2.0-dropbear", 16), "banner %s",
		      info.server_banner);
	ck_assert_msg(info.kex[0] && info.cipher[0] && info.mac[0], "kex %s cipher %s mac %s", info.kex,
		      info.cipher, info.mac);
	asp_close(sb);
	stop_row();
}
END_TEST

Suite *suite_interop(void);

Suite *suite_interop(void)
{
	Suite *s = suite_create("interop");
	TCase *tc;

	for (int i = 0; i < NROWS; i++) {
		tc = tcase_create(rows[i].name);
		tcase_set_timeout(tc, 120);
		tcase_add_loop_test(tc, test_core, i, i + 1);
		if (rows[i].user || i == 0)
			tcase_add_loop_test(tc, test_login_shell_is_the_rows, i, i + 1);
		suite_add_tcase(s, tc);
	}
	tc = tcase_create("shell-fish");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_fish_named);
	suite_add_tcase(s, tc);
	tc = tcase_create("negotiation");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_negotiation_cipher);
	tcase_add_test(tc, test_negotiation_mac);
	tcase_add_test(tc, test_negotiation_kex);
	tcase_add_test(tc, test_negotiation_host_key);
	tcase_add_test(tc, test_negotiation_tinysshd);
	tcase_add_test(tc, test_negotiation_tinysshd_proxy_command);
	tcase_add_test(tc, test_negotiated_methods_recorded);
	suite_add_tcase(s, tc);
	return s;
}
