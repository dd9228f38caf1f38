/*
 * test_trust.c - who we trust and how we prove who we are, against a real
 * sshd: config discovery, pinned host keys (line and fingerprint), a
 * mismatch that fails closed before any credential is sent (checked in
 * sshd's own log), trust on first use with an OpenSSH known_hosts file,
 * @revoked entries, identities by path / env / ~, key file permissions,
 * passphrases, RSA under libssh2 1.10, ssh-agent, token-as-user-name
 * ("none" auth), connection failures and ASP_OPEN_LAZY.
 *
 * Every test runs in its own forked child with its own temp dir (HOME and
 * XDG_CONFIG_HOME point into it, so nothing touches the real ~/.config) and
 * its own known_hosts path; servers are started per test.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "asp.h"
#include "fixture/fixture.h"
#include "hostkey.h"

#define TOKEN_USER "asp-token"
#define IDENTITY_VAR "ASP_TEST_TRUST_IDENTITY"

/* ------------------------------------------------------------ per-test state */

static struct {
	char tmp[64];        /* private temp dir, removed on success */
	char kh[PATH_MAX];   /* this test's known_hosts path (inside tmp) */
} T;

static fx_sshd fx;     /* the server of the test (started by start_server) */
static fx_sshd fx2;    /* a second server, for tests that need two */
static pid_t agent_pid; /* ssh-agent started by the test, 0 when none */

static void setup(void)
{
	static const char *const clear[] = { "ASP_CONFIG", "ASP_KNOWN_HOSTS", "SSH_AUTH_SOCK",
					     "SSH_AGENT_PID", "ASP_IDENTITY_PASSPHRASE",
					     IDENTITY_VAR, NULL };
	char tmpl[] = "/tmp/asp-trust.XXXXXX", home[PATH_MAX + 8], xdg[PATH_MAX + 8];

	memset(&fx, 0, sizeof(fx));
	memset(&fx2, 0, sizeof(fx2));
	agent_pid = 0;
	ck_assert_ptr_nonnull(mkdtemp(tmpl));
	snprintf(T.tmp, sizeof(T.tmp), "%s", tmpl);
	snprintf(T.kh, sizeof(T.kh), "%s/known_hosts", T.tmp);
	for (size_t i = 0; clear[i]; i++)
		unsetenv(clear[i]);
	/* Nothing may fall back to the real user's files. */
	snprintf(home, sizeof(home), "%s/home", T.tmp);
	snprintf(xdg, sizeof(xdg), "%s/xdg", T.tmp);
	ck_assert_int_eq(mkdir(home, 0700), 0);
	setenv("HOME", home, 1);
	setenv("XDG_CONFIG_HOME", xdg, 1);
}

static void stop_agent(void)
{
	if (agent_pid > 0) {
		kill(agent_pid, SIGTERM);
		waitpid(agent_pid, NULL, 0);
		agent_pid = 0;
	}
}

static void teardown(void)
{
	stop_agent();
	fx_sshd_stop(&fx);
	fx_sshd_stop(&fx2);
	if (T.tmp[0])
		fx_run("rm -rf '%s'", T.tmp);
}

static void start_server(void)
{
	ck_assert_int_eq(fx_sshd_start(&fx), 0);
}

/* ------------------------------------------------------------ small helpers */

/* out = T.tmp + "/" + name (printf-style). */
static void tmp_path(char *out, size_t outlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void tmp_path(char *out, size_t outlen, const char *fmt, ...)
{
	char name[PATH_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	n = snprintf(out, outlen, "%s/%s", T.tmp, name);
	ck_assert(n > 0 && (size_t)n < outlen);
}

#define TMP_PATH(buf, ...) tmp_path(buf, sizeof(buf), __VA_ARGS__)

static void mkdirs(const char *dir)
{
	ck_assert_int_eq(fx_run("mkdir -p '%s'", dir), 0);
}

#define assert_contains(haystack, needle)                                                   \
	ck_assert_msg(strstr((haystack), (needle)) != NULL, "expected \"%s\" in: %s", (needle), \
		      (haystack))

static int file_exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static char *read_text(const char *path)
{
	char *text = fx_read_file(path, NULL);

	ck_assert_msg(text != NULL, "cannot read %s", path);
	return text;
}

static void write_text(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");

	ck_assert_msg(f != NULL, "cannot write %s", path);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(path, mode), 0);
}

static void assert_file_equals(const char *path, const char *expected)
{
	char *text = read_text(path);

	ck_assert_str_eq(text, expected);
	free(text);
}

/* ------------------------------------------------------------ keys */

/* A fresh key pair at `path` (+ ".pub"); `options` e.g. "-t rsa -b 2048 -m PEM". */
static void make_key(const char *path, const char *options, const char *passphrase)
{
	ck_assert_int_eq(fx_run("rm -f '%s' '%s.pub' && ssh-keygen -q %s -N '%s' -C '' -f '%s' "
				"</dev/null >/dev/null",
				path, path, options, passphrase, path),
			 0);
}

/* Let the fixture's login user in with `key` (appended to its authorized_keys). */
static void authorize(const char *key)
{
	ck_assert_int_eq(fx_run("cat '%s.pub' >> '%s/authorized_keys'", key, fx.dir), 0);
}

static void copy_file(const char *from, const char *to, mode_t mode)
{
	ck_assert_int_eq(fx_run("cp '%s' '%s'", from, to), 0);
	ck_assert_int_eq(chmod(to, mode), 0);
}

/* "type base64" of a .pub file (no comment, no newline); free it. */
static char *pub_line(const char *key)
{
	char path[PATH_MAX + 8], *text;

	snprintf(path, sizeof(path), "%s.pub", key);
	text = read_text(path);
	text[strcspn(text, "\n")] = '\0';
	if (strchr(text, ' ') != strrchr(text, ' '))
		*strrchr(text, ' ') = '\0'; /* drop the comment */
	return text;
}

/* "SHA256:..." of a public key file. */
static void fingerprint_of(const char *pub, char *out, size_t outlen)
{
	char cmd[PATH_MAX + 64], line[512], fpr[128];
	FILE *p;

	snprintf(cmd, sizeof(cmd), "ssh-keygen -l -E sha256 -f '%s'", pub);
	fflush(NULL);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), p));
	pclose(p);
	ck_assert_int_eq(sscanf(line, "%*s %127s", fpr), 1);
	ck_assert_int_eq(strncmp(fpr, "SHA256:", 7), 0);
	snprintf(out, outlen, "%s", fpr);
}

static void host_fingerprint(char *out, size_t outlen)
{
	ck_assert_int_eq(fx_host_fingerprint(&fx, out, outlen), 0);
}

/* ------------------------------------------------------------ opening */

static int open_with(asp_sandbox **sb, const asp_open_options *o, asp_error *err)
{
	memset(err, 0, sizeof(*err));
	*sb = NULL;
	return asp_open(sb, o, err);
}

/* asp_open of `config` with this test's known_hosts. */
static int open_config(asp_sandbox **sb, const char *config, unsigned int flags, asp_error *err)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;

	o.config_path = config;
	o.known_hosts = T.kh;
	o.flags = flags;
	return open_with(sb, &o, err);
}

static asp_sandbox *open_ok(const char *config)
{
	asp_sandbox *sb;
	asp_error err;
	int rc = open_config(&sb, config, 0, &err);

	ck_assert_msg(rc == ASP_OK, "asp_open(%s): %s: %s", config, asp_error_name(rc), err.message);
	ck_assert_ptr_nonnull(sb);
	return sb;
}

/* asp_open must fail with `code`; err keeps the message for further checks. */
static void open_fails(const char *config, int code, asp_error *err)
{
	asp_sandbox *sb;
	int rc = open_config(&sb, config, 0, err);

	ck_assert_msg(rc == code, "asp_open(%s): expected %s, got %s: %s", config,
		      asp_error_name(code), asp_error_name(rc), err->message);
	ck_assert_int_eq(err->code, code);
	ck_assert_ptr_null(sb);
}

static asp_sandbox_info info_of(asp_sandbox *sb)
{
	asp_sandbox_info info;
	asp_error err = { 0 };

	memset(&info, 0, sizeof(info));
	info.version = ASP_SANDBOX_INFO_VERSION;
	ck_assert_msg(asp_sandbox_info_get(&info, sb, &err) == ASP_OK, "info: %s", err.message);
	return info;
}

/* Run `cmd`; returns its exit code, stdout in out (NUL-terminated). */
static int run_cmd(asp_sandbox *sb, const char *cmd, char *out, size_t outlen)
{
	asp_exec_result *r = NULL;
	asp_error err = { 0 };
	const unsigned char *data;
	size_t len;
	int code, rc = asp_exec(&r, sb, cmd, NULL, &err);

	ck_assert_msg(rc == ASP_OK, "asp_exec(%s): %s: %s", cmd, asp_error_name(rc), err.message);
	data = asp_exec_result_output(r, ASP_STDOUT, &len);
	snprintf(out, outlen, "%.*s", (int)len, (const char *)data);
	code = asp_exec_result_exit_code(r);
	asp_exec_result_free(r);
	return code;
}

/* Open `config`, check how it was trusted and authenticated, prove exec works. */
static void assert_opens(const char *config, int trust, int auth)
{
	asp_sandbox *sb = open_ok(config);
	asp_sandbox_info info = info_of(sb);
	char out[64];

	ck_assert_int_eq(info.trust, trust);
	ck_assert_int_eq(info.auth, auth);
	ck_assert_int_eq(run_cmd(sb, "echo ok", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "ok\n");
	asp_close(sb);
}

/* A config for fx at T.tmp/name. */
static void write_config(char *out, size_t outlen, const char *name, const fx_config_opts *o)
{
	tmp_path(out, outlen, "%s", name);
	ck_assert_int_eq(fx_write_config(&fx, out, o), 0);
}

#define WRITE_CONFIG(buf, name, ...) write_config(buf, sizeof(buf), name, __VA_ARGS__)

/* ------------------------------------------------------------ sshd's log */

/* Lines sshd (LogLevel VERBOSE) writes once a client starts user authentication. */
static const char *const auth_marks[] = {
	"Accepted publickey", "Failed publickey", "Postponed publickey", "Accepted key",
	"userauth", "authenticating user", "Accepted none", "Failed none", "Invalid user",
};
#define N_AUTH_MARKS (sizeof(auth_marks) / sizeof(auth_marks[0]))

typedef struct log_mark {
	size_t len;                /* log size at the mark */
	int auth[N_AUTH_MARKS];    /* occurrences of each auth_marks[i] */
	int connections;           /* "Connection from 127.0.0.1" */
} log_mark;

static int count(const char *text, const char *needle)
{
	int n = 0;

	for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

static void log_take(log_mark *m, const char *text)
{
	m->len = strlen(text);
	for (size_t i = 0; i < N_AUTH_MARKS; i++)
		m->auth[i] = count(text, auth_marks[i]);
	m->connections = count(text, "Connection from 127.0.0.1");
}

static log_mark log_now(void)
{
	log_mark m;
	char *text = read_text(fx.log);

	log_take(&m, text);
	free(text);
	return m;
}

/* Does `line` (up to its newline) mention "port <port>" (not a longer number)? */
static int line_has_port(const char *line, int port)
{
	char needle[32];
	const char *end = strchr(line, '\n'), *p = line;
	size_t n = (size_t)snprintf(needle, sizeof(needle), "port %d", port);

	if (!end)
		end = line + strlen(line);
	while ((p = strstr(p, needle)) != NULL && p < end) {
		if (p + n <= end && (p[n] < '0' || p[n] > '9'))
			return 1;
		p += n;
	}
	return 0;
}

/*
 * Since `before`, sshd saw exactly one new connection and said nothing
 * about it but "Connection from" and an unauthenticated close: none of the
 * lines a user authentication attempt produces, not even the user name.
 * (Lines about earlier connections, which sshd may log late, are told
 * apart by the client port.)
 */
static void assert_no_auth_since(const log_mark *before)
{
	log_mark after;
	char *text = NULL, closed[96];
	const char *seg = NULL, *from;
	int port = -1;

	for (int waited = 0; waited < 5000; waited += 20) {
		free(text);
		text = read_text(fx.log);
		seg = text + before->len;
		from = strstr(seg, "Connection from 127.0.0.1 port ");
		if (from && sscanf(from, "Connection from 127.0.0.1 port %d", &port) == 1) {
			snprintf(closed, sizeof(closed), "Connection closed by 127.0.0.1 port %d [preauth]",
				 port);
			if (strstr(seg, closed)) /* sshd logs the close asynchronously */
				break;
		}
		fx_sleep_ms(20);
	}
	log_take(&after, text);
	ck_assert_msg(after.connections == before->connections + 1,
		      "expected one new connection in sshd's log, got %d:\n%s",
		      after.connections - before->connections, seg);
	ck_assert_msg(strstr(seg, closed) != NULL,
		      "expected \"%s\" in sshd's log:\n%s", closed, seg);
	for (size_t i = 0; i < N_AUTH_MARKS; i++)
		ck_assert_msg(after.auth[i] == before->auth[i],
			      "sshd logged \"%s\" for a connection that must not authenticate:\n%s",
			      auth_marks[i], seg);
	for (const char *line = seg; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "") {
		if (!line_has_port(line, port))
			continue;
		/* e.g. "Connection closed by authenticating user asp-test ..." would fail here */
		ck_assert_msg(!strncmp(line, "Connection from ", 16) || !strncmp(line, closed, strlen(closed)),
			      "unexpected line about the connection in sshd's log:\n%s", seg);
	}
	free(text);
}

/* ============================================================ discovery */

START_TEST(test_discovery_from_nested_dir)
{
	char proj[PATH_MAX], nested[PATH_MAX], cfg[PATH_MAX], real[PATH_MAX], *found = NULL;
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb;
	asp_error err;

	start_server();
	TMP_PATH(proj, "proj");
	TMP_PATH(nested, "proj/a/b/c");
	mkdirs(nested);
	WRITE_CONFIG(cfg, "proj/.asp.json", NULL);
	ck_assert_ptr_nonnull(realpath(cfg, real));

	/* From a nested start_dir, the parent's file; always an absolute path. */
	ck_assert_int_eq(asp_config_find(&found, nested, &err), ASP_OK);
	ck_assert_str_eq(found, real);
	asp_free(found);

	/* A relative start_dir and NULL (the cwd) give the same absolute path. */
	ck_assert_int_eq(chdir(T.tmp), 0);
	ck_assert_int_eq(asp_config_find(&found, "proj/a/b", &err), ASP_OK);
	ck_assert_str_eq(found, real);
	asp_free(found);
	ck_assert_int_eq(chdir(nested), 0);
	ck_assert_int_eq(asp_config_find(&found, NULL, &err), ASP_OK);
	ck_assert_str_eq(found, real);
	asp_free(found);
	ck_assert_int_eq(chdir("/"), 0);

	/* asp_open with start_dir and no config_path uses it and connects. */
	o.start_dir = nested;
	o.known_hosts = T.kh;
	ck_assert_msg(open_with(&sb, &o, &err) == ASP_OK, "%s", err.message);
	ck_assert_str_eq(asp_sandbox_config_path(sb), real);
	ck_assert_int_eq(info_of(sb).trust, ASP_TRUST_PINNED);
	asp_close(sb);
}
END_TEST

START_TEST(test_discovery_nearest_wins)
{
	char nested[PATH_MAX], outer[PATH_MAX], inner[PATH_MAX], real[PATH_MAX], *found = NULL;
	asp_error err;

	start_server();
	TMP_PATH(nested, "proj/a/b");
	mkdirs(nested);
	WRITE_CONFIG(outer, "proj/.asp.json", NULL);
	WRITE_CONFIG(inner, "proj/a/.asp.json", NULL);
	ck_assert_ptr_nonnull(realpath(inner, real));
	ck_assert_int_eq(asp_config_find(&found, nested, &err), ASP_OK);
	ck_assert_str_eq(found, real);
	asp_free(found);
}
END_TEST

START_TEST(test_discovery_asp_config_env_wins)
{
	char nested[PATH_MAX], cfg[PATH_MAX], other[PATH_MAX], real[PATH_MAX], missing[PATH_MAX];
	char *found = NULL;
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb;
	asp_error err;

	start_server();
	TMP_PATH(nested, "proj/a/b");
	mkdirs(nested);
	WRITE_CONFIG(cfg, "proj/.asp.json", NULL);
	TMP_PATH(other, "elsewhere");
	mkdirs(other);
	WRITE_CONFIG(other, "elsewhere/sandbox.json", NULL);
	ck_assert_ptr_nonnull(realpath(other, real));

	setenv("ASP_CONFIG", other, 1);
	ck_assert_int_eq(asp_config_find(&found, nested, &err), ASP_OK);
	ck_assert_str_eq(found, real);
	asp_free(found);
	o.start_dir = nested;
	o.known_hosts = T.kh;
	ck_assert_msg(open_with(&sb, &o, &err) == ASP_OK, "%s", err.message);
	ck_assert_str_eq(asp_sandbox_config_path(sb), real);
	asp_close(sb);

	/* A relative ASP_CONFIG comes back absolute. */
	ck_assert_int_eq(chdir(T.tmp), 0);
	setenv("ASP_CONFIG", "elsewhere/sandbox.json", 1);
	ck_assert_int_eq(asp_config_find(&found, nested, &err), ASP_OK);
	ck_assert_str_eq(found, real);
	asp_free(found);
	ck_assert_int_eq(chdir("/"), 0);

	/* ASP_CONFIG must exist: no silent fallback to discovery. */
	TMP_PATH(missing, "elsewhere/missing.json");
	setenv("ASP_CONFIG", missing, 1);
	found = NULL;
	ck_assert_int_eq(asp_config_find(&found, nested, &err), ASP_ENOCONFIG);
	ck_assert_ptr_null(found);
	assert_contains(err.message, missing);
	ck_assert_int_eq(open_with(&sb, &o, &err), ASP_ENOCONFIG);
	ck_assert_ptr_null(sb);
}
END_TEST

/* ============================================================ pinned host key */

/* loop: 0 pins the OpenSSH line (with a comment), 1 the SHA256 fingerprint. */
START_TEST(test_pinned)
{
	char cfg[PATH_MAX], fpr[128], pin[600];
	asp_sandbox *sb;
	asp_sandbox_info info;

	start_server();
	host_fingerprint(fpr, sizeof(fpr));
	if (_i == 0)
		snprintf(pin, sizeof(pin), "%s root@sandbox", fx.host_key_line);
	else
		snprintf(pin, sizeof(pin), "%s", fpr);
	WRITE_CONFIG(cfg, "pinned.json", &(fx_config_opts){ .host_key = pin });

	sb = open_ok(cfg);
	info = info_of(sb);
	ck_assert_int_eq(info.trust, ASP_TRUST_PINNED);
	ck_assert_int_eq(info.auth, ASP_AUTH_PUBLICKEY);
	ck_assert_str_eq(info.host_key_fingerprint, fpr);
	ck_assert_str_eq(info.host_key_type, "ssh-ed25519");
	ck_assert_str_eq(info.known_hosts, "");
	asp_close(sb);
	/* A pinned key never touches the trust-on-first-use store. */
	ck_assert(!file_exists(T.kh));
}
END_TEST

/* loop: 0 pins another key's line, 1 its fingerprint. */
START_TEST(test_pinned_mismatch_sends_nothing)
{
	char cfg[PATH_MAX], other[PATH_MAX], other_pub[PATH_MAX + 8], want[128], got[128];
	char *line;
	log_mark before;
	asp_error err;

	start_server();
	TMP_PATH(other, "other_host_key");
	make_key(other, "-t ed25519", "");
	snprintf(other_pub, sizeof(other_pub), "%s.pub", other);
	fingerprint_of(other_pub, want, sizeof(want));
	host_fingerprint(got, sizeof(got));
	line = pub_line(other);
	WRITE_CONFIG(cfg, "mismatch.json", &(fx_config_opts){ .host_key = _i == 0 ? line : want });
	free(line);

	/* Control: a good connection does log the marks we look for. */
	before = log_now();
	assert_opens(fx.config, ASP_TRUST_PINNED, ASP_AUTH_PUBLICKEY);
	ck_assert_int_gt(log_now().auth[0], before.auth[0]); /* "Accepted publickey" */

	before = log_now();
	open_fails(cfg, ASP_EHOSTKEY, &err);
	assert_contains(err.message, want);
	assert_contains(err.message, got);
	assert_contains(err.message, cfg);
	assert_no_auth_since(&before);
	ck_assert(!file_exists(T.kh));
}
END_TEST

/* ============================================================ trust on first use */

/* The one entry we expect for fx in a known_hosts file. */
static void expected_entry(char *out, size_t outlen)
{
	snprintf(out, outlen, "[127.0.0.1]:%d %s\n", fx.port, fx.host_key_line);
}

/* No "known_hosts.tmp.*" left behind in the store's directory. */
static void assert_no_temp_files(void)
{
	ck_assert_int_ne(fx_run("ls -a '%s' | grep -q 'known_hosts\\.tmp'", T.tmp), 0);
}

START_TEST(test_tofu_first_use_then_known)
{
	char cfg[PATH_MAX], entry[700], fpr[128], host[64];
	asp_sandbox *sb;
	asp_sandbox_info info;
	struct stat st;

	start_server();
	WRITE_CONFIG(cfg, "tofu.json", &(fx_config_opts){ .host_key = FX_OMIT });
	host_fingerprint(fpr, sizeof(fpr));
	expected_entry(entry, sizeof(entry));
	ck_assert(!file_exists(T.kh));

	sb = open_ok(cfg);
	info = info_of(sb);
	ck_assert_int_eq(info.trust, ASP_TRUST_FIRST_USE);
	ck_assert_str_eq(info.host_key_fingerprint, fpr);
	ck_assert_str_eq(info.host_key_type, "ssh-ed25519");
	ck_assert_str_eq(info.known_hosts, T.kh);
	asp_close(sb);

	/* One OpenSSH-format line, private, that OpenSSH itself finds. */
	ck_assert_int_eq(stat(T.kh, &st), 0);
	ck_assert_int_eq(st.st_mode & 07777, 0600);
	assert_file_equals(T.kh, entry);
	snprintf(host, sizeof(host), "[127.0.0.1]:%d", fx.port);
	ck_assert_int_eq(fx_run("ssh-keygen -F '%s' -f '%s' | grep -q ssh-ed25519", host, T.kh), 0);
	ck_assert_int_ne(fx_run("ssh-keygen -F '[127.0.0.1]:%d' -f '%s' >/dev/null", fx.port + 1,
				T.kh),
			 0);
	assert_no_temp_files();

	/* Second time: known, and the file is left as it was. */
	assert_opens(cfg, ASP_TRUST_KNOWN, ASP_AUTH_PUBLICKEY);
	assert_file_equals(T.kh, entry);
}
END_TEST

START_TEST(test_tofu_changed_key_fails_closed)
{
	char cfg[PATH_MAX], entry[700], old_fpr[128], new_fpr[128];
	log_mark before;
	asp_error err;

	start_server();
	WRITE_CONFIG(cfg, "tofu.json", &(fx_config_opts){ .host_key = FX_OMIT });
	expected_entry(entry, sizeof(entry));
	host_fingerprint(old_fpr, sizeof(old_fpr));
	assert_opens(cfg, ASP_TRUST_FIRST_USE, ASP_AUTH_PUBLICKEY);
	assert_file_equals(T.kh, entry);

	ck_assert_int_eq(fx_sshd_rotate_host_key(&fx), 0);
	host_fingerprint(new_fpr, sizeof(new_fpr));
	ck_assert_str_ne(old_fpr, new_fpr);
	before = log_now();
	open_fails(cfg, ASP_EHOSTKEY, &err);
	assert_contains(err.message, old_fpr);
	assert_contains(err.message, new_fpr);
	assert_contains(err.message, T.kh);
	assert_no_auth_since(&before);
	/* Fail closed: the new key was not recorded, nothing was rewritten. */
	assert_file_equals(T.kh, entry);
	assert_no_temp_files();
}
END_TEST

/* ------------------------------------------------------------ two keys, one name */

/*
 * A config for `server` that records its key under [127.0.0.1]:name_port:
 * x-asp-proxy-command reaches the server (a real sshd) on its own port, so
 * two servers with different host keys answer for the same name.
 */
static void write_named_config(char *out, size_t outlen, const char *file, const fx_sshd *server,
			       int name_port)
{
	char extra[300];

	tmp_path(out, outlen, "%s", file);
	snprintf(extra, sizeof(extra),
		 "\"x-asp-proxy-command\": \"exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; "
		 "cat <&3 & exec cat >&3'\"", server->port);
	ck_assert_int_eq(fx_write_config(server, out, &(fx_config_opts){ .host_key = FX_OMIT,
		.port = name_port, .extra = extra }), 0);
}

/* How many descriptors of this process are open on `path`. */
static int fds_open_on(const char *path)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d))) {
		char link[300], target[PATH_MAX];
		ssize_t len;

		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		n += !strcmp(target, path);
	}
	closedir(d);
	return n;
}

typedef struct racer {
	const char *config;
	asp_sandbox *sb;
	asp_error err;
	int rc;
	pthread_t thread;
} racer;

static void *race_open(void *arg)
{
	racer *r = arg;

	r->rc = open_config(&r->sb, r->config, 0, &r->err);
	return NULL;
}

/*
 * Two servers with different host keys, one name, first use at the same
 * moment. A second process holds the store's lock until both connections
 * have found the name unknown and wait to record their key, so both reach
 * the read-modify-write. Exactly one key is recorded; the other connection
 * fails closed with ASP_EHOSTKEY (expected the recorded key, got its own);
 * the store is one well-formed line; later opens agree.
 */
START_TEST(test_tofu_race_two_keys)
{
	char cfg[2][PATH_MAX], fpr[2][128], lock[PATH_MAX + 8], entry[700], c;
	racer r[2];
	int ready[2], hold[2], win, lose, status;
	long long until;
	pid_t holder;
	char *text;

	start_server();
	ck_assert_int_eq(fx_sshd_start(&fx2), 0);
	host_fingerprint(fpr[0], sizeof(fpr[0]));
	ck_assert_int_eq(fx_host_fingerprint(&fx2, fpr[1], sizeof(fpr[1])), 0);
	ck_assert_str_ne(fpr[0], fpr[1]);
	write_named_config(cfg[0], sizeof(cfg[0]), "a.json", &fx, fx.port);
	write_named_config(cfg[1], sizeof(cfg[1]), "b.json", &fx2, fx.port);
	snprintf(lock, sizeof(lock), "%s.lock", T.kh);

	/* The holder: a real second process with the store's lock. */
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(hold), 0);
	holder = fork();
	ck_assert_int_ge(holder, 0);
	if (holder == 0) {
		int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

		close(ready[0]);
		close(hold[1]);
		if (fd < 0 || flock(fd, LOCK_EX) || write(ready[1], "L", 1) != 1)
			_exit(1);
		while (read(hold[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(ready[1]);
	close(hold[0]);
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	close(ready[0]);

	memset(r, 0, sizeof(r));
	/* The first to arrive waits for the other longer than a real first use would (5 s). */
	asp__known_hosts_lock_wait(60000 * fx_slowdown());
	for (int i = 0; i < 2; i++) {
		r[i].config = cfg[i];
		ck_assert_int_eq(pthread_create(&r[i].thread, NULL, race_open, &r[i]), 0);
	}
	/* Both wait on the lock: each has the lock file open. A hang detector. */
	for (until = fx_now_ms() + 30000 * fx_slowdown(); fds_open_on(lock) < 2 && fx_now_ms() < until;)
		fx_sleep_ms(5);
	ck_assert_msg(fds_open_on(lock) == 2, "the two first uses did not both reach the store's lock");
	ck_assert_int_eq(kill(holder, 0), 0);
	close(hold[1]); /* let go */
	ck_assert_int_eq(waitpid(holder, &status, 0), holder);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_join(r[i].thread, NULL), 0);
	asp__known_hosts_lock_wait(0);

	ck_assert_msg((r[0].rc == ASP_OK) != (r[1].rc == ASP_OK), "expected one success: %s / %s",
		      r[0].rc ? r[0].err.message : "ok", r[1].rc ? r[1].err.message : "ok");
	win = r[0].rc == ASP_OK ? 0 : 1;
	lose = 1 - win;
	ck_assert_msg(r[lose].rc == ASP_EHOSTKEY, "%s: %s", asp_error_name(r[lose].rc),
		      r[lose].err.message);
	ck_assert_ptr_null(r[lose].sb);
	assert_contains(r[lose].err.message, T.kh);
	assert_contains(r[lose].err.message, fpr[win]);  /* expected */
	assert_contains(r[lose].err.message, fpr[lose]); /* got */
	ck_assert_int_eq(info_of(r[win].sb).trust, ASP_TRUST_FIRST_USE);
	ck_assert_str_eq(info_of(r[win].sb).host_key_fingerprint, fpr[win]);
	asp_close(r[win].sb);

	/* One line: the winner's key under the shared name. */
	snprintf(entry, sizeof(entry), "[127.0.0.1]:%d %s\n", fx.port,
		 win == 0 ? fx.host_key_line : fx2.host_key_line);
	assert_file_equals(T.kh, entry);
	assert_no_temp_files();
	text = read_text(T.kh);
	ck_assert_int_eq(count(text, "\n"), 1);
	free(text);

	/* Afterwards: the winner is known, the loser still refused, the store unchanged. */
	assert_opens(cfg[win], ASP_TRUST_KNOWN, ASP_AUTH_PUBLICKEY);
	open_fails(cfg[lose], ASP_EHOSTKEY, &r[lose].err);
	assert_file_equals(T.kh, entry);
}
END_TEST

START_TEST(test_tofu_revoked)
{
	char cfg[PATH_MAX], entry[700], revoked[700], both[1400], fpr[128];
	asp_error err;

	start_server();
	WRITE_CONFIG(cfg, "tofu.json", &(fx_config_opts){ .host_key = FX_OMIT });
	host_fingerprint(fpr, sizeof(fpr));
	expected_entry(entry, sizeof(entry));
	snprintf(revoked, sizeof(revoked), "@revoked * %s\n", fx.host_key_line);

	/* Revoked and otherwise unknown: refused, and not recorded as a first use. */
	write_text(T.kh, revoked, 0600);
	open_fails(cfg, ASP_EHOSTKEY, &err);
	assert_contains(err.message, "revoked");
	assert_contains(err.message, fpr);
	assert_file_equals(T.kh, revoked);

	/* Revoked wins over a matching entry, whatever the order. */
	snprintf(both, sizeof(both), "%s%s", entry, revoked);
	write_text(T.kh, both, 0600);
	open_fails(cfg, ASP_EHOSTKEY, &err);
	assert_contains(err.message, "revoked");
	assert_file_equals(T.kh, both);

	/* Control: the same entry without the @revoked line is accepted. */
	write_text(T.kh, entry, 0600);
	assert_opens(cfg, ASP_TRUST_KNOWN, ASP_AUTH_PUBLICKEY);
}
END_TEST

START_TEST(test_known_hosts_env)
{
	char cfg[PATH_MAX], env_kh[PATH_MAX], env_dir[PATH_MAX], opt_kh[PATH_MAX], xdg_kh[PATH_MAX];
	char entry[700];
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb;
	asp_error err;
	struct stat st;

	start_server();
	WRITE_CONFIG(cfg, "tofu.json", &(fx_config_opts){ .host_key = FX_OMIT });
	expected_entry(entry, sizeof(entry));
	TMP_PATH(env_dir, "env/store");
	TMP_PATH(env_kh, "env/store/known_hosts"); /* its directories do not exist yet */
	TMP_PATH(opt_kh, "option_known_hosts");
	TMP_PATH(xdg_kh, "xdg/asp/known_hosts");
	setenv("ASP_KNOWN_HOSTS", env_kh, 1);

	/* Option NULL: $ASP_KNOWN_HOSTS is the store (created with private dirs). */
	o.config_path = cfg;
	ck_assert_msg(open_with(&sb, &o, &err) == ASP_OK, "%s", err.message);
	ck_assert_int_eq(info_of(sb).trust, ASP_TRUST_FIRST_USE);
	ck_assert_str_eq(info_of(sb).known_hosts, env_kh);
	asp_close(sb);
	assert_file_equals(env_kh, entry);
	ck_assert_int_eq(stat(env_kh, &st), 0);
	ck_assert_int_eq(st.st_mode & 07777, 0600);
	ck_assert_int_eq(stat(env_dir, &st), 0);
	ck_assert_int_eq(st.st_mode & 07777, 0700);
	ck_assert(!file_exists(xdg_kh));

	/* An explicit option beats the environment. */
	o.known_hosts = opt_kh;
	ck_assert_msg(open_with(&sb, &o, &err) == ASP_OK, "%s", err.message);
	ck_assert_int_eq(info_of(sb).trust, ASP_TRUST_FIRST_USE);
	ck_assert_str_eq(info_of(sb).known_hosts, opt_kh);
	asp_close(sb);
	assert_file_equals(opt_kh, entry);
	assert_file_equals(env_kh, entry);

	/* Neither: $XDG_CONFIG_HOME/asp/known_hosts. */
	unsetenv("ASP_KNOWN_HOSTS");
	o.known_hosts = NULL;
	ck_assert_msg(open_with(&sb, &o, &err) == ASP_OK, "%s", err.message);
	ck_assert_str_eq(info_of(sb).known_hosts, xdg_kh);
	asp_close(sb);
	assert_file_equals(xdg_kh, entry);
}
END_TEST

/* ============================================================ identity */

START_TEST(test_identity_relative_to_config_dir)
{
	char dir[PATH_MAX], key[PATH_MAX], sub[PATH_MAX], cfg[PATH_MAX];

	start_server();
	TMP_PATH(dir, "project/keys");
	mkdirs(dir);
	TMP_PATH(key, "project/mykey");
	copy_file(fx.client_key, key, 0600);
	TMP_PATH(sub, "project/keys/id_ed25519");
	copy_file(fx.client_key, sub, 0600);
	/* The cwd is elsewhere: relative means relative to the .asp.json. */
	ck_assert_int_eq(chdir("/"), 0);

	/* A bare name (that is not a set environment variable) is a file name. */
	WRITE_CONFIG(cfg, "project/.asp.json", &(fx_config_opts){ .identity = "mykey" });
	assert_opens(cfg, ASP_TRUST_PINNED, ASP_AUTH_PUBLICKEY);
	WRITE_CONFIG(cfg, "project/.asp.json", &(fx_config_opts){ .identity = "keys/id_ed25519" });
	assert_opens(cfg, ASP_TRUST_PINNED, ASP_AUTH_PUBLICKEY);
}
END_TEST

START_TEST(test_identity_home)
{
	char ssh_dir[PATH_MAX], key[PATH_MAX], cfg[PATH_MAX];

	start_server();
	TMP_PATH(ssh_dir, "home/.ssh");
	mkdirs(ssh_dir);
	TMP_PATH(key, "home/.ssh/sandbox_key");
	copy_file(fx.client_key, key, 0600);
	WRITE_CONFIG(cfg, "home.json", &(fx_config_opts){ .identity = "~/.ssh/sandbox_key" });
	assert_opens(cfg, ASP_TRUST_PINNED, ASP_AUTH_PUBLICKEY);
}
END_TEST

START_TEST(test_identity_env_text_and_path)
{
	char cfg[PATH_MAX], *key_text;

	start_server();
	WRITE_CONFIG(cfg, "env.json", &(fx_config_opts){ .identity = IDENTITY_VAR });

	/* The variable holds the key itself... */
	key_text = read_text(fx.client_key);
	ck_assert_int_eq(strncmp(key_text, "-----BEGIN", 10), 0);
	setenv(IDENTITY_VAR, key_text, 1);
	free(key_text);
	assert_opens(cfg, ASP_TRUST_PINNED, ASP_AUTH_PUBLICKEY);

	/* ...or a path to it. */
	setenv(IDENTITY_VAR, fx.client_key, 1);
	assert_opens(cfg, ASP_TRUST_PINNED, ASP_AUTH_PUBLICKEY);
}
END_TEST

/* loop: the key file is readable by others (0644), by the group (0640). */
START_TEST(test_identity_too_open)
{
	static const mode_t modes[] = { 0644, 0640 };
	char key[PATH_MAX], cfg[PATH_MAX], mode[8];
	asp_error err;

	start_server();
	TMP_PATH(key, "open_key");
	copy_file(fx.client_key, key, modes[_i]);
	WRITE_CONFIG(cfg, "open.json", &(fx_config_opts){ .identity = key });
	open_fails(cfg, ASP_ECONFIG, &err);
	assert_contains(err.message, "too open");
	assert_contains(err.message, key);
	assert_contains(err.message, "connection.identity");
	snprintf(mode, sizeof(mode), "%04o", (unsigned)modes[_i]);
	assert_contains(err.message, mode);
}
END_TEST

START_TEST(test_identity_missing)
{
	char key[PATH_MAX], cfg[PATH_MAX];
	asp_error err;

	start_server();
	TMP_PATH(key, "no_such_key");
	WRITE_CONFIG(cfg, "missing.json", &(fx_config_opts){ .identity = key });
	open_fails(cfg, ASP_ECONFIG, &err);
	assert_contains(err.message, key);
	assert_contains(err.message, cfg);

	/* A name that is neither a set variable nor a file says both. */
	WRITE_CONFIG(cfg, "missing.json", &(fx_config_opts){ .identity = IDENTITY_VAR });
	open_fails(cfg, ASP_ECONFIG, &err);
	assert_contains(err.message, IDENTITY_VAR);
	assert_contains(err.message, "environment variable");
}
END_TEST

START_TEST(test_identity_passphrase)
{
	char key[PATH_MAX], cfg[PATH_MAX];
	asp_error err;

	start_server();
	TMP_PATH(key, "locked_key");
	make_key(key, "-t ed25519", "secret");
	authorize(key);
	WRITE_CONFIG(cfg, "locked.json", &(fx_config_opts){ .identity = key });

	open_fails(cfg, ASP_EAUTH, &err);
	assert_contains(err.message, "ASP_IDENTITY_PASSPHRASE");
	assert_contains(err.message, key);

	setenv("ASP_IDENTITY_PASSPHRASE", "wrong", 1);
	open_fails(cfg, ASP_EAUTH, &err);
	assert_contains(err.message, "ASP_IDENTITY_PASSPHRASE");
	assert_contains(err.message, key);

	setenv("ASP_IDENTITY_PASSPHRASE", "secret", 1);
	assert_opens(cfg, ASP_TRUST_PINNED, ASP_AUTH_PUBLICKEY);
}
END_TEST

START_TEST(test_identity_unknown_to_server)
{
	char key[PATH_MAX], cfg[PATH_MAX], user[80];
	asp_error err;

	start_server();
	TMP_PATH(key, "stranger_key");
	make_key(key, "-t ed25519", "");
	WRITE_CONFIG(cfg, "stranger.json", &(fx_config_opts){ .identity = key });
	open_fails(cfg, ASP_EAUTH, &err);
	/* The field, never the user name (a provider may put a token there). */
	snprintf(user, sizeof(user), "%s", fx.user);
	ck_assert_msg(!strstr(err.message, user), "the message shows the user name: %s", err.message);
	assert_contains(err.message, "connection.user");
	assert_contains(err.message, key);
}
END_TEST

/* loop: an RSA key in OpenSSH format, in PEM format; authorized either way. */
START_TEST(test_identity_rsa)
{
	static const char *const formats[] = { "-t rsa -b 2048", "-t rsa -b 2048 -m PEM" };
	char key[PATH_MAX], cfg[PATH_MAX];
	asp_error err;

	start_server();
	TMP_PATH(key, "rsa_key");
	make_key(key, formats[_i], "");
	authorize(key);
	WRITE_CONFIG(cfg, "rsa.json", &(fx_config_opts){ .identity = key });
	open_fails(cfg, ASP_EAUTH, &err);
	assert_contains(err.message, "RSA");
	assert_contains(err.message, "ed25519");
	assert_contains(err.message, key);
}
END_TEST

/* ============================================================ ssh-agent */

/* ssh-agent -D on `sock`, dying with this test; returns when the socket is up. */
static void start_agent(const char *sock)
{
	pid_t parent = getpid();

	fflush(NULL);
	agent_pid = fork();
	ck_assert_int_ge(agent_pid, 0);
	if (agent_pid == 0) {
		int fd = open("/dev/null", O_RDWR);

		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(1);
		dup2(fd, 0);
		dup2(fd, 1);
		execlp("ssh-agent", "ssh-agent", "-D", "-a", sock, (char *)NULL);
		_exit(127);
	}
	for (int waited = 0; !file_exists(sock); waited += 10) {
		ck_assert_msg(waited < 5000, "ssh-agent did not create %s", sock);
		fx_sleep_ms(10);
	}
}

static void agent_add(const char *sock, const char *key)
{
	ck_assert_int_eq(fx_run("SSH_AUTH_SOCK='%s' ssh-add -q '%s' </dev/null 2>/dev/null", sock,
				key),
			 0);
}

START_TEST(test_agent)
{
	char sock[PATH_MAX], cfg[PATH_MAX], stranger[PATH_MAX];
	asp_error err;

	start_server();
	TMP_PATH(sock, "agent.sock");
	WRITE_CONFIG(cfg, "agent.json", &(fx_config_opts){ .identity = FX_OMIT });
	start_agent(sock);
	setenv("SSH_AUTH_SOCK", sock, 1);

	/* Only a key the server does not know: every agent key is rejected. */
	TMP_PATH(stranger, "stranger_key");
	make_key(stranger, "-t ed25519", "");
	agent_add(sock, stranger);
	open_fails(cfg, ASP_EAUTH, &err);
	assert_contains(err.message, "ssh-agent");
	assert_contains(err.message, "connection.user");
	ck_assert_msg(!strstr(err.message, fx.user), "the message shows the user name: %s", err.message);

	/* With the authorized key added, the agent's second key gets us in. */
	agent_add(sock, fx.client_key);
	assert_opens(cfg, ASP_TRUST_PINNED, ASP_AUTH_AGENT);
	stop_agent();
}
END_TEST

START_TEST(test_no_agent_no_identity)
{
	char cfg[PATH_MAX];
	asp_error err;

	start_server();
	WRITE_CONFIG(cfg, "bare.json", &(fx_config_opts){ .identity = FX_OMIT });
	open_fails(cfg, ASP_EAUTH, &err);
	assert_contains(err.message, "SSH_AUTH_SOCK");
	assert_contains(err.message, "connection.identity");
}
END_TEST

/* ============================================================ token as user name */

/*
 * sshd accepts the "none" method (auth2-none.c) for an account whose
 * password is empty when PermitEmptyPasswords and PasswordAuthentication
 * are both on (UsePAM no, as in the fixture): the user name is the whole
 * credential, as with providers that put an access token in `user`.
 */
static void ensure_token_user(void)
{
	int rc = 1;

	for (int attempt = 0; attempt < 10 && rc != 0; attempt++) {
		/* useradd refuses while another process holds the passwd lock: retry. */
		rc = fx_run("(id -u " TOKEN_USER " >/dev/null 2>&1 || "
			    "useradd -m -s /bin/bash " TOKEN_USER " >/dev/null 2>&1) && "
			    "passwd -d " TOKEN_USER " >/dev/null 2>&1");
		if (rc != 0)
			fx_sleep_ms(200);
	}
	ck_assert_msg(rc == 0, "cannot create the local user " TOKEN_USER " (needs root)");
	ck_assert_int_eq(fx_run("passwd -S " TOKEN_USER " | grep -q '^" TOKEN_USER " NP '"), 0);
}

START_TEST(test_token_user_none_auth)
{
	char cfg[PATH_MAX], out[64];
	asp_sandbox *sb;
	asp_sandbox_info info;

	ck_assert_msg(geteuid() == 0, "this test creates a local user: run as root");
	ensure_token_user();
	/* The fixture's own "AllowUsers <login user>" adds to this list. */
	ck_assert_int_eq(fx_sshd_start_with(&fx, "PermitEmptyPasswords yes\n"
						 "PasswordAuthentication yes\n"
						 "AllowUsers " TOKEN_USER "\n"),
			 0);
	WRITE_CONFIG(cfg, "token.json",
		     &(fx_config_opts){ .user = TOKEN_USER, .identity = FX_OMIT });

	sb = open_ok(cfg);
	info = info_of(sb);
	ck_assert_int_eq(info.auth, ASP_AUTH_NONE);
	ck_assert_int_eq(info.trust, ASP_TRUST_PINNED);
	ck_assert_int_eq(run_cmd(sb, "id -un", out, sizeof(out)), 0);
	ck_assert_str_eq(out, TOKEN_USER "\n");
	asp_close(sb);
	ck_assert(fx_log_contains(&fx, "Accepted none for " TOKEN_USER));

	/* The same server still wants a key from the regular user. */
	assert_opens(fx.config, ASP_TRUST_PINNED, ASP_AUTH_PUBLICKEY);
}
END_TEST

/* ============================================================ connection errors */

/* A config (trust on first use) for something on `port` that is not an sshd of ours. */
static void write_port_config(char *out, size_t outlen, int port)
{
	fx_sshd none = { .user = "nobody", .workspace = "/tmp" }; /* what fx_write_config reads */
	char key[PATH_MAX];

	tmp_path(out, outlen, "port%d.json", port);
	TMP_PATH(key, "client_key");
	make_key(key, "-t ed25519", "");
	ck_assert_int_eq(fx_write_config(&none, out,
					 &(fx_config_opts){ .port = port, .identity = key,
							    .host_key = FX_OMIT }),
			 0);
}

/* A socket bound to a free port of 127.0.0.1; listening when `listening`. */
static int local_socket(int *port, int listening)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	if (listening)
		ck_assert_int_eq(listen(fd, 4), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

/* Open a config for `port` with a 1 s connect timeout; returns the code, *ms the time taken. */
static int open_port(int port, uint64_t *ms, asp_error *err)
{
	char cfg[PATH_MAX];
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb;
	uint64_t t0;
	int rc;

	write_port_config(cfg, sizeof(cfg), port);
	o.config_path = cfg;
	o.known_hosts = T.kh;
	o.connect_timeout_ms = 1000;
	t0 = fx_now_ms();
	rc = open_with(&sb, &o, err);
	*ms = fx_now_ms() - t0;
	ck_assert_ptr_null(sb);
	return rc;
}

START_TEST(test_connect_refused)
{
	asp_error err;
	uint64_t ms;
	int port, fd = local_socket(&port, 0); /* bound, not listening: connect is refused */
	int rc = open_port(port, &ms, &err);

	ck_assert_msg(rc == ASP_ECONNECT, "%s: %s", asp_error_name(rc), err.message);
	/* Refused, not waited out: the cause is named (no timing: valgrind stretches any bound). */
	(void)ms;
	assert_contains(err.message, "127.0.0.1");
	assert_contains(err.message, "refused");
	close(fd);
	ck_assert(!file_exists(T.kh));
}
END_TEST

/* A fake server: accept one client, optionally answer with `reply`, then wait for its EOF. */
typedef struct fake_server {
	int fd;
	const char *reply; /* NULL: never say anything */
	size_t reply_len;
	pthread_t thread;
} fake_server;

static void *fake_server_run(void *arg)
{
	fake_server *s = arg;
	struct pollfd pfd = { s->fd, POLLIN, 0 };
	char buf[4096];
	int client;

	if (poll(&pfd, 1, 10000) <= 0 || (client = accept(s->fd, NULL, NULL)) < 0)
		return NULL;
	if (s->reply) {
		/* Let the client's banner arrive first, so closing sends FIN, not RST. */
		pfd.fd = client;
		if (poll(&pfd, 1, 2000) > 0)
			(void)!recv(client, buf, sizeof(buf), 0);
		(void)!send(client, s->reply, s->reply_len, MSG_NOSIGNAL);
		shutdown(client, SHUT_WR);
	}
	/* Hold the connection until the client gives up. */
	pfd.fd = client;
	while (poll(&pfd, 1, 10000) > 0 && recv(client, buf, sizeof(buf), 0) > 0)
		;
	close(client);
	return NULL;
}

static void fake_server_start(fake_server *s, int *port, const char *reply, size_t reply_len)
{
	s->fd = local_socket(port, 1);
	s->reply = reply;
	s->reply_len = reply_len;
	ck_assert_int_eq(pthread_create(&s->thread, NULL, fake_server_run, s), 0);
}

static void fake_server_stop(fake_server *s)
{
	pthread_join(s->thread, NULL);
	close(s->fd);
}

START_TEST(test_connect_no_banner_times_out)
{
	fake_server s;
	asp_error err;
	uint64_t ms;
	int port, rc;

	fake_server_start(&s, &port, NULL, 0);
	rc = open_port(port, &ms, &err);
	fake_server_stop(&s);
	ck_assert_msg(rc == ASP_ETIMEOUT, "%s: %s", asp_error_name(rc), err.message);
	ck_assert_msg(ms < 5000, "connect_timeout_ms 1000 but asp_open took %llu ms",
		      (unsigned long long)ms);
	ck_assert(!file_exists(T.kh));
}
END_TEST

/* loop: a web server's answer; an SSH banner followed by noise. */
START_TEST(test_connect_garbage)
{
	static const char http[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
	static const char noise[] = "SSH-2.0-OpenSSH_9.2\r\n\x00\x00\x00\x0c\x0a\x14garbage!!\xff\xfe";
	fake_server s;
	asp_error err;
	uint64_t ms;
	int port, rc;

	if (_i == 0)
		fake_server_start(&s, &port, http, sizeof(http) - 1);
	else
		fake_server_start(&s, &port, noise, sizeof(noise) - 1);
	rc = open_port(port, &ms, &err);
	fake_server_stop(&s);
	ck_assert_msg(rc == ASP_ECONNECT, "%s: %s", asp_error_name(rc), err.message);
	ck_assert_msg(ms < 5000, "asp_open took %llu ms", (unsigned long long)ms);
	ck_assert(!file_exists(T.kh));
}
END_TEST

/* ============================================================ lazy open */

START_TEST(test_lazy_does_not_connect)
{
	char cfg[PATH_MAX], other[PATH_MAX], *line;
	asp_sandbox *sb;
	asp_exec_result *r = NULL;
	asp_error err;
	log_mark before;
	int rc;

	start_server();
	TMP_PATH(other, "other_host_key");
	make_key(other, "-t ed25519", "");
	line = pub_line(other);
	WRITE_CONFIG(cfg, "lazy.json", &(fx_config_opts){ .host_key = line });
	free(line);

	before = log_now();
	rc = open_config(&sb, cfg, ASP_OPEN_LAZY, &err);
	ck_assert_msg(rc == ASP_OK, "%s: %s", asp_error_name(rc), err.message);
	fx_sleep_ms(200);
	ck_assert_int_eq(log_now().connections, before.connections);

	rc = asp_exec(&r, sb, "true", NULL, &err);
	ck_assert_msg(rc == ASP_EHOSTKEY, "%s: %s", asp_error_name(rc), err.message);
	ck_assert_ptr_null(r);
	assert_contains(err.message, cfg);
	asp_close(sb);
	assert_no_auth_since(&before);
}
END_TEST

/* ============================================================ suite */

Suite *suite_trust(void);

static TCase *new_case(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	suite_add_tcase(s, tc);
	return tc;
}

Suite *suite_trust(void)
{
	Suite *s = suite_create("trust");
	TCase *tc = new_case(s, "discovery");

	tcase_add_test(tc, test_discovery_from_nested_dir);
	tcase_add_test(tc, test_discovery_nearest_wins);
	tcase_add_test(tc, test_discovery_asp_config_env_wins);

	tc = new_case(s, "host_key");
	tcase_add_loop_test(tc, test_pinned, 0, 2);
	tcase_add_loop_test(tc, test_pinned_mismatch_sends_nothing, 0, 2);
	tcase_add_test(tc, test_tofu_first_use_then_known);
	tcase_add_test(tc, test_tofu_changed_key_fails_closed);
	tcase_add_test(tc, test_tofu_revoked);
	tcase_add_test(tc, test_tofu_race_two_keys);
	tcase_add_test(tc, test_known_hosts_env);
	tcase_add_test(tc, test_lazy_does_not_connect);

	tc = new_case(s, "identity");
	tcase_add_test(tc, test_identity_relative_to_config_dir);
	tcase_add_test(tc, test_identity_home);
	tcase_add_test(tc, test_identity_env_text_and_path);
	tcase_add_loop_test(tc, test_identity_too_open, 0, 2);
	tcase_add_test(tc, test_identity_missing);
	tcase_add_test(tc, test_identity_passphrase);
	tcase_add_test(tc, test_identity_unknown_to_server);
	tcase_add_loop_test(tc, test_identity_rsa, 0, 2);

	tc = new_case(s, "agent_and_token");
	tcase_add_test(tc, test_agent);
	tcase_add_test(tc, test_no_agent_no_identity);
	tcase_add_test(tc, test_token_user_none_auth);

	tc = new_case(s, "connect_errors");
	tcase_add_test(tc, test_connect_refused);
	tcase_add_test(tc, test_connect_no_banner_times_out);
	tcase_add_loop_test(tc, test_connect_garbage, 0, 2);
	return s;
}
