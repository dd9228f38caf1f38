/*
 * test_security.c - claims of docs/SECURITY.md ("The library") that no
 * other suite shows, against a real sshd:
 *  - the private key text and its passphrase never appear in an error
 *    message (bad passphrase, rejected key, RSA key, undecodable key, key
 *    text from an environment variable);
 *  - nothing of the harness reaches the sandbox: not the key text, not the
 *    harness's environment (libasp forwards none, even to an sshd that
 *    would accept any: AcceptEnv *);
 *  - a key file owned by another user is refused;
 *  - x-asp-proxy-command's %r and %h are quoted for the shell;
 *  - every descriptor libasp opens is close-on-exec (connections, the
 *    cancel pipe), and all are closed by asp_close / asp_cancel_free;
 *  - a hostile SFTP server cannot make libasp allocate what it announces
 *    (a 2 GiB packet length is ASP_EPROTO at once), answer a request that
 *    was not asked (a reply id out of order is ASP_EPROTO), nor hang it (a
 *    server that never answers is ASP_ETIMEOUT after io_timeout_ms);
 *  - a server that does not run the command wrapper (not a POSIX shell) is
 *    ASP_EPROTO, not a silent success;
 *  - a timeout kills a process that left the process group (setsid) and
 *    lost its parent, and does not wait for it.
 *
 * Each test starts its own sshd (checked fixture).
 */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "asp.h"
#include "fixture/fixture.h"
#include "helpers.h"
#include "tiers.h"

static fx_sshd fx;
static char tmp[256];

static void setup(void)
{
	memset(&fx, 0, sizeof(fx));
	unsetenv("ASP_IDENTITY_PASSPHRASE");
	unsetenv("SSH_AUTH_SOCK");
	snprintf(tmp, sizeof(tmp), "/tmp/asp-sec.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	ck_assert_int_eq(chmod(tmp, 0755), 0);
}

static void teardown(void)
{
	fx_sshd_stop(&fx);
	fx_run("rm -rf '%s'", tmp);
}

static void start_server(const char *extra)
{
	ck_assert_int_eq(fx_sshd_start_with(&fx, extra), 0);
}

static void tmp_path(char *out, size_t n, const char *name)
{
	snprintf(out, n, "%s/%s", tmp, name);
}

static void make_key(const char *path, const char *options, const char *passphrase)
{
	ck_assert_int_eq(fx_run("rm -f '%s' '%s.pub' && ssh-keygen -q %s -N '%s' -C '' -f '%s' "
				"</dev/null >/dev/null",
				path, path, options, passphrase, path),
			 0);
}

static asp_sandbox *open_with(const char *config, unsigned int transport, unsigned int io_timeout_ms, int *rc,
			      asp_error *e)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	char kh[300];

	tmp_path(kh, sizeof(kh), "known_hosts");
	o.config_path = config;
	o.known_hosts = kh;
	o.io_timeout_ms = io_timeout_ms;
	o.file_transport = transport;
	trace_on(&o); /* the trace is held to the same rules as messages */
	memset(e, 0, sizeof(*e));
	*rc = asp_open(&sb, &o, e);
	return sb;
}

static asp_sandbox *open_config(const char *config, int *rc, asp_error *e)
{
	return open_with(config, ASP_FILES_AUTO, 2000, rc, e);
}

static asp_sandbox *open_ok(const char *config)
{
	asp_error e;
	int rc;
	asp_sandbox *sb = open_config(config, &rc, &e);

	ck_assert_msg(rc == ASP_OK, "asp_open %s: %s: %s", config, asp_error_name(rc), e.message);
	return sb;
}

/*
 * For a hostile SFTP server: SFTP only (under auto, an INIT answered late
 * on a busy machine, after io_timeout_ms, would send file calls to shell
 * commands, and the server's replies would never be read), and an
 * io_timeout_ms only a hang reaches: the replies come at once.
 */
static asp_sandbox *open_sftp_ok(const char *config)
{
	asp_error e;
	int rc;
	asp_sandbox *sb = open_with(config, ASP_FILES_SFTP, 60000, &rc, &e);

	ck_assert_msg(rc == ASP_OK, "asp_open %s: %s: %s", config, asp_error_name(rc), e.message);
	return sb;
}

/*
 * The secret parts of a private key file: every line between the BEGIN and
 * END markers (base64 of the key), and every 16-byte piece of them.
 */
static void assert_no_key_text(const char *key_file, const char *text, const char *what)
{
	char *key = fx_read_file(key_file, NULL), *line, *save = NULL;

	ck_assert_ptr_nonnull(key);
	ck_assert_msg(!strstr(text, "-----BEGIN") && !strstr(text, "PRIVATE KEY-----"),
		      "%s shows a PEM marker: %s", what, text);
	for (line = strtok_r(key, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		size_t n = strlen(line);

		if (!strncmp(line, "-----", 5) || n < 16)
			continue;
		for (size_t i = 0; i + 16 <= n; i += 8) {
			char piece[17];
			memcpy(piece, line + i, 16);
			piece[16] = '\0';
			ck_assert_msg(!strstr(text, piece), "%s holds key text \"%s\": %s", what, piece, text);
		}
	}
	free(key);
}

/* -------------------------------------------------------------- key text in messages */

/*
 * loop: 0 an encrypted key, no passphrase; 1 wrong passphrase; 2 a key the
 * server does not know; 3 an RSA key (libssh2 1.10 cannot sign for OpenSSH
 * 8.8+); 4 an undecodable key (PEM markers, garbage inside); 5..9 the same
 * key texts handed over in an environment variable instead of a file.
 */
START_TEST(test_key_text_never_in_messages)
{
	static const char *const pass = "hunter2-correct-horse";
	const int kind = _i % 5, from_env = _i >= 5;
	char key[300], cfg[300], *text;
	asp_error e;
	int rc;

	start_server(NULL);
	tmp_path(key, sizeof(key), "id_secret");
	switch (kind) {
	case 0:
	case 1:
		make_key(key, "-t ed25519", pass);
		if (kind == 1)
			setenv("ASP_IDENTITY_PASSPHRASE", "wrong-battery-staple", 1);
		break;
	case 2:
		make_key(key, "-t ed25519", "");
		break;
	case 3:
		make_key(key, "-t rsa -b 2048", "");
		ck_assert_int_eq(fx_run("cat '%s.pub' >> '%s/authorized_keys'", key, fx.dir), 0);
		break;
	default:
		make_key(key, "-t ed25519", "");
		/* Keep the markers and the length, scramble the middle. */
		ck_assert_int_eq(fx_run("sed -i '2,4y/ABCDEFGHIJKLMabcdefghijklm/NOPQRSTUVWXYZnopqrstuvwxyz/' '%s'",
					key),
				 0);
		break;
	}
	tmp_path(cfg, sizeof(cfg), "secret.json");
	if (from_env) {
		ck_assert_ptr_nonnull(text = fx_read_file(key, NULL));
		setenv("ASP_SEC_KEY_TEXT", text, 1);
		free(text);
		ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = "ASP_SEC_KEY_TEXT" }), 0);
	} else {
		ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = key }), 0);
	}
	ck_assert_ptr_null(open_config(cfg, &rc, &e));
	ck_assert_msg(rc == ASP_EAUTH, "kind %d: %s: %s", kind, asp_error_name(rc), e.message);
	assert_no_key_text(key, e.message, "the error message");
	ck_assert_msg(!strstr(e.message, pass) && !strstr(e.message, "wrong-battery-staple"),
		      "the message shows a passphrase: %s", e.message);
	ck_assert_msg(strstr(trace_text(), "connect to "), "no trace of the connect:\n%s", trace_text());
	assert_no_key_text(key, trace_text(), "the trace");
	ck_assert_msg(!strstr(trace_text(), pass) && !strstr(trace_text(), "wrong-battery-staple"),
		      "the trace shows a passphrase: %s", trace_text());
	/* It does say where the key came from. */
	ck_assert_msg(strstr(e.message, from_env ? "ASP_SEC_KEY_TEXT" : key), "%s", e.message);
	unsetenv("ASP_SEC_KEY_TEXT");
	unsetenv("ASP_IDENTITY_PASSPHRASE");
}
END_TEST

/* A key file owned by someone else is refused, as OpenSSH does. */
START_TEST(test_key_file_of_another_user)
{
	char key[300], cfg[300];
	asp_error e;
	int rc;

	if (getuid() != 0)
		return; /* only root can give a file away */
	start_server(NULL);
	tmp_path(key, sizeof(key), "their_key");
	ck_assert_int_eq(fx_run("cp '%s' '%s' && chmod 600 '%s' && chown %s '%s'", fx.client_key, key, key,
				fx.user, key),
			 0);
	tmp_path(cfg, sizeof(cfg), "theirs.json");
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = key }), 0);
	ck_assert_ptr_null(open_config(cfg, &rc, &e));
	ck_assert_msg(rc == ASP_ECONFIG && strstr(e.message, "not by you"), "%s: %s", asp_error_name(rc),
		      e.message);
	assert_no_key_text(key, e.message, "the error message");
}
END_TEST

/* -------------------------------------------------------------- nothing reaches the sandbox */

START_TEST(test_no_secret_reaches_sandbox)
{
	char cfg[300], secret[64], *key, *line, *save = NULL, *body = NULL;
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	asp_sandbox *sb;
	const unsigned char *out;
	size_t n;
	int rc;

	/* An sshd that would take any environment variable a client sent. */
	start_server("AcceptEnv *\n");
	ck_assert_ptr_nonnull(key = fx_read_file(fx.client_key, NULL));
	setenv("ASP_SEC_KEY_TEXT", key, 1);
	snprintf(secret, sizeof(secret), "harness-secret-%d", (int)getpid());
	setenv("ASP_HARNESS_SECRET", secret, 1);
	setenv("LC_ASP_SECRET", secret, 1);
	setenv("LANG", secret, 1);
	tmp_path(cfg, sizeof(cfg), "env-key.json");
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = "ASP_SEC_KEY_TEXT" }), 0);
	sb = open_ok(cfg);

	rc = asp_exec(&r, sb, "env; echo ---; ls -la ~ ~/.ssh 2>&1; cat ~/.ssh/* 2>/dev/null; echo ---; "
			      "ps -ww -o args= -u \"$(id -u)\"", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "exec: %s", e.message);
	out = asp_exec_result_output(r, ASP_STDOUT, &n);
	{
		char *text = strndup((const char *)out, n);
		ck_assert_msg(!strstr(text, secret), "the harness environment reached the sandbox:\n%s", text);
		ck_assert_msg(!strstr(text, "ASP_SEC_KEY_TEXT") && !strstr(text, "ASP_HARNESS_SECRET"),
			      "a harness variable name reached the sandbox:\n%s", text);
		assert_no_key_text(fx.client_key, text, "the sandbox's environment and home");
		free(text);
	}
	asp_exec_result_free(r);
	/* Some file work, then look through every file the login user can have written. */
	ck_assert_int_eq(asp_write(sb, "sec/a.txt", "a", 1,
				   &(asp_write_options){ .version = ASP_WRITE_OPTIONS_VERSION,
							 .flags = ASP_WRITE_PARENTS }, &e),
			 ASP_OK);
	asp_close(sb);
	/*
	 * The 4th base64 line of an OpenSSH ed25519 key holds the private seed
	 * (the first lines are a header every such key shares, and the public key).
	 */
	for (int i = 0, l = 0; (line = strtok_r(i ? NULL : key, "\n", &save)) != NULL; i++)
		if (strncmp(line, "-----", 5) && ++l == 4)
			body = line;
	ck_assert_msg(body && strlen(body) >= 44, "unexpected key layout");
	ck_assert_msg(fx_run("grep -rqsF -- '%.40s' '%s' /home/%s", body + 4, fx.workspace, fx.user) != 0,
		      "key text found in the sandbox's files");
	ck_assert_msg(fx_run("find /tmp /var/tmp -xdev -user %s -type f -exec grep -lsF -- '%.40s' {} + "
			     "| grep -q .", fx.user, body + 4) != 0,
		      "key text found in a temporary file of the login user");
	free(key);
	unsetenv("ASP_SEC_KEY_TEXT");
	unsetenv("ASP_HARNESS_SECRET");
	unsetenv("LC_ASP_SECRET");
	unsetenv("LANG");
}
END_TEST

/*
 * sshd tells the login shell where the client is (SSH_CLIENT,
 * SSH_CONNECTION: the harness's address and port); a command does not see
 * them. Control: the wrapper's own shell did get them from sshd.
 */
START_TEST(test_harness_address_not_in_command_env)
{
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	asp_sandbox *sb;
	const unsigned char *out;
	char *text, *sep;
	size_t n;
	int rc;

	start_server(NULL);
	sb = open_ok(fx.config);
	rc = asp_exec(&r, sb, "env; echo ---; tr '\\0' '\\n' < /proc/$$/environ", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "exec: %s", e.message);
	out = asp_exec_result_output(r, ASP_STDOUT, &n);
	text = strndup((const char *)out, n);
	ck_assert_ptr_nonnull(sep = strstr(text, "---\n"));
	ck_assert_msg(strstr(sep, "SSH_CONNECTION=127.0.0.1 ") && strstr(sep, "SSH_CLIENT=127.0.0.1 "),
		      "control: sshd did not give the login shell SSH_CONNECTION/SSH_CLIENT:\n%s", sep);
	*sep = '\0';
	ck_assert_msg(!strstr(text, "SSH_CONNECTION=") && !strstr(text, "SSH_CLIENT=") &&
		      !strstr(text, "127.0.0.1"), "the harness's address reached the command:\n%s", text);
	free(text);
	asp_exec_result_free(r);
	asp_close(sb);
}
END_TEST

/* -------------------------------------------------------------- proxy command */

/* %r (the user) and %h reach x-asp-proxy-command single-quoted: no shell syntax gets through. */
START_TEST(test_proxy_command_placeholders_quoted)
{
	static const char user[] = "u'$(touch PWNED)`touch PWNED2`;touch PWNED3\" x";
	char cfg[300], extra[600], out[300], pwned[300], *got;
	asp_error e;
	int rc;

	start_server(NULL);
	tmp_path(out, sizeof(out), "proxy.out");
	snprintf(extra, sizeof(extra),
		 "\"x-asp-proxy-command\": \"cd %s && printf '%%%%s|%%%%s' %%r %%h > proxy.out\"", tmp);
	tmp_path(cfg, sizeof(cfg), "proxy.json");
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .user = user, .extra = extra }), 0);
	ck_assert_ptr_null(open_config(cfg, &rc, &e));
	ck_assert_msg(rc != ASP_OK, "%s", e.message); /* the proxy never connects anywhere */
	ck_assert_ptr_nonnull(got = fx_read_file(out, NULL));
	ck_assert_msg(!strncmp(got, user, strlen(user)) && !strcmp(got + strlen(user), "|127.0.0.1"),
		      "the proxy command saw [%s]", got);
	free(got);
	for (const char *p = "PWNED\0PWNED2\0PWNED3\0"; *p; p += strlen(p) + 1) {
		struct stat st;
		tmp_path(pwned, sizeof(pwned), p);
		ck_assert_msg(stat(pwned, &st) != 0, "%s was created", p);
	}
}
END_TEST

/* -------------------------------------------------------------- descriptors */

static int fd_open(int fd)
{
	return fcntl(fd, F_GETFD) != -1;
}

START_TEST(test_descriptors_close_on_exec)
{
	char before[1024] = { 0 }, cfg[300];
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_cancel *cancel = NULL;
	asp_error e = { 0 };
	asp_sandbox *sb;
	int checked = 0;

	start_server(NULL);
	for (int fd = 0; fd < 1024; fd++)
		before[fd] = (char)fd_open(fd);
	/* Trust on first use, so the store and its lock are opened too. */
	tmp_path(cfg, sizeof(cfg), "tofu.json");
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .host_key = FX_OMIT }), 0);
	ck_assert_int_eq(asp_cancel_new(&cancel, &e), ASP_OK);
	sb = open_ok(cfg);
	o.call.cancel = cancel;
	ck_assert_int_eq(asp_exec(&r, sb, "true", &o, &e), ASP_OK);
	asp_exec_result_free(r);
	ck_assert_int_eq(asp_write(sb, "fds.txt", "x", 1, NULL, &e), ASP_OK);

	for (int fd = 0; fd < 1024; fd++) {
		if (before[fd] || !fd_open(fd))
			continue;
		ck_assert_msg(fcntl(fd, F_GETFD) & FD_CLOEXEC, "descriptor %d is not close-on-exec", fd);
		checked++;
	}
	ck_assert_msg(checked >= 3, "only %d new descriptors (a socket and the cancel pipe expected)",
		      checked);
	asp_close(sb);
	asp_cancel_free(cancel);
	for (int fd = 0; fd < 1024; fd++)
		ck_assert_msg(fd_open(fd) == before[fd], "descriptor %d %s", fd,
			      before[fd] ? "was closed" : "was left open");
}
END_TEST

/* -------------------------------------------------------------- hostile servers */

/* A "Subsystem sftp" script for the fixture's sshd (run by the login user's shell). */
static void hostile_sftp(char *extra, size_t n, const char *name, const char *script)
{
	char path[300];

	tmp_path(path, sizeof(path), name);
	ck_assert_int_eq(fx_run("printf '%%s\\n' '%s' > '%s' && chmod 755 '%s'", script, path, path), 0);
	snprintf(extra, n, "Subsystem sftp /bin/sh %s\n", path);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The server announces a 2 GiB packet: refused at once, nothing of that size allocated. */
START_TEST(test_sftp_packet_size_cap)
{
	char extra[400];
	asp_sandbox *sb;
	asp_stat_info st;
	asp_error e = { 0 };
	int rc;

	/* Swallow INIT, answer with a length of 0x7fffffff and a trickle of bytes. */
	hostile_sftp(extra, sizeof(extra), "big.sh",
		     "head -c 9 >/dev/null; printf \"\\177\\377\\377\\377\\002\"; sleep 20");
	start_server(extra);
	sb = open_sftp_ok(fx.config);
	/* Not an ASP_ETIMEOUT: the length alone ends it, not the 20 s trickle. */
	rc = asp_stat(&st, sb, ".", NULL, &e);
	ck_assert_msg(rc == ASP_EPROTO && strstr(e.message, "malformed SFTP packet length"), "%s: %s",
		      asp_error_name(rc), e.message);
	asp_close(sb);
}
END_TEST

/* A reply for a request that was not sent (id 99): ASP_EPROTO, the connection is given up. */
START_TEST(test_sftp_reply_id_checked)
{
	char extra[400];
	asp_sandbox *sb;
	asp_stat_info st;
	asp_error e = { 0 };
	int rc;

	/* VERSION 3, then, whatever is asked, a STATUS OK for id 99. */
	hostile_sftp(extra, sizeof(extra), "ids.sh",
		     "head -c 9 >/dev/null; printf \"\\0\\0\\0\\5\\2\\0\\0\\0\\3\"; head -c 4 >/dev/null; "
		     "printf \"\\0\\0\\0\\11\\145\\0\\0\\0\\143\\0\\0\\0\\0\"; sleep 20");
	start_server(extra);
	sb = open_sftp_ok(fx.config);
	rc = asp_stat(&st, sb, ".", NULL, &e);
	ck_assert_msg(rc == ASP_EPROTO && strstr(e.message, "out of order"), "%s: %s", asp_error_name(rc),
		      e.message);
	asp_close(sb);
}
END_TEST

/*
 * A server whose SFTP subsystem never answers INIT is not a hang: after
 * io_timeout_ms, file_transport auto turns the connection to shell
 * commands; forced SFTP fails, naming the missing subsystem.
 */
START_TEST(test_silent_sftp_server_times_out)
{
	char extra[400], kh[300];
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox_info info = ASP_SANDBOX_INFO_INIT;
	asp_sandbox *sb;
	asp_stat_info st;
	asp_error e = { 0 };
	double t0;
	int rc;

	hostile_sftp(extra, sizeof(extra), "silent.sh", "sleep 30");
	start_server(extra);
	sb = open_ok(fx.config); /* io_timeout_ms = 2000 */
	t0 = now_s();
	rc = asp_stat(&st, sb, ".", NULL, &e);
	ck_assert_msg(rc == ASP_OK && st.type == ASP_TYPE_DIR, "auto: %s: %s", asp_error_name(rc),
		      e.message);
	ck_assert_msg(now_s() - t0 < 10.0 * (double)fx_slowdown(), "took %.1f s (a hang detector)", now_s() - t0);
	ck_assert_int_eq(asp_sandbox_info_get(&info, sb, &e), ASP_OK);
	ck_assert_int_eq(info.file_transport, ASP_FILES_EXEC);
	asp_close(sb);

	tmp_path(kh, sizeof(kh), "known_hosts");
	o.config_path = fx.config;
	o.known_hosts = kh;
	o.io_timeout_ms = 2000;
	o.file_transport = ASP_FILES_SFTP;
	ck_assert_int_eq(asp_open(&sb, &o, &e), ASP_OK);
	t0 = now_s();
	rc = asp_stat(&st, sb, ".", NULL, &e);
	ck_assert_msg(rc == ASP_EPROTO && strstr(e.message, "no SFTP subsystem"), "forced sftp: %s: %s",
		      asp_error_name(rc), e.message);
	ck_assert_msg(now_s() - t0 < 10.0 * (double)fx_slowdown(), "took %.1f s (a hang detector)", now_s() - t0);
	asp_close(sb);
}
END_TEST

/* The whole file text, or "" (never NULL); free it. */
static char *text_of(const char *path)
{
	char *t = fx_read_file(path, NULL);

	return t ? t : strdup("");
}

static int count_of(const char *text, const char *needle)
{
	int n = 0;

	for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

static void *busy_exec(void *arg)
{
	asp_sandbox *sb = arg;
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "touch %s/busy && sleep 3", fx.workspace);
	if (asp_exec(&r, sb, cmd, NULL, &e) == ASP_OK) {
		if (asp_exec_result_exit_code(r) != 0)
			fprintf(stderr, "security: `%s` exited %d\n", cmd, asp_exec_result_exit_code(r));
		asp_exec_result_free(r);
	} else {
		fprintf(stderr, "security: `%s`: %s\n", cmd, e.message);
	}
	return NULL;
}

/*
 * Under auto, a handle asks for SFTP once: after one connection found the
 * subsystem silent (io_timeout_ms spent), a second connection of the same
 * handle goes to shell commands without asking (the subsystem's program,
 * which logs each start, started once for two connections).
 */
START_TEST(test_silent_sftp_asked_once_per_handle)
{
	char extra[600], script[600], starts[400], busy[400];
	asp_sandbox *sb;
	asp_stat_info st;
	asp_error e = { 0 };
	pthread_t th;
	char *log, *seen;
	int rc;

	tmp_path(starts, sizeof(starts), "sftp-starts");
	snprintf(script, sizeof(script), "echo start >> %s; sleep 30", starts);
	ck_assert_int_eq(fx_run("rm -f '%s' && touch '%s' && chmod 666 '%s'", starts, starts, starts), 0);
	hostile_sftp(extra, sizeof(extra), "silent-logged.sh", script);
	start_server(extra);
	snprintf(busy, sizeof(busy), "%s/busy", fx.workspace);
	sb = open_ok(fx.config); /* io_timeout_ms = 2000 */
	rc = asp_stat(&st, sb, ".", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "first stat: %s: %s", asp_error_name(rc), e.message);
	seen = text_of(starts);
	ck_assert_int_eq(count_of(seen, "start"), 1);
	free(seen);

	/* The first connection busy: the next call takes a second one. */
	ck_assert_int_eq(pthread_create(&th, NULL, busy_exec, sb), 0);
	for (int i = 0; i < 200 && !local_exists(busy); i++)
		fx_sleep_ms(50);
	ck_assert_msg(local_exists(busy), "the busy command did not start");
	rc = asp_stat(&st, sb, ".", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "second stat: %s: %s", asp_error_name(rc), e.message);
	pthread_join(th, NULL);
	log = text_of(fx.log);
	ck_assert_msg(count_of(log, "Accepted publickey") >= 2, "the second call did not open a second "
		      "connection");
	free(log);
	seen = text_of(starts);
	ck_assert_msg(count_of(seen, "start") == 1, "the SFTP subsystem started %d times for one handle",
		      count_of(seen, "start"));
	free(seen);
	asp_close(sb);
}
END_TEST

/* The shell did not run our wrapper (ForceCommand stands in for a non-POSIX shell). */
START_TEST(test_wrapper_not_run_is_eproto)
{
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	asp_sandbox *sb;
	int rc;

	start_server("ForceCommand echo this is not your command\n");
	sb = open_ok(fx.config);
	rc = asp_exec(&r, sb, "echo hello", NULL, &e);
	ck_assert_msg(rc == ASP_EPROTO && strstr(e.message, "POSIX"), "%s: %s", asp_error_name(rc),
		      e.message);
	ck_assert_ptr_null(r);
	asp_close(sb);
}
END_TEST

/* -------------------------------------------------------------- documented limits */

/* Reads "pids A B C\n" from stdout and sees each of them alive as it comes. */
typedef struct pids_seen {
	char out[256];
	size_t len;
	int pids[3];
	int npids, alive;
} pids_seen;

static int see_pids(asp_stream stream, const unsigned char *data, size_t len, void *userdata)
{
	pids_seen *ps = userdata;
	const char *line;

	if (stream != ASP_STDOUT || ps->npids || ps->len + len >= sizeof(ps->out))
		return 0;
	memcpy(ps->out + ps->len, data, len);
	ps->len += len;
	ps->out[ps->len] = '\0';
	if (!(line = strstr(ps->out, "pids ")) || !strchr(line, '\n'))
		return 0;
	ps->npids = sscanf(line, "pids %d %d %d", &ps->pids[0], &ps->pids[1], &ps->pids[2]);
	for (int i = 0; i < ps->npids; i++)
		ps->alive += ps->pids[i] > 1 && pid_alive(ps->pids[i]);
	return 0;
}

/*
 * A process that makes its own session (setsid) leaves the process group,
 * and one whose parent exits is re-parented out of the shell's tree: the
 * timeout must still reach it. Here the escaped shell is both (a subshell
 * starts it and exits), so only the call's ASP_CALL token still ties it to
 * the call. The shell and its sleep (in the group) and the escaped shell are
 * all seen alive first; after the timeout all are gone. The escaped shell
 * would write escaped.marker 20 s on if it lived: the call returned without
 * waiting for it (its stdout is the channel's) when the marker is absent.
 */
START_TEST(test_setsid_descendant_killed)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	asp_sandbox *sb;
	pids_seen ps = { 0 };
	char marker[400];
	int escaped, gone;

	start_server(NULL);
	sb = open_ok(fx.config);
	snprintf(marker, sizeof(marker), "%s/escaped.marker", fx.workspace);
	/* The command names its pids as soon as the escaped one is up; 3 s leaves
	 * time to see them alive under ASan on two busy cores. */
	o.kill_after_ms = 3000;
	o.kill_grace_ms = 200;
	o.on_output = see_pids;
	o.userdata = &ps;
	ck_assert_int_eq(asp_exec(&r, sb,
				  "( setsid sh -c 'echo $$ > escaped.pid; sleep 20; "
				  "echo survived > escaped.marker' & ); "
				  "while [ ! -s escaped.pid ]; do sleep 0.05; done; "
				  "sleep 30 & echo \"pids $$ $! $(cat escaped.pid)\"; wait",
				  &o, &e),
			 ASP_OK);
	ck_assert(asp_exec_result_timed_out(r));
	asp_exec_result_free(r);
	ck_assert_msg(access(marker, F_OK) != 0,
		      "the call waited for the escaped process (%s exists)", marker);
	escaped = ps.npids == 3 ? ps.pids[2] : 0;
	ck_assert_msg(ps.npids == 3 && ps.alive == 3,
		      "saw %d of the %d pids (shell, sleep, escaped shell) alive before the timeout",
		      ps.alive, ps.npids);
	ck_assert_msg(wait_gone(ps.pids[0], 10000), "the shell survived the timeout");
	ck_assert_msg(wait_gone(ps.pids[1], 10000), "the shell's sleep survived the timeout");
	gone = wait_gone(escaped, 10000);
	if (!gone && escaped > 1)
		kill(escaped, SIGKILL); /* the test's own escaped process, by its id */
	ck_assert_msg(gone, "the setsid process (pid %d) survived the timeout", escaped);
	ck_assert_msg(access(marker, F_OK) != 0, "the escaped process wrote %s", marker);
	asp_close(sb);
}
END_TEST

Suite *suite_security(void)
{
	TCase *slow;
	Suite *s = suite_create("security");
	TCase *tc = tcase_create("security");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_key_text_never_in_messages, 0, 10);
	tcase_add_test(tc, test_key_file_of_another_user);
	tcase_add_test(tc, test_harness_address_not_in_command_env);
	tcase_add_test(tc, test_proxy_command_placeholders_quoted);
	tcase_add_test(tc, test_descriptors_close_on_exec);
	tcase_add_test(tc, test_sftp_packet_size_cap);
	tcase_add_test(tc, test_sftp_reply_id_checked);
	tcase_add_test(tc, test_wrapper_not_run_is_eproto);
	suite_add_tcase(s, tc);
	slow = slow_case(s, "security-slow", FIXTURE_CHECKED, setup, teardown, 60);
	tcase_add_test(slow, test_no_secret_reaches_sandbox);
	tcase_add_test(slow, test_silent_sftp_server_times_out);
	tcase_add_test(slow, test_silent_sftp_asked_once_per_handle);
	tcase_add_test(slow, test_setsid_descendant_killed);
	return s;
}
