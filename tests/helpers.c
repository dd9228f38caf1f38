/*
 * helpers.c - the shared test helpers declared in helpers.h.
 */
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "fixture/fixture.h"


/* rc and err.code are `want`, and the message mentions `needle` (when not NULL). */
void check_err(int line, int rc, const asp_error *e, int want, const char *needle)
{
	ck_assert_msg(rc == want, "line %d: expected %s, got %s (message: %s)", line,
		      asp_error_name(want), asp_error_name(rc), e->message);
	ck_assert_msg(e->code == want, "line %d: err.code is %s, expected %s", line,
		      asp_error_name(e->code), asp_error_name(want));
	ck_assert_msg(e->message[0] != '\0', "line %d: empty error message", line);
	if (needle)
		ck_assert_msg(strstr(e->message, needle) != NULL,
			      "line %d: message \"%s\" does not mention \"%s\"", line, e->message,
			      needle);
}

unsigned int test_file_transport(void)
{
	const char *v = getenv("ASP_TEST_FILE_TRANSPORT");

	if (!v || !*v || !strcmp(v, "auto"))
		return ASP_FILES_AUTO;
	if (!strcmp(v, "sftp"))
		return ASP_FILES_SFTP;
	if (!strcmp(v, "exec"))
		return ASP_FILES_EXEC;
	ck_abort_msg("ASP_TEST_FILE_TRANSPORT=%s: expected exec, sftp or auto", v);
	return ASP_FILES_AUTO;
}

void test_open_options(asp_open_options *o)
{
	o->file_transport = test_file_transport();
}

int skip_unless_sftp(const char *test, const char *why)
{
	if (test_file_transport() != ASP_FILES_EXEC)
		return 0;
	/* One line per skip, with a fixed prefix: the Makefile counts them. */
	fprintf(stderr, "SKIP file_transport=exec: %s: %s\n", test, why);
	ck_assert_msg(!getenv("ASP_TEST_NO_SKIP"), "%s skipped (%s) under ASP_TEST_NO_SKIP", test, why);
	return 1;
}

int skip_under_tsan(const char *test, const char *why)
{
#if defined(__SANITIZE_THREAD__)
	fprintf(stderr, "SKIP tsan: %s: %s\n", test, why);
	ck_assert_msg(!getenv("ASP_TEST_NO_SKIP"), "%s skipped (%s) under ASP_TEST_NO_SKIP", test, why);
	return 1;
#else
	(void)test;
	(void)why;
	return 0;
#endif
}

asp_sandbox *sb_open_opts(const asp_open_options *o)
{
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	int rc = asp_open(&sb, o, &e);

	if (rc == ASP_ECONNECT)
		fx_sshd_report(); /* why the server did not answer */
	ck_assert_msg(rc == ASP_OK, "asp_open(%s): %s: %s", o->config_path ? o->config_path : "NULL",
		      asp_error_name(rc), e.message);
	ck_assert_ptr_nonnull(sb);
	return sb;
}

asp_sandbox *sb_open_transport(const char *config, unsigned int transport)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;

	o.config_path = config;
	o.file_transport = transport;
	return sb_open_opts(&o);
}

asp_sandbox *sb_open(const char *config)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;

	o.config_path = config;
	test_open_options(&o);
	return sb_open_opts(&o);
}

const char *ws_path(const char *workspace, const char *rel)
{
	static char bufs[8][PATH_MAX];
	static atomic_uint next; /* threads of one test take different buffers */
	char *b = bufs[atomic_fetch_add(&next, 1) % 8];
	int n = snprintf(b, PATH_MAX, "%s/%s", workspace, rel);

	ck_assert(n > 0 && n < PATH_MAX);
	return b;
}

int local_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

struct stat local_lstat(const char *path)
{
	struct stat st;

	ck_assert_msg(lstat(path, &st) == 0, "lstat %s failed", path);
	return st;
}

/* Exact byte comparison that reports where the first difference is. */
void assert_bytes(const char *what, const void *got, size_t glen, const void *want,
			 size_t wlen)
{
	const unsigned char *g = got, *w = want;
	size_t i, n = glen < wlen ? glen : wlen;

	for (i = 0; i < n && g[i] == w[i]; i++)
		;
	if (i == n && glen == wlen)
		return;
	ck_abort_msg("%s: %zu bytes, expected %zu; first difference at offset %zu "
		     "(got 0x%02x, want 0x%02x)",
		     what, glen, wlen, i, i < glen ? g[i] : 0, i < wlen ? w[i] : 0);
}

void sha256_hex(const void *data, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0, i;

	ck_assert_int_eq(EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL), 1);
	ck_assert_uint_eq(mdlen, 32);
	for (i = 0; i < mdlen; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	out[64] = '\0';
}

/*
 * Deterministic pseudo-random bytes (xorshift64, 8 bytes a step): the same
 * for the same seed, different for every seed.
 */
unsigned char *random_bytes(size_t len, uint64_t seed)
{
	unsigned char *p = malloc(len ? len : 1);
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	size_t i;

	ck_assert_ptr_nonnull(p);
	for (i = 0; i < len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, len - i < 8 ? len - i : 8);
	}
	return p;
}

/* `reps` copies of the bytes 0x00..0xff. */
unsigned char *all_bytes(size_t reps, size_t *len)
{
	unsigned char *p = malloc(256 * reps);
	size_t i;

	ck_assert_ptr_nonnull(p);
	for (i = 0; i < 256 * reps; i++)
		p[i] = (unsigned char)i;
	*len = 256 * reps;
	return p;
}

/* -------------------------------------------------- sandbox operations */

void put_opts(asp_sandbox *sb, const char *path, const void *data, size_t len,
		     const asp_write_options *o)
{
	asp_error e = { 0 };
	int rc = asp_write(sb, path, data, len, o, &e);

	ck_assert_msg(rc == ASP_OK, "write %s: %s: %s", path, asp_error_name(rc), e.message);
}

void put(asp_sandbox *sb, const char *path, const char *text)
{
	put_opts(sb, path, text, strlen(text), NULL);
}

/* Read the whole file; checks the documented NUL terminator too. */
unsigned char *get(asp_sandbox *sb, const char *path, size_t *len)
{
	unsigned char *buf = NULL;
	asp_error e = { 0 };
	int rc = asp_read(&buf, len, sb, path, 0, ASP_READ_ALL, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "read %s: %s: %s", path, asp_error_name(rc), e.message);
	ck_assert_ptr_nonnull(buf);
	ck_assert_msg(buf[*len] == '\0', "read %s: buffer is not NUL-terminated", path);
	return buf;
}

void assert_content(asp_sandbox *sb, const char *path, const void *want, size_t wlen)
{
	size_t len;
	unsigned char *buf = get(sb, path, &len);

	assert_bytes(path, buf, len, want, wlen);
	asp_free(buf);
}

void assert_local_content(const char *local, const void *want, size_t wlen)
{
	size_t len;
	char *buf = fx_read_file(local, &len);

	ck_assert_msg(buf != NULL, "cannot read %s locally", local);
	assert_bytes(local, buf, len, want, wlen);
	free(buf);
}

asp_stat_info stat_ok(asp_sandbox *sb, const char *path)
{
	asp_stat_info st;
	asp_error e = { 0 };
	int rc;

	memset(&st, 0xa5, sizeof(st));
	rc = asp_stat(&st, sb, path, NULL, &e);
	ck_assert_msg(rc == ASP_OK, "stat %s: %s: %s", path, asp_error_name(rc), e.message);
	return st;
}

void mkdir_ok(asp_sandbox *sb, const char *path, unsigned int mode, int parents)
{
	asp_error e = { 0 };
	int rc = asp_mkdir(sb, path, mode, parents ? ASP_MKDIR_PARENTS : 0, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "mkdir %s: %s: %s", path, asp_error_name(rc), e.message);
}

void remove_ok(asp_sandbox *sb, const char *path, int recursive)
{
	asp_error e = { 0 };
	int rc = asp_remove(sb, path, recursive ? ASP_REMOVE_RECURSIVE : 0, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "remove %s: %s: %s", path, asp_error_name(rc), e.message);
}

void rename_ok(asp_sandbox *sb, const char *from, const char *to)
{
	asp_error e = { 0 };
	int rc = asp_rename(sb, from, to, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "rename %s: %s: %s", from, asp_error_name(rc), e.message);
}

/* asp_stat says ENOENT, naming the path (control bytes, '\\' and, in these names, bytes >= 0x80 (not UTF-8)
 * escaped as \\xNN). */
void assert_missing(asp_sandbox *sb, const char *path)
{
	asp_stat_info st;
	asp_error e = { 0 };
	char shown[1024];
	size_t o = 0;
	int rc = asp_stat(&st, sb, path, NULL, &e);

	for (const unsigned char *p = (const unsigned char *)path; *p && o + 5 < sizeof(shown); p++)
		o += (size_t)snprintf(shown + o, sizeof(shown) - o,
				      *p < 0x20 || *p >= 0x7f || *p == '\\' ? "\\x%02x" : "%c", *p);
	shown[o] = '\0';
	ASSERT_ERR(rc, e, ASP_ENOENT, shown);
}

asp_exec_result *run_opts(asp_sandbox *sb, const char *cmd, const asp_exec_options *o)
{
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	int rc = asp_exec(&r, sb, cmd, o, &e);

	ck_assert_msg(rc == ASP_OK, "exec `%s`: %s: %s", cmd, asp_error_name(rc), e.message);
	ck_assert_ptr_nonnull(r);
	return r;
}

asp_exec_result *run(asp_sandbox *sb, const char *cmd)
{
	return run_opts(sb, cmd, NULL);
}

void assert_stream(const asp_exec_result *r, asp_stream stream, const void *want, size_t wlen)
{
	size_t len = 0;
	const unsigned char *d = asp_exec_result_output(r, stream, &len);

	ck_assert_msg(d != NULL || len == 0, "output pointer is NULL with %zu bytes", len);
	assert_bytes(stream == ASP_STDOUT ? "stdout" : "stderr", d, len, want, wlen);
	ck_assert_uint_eq(asp_exec_result_output_total(r, stream), wlen);
	ck_assert_int_eq(asp_exec_result_truncated(r, stream), 0);
}

void assert_exited(const asp_exec_result *r, int code)
{
	size_t len = 0;
	const unsigned char *err = asp_exec_result_output(r, ASP_STDERR, &len);

	ck_assert_msg(asp_exec_result_exit_code(r) == code && asp_exec_result_signal(r) == 0,
		      "exit code %d signal %d, expected exit %d (stderr: %.*s)",
		      asp_exec_result_exit_code(r), asp_exec_result_signal(r), code,
		      (int)(len > 300 ? 300 : len), err ? (const char *)err : "");
}

/* Run with options; expect exit 0, exactly `want` on stdout and nothing on stderr. */
void expect_stdout_opts(asp_sandbox *sb, const char *cmd, const asp_exec_options *o,
			       const void *want, size_t wlen)
{
	asp_exec_result *r = run_opts(sb, cmd, o);

	assert_exited(r, 0);
	assert_stream(r, ASP_STDOUT, want, wlen);
	assert_stream(r, ASP_STDERR, "", 0);
	asp_exec_result_free(r);
}

void expect_stdout(asp_sandbox *sb, const char *cmd, const char *want)
{
	expect_stdout_opts(sb, cmd, NULL, want, strlen(want));
}

/* Does the listing of `dir` contain exactly `name`? Returns its index or -1. */
long list_find(const asp_list *l, const char *name)
{
	size_t i;

	for (i = 0; i < asp_list_count(l); i++)
		if (!strcmp(asp_list_name(l, i), name))
			return (long)i;
	return -1;
}

asp_list *list_ok(asp_sandbox *sb, const char *path)
{
	asp_list *l = NULL;
	asp_error e = { 0 };
	int rc = asp_list_dir(&l, sb, path, NULL, &e);

	ck_assert_msg(rc == ASP_OK, "list %s: %s: %s", path, asp_error_name(rc), e.message);
	ck_assert_ptr_nonnull(l);
	return l;
}

/* No atomic-write temporary file (".asp-") is left in `dir`, checked remotely and locally. */
void assert_no_temp_files(asp_sandbox *sb, const char *workspace, const char *dir)
{
	asp_list *l = list_ok(sb, dir);
	struct dirent *de;
	DIR *d;
	size_t i;

	for (i = 0; i < asp_list_count(l); i++)
		ck_assert_msg(!strstr(asp_list_name(l, i), ".asp-"), "temp file left in %s: %s", dir,
			      asp_list_name(l, i));
	asp_list_free(l);
	d = opendir(ws_path(workspace, dir));
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)) != NULL)
		ck_assert_msg(!strstr(de->d_name, ".asp-"), "temp file left in %s: %s", dir, de->d_name);
	closedir(d);
}

/* No file named prefix1..prefix4 appeared anywhere in the workspace (injection probes). */
void assert_not_injected(const char *workspace, const char *prefix)
{
	ck_assert_int_eq(fx_run("[ -z \"$(find '%s' -name '%s[0-9]')\" ]", workspace, prefix), 0);
}

/* ============================================================ read/write */
int pid_alive(pid_t pid)
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

int wait_gone(pid_t pid, long ms)
{
	for (long long end = fx_now_ms() + ms; fx_now_ms() < end; fx_sleep_ms(10))
		if (!pid_alive(pid))
			return 1;
	return !pid_alive(pid);
}

pid_t wait_sleep_under(const char *arg, pid_t ancestor, long ms)
{
	char needle[64];
	pid_t pid;

	snprintf(needle, sizeof(needle), "sleep %s", arg);
	for (long long end = fx_now_ms() + ms; !(pid = find_process_under(needle, ancestor)) && fx_now_ms() < end;)
		fx_sleep_ms(20);
	return pid;
}

int text_is_clean(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	for (; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			return 0;
		if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
			return 0;
		if (p[0] == 0xe2 && p[1] == 0x80 && p[2] >= 0xa8 && p[2] <= 0xae)
			return 0;
	}
	return 1;
}

/* A field of /proc/self/status in kB ("VmHWM", "VmRSS", "VmSize"), or -1. */
long status_kb(const char *field)
{
	char line[256];
	size_t fl = strlen(field);
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, fl) && line[fl] == ':') {
			v = strtol(line + fl + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

int test_lock(const char *name)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "/run/lock/asp-test-%s.lock", name);
	/* Read-only: flock needs no write access, so any user can take a lock root made. */
	fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
	ck_assert_msg(fd >= 0, "cannot open %s: %s", path, strerror(errno));
	while (flock(fd, LOCK_EX) != 0)
		ck_assert_msg(errno == EINTR, "cannot lock %s: %s", path, strerror(errno));
	return fd;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/* A sanitizer's allocator replaces malloc's bookkeeping; its runtime says what is in use. */
size_t __sanitizer_get_current_allocated_bytes(void);
size_t test_heap_in_use(void)
{
	return __sanitizer_get_current_allocated_bytes();
}
#else
size_t test_heap_in_use(void)
{
	struct mallinfo2 m = mallinfo2();

	return m.uordblks + m.hblkhd;
}
#endif

/* Reset VmHWM to the current RSS (Linux >= 4.0). */
int reset_peak(void)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY);
	int ok = fd >= 0 && write(fd, "5", 1) == 1;

	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

void proc_ids(pid_t pid, pid_t *ppid, pid_t *pgrp)
{
	char path[64], *text, *p;
	int pp = 0, pg = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	/* "PID (comm) STATE PPID PGRP ...": comm may hold anything, ")" too */
	if ((text = fx_read_file(path, NULL)) && (p = strrchr(text, ')')) &&
	    sscanf(p + 1, " %*c %d %d", &pp, &pg) != 2)
		pp = pg = 0;
	free(text);
	if (ppid)
		*ppid = (pid_t)pp;
	if (pgrp)
		*pgrp = (pid_t)pg;
}

/* The parent of pid, or 0. */
static pid_t parent_of(pid_t pid)
{
	pid_t ppid;

	proc_ids(pid, &ppid, NULL);
	return ppid;
}

/* A process (not this one) whose command line holds needle (and also), under ancestor if not 0. */
static pid_t find_matching(const char *needle, const char *also, pid_t ancestor)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	ck_assert_ptr_nonnull(d);
	while (!found && (e = readdir(d)) != NULL) {
		char path[64], *text;
		size_t len, i;
		pid_t pid = (pid_t)atoi(e->d_name), up;

		if (pid <= 0 || pid == getpid())
			continue;
		for (up = parent_of(pid); ancestor && up > 1 && up != ancestor; up = parent_of(up))
			;
		if (ancestor && up != ancestor)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
		if (!(text = fx_read_file(path, &len)))
			continue;
		for (i = 0; i < len; i++)
			if (!text[i])
				text[i] = ' ';
		if (strstr(text, needle) && (!also || strstr(text, also)) && pid_alive(pid))
			found = pid;
		free(text);
	}
	closedir(d);
	return found;
}

pid_t find_process_under(const char *needle, pid_t ancestor)
{
	return find_matching(needle, NULL, ancestor);
}

pid_t find_process(const char *needle)
{
	return find_matching(needle, NULL, 0);
}

pid_t find_process_with(const char *needle, const char *also)
{
	return find_matching(needle, also, 0);
}

void suite_sshd_start(fx_sshd *fx)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	int rc;

	memset(fx, 0, sizeof(*fx));
	ck_assert_msg(fx_sshd_start(fx) == 0, "the sshd fixture did not start");
	o.config_path = fx->config;
	test_open_options(&o);
	rc = asp_open(&sb, &o, &e);
	ck_assert_msg(rc == ASP_OK, "asp_open(%s): %s: %s", fx->config, asp_error_name(rc), e.message);
	asp_close(sb);
}

/* ------------------------------------------------------ the trace */

static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static char *trace_buf;
static size_t trace_len;

static void trace_collect(asp_log_level level, const char *msg, void *userdata)
{
	static const char *const names[] = { "?", "debug", "info", "warn" };
	size_t n = strlen(msg) + 16;
	char *grown;

	(void)userdata;
	pthread_mutex_lock(&trace_mu);
	if ((grown = realloc(trace_buf, trace_len + n))) {
		trace_buf = grown;
		trace_len += (size_t)snprintf(trace_buf + trace_len, n, "%s: %s\n",
					      names[level >= 1 && level <= 3 ? level : 0], msg);
	}
	pthread_mutex_unlock(&trace_mu);
}

void trace_on(asp_open_options *o)
{
	pthread_mutex_lock(&trace_mu);
	free(trace_buf);
	trace_buf = NULL;
	trace_len = 0;
	pthread_mutex_unlock(&trace_mu);
	o->log_fn = trace_collect;
	o->log_userdata = NULL;
}

const char *trace_text(void)
{
	const char *t;

	pthread_mutex_lock(&trace_mu);
	t = trace_buf ? trace_buf : "";
	pthread_mutex_unlock(&trace_mu);
	return t;
}
