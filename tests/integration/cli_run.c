/*
 * cli_run.c - running asp-exec (fork + exec of build/bin/asp-exec) for the
 * test_cli*.c suites: argv, pipes, results, the masters of a test, and the
 * per-test fixture (its own sshd and XDG_RUNTIME_DIR). See cli_run.h.
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

fx_sshd fx;
char bin[PATH_MAX];     /* build/bin/asp-exec next to this test binary */
char top[PATH_MAX];     /* the source tree */
char rundir[64];        /* this test's XDG_RUNTIME_DIR */
int use_master = 1;     /* 0: every call gets --no-master */
char run_cwd[PATH_MAX]; /* where asp-exec runs; empty: here */

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
int find_masters(pid_t *pids, int max)
{
	return find_masters_matching(rundir, pids, max);
}

pid_t the_master(void)
{
	pid_t pid = 0;

	ck_assert_int_eq(find_masters(&pid, 1), 1);
	return pid;
}

/* The one socket in our runtime dir's asp/ (there must be exactly one). */
void the_socket(char *out, size_t outlen)
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

int count_in_log(const char *needle)
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

/* argv for asp-exec: --config, maybe --no-master, then args. */
const char **cli_argv(const char *const *args)
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
void spawn(proc *p, const char *const *argv, int keep_fd)
{
	int in[2], out[2], err[2];

	ck_assert(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0 &&
		  pipe2(err, O_CLOEXEC) == 0);
	fflush(NULL);
	p->pid = fork();
	ck_assert_int_ge(p->pid, 0);
	if (p->pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		if ((run_cwd[0] && chdir(run_cwd) < 0) || dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 ||
		    dup2(err[1], 2) < 0 || (keep_fd >= 0 && dup2(keep_fd, 3) < 0))
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

int decode_status(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * The room a buffer of len bytes (and its '\0') has: powers of two from 4 KiB.
 * It grows by doubling: ASan's realloc always copies, and growing by each
 * read's size took minutes for a 20 MB stdout (the "hangs" of the large
 * transfers' tests under ASan were this reader, not asp-exec).
 */
static size_t room(size_t need)
{
	size_t c = 4096;

	while (c < need)
		c *= 2;
	return c;
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
	/* A new result's buffer is 1 byte; after that, room(len + 1). */
	if (*len == 0 || room(*len + 1) < *len + (size_t)n + 1)
		*buf = realloc(*buf, room(*len + (size_t)n + 1));
	ck_assert_ptr_nonnull(*buf);
	memcpy(*buf + *len, chunk, (size_t)n);
	*len += (size_t)n;
	(*buf)[*len] = '\0';
}

/*
 * Feed `in`, collect stdout and stderr until both reach EOF (every copy of
 * them closed: the master must not keep them), then reap.
 */
result finish(proc *p, const void *in, size_t in_len, long timeout_ms)
{
	result r = { -1, calloc(1, 1), calloc(1, 1), 0, 0 };
	size_t off = 0;
	int out_open = 1, err_open = 1, st;
	long long end = fx_now_ms() + timeout_ms * fx_slowdown(); /* a hang detector */

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
	if (out_open || err_open) {
		/*
		 * The hang detector fired: log what the process is doing, before
		 * its pipes close (which would end it). Without gdb there are no
		 * stacks, only this line.
		 */
		char cmd[160];
		fprintf(stderr, "hang detector: pid %d still running after %ld ms (x%lld), %zu bytes of stdout "
			"read, %zu of %zu of stdin written; its threads:\n", (int)p->pid, timeout_ms,
			fx_slowdown(), r.out_len, off, in_len);
		snprintf(cmd, sizeof(cmd), "command -v gdb >/dev/null && timeout 60 gdb -p %d -batch -nx "
			 "-ex 'thread apply all bt' 2>&1 | tail -n 300 >&2", (int)p->pid);
		if (system(cmd) == -1)
			fprintf(stderr, "hang detector: no shell for gdb\n");
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

void result_free(result *r)
{
	free(r->out);
	free(r->err);
}

result run_argv(const void *in, size_t in_len, const char *const *argv)
{
	proc p;

	spawn(&p, argv, -1);
	return finish(&p, in, in_len, RUN_TIMEOUT_MS);
}

/* asp-exec [--no-master] --config CONFIG args... with `in` on stdin. */
result cli_in(const void *in, size_t in_len, const char *const *args)
{
	return run_argv(in, in_len, cli_argv(args));
}

/* One line of stderr: "asp-exec: " ... "\n", nothing else. */
void assert_one_error_line(const result *r, const char *needle)
{
	ck_assert_msg(!strncmp(r->err, "asp-exec: ", 10), "stderr: %s", r->err);
	ck_assert_msg(r->err_len > 0 && strchr(r->err, '\n') == r->err + r->err_len - 1,
		      "not one line: %s", r->err);
	if (needle)
		ck_assert_msg(strstr(r->err, needle), "'%s' not in: %s", needle, r->err);
}

/* Read one line from fd within ms; returns malloc'd text (without "\n") or NULL. */
char *read_line(int fd, long ms)
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

/* A hang detector: asp-exec and its core start slowly under ASan on two busy cores. */
#define PID_LINE_MS (30000 * fx_slowdown())

pid_t read_pid(int fd)
{
	long long t0 = fx_now_ms();
	char *line = read_line(fd, PID_LINE_MS);
	pid_t pid = line ? atoi(line) : 0;

	ck_assert_msg(pid > 0, "no pid line from the command: %s after %lld ms",
		      line ? "a line that is not a pid" :
		      fx_now_ms() - t0 >= PID_LINE_MS ? "nothing came" : "its output ended",
		      fx_now_ms() - t0);
	free(line);
	return pid;
}

/* Positive control for a kill check: the process is seen alive before the kill. */
void assert_alive(pid_t pid, const char *what)
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
void cli_runner_setup(void)
{
	runner = getpid();
}

/* A failed assertion ends a test's process without its teardown: clean up after it here. */
void cli_runner_cleanup(void)
{
	char pattern[64];

	snprintf(pattern, sizeof(pattern), "/tmp/asp-cli-run.%d.", (int)runner);
	kill_masters_matching(pattern);
	fx_run("rm -rf %s*", pattern);
}

void cli_setup(void)
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

void cli_teardown(void)
{
	remove_masters();
	fx_sshd_stop(&fx);
}
