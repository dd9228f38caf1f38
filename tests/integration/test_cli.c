/*
 * test_cli.c - asp-exec, the command-line client, run as a program (fork +
 * exec of build/bin/asp-exec) against the real sshd fixture: exit codes,
 * signals, streaming, quoting, timeouts, Ctrl-C, --json, --read/--write,
 * --check, and the connection-sharing master (reuse, idle exit, stale
 * socket, --stop, another user kept out). Most tests run twice: through
 * the master and with --no-master, and must see the same results.
 *
 * Each test gets its own sshd and its own XDG_RUNTIME_DIR, so masters of
 * different tests never meet; teardown stops them.
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

#define NOBODY_UID 65534
#define NOBODY_GID 65534
#define RUN_TIMEOUT_MS 30000

static fx_sshd fx;
static char bin[PATH_MAX];     /* build/bin/asp-exec next to this test binary */
static char top[PATH_MAX];     /* the source tree */
static char rundir[64];        /* this test's XDG_RUNTIME_DIR */
static int use_master = 1;     /* 0: every call gets --no-master */
static char run_cwd[PATH_MAX]; /* where asp-exec runs; empty: here */

/* ---------------------------------------------------------------- helpers */

/* Strip n trailing path components. */
static void strip_components(char *path, int n)
{
	for (int i = 0; i < n; i++) {
		char *slash = strrchr(path, '/');

		ck_assert_ptr_nonnull(slash);
		*slash = '\0';
	}
}

/*
 * BUILD/tests/test-integration -> BUILD/bin/asp-exec (or $ASP_EXEC), and
 * the source tree: the directory above BUILD.
 */
static void find_paths(void)
{
	ssize_t n = readlink("/proc/self/exe", bin, sizeof(bin) - 1);

	ck_assert_int_gt(n, 0);
	bin[n] = '\0';
	strip_components(bin, 2);
	ck_assert_int_lt(strlen(bin) + 14, sizeof(bin));
	strcat(bin, "/bin/asp-exec");
	if (getenv("ASP_EXEC"))
		snprintf(bin, sizeof(bin), "%s", getenv("ASP_EXEC"));
	snprintf(top, sizeof(top), "%s", bin);
	strip_components(top, 3);
	ck_assert_msg(access(bin, X_OK) == 0, "%s is not built (make tools)", bin);
}

static int pid_alive(pid_t pid)
{
	char path[64], *stat;
	const char *paren;
	int alive;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(stat = fx_read_file(path, NULL)))
		return 0;
	paren = strrchr(stat, ')');
	alive = paren && paren[2] != 'Z' && paren[2] != 'X';
	free(stat);
	return alive;
}

static int wait_gone(pid_t pid, long ms)
{
	for (long long end = fx_now_ms() + ms; fx_now_ms() < end; fx_sleep_ms(10))
		if (!pid_alive(pid))
			return 1;
	return !pid_alive(pid);
}

/* Masters whose command line contains `pattern`; up to max pids. */
static int find_masters_matching(const char *pattern, pid_t *pids, int max)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)) != NULL) {
		char path[64], *cmd;
		size_t len;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		if (snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name) >= (int)sizeof(path))
			continue;
		if (!(cmd = fx_read_file(path, &len)))
			continue;
		if (len > 0 && !strcmp(cmd + strlen(cmd) + 1, "--master") &&
		    memmem(cmd, len, pattern, strlen(pattern)) && pid_alive(atoi(e->d_name))) {
			if (n < max)
				pids[n] = atoi(e->d_name);
			n++;
		}
		free(cmd);
	}
	if (d)
		closedir(d);
	return n;
}

/* Masters of this test (their command line names our runtime dir). */
static int find_masters(pid_t *pids, int max)
{
	return find_masters_matching(rundir, pids, max);
}

static pid_t the_master(void)
{
	pid_t pid = 0;

	ck_assert_int_eq(find_masters(&pid, 1), 1);
	return pid;
}

/* The one socket in our runtime dir's asp/ (there must be exactly one). */
static void the_socket(char *out, size_t outlen)
{
	char dir[128];
	DIR *d;
	struct dirent *e;
	int n = 0;

	snprintf(dir, sizeof(dir), "%s/asp", rundir);
	d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL)
		if (strstr(e->d_name, ".sock")) {
			ck_assert_int_lt(snprintf(out, outlen, "%s/%s", dir, e->d_name), (int)outlen);
			n++;
		}
	closedir(d);
	ck_assert_int_eq(n, 1);
}

static int count_in_log(const char *needle)
{
	char *text = fx_read_file(fx.log, NULL), *p = text;
	int n = 0;

	while (p && (p = strstr(p, needle)) != NULL) {
		n++;
		p += strlen(needle);
	}
	free(text);
	return n;
}

/* ---------------------------------------------------------------- running asp-exec */

typedef struct proc {
	pid_t pid;
	int in, out, err; /* our ends of the child's stdin, stdout, stderr */
} proc;

typedef struct result {
	int status; /* exit status, 128 + N for signal N, -1 when it had to be killed */
	char *out, *err;
	size_t out_len, err_len;
} result;

/* argv for asp-exec: --config, maybe --no-master, then args. */
static const char **cli_argv(const char *const *args)
{
	static const char *argv[64];
	int n = 0;

	argv[n++] = bin;
	argv[n++] = "--config";
	argv[n++] = fx.config;
	argv[n++] = "--persist"; /* a master left behind goes away by itself */
	argv[n++] = "30";
	if (!use_master)
		argv[n++] = "--no-master";
	for (int i = 0; args[i] && n < 63; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	return argv;
}

/* fork + exec argv with pipes for stdin/stdout/stderr; keep_fd (if >= 0) stays open as fd 3. */
static void spawn(proc *p, const char *const *argv, int keep_fd)
{
	int in[2], out[2], err[2];

	ck_assert(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0 &&
		  pipe2(err, O_CLOEXEC) == 0);
	fflush(NULL);
	p->pid = fork();
	ck_assert_int_ge(p->pid, 0);
	if (p->pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		if ((run_cwd[0] && chdir(run_cwd) < 0) || dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0 ||
		    (keep_fd >= 0 && dup2(keep_fd, 3) < 0))
			_exit(127);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	close(err[1]);
	p->in = in[1];
	p->out = out[0];
	p->err = err[0];
	fcntl(p->in, F_SETFL, O_NONBLOCK);
}

static int decode_status(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void append(int fd, char **buf, size_t *len, int *open_)
{
	char chunk[65536];
	ssize_t n = read(fd, chunk, sizeof(chunk));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		*open_ = 0;
		return;
	}
	*buf = realloc(*buf, *len + (size_t)n + 1);
	ck_assert_ptr_nonnull(*buf);
	memcpy(*buf + *len, chunk, (size_t)n);
	*len += (size_t)n;
	(*buf)[*len] = '\0';
}

/*
 * Feed `in`, collect stdout and stderr until both reach EOF (every copy of
 * them closed: the master must not keep them), then reap.
 */
static result finish(proc *p, const void *in, size_t in_len, long timeout_ms)
{
	result r = { -1, calloc(1, 1), calloc(1, 1), 0, 0 };
	size_t off = 0;
	int out_open = 1, err_open = 1, st;
	long long end = fx_now_ms() + timeout_ms;

	if (!in_len && p->in >= 0) {
		close(p->in);
		p->in = -1;
	}
	while ((out_open || err_open) && fx_now_ms() < end) {
		struct pollfd f[3] = { { out_open ? p->out : -1, POLLIN, 0 },
				       { err_open ? p->err : -1, POLLIN, 0 },
				       { p->in, POLLOUT, 0 } };

		if (poll(f, 3, 100) <= 0)
			continue;
		if (f[0].revents)
			append(p->out, &r.out, &r.out_len, &out_open);
		if (f[1].revents)
			append(p->err, &r.err, &r.err_len, &err_open);
		if (p->in >= 0 && f[2].revents) {
			ssize_t n = write(p->in, (const char *)in + off, in_len - off);

			if (n > 0)
				off += (size_t)n;
			if (off == in_len || (n < 0 && errno != EAGAIN)) {
				close(p->in);
				p->in = -1;
			}
		}
	}
	if (p->in >= 0)
		close(p->in);
	close(p->out);
	close(p->err);
	if (out_open || err_open)
		kill(p->pid, SIGKILL);
	while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!out_open && !err_open)
		r.status = decode_status(st);
	return r;
}

static void result_free(result *r)
{
	free(r->out);
	free(r->err);
}

static result run_argv(const void *in, size_t in_len, const char *const *argv)
{
	proc p;

	spawn(&p, argv, -1);
	return finish(&p, in, in_len, RUN_TIMEOUT_MS);
}

/* asp-exec [--no-master] --config CONFIG args... with `in` on stdin. */
static result cli_in(const void *in, size_t in_len, const char *const *args)
{
	return run_argv(in, in_len, cli_argv(args));
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define CLI(...) cli_in(NULL, 0, ARGS(__VA_ARGS__))

/* One line of stderr: "asp-exec: " ... "\n", nothing else. */
static void assert_one_error_line(const result *r, const char *needle)
{
	ck_assert_msg(!strncmp(r->err, "asp-exec: ", 10), "stderr: %s", r->err);
	ck_assert_msg(r->err_len > 0 && strchr(r->err, '\n') == r->err + r->err_len - 1,
		      "not one line: %s", r->err);
	if (needle)
		ck_assert_msg(strstr(r->err, needle), "'%s' not in: %s", needle, r->err);
}

/* Read one line from fd within ms; returns malloc'd text (without "\n") or NULL. */
static char *read_line(int fd, long ms)
{
	char buf[512];
	size_t n = 0;
	long long end = fx_now_ms() + ms;

	while (n < sizeof(buf) - 1 && fx_now_ms() < end) {
		struct pollfd f = { fd, POLLIN, 0 };

		if (poll(&f, 1, 50) <= 0)
			continue;
		if (read(fd, buf + n, 1) != 1)
			return NULL;
		if (buf[n] == '\n') {
			buf[n] = '\0';
			return strdup(buf);
		}
		n++;
	}
	return NULL;
}

static pid_t read_pid(int fd)
{
	char *line = read_line(fd, 10000);
	pid_t pid = line ? atoi(line) : 0;

	ck_assert_msg(pid > 0, "no pid line from the command");
	free(line);
	return pid;
}

/* Positive control for a kill check: the process is seen alive before the kill. */
static void assert_alive(pid_t pid, const char *what)
{
	ck_assert_msg(pid_alive(pid), "%s (pid %d) was not alive before the kill", what, (int)pid);
}

/* ---------------------------------------------------------------- fixture */

static pid_t runner; /* the check runner: every test's runtime dir names it */

static void kill_masters_matching(const char *pattern)
{
	pid_t pids[16];
	int n = find_masters_matching(pattern, pids, 16);

	for (int i = 0; i < n && i < 16; i++) {
		kill(pids[i], SIGKILL);
		wait_gone(pids[i], 2000);
	}
}

static void remove_masters(void)
{
	if (!rundir[0])
		return;
	kill_masters_matching(rundir);
	fx_run("rm -rf '%s'", rundir);
	rundir[0] = '\0';
}

/* In the runner, around all tests of a case. */
static void runner_setup(void)
{
	runner = getpid();
}

/* A failed assertion ends a test's process without its teardown: clean up after it here. */
static void runner_cleanup(void)
{
	char pattern[64];

	snprintf(pattern, sizeof(pattern), "/tmp/asp-cli-run.%d.", (int)runner);
	kill_masters_matching(pattern);
	fx_run("rm -rf %s*", pattern);
}

static void setup(void)
{
	char tmpl[64];

	find_paths();
	snprintf(tmpl, sizeof(tmpl), "/tmp/asp-cli-run.%d.XXXXXX", (int)(runner ? runner : getpid()));
	ck_assert_ptr_nonnull(mkdtemp(tmpl));
	snprintf(rundir, sizeof(rundir), "%s", tmpl);
	setenv("XDG_RUNTIME_DIR", rundir, 1);
	unsetenv("ASP_CONFIG");
	use_master = 1;
	run_cwd[0] = '\0';
	ck_assert_int_eq(fx_sshd_start(&fx), 0);
}

static void teardown(void)
{
	remove_masters();
	fx_sshd_stop(&fx);
}

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
START_TEST(test_stdin_streaming_large)
{
	size_t len = 20u << 20;
	unsigned char *data = malloc(len), md[32];
	unsigned int x = 12345, mdlen;
	char hex[80];
	result r;

	use_master = _i == 0;
	ck_assert_ptr_nonnull(data);
	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		data[i] = (unsigned char)(x >> 16);
	}
	ck_assert(EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL));
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	strcat(hex, "  -\n");
	r = cli_in(data, len, ARGS("sha256sum"));
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, hex);
	result_free(&r);

	/* And out again: 20 MiB of stdout, byte for byte. */
	r = cli_in(data, len, ARGS("cat"));
	ck_assert_int_eq(r.status, 0);
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
START_TEST(test_client_killed_cancels)
{
	proc p;
	result r;
	pid_t shell;

	spawn(&p, cli_argv(ARGS("echo $$; exec sleep 60")), -1);
	shell = read_pid(p.out);
	assert_alive(shell, "the command");
	kill(p.pid, SIGKILL);
	r = finish(&p, NULL, 0, 10000);
	ck_assert_int_eq(r.status, 128 + SIGKILL);
	ck_assert_msg(wait_gone(shell, 5000), "the master did not cancel an orphaned command");
	result_free(&r);
}
END_TEST

/* A closed stdout stops the command, as a closed pipe stops a local one. */
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

/* ---------------------------------------------------------------- --read / --write */

START_TEST(test_read_write_binary)
{
	unsigned char data[1024];
	char path[400], *local;
	size_t len;
	result r;

	use_master = _i == 0;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 7 + i / 256); /* every byte value, four times */
	r = cli_in(data, sizeof(data), ARGS("--write", "sub/dir/bytes.bin", "--mkdirs"));
	ck_assert_msg(r.status == 0, "write: %s", r.err);
	ck_assert_uint_eq(r.out_len + r.err_len, 0);
	result_free(&r);
	snprintf(path, sizeof(path), "%s/sub/dir/bytes.bin", fx.workspace);
	local = fx_read_file(path, &len);
	ck_assert_ptr_nonnull(local);
	ck_assert_uint_eq(len, sizeof(data));
	ck_assert(memcmp(local, data, len) == 0);
	free(local);
	/* Atomic: nothing but the file in its directory (no temp file left). */
	ck_assert_int_eq(fx_run("test \"$(ls -A '%s/sub/dir')\" = bytes.bin", fx.workspace), 0);

	r = CLI("--read", "sub/dir/bytes.bin");
	ck_assert_int_eq(r.status, 0);
	ck_assert_uint_eq(r.out_len, sizeof(data));
	ck_assert(memcmp(r.out, data, sizeof(data)) == 0);
	result_free(&r);

	/* An empty file, and an absolute path. */
	r = cli_in(NULL, 0, ARGS("--write", path));
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	r = CLI("--read", path);
	ck_assert_int_eq(r.status, 0);
	ck_assert_uint_eq(r.out_len, 0);
	result_free(&r);
}
END_TEST

START_TEST(test_read_write_errors)
{
	result r;

	use_master = _i == 0;
	r = CLI("--read", "missing.txt");
	ck_assert_int_eq(r.status, 1);
	ck_assert_uint_eq(r.out_len, 0);
	assert_one_error_line(&r, "missing.txt");
	result_free(&r);

	r = cli_in("x", 1, ARGS("--write", "no/such/parent/f.txt"));
	ck_assert_int_eq(r.status, 1);
	assert_one_error_line(&r, "no/such/parent");
	result_free(&r);

	r = CLI("--read", ".");
	ck_assert_int_eq(r.status, 1);
	assert_one_error_line(&r, NULL);
	result_free(&r);
}
END_TEST

/* --read streams a file larger than one range (8 MiB) in ranges, byte for byte. */
START_TEST(test_read_streams_in_ranges)
{
	char path[400], *local;
	size_t len;
	result r;

	use_master = _i == 0;
	snprintf(path, sizeof(path), "%s/big.bin", fx.workspace);
	ck_assert_int_eq(fx_run("head -c 20000000 /dev/urandom > '%s' && chmod 644 '%s'", path, path), 0);
	local = fx_read_file(path, &len);
	ck_assert_ptr_nonnull(local);
	ck_assert_uint_eq(len, 20000000);
	r = CLI("--read", "big.bin");
	ck_assert_msg(r.status == 0, "read: %s", r.err);
	ck_assert_uint_eq(r.out_len, len);
	ck_assert(memcmp(r.out, local, len) == 0);
	result_free(&r);
	free(local);
}
END_TEST

/*
 * --read of a file that never answers (the SFTP server blocks opening a
 * FIFO) is cancelled by SIGINT like a command: exit 130.
 */
START_TEST(test_read_cancelled)
{
	char path[400];
	proc p;
	result r;

	use_master = _i == 0;
	snprintf(path, sizeof(path), "%s/fifo", fx.workspace);
	ck_assert_int_eq(fx_run("rm -f '%s' && mkfifo -m 666 '%s'", path, path), 0);
	spawn(&p, cli_argv(ARGS("--read", "fifo")), -1);
	fx_sleep_ms(500);
	ck_assert_msg(pid_alive(p.pid), "asp-exec --read of a FIFO ended on its own");
	ck_assert_int_eq(kill(p.pid, SIGINT), 0);
	r = finish(&p, NULL, 0, 10000);
	ck_assert_int_eq(r.status, 130);
	result_free(&r);
	/* Release the server still blocked opening the FIFO. */
	ck_assert_int_eq(fx_run("exec 3<>'%s'; exec 3>&-; rm -f '%s'", path, path), 0);
}
END_TEST

/* ---------------------------------------------------------------- failures and usage */

/* Both modes fail the same way: same status, same message. */
static void check_failure(const char *config, int status, const char *needle)
{
	const char *const args[] = { bin, "--config", config, "true", NULL };
	const char *const direct[] = { bin, "--config", config, "--no-master", "true", NULL };
	result a = run_argv(NULL, 0, args), b = run_argv(NULL, 0, direct);

	ck_assert_msg(a.status == status, "got %d: %s", a.status, a.err);
	assert_one_error_line(&a, needle);
	ck_assert_int_eq(b.status, a.status);
	ck_assert_str_eq(b.err, a.err);
	result_free(&a);
	result_free(&b);
}

START_TEST(test_failure_exit_codes)
{
	char path[400], key[400];

	snprintf(path, sizeof(path), "%s/other.json", fx.dir);
	check_failure("/nonexistent/asp.json", 251, NULL);

	ck_assert_int_eq(fx_run("echo '{\"version\": \"0\"}' > '%s'", path), 0);
	check_failure(path, 251, path);

	/* A pinned key that is not the server's: the client key's public half. */
	snprintf(key, sizeof(key), "%s.pub", fx.client_key);
	{
		char *line = fx_read_file(key, NULL);

		ck_assert_ptr_nonnull(line);
		*strchr(line, '\n') = '\0';
		ck_assert_int_eq(fx_write_config(&fx, path, &(fx_config_opts){ .host_key = line }), 0);
		free(line);
	}
	check_failure(path, 252, NULL);

	snprintf(key, sizeof(key), "%s/stranger_key", fx.dir);
	ck_assert_int_eq(fx_run("ssh-keygen -q -t ed25519 -N '' -f '%s'", key), 0);
	ck_assert_int_eq(fx_write_config(&fx, path, &(fx_config_opts){ .identity = key }), 0);
	check_failure(path, 253, NULL);

	ck_assert_int_eq(fx_write_config(&fx, path, &(fx_config_opts){ .port = 1 }), 0);
	check_failure(path, 254, NULL);
}
END_TEST

START_TEST(test_usage_errors)
{
	const char *const *cases[] = {
		ARGS("--bogus", "true"), ARGS(NULL), ARGS("--json", "--read", "x"),
		ARGS("--read", "a", "--write", "b"), ARGS("--read", "a", "extra"),
		ARGS("--timeout", "soon", "true"), ARGS("--env", "1X=2", "true"),
		ARGS("--env", "NOEQUALS", "true"), ARGS("--mkdirs", "true"), ARGS("--persist", "0", "true"),
	};
	result r;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *argv[16] = { bin };

		for (int k = 0; cases[i][k]; k++)
			argv[k + 1] = cases[i][k];
		r = run_argv(NULL, 0, argv);
		ck_assert_msg(r.status == 2, "case %zu: status %d", i, r.status);
		ck_assert_msg(!strncmp(r.err, "asp-exec: ", 10), "case %zu: %s", i, r.err);
		result_free(&r);
	}
	r = run_argv(NULL, 0, ARGS(bin, "--help"));
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "usage: asp-exec"));
	result_free(&r);
}
END_TEST

/* Discovery: $ASP_CONFIG, or .asp.json from the working directory up, as libasp does it. */
START_TEST(test_discovery)
{
	char deep[400], shadow[400];
	result r;

	/* Upwards from a subdirectory: the front finds it and uses a master. */
	snprintf(deep, sizeof(deep), "%s/a/b", fx.dir);
	ck_assert_int_eq(fx_run("mkdir -p '%s'", deep), 0);
	snprintf(run_cwd, sizeof(run_cwd), "%s", deep);
	r = run_argv(NULL, 0, ARGS(bin, "echo up"));
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "up\n");
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 1);

	/* Something unusable named .asp.json on the way stops the search (libasp's rule). */
	snprintf(shadow, sizeof(shadow), "%s/a/.asp.json", fx.dir);
	ck_assert_int_eq(mkdir(shadow, 0755), 0);
	r = run_argv(NULL, 0, ARGS(bin, "echo up"));
	ck_assert_int_eq(r.status, 251);
	assert_one_error_line(&r, shadow);
	result_free(&r);
	run_cwd[0] = '\0';

	/* $ASP_CONFIG wins, relative to the working directory. */
	snprintf(run_cwd, sizeof(run_cwd), "%s", fx.dir);
	setenv("ASP_CONFIG", ".asp.json", 1);
	r = run_argv(NULL, 0, ARGS(bin, "echo env"));
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "env\n");
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 1); /* the same file, the same master */
	run_cwd[0] = '\0';

	setenv("ASP_CONFIG", fx.config, 1);
	r = run_argv(NULL, 0, ARGS(bin, "echo found"));
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "found\n");
	result_free(&r);
	setenv("ASP_CONFIG", "/nonexistent/.asp.json", 1);
	r = run_argv(NULL, 0, ARGS(bin, "true"));
	ck_assert_int_eq(r.status, 251);
	assert_one_error_line(&r, NULL);
	result_free(&r);
}
END_TEST

/*
 * A .asp.json another user could have written or planted, found by
 * discovery, is refused by the front and the core alike (the front runs
 * libasp's own discovery code), before anything it says runs: same exit
 * status, same message naming the file, its owner and the remedies. The
 * parent's trusted .asp.json (fx.dir) is not used instead. loop: 0 another
 * user's file in a sticky 1777 directory, 1 a group-writable file, 2 a
 * file in a group-writable directory, 3 a symlink to another user's file.
 */
START_TEST(test_discovery_untrusted)
{
	char dir[300], file[320], target[320], owner[128], marker[320], extra[600], safe[400];
	const char *const direct[] = { bin, "--no-master", "echo hi", NULL };
	struct passwd *pw = getpwnam(_i == 3 ? "nobody" : "asp-test");
	result r, d;

	ck_assert_ptr_nonnull(pw);
	unsetenv("ASP_SAFE_DIRS");
	snprintf(dir, sizeof(dir), "%s/shared", fx.dir);
	snprintf(file, sizeof(file), "%s/.asp.json", dir);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(owner, sizeof(owner), "owned by root (uid 0)");
	if (_i == 3) {
		snprintf(target, sizeof(target), "%s/foreign.json", fx.dir);
		ck_assert_int_eq(fx_write_config(&fx, target, NULL), 0);
		ck_assert_int_eq(chown(target, pw->pw_uid, (gid_t)-1), 0);
		ck_assert_int_eq(symlink(target, file), 0);
	} else {
		ck_assert_int_eq(fx_write_config(&fx, file, NULL), 0);
	}
	if (_i == 0) {
		ck_assert_int_eq(chmod(dir, 01777), 0);
		ck_assert_int_eq(chown(file, pw->pw_uid, (gid_t)-1), 0);
	} else if (_i == 1) {
		ck_assert_int_eq(chmod(file, 0664), 0);
	} else if (_i == 2) {
		ck_assert_int_eq(chmod(dir, 0775), 0);
	}
	if (_i == 0 || _i == 3)
		snprintf(owner, sizeof(owner), "owned by %s (uid %u)", pw->pw_name,
			 (unsigned int)pw->pw_uid);
	snprintf(safe, sizeof(safe), "add %s to ASP_SAFE_DIRS", dir);

	snprintf(run_cwd, sizeof(run_cwd), "%s", dir);
	r = run_argv(NULL, 0, ARGS(bin, "echo hi"));
	d = run_argv(NULL, 0, direct);
	ck_assert_msg(r.status == 251, "status %d: %s", r.status, r.err);
	assert_one_error_line(&r, file);
	assert_one_error_line(&r, "not trusted");
	assert_one_error_line(&r, owner);
	assert_one_error_line(&r, "ASP_CONFIG");
	assert_one_error_line(&r, safe);
	ck_assert_int_eq(d.status, r.status);
	ck_assert_str_eq(d.err, r.err);
	ck_assert_str_eq(r.out, "");
	result_free(&r);
	result_free(&d);
	ck_assert_int_eq(find_masters(NULL, 0), 0);

	/* Listed in ASP_SAFE_DIRS, it is used (through a master, as any discovered file). */
	setenv("ASP_SAFE_DIRS", dir, 1);
	r = run_argv(NULL, 0, ARGS(bin, "echo hi"));
	ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
	ck_assert_str_eq(r.out, "hi\n");
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 1);
	unsetenv("ASP_SAFE_DIRS");

	/* Named explicitly, by --config or ASP_CONFIG, it is the caller's choice. */
	r = run_argv(NULL, 0, ARGS(bin, "--config", file, "--no-master", "echo hi"));
	ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
	ck_assert_str_eq(r.out, "hi\n");
	result_free(&r);
	setenv("ASP_CONFIG", file, 1);
	r = run_argv(NULL, 0, ARGS(bin, "--no-master", "echo hi"));
	ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
	result_free(&r);
	unsetenv("ASP_CONFIG");
	if (_i != 0) {
		run_cwd[0] = '\0';
		return;
	}

	/* What a planted file says never runs: its proxy command would run as us. */
	snprintf(marker, sizeof(marker), "%s/proxy-ran", fx.dir);
	snprintf(extra, sizeof(extra), "\"x-asp-proxy-command\": \"touch %s\"", marker);
	ck_assert_int_eq(fx_write_config(&fx, file, &(fx_config_opts){ .extra = extra }), 0);
	ck_assert_int_eq(chown(file, pw->pw_uid, (gid_t)-1), 0);
	r = run_argv(NULL, 0, ARGS(bin, "echo hi"));
	d = run_argv(NULL, 0, direct);
	ck_assert_int_eq(r.status, 251);
	ck_assert_int_eq(d.status, 251);
	result_free(&r);
	result_free(&d);
	ck_assert_msg(access(marker, F_OK) != 0, "the planted proxy command ran");
	run_cwd[0] = '\0';
}
END_TEST

START_TEST(test_check)
{
	char fpr[128], path[400];
	result r;

	ck_assert_int_eq(fx_host_fingerprint(&fx, fpr, sizeof(fpr)), 0);
	r = CLI("--check");
	ck_assert_msg(r.status == 0, "%s", r.err);
	ck_assert_ptr_nonnull(strstr(r.out, fpr));
	ck_assert_ptr_nonnull(strstr(r.out, "pinned by connection.host_key"));
	ck_assert_ptr_nonnull(strstr(r.out, "publickey"));
	ck_assert_ptr_nonnull(strstr(r.out, "round trip:"));
	ck_assert_ptr_nonnull(strstr(r.out, "\nok\n"));
	result_free(&r);

	/* Trust on first use, in a known_hosts file of our own. */
	snprintf(path, sizeof(path), "%s/tofu.json", fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, path, &(fx_config_opts){ .host_key = FX_OMIT }), 0);
	{
		char kh[400];

		snprintf(kh, sizeof(kh), "%s/known_hosts", fx.dir);
		setenv("ASP_KNOWN_HOSTS", kh, 1);
		r = run_argv(NULL, 0, ARGS(bin, "--config", path, "--check"));
		ck_assert_msg(r.status == 0, "%s", r.err);
		ck_assert_ptr_nonnull(strstr(r.out, "first use"));
		result_free(&r);
		r = run_argv(NULL, 0, ARGS(bin, "--config", path, "--check"));
		ck_assert_ptr_nonnull(strstr(r.out, "known, recorded in"));
		result_free(&r);
	}

	ck_assert_int_eq(fx_write_config(&fx, path, &(fx_config_opts){ .port = 1 }), 0);
	r = run_argv(NULL, 0, ARGS(bin, "--config", path, "--check"));
	ck_assert_int_eq(r.status, 254);
	assert_one_error_line(&r, NULL);
	result_free(&r);
}
END_TEST

/* ---------------------------------------------------------------- the master */

START_TEST(test_master_reuses_connection)
{
	int before;
	result r;

	r = CLI("true");
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	before = count_in_log("Accepted publickey");
	ck_assert_int_eq(before, 1);
	for (int i = 0; i < 5; i++) {
		r = CLI("echo $((40 + 2))");
		ck_assert_str_eq(r.out, "42\n");
		result_free(&r);
	}
	r = CLI("--read", ".asp-none");
	result_free(&r);
	ck_assert_int_eq(count_in_log("Accepted publickey"), 1);
	ck_assert_int_eq(find_masters(NULL, 0), 1);

	use_master = 0;
	r = CLI("true");
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	ck_assert_int_eq(count_in_log("Accepted publickey"), 2);
}
END_TEST

/* Clients racing to start the master: exactly one starts. */
START_TEST(test_master_start_race)
{
	proc p[6];
	result r;

	for (int i = 0; i < 6; i++)
		spawn(&p[i], cli_argv(ARGS("echo ok")), -1);
	for (int i = 0; i < 6; i++) {
		r = finish(&p[i], NULL, 0, RUN_TIMEOUT_MS);
		ck_assert_msg(r.status == 0, "client %d: %d %s", i, r.status, r.err);
		ck_assert_str_eq(r.out, "ok\n");
		result_free(&r);
	}
	ck_assert_int_eq(find_masters(NULL, 0), 1);
}
END_TEST

START_TEST(test_master_idle_exit)
{
	char sock[256];
	pid_t m;
	result r = CLI("--persist", "1", "true");

	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	m = the_master();
	the_socket(sock, sizeof(sock));
	ck_assert_msg(wait_gone(m, 5000), "the master outlived --persist 1");
	ck_assert_int_eq(access(sock, F_OK), -1);
}
END_TEST

START_TEST(test_master_stale_socket)
{
	char sock[256];
	pid_t old, fresh;
	result r = CLI("true");

	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	old = the_master();
	the_socket(sock, sizeof(sock));
	kill(old, SIGKILL);
	ck_assert(wait_gone(old, 3000));
	ck_assert_int_eq(access(sock, F_OK), 0); /* left behind, nothing listens */
	r = CLI("echo again");
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "again\n");
	ck_assert_uint_eq(r.err_len, 0);
	result_free(&r);
	fresh = the_master();
	ck_assert_int_ne(fresh, old);
}
END_TEST

START_TEST(test_master_stop)
{
	char sock[256];
	pid_t m;
	result r = CLI("true");

	result_free(&r);
	m = the_master();
	the_socket(sock, sizeof(sock));
	r = CLI("--stop");
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	ck_assert_int_eq(access(sock, F_OK), -1);
	ck_assert(wait_gone(m, 3000));
	r = CLI("--stop");
	ck_assert_int_eq(r.status, 1);
	assert_one_error_line(&r, "no master");
	result_free(&r);
}
END_TEST

/* An edited configuration is another master; so is another identity in the environment. */
START_TEST(test_master_per_config_contents)
{
	result r = CLI("true");

	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 1);
	ck_assert_int_eq(fx_run("echo ' ' >> '%s'", fx.config), 0);
	r = CLI("true");
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 2);
}
END_TEST

/* The master must not hold on to descriptors a harness gave the first client. */
START_TEST(test_master_does_not_keep_fds)
{
	int fds[2];
	proc p;
	result r;
	char b;

	ck_assert_int_eq(pipe(fds), 0);
	spawn(&p, cli_argv(ARGS("true")), fds[1]);
	close(fds[1]);
	r = finish(&p, NULL, 0, RUN_TIMEOUT_MS);
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 1);
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	ck_assert_msg(read(fds[0], &b, 1) == 0, "the master kept the harness's pipe open");
	close(fds[0]);
}
END_TEST

/* A directory others can enter is refused; the call still runs, without a master. */
START_TEST(test_master_refuses_open_dir)
{
	char dir[128];
	result r;

	snprintf(dir, sizeof(dir), "%s/asp", rundir);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	chmod(dir, 0755);
	r = CLI("echo still-runs");
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "still-runs\n");
	assert_one_error_line(&r, "not sharing connections");
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 0);
}
END_TEST

/* In a child as user nobody: connect to sock; 0 connected and got EOF (kicked out),
 * 1 connected and not kicked out, 2 + errno-ish codes for connect failures. */
static int connect_as_nobody(const char *sock)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		struct pollfd f;
		int fd;
		char b;

		if (setgroups(0, NULL) || setresgid(NOBODY_GID, NOBODY_GID, NOBODY_GID) ||
		    setresuid(NOBODY_UID, NOBODY_UID, NOBODY_UID))
			_exit(10);
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			_exit(errno == EACCES ? 3 : 4);
		f.fd = fd;
		f.events = POLLIN;
		if (poll(&f, 1, 3000) == 1 && read(fd, &b, 1) == 0)
			_exit(0);
		_exit(1);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return decode_status(st);
}

START_TEST(test_master_other_user)
{
	char sock[256], dir[128];
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct pollfd f;
	result r;
	int fd;

	if (geteuid() != 0)
		return; /* needs root to become nobody */
	r = CLI("true");
	result_free(&r);
	the_socket(sock, sizeof(sock));
	snprintf(dir, sizeof(dir), "%s/asp", rundir);
	/* The directory is 0700: another user cannot even reach the socket. */
	chmod(rundir, 0755);
	ck_assert_int_eq(connect_as_nobody(sock), 3);

	/* Opened up by mistake: the master still hangs up on them (SO_PEERCRED). */
	chmod(dir, 0755);
	chmod(sock, 0777);
	ck_assert_int_eq(connect_as_nobody(sock), 0);
	/* ...but not on us. */
	ck_assert_int_lt(snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock), (int)sizeof(a.sun_path));
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	f.fd = fd;
	f.events = POLLIN;
	ck_assert_int_eq(poll(&f, 1, 300), 0);
	close(fd);
	chmod(dir, 0700);
}
END_TEST

/* Send bytes with our stdin/stdout/stderr attached, as a client does; then wait for EOF. */
static int master_hangs_up_on(const char *sock, const void *bytes, size_t len, int with_fds)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(3 * sizeof(int))];
	} ctl;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct iovec iov = { (void *)bytes, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct pollfd f;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0), fds[3] = { 0, 1, 2 }, eof;
	char b[8];

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	if (with_fds) {
		memset(&ctl, 0, sizeof(ctl));
		m.msg_control = ctl.buf;
		m.msg_controllen = sizeof(ctl.buf);
		CMSG_FIRSTHDR(&m)->cmsg_level = SOL_SOCKET;
		CMSG_FIRSTHDR(&m)->cmsg_type = SCM_RIGHTS;
		CMSG_FIRSTHDR(&m)->cmsg_len = CMSG_LEN(sizeof(fds));
		memcpy(CMSG_DATA(CMSG_FIRSTHDR(&m)), fds, sizeof(fds));
	}
	ck_assert_int_eq(sendmsg(fd, &m, MSG_NOSIGNAL), (ssize_t)len);
	shutdown(fd, SHUT_WR);
	f.fd = fd;
	f.events = POLLIN;
	/* Closed with our bytes unread, the connection is reset rather than ended. */
	eof = poll(&f, 1, 12000) == 1 && (read(fd, b, sizeof(b)) == 0 || errno == ECONNRESET);
	close(fd);
	return eof;
}

/* Malformed requests are refused (the connection closed, nothing run) and the master lives on. */
START_TEST(test_master_rejects_garbage)
{
	static const unsigned char bad_magic[] = "\0\0\0\x0cXXXX\x02\x01\0\0\0\0\0\0";
	static const unsigned char bad_version[] = "\0\0\0\x0c" "ASPX\x63\x01\0\0\0\0\0\0";
	static const unsigned char bad_mode[] = "\0\0\0\x0c" "ASPX\x02\x09\0\0\0\0\0\0";
	static const unsigned char too_long[] = "\x7f\xff\xff\xff" "ASPX";
	static const unsigned char short_list[] = "\0\0\0\x14" "ASPX\x02\x01\0\0\0\0\0\0"
						  "\0\0\0\0\xff\xff\0\0";
	char sock[256];
	pid_t m;
	result r = CLI("true");

	result_free(&r);
	m = the_master();
	the_socket(sock, sizeof(sock));
	ck_assert(master_hangs_up_on(sock, bad_magic, sizeof(bad_magic) - 1, 0));
	ck_assert(master_hangs_up_on(sock, bad_magic, sizeof(bad_magic) - 1, 1));
	ck_assert(master_hangs_up_on(sock, bad_version, sizeof(bad_version) - 1, 1));
	ck_assert(master_hangs_up_on(sock, bad_mode, sizeof(bad_mode) - 1, 1));
	ck_assert(master_hangs_up_on(sock, too_long, sizeof(too_long) - 1, 1));
	ck_assert(master_hangs_up_on(sock, short_list, sizeof(short_list) - 1, 1));
	ck_assert(master_hangs_up_on(sock, "\0\0", 2, 1)); /* truncated length */
	r = CLI("echo alive");
	ck_assert_str_eq(r.out, "alive\n");
	result_free(&r);
	ck_assert_int_eq(the_master(), m);
}
END_TEST

/* The same calls through the master and without it: byte-identical results. */
START_TEST(test_master_and_direct_agree)
{
	const char *const *cases[] = {
		ARGS("printf 'a\\000b'; echo err >&2; exit 7"),
		ARGS("--", "printf", "%s|", "x y", "$(z)", "\xff"),
		ARGS("--cwd", "/", "--env", "A=1", "pwd; echo $A"),
		ARGS("--read", "nope"),
		ARGS("kill -USR1 $$"),
		ARGS("--timeout", "0.3", "sleep 5"),
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		result a, b;

		use_master = 1;
		a = cli_in(NULL, 0, cases[i]);
		use_master = 0;
		b = cli_in(NULL, 0, cases[i]);
		ck_assert_msg(a.status == b.status, "case %zu: %d vs %d", i, a.status, b.status);
		ck_assert_uint_eq(a.out_len, b.out_len);
		ck_assert(memcmp(a.out, b.out, a.out_len) == 0);
		ck_assert_str_eq(a.err, b.err);
		result_free(&a);
		result_free(&b);
	}
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

/* ---------------------------------------------------------------- suite */

Suite *suite_cli(void);

Suite *suite_cli(void)
{
	Suite *s = suite_create("cli");
	TCase *both = tcase_create("cli-both-modes");
	TCase *one = tcase_create("cli");
	TCase *master = tcase_create("cli-master");

	tcase_add_unchecked_fixture(both, runner_setup, runner_cleanup);
	tcase_add_checked_fixture(both, setup, teardown);
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
	tcase_add_loop_test(both, test_read_write_binary, 0, 2);
	tcase_add_loop_test(both, test_read_write_errors, 0, 2);
	tcase_add_loop_test(both, test_read_streams_in_ranges, 0, 2);
	tcase_add_loop_test(both, test_read_cancelled, 0, 2);
	suite_add_tcase(s, both);

	tcase_add_unchecked_fixture(one, runner_setup, runner_cleanup);
	tcase_add_checked_fixture(one, setup, teardown);
	tcase_set_timeout(one, 120);
	tcase_add_test(one, test_failure_exit_codes);
	tcase_add_test(one, test_usage_errors);
	tcase_add_test(one, test_discovery);
	tcase_add_loop_test(one, test_discovery_untrusted, 0, 4);
	tcase_add_test(one, test_check);
	tcase_add_test(one, test_example_agent);
	suite_add_tcase(s, one);

	tcase_add_unchecked_fixture(master, runner_setup, runner_cleanup);
	tcase_add_checked_fixture(master, setup, teardown);
	tcase_set_timeout(master, 120);
	tcase_add_test(master, test_client_killed_cancels);
	tcase_add_test(master, test_master_reuses_connection);
	tcase_add_test(master, test_master_start_race);
	tcase_add_test(master, test_master_idle_exit);
	tcase_add_test(master, test_master_stale_socket);
	tcase_add_test(master, test_master_stop);
	tcase_add_test(master, test_master_per_config_contents);
	tcase_add_test(master, test_master_does_not_keep_fds);
	tcase_add_test(master, test_master_refuses_open_dir);
	tcase_add_test(master, test_master_other_user);
	tcase_add_test(master, test_master_rejects_garbage);
	tcase_add_test(master, test_master_and_direct_agree);
	suite_add_tcase(s, master);
	return s;
}
