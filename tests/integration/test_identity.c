/*
 * test_identity.c - what connection.identity holds never reaches a message,
 * and neither does the user name.
 *
 * Malformed and oddly pasted keys (real ones, made by ssh-keygen) go through
 * an environment variable into asp_open and into asp-exec (plain, --json,
 * through the master and without it), and through a key file; no 16-byte
 * window of any key of the test, nor of the variable's value, may appear in
 * a message, in asp-exec's stdout or stderr, or in the master's files.
 * Variants that are a valid key once normalised (CRLF, CR, surrounding
 * whitespace, indentation) must authenticate against the fixture sshd.
 *
 * A token-like user name ("tok_" + 24 random characters) that the server
 * rejects must not appear in any message either (publickey, ssh-agent).
 *
 * The trace is on throughout (helpers.c's trace_on for asp_open, ASP_DEBUG=1
 * for asp-exec, whose stderr is checked) and is held to the same rule.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "asp.h"
#include "fixture/fixture.h"
#include "helpers.h"

#define VAR "ASP_TEST_IDENTITY_VALUE"
#define WINDOW 16

static fx_sshd fx;
static char tmp[64];

/* ------------------------------------------------------------ helpers */

static void setup(void)
{
	char tmpl[] = "/tmp/asp-identity.XXXXXX", home[128];

	memset(&fx, 0, sizeof(fx));
	ck_assert_ptr_nonnull(mkdtemp(tmpl));
	snprintf(tmp, sizeof(tmp), "%s", tmpl);
	snprintf(home, sizeof(home), "%s/home", tmp);
	ck_assert_int_eq(mkdir(home, 0700), 0);
	setenv("HOME", home, 1);
	unsetenv("ASP_CONFIG");
	unsetenv("SSH_AUTH_SOCK");
	unsetenv("ASP_IDENTITY_PASSPHRASE");
	unsetenv(VAR);
	setenv("ASP_DEBUG", "1", 1); /* asp-exec's trace, on its stderr */
	ck_assert_int_eq(fx_sshd_start(&fx), 0);
}

static void teardown(void)
{
	unsetenv("ASP_DEBUG");
	fx_sshd_stop(&fx);
	fx_run("rm -rf '%s'", tmp);
}

static void tmp_path(char *out, size_t outlen, const char *name)
{
	ck_assert_int_lt(snprintf(out, outlen, "%s/%s", tmp, name), (int)outlen);
}

static void make_key(const char *path, const char *options, const char *passphrase)
{
	ck_assert_int_eq(fx_run("rm -f '%s' '%s.pub' && ssh-keygen -q %s -N '%s' -C '' -f '%s' "
				"</dev/null >/dev/null",
				path, path, options, passphrase, path),
			 0);
}

static void authorize(const char *key)
{
	ck_assert_int_eq(fx_run("cat '%s.pub' >> '%s/authorized_keys'", key, fx.dir), 0);
}

static char *read_text(const char *path)
{
	char *t = fx_read_file(path, NULL);

	ck_assert_msg(t != NULL, "read %s", path);
	return t;
}

/* The offset in `hay` of the first 16-byte window of `secret` found there, or -1. */
static long leaked_window(const char *hay, size_t hay_len, const char *secret, size_t slen)
{
	for (size_t i = 0; i + WINDOW <= slen; i++) {
		const char *at = memmem(hay, hay_len, secret + i, WINDOW);

		if (at)
			return (long)(at - hay);
	}
	return -1;
}

/* ------------------------------------------------------------ the variants */

typedef struct variant {
	const char *name;
	char *value;
	int expect; /* ASP_OK (it must authenticate), ASP_ECONFIG or ASP_EAUTH */
} variant;

#define NVARIANTS 19

static struct {
	char *key;       /* the authorized ed25519 key (the fixture's client key) */
	char *locked;    /* an authorized ed25519 key with a passphrase */
	char *stranger;  /* an ed25519 key the server does not know */
	char *pub;       /* the client key's .pub line */
	variant v[NVARIANTS];
	int n;
} K;

static char *cat3(const char *a, const char *b, const char *c)
{
	size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
	char *s = malloc(la + lb + lc + 1);

	ck_assert_ptr_nonnull(s);
	memcpy(s, a, la);
	memcpy(s + la, b, lb);
	memcpy(s + la + lb, c, lc + 1);
	return s;
}

/* `text` with every "\n" replaced by `nl`. */
static char *replace_newlines(const char *text, const char *nl)
{
	size_t n = 0, l = strlen(nl);
	char *out, *o;

	for (const char *p = text; *p; p++)
		n += *p == '\n' ? l : 1;
	o = out = malloc(n + 1);
	ck_assert_ptr_nonnull(out);
	for (const char *p = text; *p; p++) {
		if (*p == '\n') {
			memcpy(o, nl, l);
			o += l;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
	return out;
}

/* Lines [from, to) of text (0-based; to < 0 counts from the end), each ending with sep. */
static char *lines(const char *text, int from, int to, const char *sep)
{
	int count = 0, i = 0;
	size_t cap = strlen(text) * 2 + 16, used = 0;
	char *out = malloc(cap), *copy = strdup(text), *save = NULL, *line;

	ck_assert(out && copy);
	for (const char *p = text; *p; p++)
		count += *p == '\n';
	if (to < 0)
		to += count;
	out[0] = '\0';
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save), i++)
		if (i >= from && i < to)
			used += (size_t)sprintf(out + used, "%s%s", line, sep);
	free(copy);
	return out;
}

static void add(const char *name, char *value, int expect)
{
	ck_assert_int_lt(K.n, NVARIANTS);
	K.v[K.n++] = (variant){ name, value, expect };
}

static void make_variants(void)
{
	char path[PATH_MAX], *t, *u;
	unsigned char noise[600];
	size_t klen;

	memset(&K, 0, sizeof(K));
	K.key = read_text(fx.client_key);
	tmp_path(path, sizeof(path), "locked_key");
	make_key(path, "-t ed25519", "correct horse");
	authorize(path);
	K.locked = read_text(path);
	tmp_path(path, sizeof(path), "stranger_key");
	make_key(path, "-t ed25519", "");
	K.stranger = read_text(path);
	snprintf(path, sizeof(path), "%s.pub", fx.client_key);
	K.pub = read_text(path);
	klen = strlen(K.key);

	/* Valid once normalised: these must log in. */
	add("leading newline", cat3("\n", K.key, ""), ASP_OK);
	add("CRLF line ends", replace_newlines(K.key, "\r\n"), ASP_OK);
	add("CR line ends", replace_newlines(K.key, "\r"), ASP_OK);
	add("leading and trailing spaces", cat3("   \t", K.key, "  \n \n"), ASP_OK);
	t = replace_newlines(K.key, "\n    ");
	add("indented lines (YAML block)", cat3("    ", t, ""), ASP_OK);
	free(t);

	/* Not a usable key. */
	t = lines(K.key, 1, -1, "\n");
	add("PuTTY format", cat3("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: \n"
				 "Public-Lines: 2\n", t, "Private-MAC: 0123456789abcdef\n"), ASP_ECONFIG);
	add("base64 body only", t, ASP_ECONFIG);
	add("base64 body on one line", lines(K.key, 1, -1, ""), ASP_ECONFIG);
	add("truncated (no END line)", lines(K.key, 0, 4, "\n"), ASP_ECONFIG);
	t = lines(K.key, 0, 3, "\n");
	u = lines(K.key, -1, 1000, "\n");
	add("truncated body", cat3(t, u, ""), ASP_EAUTH);
	free(t);
	free(u);
	add("passphrase-protected, no passphrase", strdup(K.locked), ASP_EAUTH);
	ck_assert_int_eq(RAND_bytes(noise, sizeof(noise)), 1);
	for (size_t i = 0; i < sizeof(noise); i++)
		noise[i] = noise[i] ? noise[i] : 'x';
	t = malloc(sizeof(noise) + klen + 1);
	memcpy(t, noise, 300);
	memcpy(t + 300, K.key, klen);
	memcpy(t + 300 + klen, noise + 300, 299);
	t[300 + klen + 299] = '\0';
	add("binary garbage around the key", t, ASP_ECONFIG);
	/* More than a key can be (64 KiB), less than execve allows one string (128 KiB). */
	t = malloc(250 * klen + 1);
	for (int i = 0; i < 250; i++)
		memcpy(t + (size_t)i * klen, K.key, klen);
	t[250 * klen] = '\0';
	add("a huge value", t, ASP_ECONFIG);
	add("BEGIN line missing", lines(K.key, 1, 1000, "\n"), ASP_ECONFIG);
	add("END line missing", lines(K.key, 0, -1, "\n"), ASP_ECONFIG);
	add("newlines written as \\n", replace_newlines(K.key, "\\n"), ASP_ECONFIG);
	add("the public key", strdup(K.pub), ASP_ECONFIG);
	add("a key the server does not know", strdup(K.stranger), ASP_EAUTH);
	add("only whitespace", strdup(" \r\n\t \n"), ASP_ECONFIG);
	ck_assert_int_eq(K.n, NVARIANTS);
}

static void free_variants(void)
{
	for (int i = 0; i < K.n; i++)
		free(K.v[i].value);
	free(K.key);
	free(K.locked);
	free(K.stranger);
	free(K.pub);
}

/* Nothing of any key, nor of the value, in `hay`. */
static void assert_no_leak(const variant *v, const char *where, const char *hay, size_t hay_len)
{
	const char *secrets[] = { K.key, K.locked, K.stranger, v->value };

	for (size_t s = 0; s < sizeof(secrets) / sizeof(secrets[0]); s++) {
		long at = leaked_window(hay, hay_len, secrets[s], strlen(secrets[s]));

		ck_assert_msg(at < 0, "%s: %s shows %s at offset %ld: %s", v->name, where,
			      s == 3 ? "the variable's value" : "a private key", at, hay);
	}
}

/* ------------------------------------------------------------ the library */

static int open_config(const char *config, asp_error *err, asp_sandbox_info *info)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	char kh[PATH_MAX];
	int rc;

	tmp_path(kh, sizeof(kh), "known_hosts");
	memset(err, 0, sizeof(*err));
	o.config_path = config;
	o.known_hosts = kh;
	trace_on(&o);
	rc = asp_open(&sb, &o, err);
	/* The positive control: a connect that was tried is in the trace (a bad key ends before). */
	ck_assert_msg(rc == ASP_ECONFIG || strstr(trace_text(), "connect"), "no trace of the connect:\n%s",
		      trace_text());
	if (rc == ASP_OK) {
		memset(info, 0, sizeof(*info));
		info->version = ASP_SANDBOX_INFO_VERSION;
		ck_assert_int_eq(asp_sandbox_info_get(info, sb, err), ASP_OK);
		asp_close(sb);
	}
	return rc;
}

static void check_outcome(const variant *v, int rc, const asp_error *err, const asp_sandbox_info *info,
			  const char *source)
{
	ck_assert_msg(rc == v->expect, "%s: expected %s, got %s: %s", v->name, asp_error_name(v->expect),
		      asp_error_name(rc), err->message);
	assert_no_leak(v, "the trace", trace_text(), strlen(trace_text()));
	if (rc == ASP_OK) {
		ck_assert_int_eq(info->auth, ASP_AUTH_PUBLICKEY);
		return;
	}
	assert_no_leak(v, "the message", err->message, strlen(err->message));
	ck_assert_msg(strstr(err->message, source), "%s: the message does not name %s: %s", v->name,
		      source, err->message);
	ck_assert_msg(strstr(err->message, "connection.identity") || strstr(err->message, "key"),
		      "%s: the message gives no reason: %s", v->name, err->message);
}

START_TEST(test_env_variants)
{
	char cfg[PATH_MAX];
	asp_sandbox_info info;
	asp_error err;

	make_variants();
	tmp_path(cfg, sizeof(cfg), "env.asp.json");
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = VAR }), 0);
	for (int i = 0; i < K.n; i++) {
		const variant *v = &K.v[i];
		int rc;

		setenv(VAR, v->value, 1);
		rc = open_config(cfg, &err, &info);
		check_outcome(v, rc, &err, &info, "environment variable " VAR);
	}
	unsetenv(VAR);
	free_variants();
}
END_TEST

/* The same texts in a key file (0600): the message may name the path, never show the text. */
START_TEST(test_file_variants)
{
	char cfg[PATH_MAX], key[PATH_MAX];
	asp_sandbox_info info;
	asp_error err;

	make_variants();
	tmp_path(cfg, sizeof(cfg), "file.asp.json");
	tmp_path(key, sizeof(key), "variant_key");
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = key }), 0);
	for (int i = 0; i < K.n; i++) {
		variant v = K.v[i];
		int fd, rc;

		fd = open(key, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, v.value, strlen(v.value)), (ssize_t)strlen(v.value));
		close(fd);
		rc = open_config(cfg, &err, &info);
		check_outcome(&v, rc, &err, &info, key);
	}
	free_variants();
}
END_TEST

/* ------------------------------------------------------------ asp-exec */

static char bin[PATH_MAX];

static void find_asp_exec(void)
{
	ssize_t n = readlink("/proc/self/exe", bin, sizeof(bin) - 1);

	ck_assert_int_gt(n, 0);
	bin[n] = '\0';
	for (int i = 0; i < 2; i++)
		*strrchr(bin, '/') = '\0';
	strcat(bin, "/bin/asp-exec");
	if (getenv("ASP_EXEC"))
		snprintf(bin, sizeof(bin), "%s", getenv("ASP_EXEC"));
	ck_assert_msg(access(bin, X_OK) == 0, "%s is not built (make tools)", bin);
}

/* Run asp-exec with argv; stdout and stderr together into *out. Returns the exit status. */
static int run_cli(const char *const *argv, char **out, size_t *out_len)
{
	char path[PATH_MAX];
	int fd, st;
	pid_t pid;

	tmp_path(path, sizeof(path), "cli.out");
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(127);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(fd);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	*out = fx_read_file(path, out_len);
	ck_assert_ptr_nonnull(*out);
	return fx_exit_status(st);
}

/* Every regular file under dir (the master's socket directory, its log) must be clean. */
static void assert_dir_clean(const variant *v, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[PATH_MAX + 300];
		struct stat st;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (lstat(path, &st))
			continue;
		if (S_ISDIR(st.st_mode)) {
			assert_dir_clean(v, path);
		} else if (S_ISREG(st.st_mode)) {
			size_t n;
			char *text = fx_read_file(path, &n);

			if (text)
				assert_no_leak(v, path, text, n);
			free(text);
		}
	}
	closedir(d);
}

START_TEST(test_cli_variants)
{
	char cfg[PATH_MAX], rundir[PATH_MAX];

	find_asp_exec();
	make_variants();
	tmp_path(cfg, sizeof(cfg), "cli.asp.json");
	tmp_path(rundir, sizeof(rundir), "run");
	ck_assert_int_eq(mkdir(rundir, 0700), 0);
	setenv("XDG_RUNTIME_DIR", rundir, 1);
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = VAR }), 0);
	for (int i = 0; i < K.n; i++) {
		const variant *v = &K.v[i];
		/* plain and --json, without a master and through one */
		const char *const runs[4][9] = {
			{ bin, "--config", cfg, "--no-master", "--", "echo", "in", NULL },
			{ bin, "--config", cfg, "--no-master", "--json", "--", "echo", "in", NULL },
			{ bin, "--config", cfg, "--persist", "2", "--", "echo", "in", NULL },
			{ bin, "--config", cfg, "--persist", "2", "--json", "--", "echo", "in" },
		};
		int want = v->expect == ASP_OK ? 0 : v->expect == ASP_ECONFIG ? 251 : 253;

		setenv(VAR, v->value, 1);
		for (int r = 0; r < 4; r++) {
			const char *argv[10];
			char *out;
			size_t n;
			int status;

			memcpy(argv, runs[r], sizeof(runs[r]));
			argv[9] = NULL;
			status = run_cli(argv, &out, &n);
			ck_assert_msg(status == want, "%s: asp-exec run %d: exit %d, expected %d: %s", v->name,
				      r, status, want, out);
			if (want == 0)
				ck_assert_msg(strstr(out, "in"), "%s: run %d: %s", v->name, r, out);
			else
				ck_assert_msg(strstr(out, VAR), "%s: run %d does not name %s: %s", v->name, r,
					      VAR, out);
			assert_no_leak(v, "asp-exec's output", out, n);
			/* The positive control: without a master, the trace is in that output. */
			ck_assert_msg(r > 1 || v->expect == ASP_ECONFIG || strstr(out, "asp: info: "),
				      "%s: run %d: no trace: %s", v->name, r, out);
			free(out);
		}
		/* A master that started stops here: the next variant is another identity anyway. */
		{
			const char *stop[] = { bin, "--config", cfg, "--stop", NULL };
			char *out;
			size_t n;

			run_cli(stop, &out, &n);
			assert_no_leak(v, "asp-exec --stop's output", out, n);
			free(out);
		}
		assert_dir_clean(v, rundir);
	}
	unsetenv(VAR);
	free_variants();
}
END_TEST

/* ------------------------------------------------------------ the user name */

static void token_user(char *out, size_t outlen)
{
	static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	unsigned char r[24];

	ck_assert_int_ge(outlen, 29);
	ck_assert_int_eq(RAND_bytes(r, sizeof(r)), 1);
	memcpy(out, "tok_", 4);
	for (size_t i = 0; i < sizeof(r); i++)
		out[4 + i] = alphabet[r[i] % (sizeof(alphabet) - 1)];
	out[28] = '\0';
}

static pid_t start_agent(const char *sock)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);

		prctl(PR_SET_PDEATHSIG, SIGTERM);
		dup2(fd, 0);
		dup2(fd, 1);
		execlp("ssh-agent", "ssh-agent", "-D", "-a", sock, (char *)NULL);
		_exit(127);
	}
	for (int waited = 0; access(sock, F_OK); waited += 10) {
		ck_assert_msg(waited < 5000, "ssh-agent did not create %s", sock);
		fx_sleep_ms(10);
	}
	return pid;
}

static void assert_user_absent(const char *user, const char *what, const char *text)
{
	ck_assert_msg(!strstr(text, user), "%s shows the user name: %s", what, text);
	/* Nor any 16-byte piece of it. */
	ck_assert_msg(leaked_window(text, strlen(text), user, strlen(user)) < 0, "%s shows part of the user name: %s",
		      what, text);
	if (strcmp(what, "the trace"))
		assert_user_absent(user, "the trace", trace_text());
}

START_TEST(test_token_user_not_echoed)
{
	char user[32], cfg[PATH_MAX], sock[PATH_MAX];
	asp_sandbox_info info;
	asp_error err;
	pid_t agent;
	int rc;

	token_user(user, sizeof(user));
	tmp_path(cfg, sizeof(cfg), "token.asp.json");

	/* A key: the server (AllowUsers, no such account) rejects it for this user. */
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .user = user }), 0);
	rc = open_config(cfg, &err, &info);
	ck_assert_msg(rc == ASP_EAUTH, "%s: %s", asp_error_name(rc), err.message);
	assert_user_absent(user, "the rejected-key message", err.message);
	ck_assert_msg(strstr(err.message, "connection.user"), "%s", err.message);

	/* The agent's keys: all rejected. */
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .user = user, .identity = FX_OMIT }),
			 0);
	tmp_path(sock, sizeof(sock), "agent.sock");
	agent = start_agent(sock);
	ck_assert_int_eq(fx_run("SSH_AUTH_SOCK='%s' ssh-add -q '%s' </dev/null 2>/dev/null", sock,
				fx.client_key),
			 0);
	setenv("SSH_AUTH_SOCK", sock, 1);
	rc = open_config(cfg, &err, &info);
	kill(agent, SIGTERM);
	waitpid(agent, NULL, 0);
	unsetenv("SSH_AUTH_SOCK");
	ck_assert_msg(rc == ASP_EAUTH, "%s: %s", asp_error_name(rc), err.message);
	ck_assert_msg(strstr(err.message, "ssh-agent"), "%s", err.message);
	assert_user_absent(user, "the ssh-agent message", err.message);

	/* Neither a key nor an agent. */
	rc = open_config(cfg, &err, &info);
	ck_assert_msg(rc == ASP_EAUTH, "%s: %s", asp_error_name(rc), err.message);
	assert_user_absent(user, "the no-agent message", err.message);

	/* asp-exec, with a key, plain and --json. */
	find_asp_exec();
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .user = user }), 0);
	for (int json = 0; json < 2; json++) {
		const char *argv[] = { bin, "--config", cfg, "--no-master", json ? "--json" : "--", "true",
				       NULL };
		char *out;
		size_t n;
		int status = run_cli(argv, &out, &n);

		ck_assert_msg(status == 253, "asp-exec: exit %d: %s", status, out);
		ck_assert_msg(strstr(out, "asp: warn: connect to "), "no trace: %s", out);
		assert_user_absent(user, "asp-exec's output", out);
		free(out);
	}
	/* The server did see that user name: it was the one offered. */
	ck_assert(fx_log_contains(&fx, user));
}
END_TEST

Suite *suite_identity(void);

Suite *suite_identity(void)
{
	Suite *s = suite_create("identity");
	TCase *tc = tcase_create("leaks");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_env_variants);
	tcase_add_test(tc, test_file_variants);
	tcase_add_test(tc, test_cli_variants);
	tcase_add_test(tc, test_token_user_not_echoed);
	suite_add_tcase(s, tc);
	return s;
}
