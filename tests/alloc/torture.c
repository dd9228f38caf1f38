/*
 * torture.c - allocation-failure torture (curl's "torture" tests, for libasp).
 *
 * Built against build-alloc/libasp.a: the library compiled with
 * -DASP_ALLOC_TEST and ASan+UBSan (`make check-alloc`). With that define,
 * common.c counts every allocation made through asp__malloc / calloc /
 * realloc / strdup / strndup / sprintf -- and libssh2's, which session.c routes
 * through the same functions in every build -- and asp__alloc_test_arm(n, s)
 * makes the n-th allocation from now fail: only that one ("once": recovery,
 * e.g. the retry on a fresh connection, gets its chance) or, "sticky", that
 * one and every later one (every error path runs out of memory too).
 *
 * For each scenario and both modes the driver runs the same call with the
 * failure at N = 1, 2, 3, ... until a run completes without reaching it, and
 * checks every run:
 *  - a run in which no allocation failed returns what the unfaulted baseline
 *    returns (ASP_OK, or ASP_ECONFIG for the broken config), with a correct
 *    result;
 *  - a run in which an allocation failed returns that same code with a
 *    correct result, or ASP_ENOMEM -- nothing else. This holds for libssh2's
 *    internal failures too: libssh2 reports some of them as other errors (a
 *    failed key exchange, a closed channel), but session.c's allocator callback
 *    sees every one, gives the session up and makes the error ASP_ENOMEM;
 *  - a failure fills the caller's asp_error (code and a message);
 *  - nothing leaks (LeakSanitizer runs after every run, not only at exit).
 *    One exception, in tests/alloc/lsan.supp: libssh2 1.10 does not free the
 *    server's ed25519 host key (an OpenSSL EVP_PKEY) when a later allocation
 *    of the key exchange fails -- libssh2's bug, not reachable from libasp;
 *  - ASan/UBSan see no memory error (they abort the process);
 *  - the handle is usable afterwards: the same operation, unfaulted, gives
 *    the right result, and a failed atomic write left the target either old
 *    or new and no temporary file behind once the next write has run.
 *
 * Outside the torture: allocations libasp does not make itself -- cJSON's
 * (config parsing; cJSON_InitHooks is process-global, so libasp leaves it to
 * the application), OpenSSL's (hashing, randomness, libssh2's crypto) and
 * libc's (getaddrinfo, getpwuid_r, realpath).
 *
 * Output: a line per scenario, then "alloc: N passed, M failed" where each
 * (scenario, N) run is one check. A failed run also prints the stack of the
 * allocation that was made to fail, and whether the calling thread made it.
 * ALLOC_ONLY=name runs one scenario; ALLOC_VERBOSE=1 prints every run.
 */
#ifndef ASP_ALLOC_TEST
#error "tests/alloc/torture.c needs the library built with -DASP_ALLOC_TEST (make check-alloc)"
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sanitizer/lsan_interface.h>

#include "asp.h"
#include "common.h"
#include "fixture/fixture.h"

#define MAX_N 20000 /* a scenario that has not finished by then is a failure of its own */

static fx_sshd fx;
static asp_sandbox *sb;          /* the shared handle of the operation scenarios */
static char tmpdir[256];         /* local files: configs, the known_hosts store */
static char cfg_good[300], cfg_bad[300], cfg_tofu[300], kh_path[300];
static int passed, failed, verbose, leak_checks_on = 1;

static void fail_run(const char *scen, long n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The sanitizer runtime's symbolizer (the torture is built with ASan). */
void __sanitizer_symbolize_pc(void *pc, const char *fmt, char *out, size_t out_size);

static void fail_run(const char *scen, long n, const char *fmt, ...)
{
	void *const *pcs;
	va_list ap;
	int depth, caller;

	failed++;
	fprintf(stderr, "alloc: FAIL %s N=%ld: ", scen, n);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	/* Where the failed allocation was made, so that a failure seen once (in CI) can be found. */
	depth = asp__alloc_test_trip_stack(&pcs, &caller);
	if (depth)
		fprintf(stderr, "alloc:   the failed allocation, made by %s:\n",
			caller ? "the calling thread" : "another thread of the library");
	for (int i = 1; i < depth; i++) { /* 0 is backtrace() itself */
		char line[512];

		/* A return address points after the call: one byte back is inside it. */
		__sanitizer_symbolize_pc((char *)pcs[i] - 1, "%f %S", line, sizeof(line));
		fprintf(stderr, "alloc:     #%d %s\n", i, line);
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- helpers */

/* A "why" buffer: a scenario's check writes what was wrong, or leaves it empty. */
typedef struct why {
	char text[600];
} why;

static void whyf(why *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void whyf(why *w, const char *fmt, ...)
{
	va_list ap;

	if (w->text[0])
		return;
	va_start(ap, fmt);
	vsnprintf(w->text, sizeof(w->text), fmt, ap);
	va_end(ap);
}

static asp_sandbox *open_plain(const char *config, const char *known_hosts, asp_error *e, int *rc)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *s = NULL;

	o.config_path = config;
	o.known_hosts = known_hosts;
	/* The pool's maintenance thread must stay quiet while a failure is armed. */
	o.keepalive_s = 3600;
	o.idle_close_s = 3600;
	*rc = asp_open(&s, &o, e);
	return s;
}

/* Content for the write scenario: 200 KiB, so that the write needs several SFTP packets. */
#define WRITE_LEN (200u * 1024u)
static unsigned char content_a[WRITE_LEN], content_b[WRITE_LEN];

/* ---------------------------------------------------------------- scenarios */

/*
 * run(): the armed call; returns its code and leaves anything to check in
 * the scenario's state. check(): unfaulted; rc is what run() returned;
 * verifies the result of a successful run and that the handle still works.
 */
typedef struct scenario {
	const char *name;
	int expect;                       /* what the unfaulted call returns */
	void (*prepare)(void);            /* unfaulted, before each run; may be NULL */
	int (*run)(asp_error *e);
	void (*check)(int rc, why *w);    /* unfaulted, after each run */
} scenario;

/* -- config */

static int run_check_config(asp_error *e)
{
	return asp_config_check(cfg_good, e);
}

static int run_check_bad_config(asp_error *e)
{
	return asp_config_check(cfg_bad, e);
}

static int run_find_config(asp_error *e)
{
	char start[300], *found = NULL;
	int rc;

	/* Discovery walks up from a subdirectory to the .asp.json in tmpdir. */
	snprintf(start, sizeof(start), "%s/sub/dir", tmpdir);
	rc = asp_config_find(&found, start, e);
	if (rc == ASP_OK && (!found || strcmp(found, cfg_good) != 0))
		rc = 999; /* a wrong answer: reported as an unexpected code */
	asp_free(found);
	return rc;
}

/* The judged content: what asp_open's discovery parses. */
static int run_read_config(asp_error *e)
{
	char start[300], *text = NULL, *path = NULL;
	int rc;

	snprintf(start, sizeof(start), "%s/sub/dir", tmpdir);
	rc = asp_config_read(&text, &path, start, e);
	if (rc == ASP_OK && (!text || !path || strcmp(path, cfg_good) != 0 || !strstr(text, "workspace")))
		rc = 999;
	asp_free(text);
	asp_free(path);
	return rc;
}

/* -- asp_open */

static asp_sandbox *opened;

static int run_open(asp_error *e)
{
	int rc;

	opened = open_plain(fx.config, NULL, e, &rc);
	return rc;
}

static void check_open(int rc, why *w)
{
	asp_stat_info st;
	asp_error e = { 0 };

	if (rc == ASP_OK) {
		if (!opened)
			whyf(w, "asp_open returned ASP_OK without a handle");
		else if ((rc = asp_stat(&st, opened, ".", NULL, &e)) != ASP_OK || st.type != ASP_TYPE_DIR)
			whyf(w, "the opened handle does not work: %s: %s", asp_error_name(rc), e.message);
	} else if (opened) {
		whyf(w, "asp_open failed but set *out");
		opened = NULL; /* not ours to close */
	}
	asp_close(opened);
	opened = NULL;
}

/* Trust on first use: each run starts with no store, so the key is recorded. */
static void prepare_tofu(void)
{
	unlink(kh_path);
}

static int run_open_tofu(asp_error *e)
{
	int rc;

	opened = open_plain(cfg_tofu, kh_path, e, &rc);
	return rc;
}

static void check_open_tofu(int rc, why *w)
{
	struct stat st;
	char *text;

	if (rc == ASP_OK) {
		if (stat(kh_path, &st) != 0)
			whyf(w, "first use succeeded but %s was not written", kh_path);
		else if ((st.st_mode & 0777) != 0600)
			whyf(w, "%s has mode %03o", kh_path, (unsigned)(st.st_mode & 0777));
		if ((text = fx_read_file(kh_path, NULL)) != NULL) {
			if (!strstr(text, "ssh-ed25519 "))
				whyf(w, "%s does not hold the key: %s", kh_path, text);
			free(text);
		}
	}
	check_open(rc, w);
}

/* -- operations on the shared handle */

static unsigned char *got;
static size_t got_len;

static int run_read(asp_error *e)
{
	got = NULL;
	got_len = 0;
	return asp_read(&got, &got_len, sb, "torture/a.bin", 0, ASP_READ_ALL, NULL, e);
}

static void check_read(int rc, why *w)
{
	asp_error e = { 0 };

	if (rc == ASP_OK && (got_len != WRITE_LEN || memcmp(got, content_a, WRITE_LEN)))
		whyf(w, "read returned %zu bytes, want %u (or the content differs)", got_len, WRITE_LEN);
	if (rc != ASP_OK && got)
		whyf(w, "a failed read set *out");
	asp_free(got);
	got = NULL;
	rc = asp_read(&got, &got_len, sb, "torture/a.bin", 0, ASP_READ_ALL, NULL, &e);
	if (rc != ASP_OK || got_len != WRITE_LEN || memcmp(got, content_a, WRITE_LEN))
		whyf(w, "the handle is broken: read again: %s: %s", asp_error_name(rc), e.message);
	asp_free(got);
	got = NULL;
}

/* A ranged read of a missing file: the error path allocates too. */
static int run_read_missing(asp_error *e)
{
	got = NULL;
	return asp_read(&got, &got_len, sb, "torture/missing.bin", 10, 100, NULL, e);
}

static void check_read_missing(int rc, why *w)
{
	if (got)
		whyf(w, "a failed read set *out");
	asp_free(got);
	got = NULL;
	check_read(ASP_ENOMEM, w);
}

static int write_flip; /* which content the next write puts */

static int run_write(asp_error *e)
{
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;

	wo.flags |= ASP_WRITE_PARENTS;
	return asp_write(sb, "torture/w/b.bin", write_flip ? content_b : content_a, WRITE_LEN, &wo, e);
}

/* The target holds the old or the new content, never a mix; no temp file is left. */
static void check_write(int rc, why *w)
{
	const unsigned char *want = write_flip ? content_b : content_a;
	const unsigned char *old = write_flip ? content_a : content_b;
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	asp_list *l = NULL;
	int r2;

	got = NULL;
	r2 = asp_read(&got, &got_len, sb, "torture/w/b.bin", 0, ASP_READ_ALL, NULL, &e);
	if (rc == ASP_OK && (r2 != ASP_OK || got_len != WRITE_LEN || memcmp(got, want, WRITE_LEN)))
		whyf(w, "write said OK but the file does not hold the new content (%s, %zu bytes)",
		     asp_error_name(r2), got_len);
	if (rc != ASP_OK && r2 == ASP_OK &&
	    (got_len != WRITE_LEN || (memcmp(got, want, WRITE_LEN) && memcmp(got, old, WRITE_LEN))))
		whyf(w, "a failed atomic write left a torn file (%zu bytes)", got_len);
	if (rc != ASP_OK && r2 != ASP_OK && r2 != ASP_ENOENT)
		whyf(w, "reading after a failed write: %s: %s", asp_error_name(r2), e.message);
	asp_free(got);
	got = NULL;
	write_flip = !write_flip;

	/* The handle works; the next write also removes a temp file the failed one left. */
	wo.flags |= ASP_WRITE_PARENTS;
	if ((r2 = asp_write(sb, "torture/w/b.bin", write_flip ? content_b : content_a, WRITE_LEN, &wo,
			    &e)) != ASP_OK)
		whyf(w, "the handle is broken: write again: %s: %s", asp_error_name(r2), e.message);
	write_flip = !write_flip;
	if ((r2 = asp_list_dir(&l, sb, "torture/w", NULL, &e)) != ASP_OK)
		whyf(w, "list after write: %s: %s", asp_error_name(r2), e.message);
	else if (asp_list_count(l) != 1 || strcmp(asp_list_name(l, 0), "b.bin"))
		whyf(w, "torture/w holds %zu entries (first: %s): a temp file was left behind",
		     asp_list_count(l), asp_list_name(l, 0) ? asp_list_name(l, 0) : "-");
	asp_list_free(l);
}

static asp_exec_result *xr;

static int run_exec(asp_error *e)
{
	static const char *const env[] = { "TORTURE_A=one two", "TORTURE_B=$(x)'\"", NULL };
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;

	o.env = env;
	o.stdin_data = (const unsigned char *)"from-stdin";
	o.stdin_len = 10;
	o.cwd = "torture";
	xr = NULL;
	return asp_exec(&xr, sb, "printf '%s|%s|' \"$TORTURE_A\" \"$TORTURE_B\"; cat; echo err >&2; exit 3",
			&o, e);
}

static int output_is(const asp_exec_result *r, asp_stream stream, const char *want)
{
	size_t len = 0;
	const unsigned char *d = asp_exec_result_output(r, stream, &len);

	return len == strlen(want) && (!len || !memcmp(d, want, len));
}

static void check_exec_result(int rc, why *w)
{
	if (rc == ASP_OK) {
		if (!xr)
			whyf(w, "exec returned ASP_OK without a result");
		else if (asp_exec_result_exit_code(xr) != 3 || asp_exec_result_signal(xr) != 0 ||
			 !output_is(xr, ASP_STDOUT, "one two|$(x)'\"|from-stdin") ||
			 !output_is(xr, ASP_STDERR, "err\n"))
			whyf(w, "exec gave a wrong result: exit %d, signal %d", asp_exec_result_exit_code(xr),
			     asp_exec_result_signal(xr));
	} else if (xr) {
		whyf(w, "a failed exec set *out");
		xr = NULL;
	}
	asp_exec_result_free(xr);
	xr = NULL;
}

static void check_exec(int rc, why *w)
{
	asp_error e = { 0 };

	check_exec_result(rc, w);
	rc = run_exec(&e);
	if (rc != ASP_OK)
		whyf(w, "the handle is broken: exec again: %s: %s", asp_error_name(rc), e.message);
	check_exec_result(rc, w);
}

/* A command killed by a signal, with output caps: the signal name and the tail ring allocate. */
static int run_exec_signal(asp_error *e)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;

	o.max_output = 8;
	xr = NULL;
	return asp_exec(&xr, sb, "printf 0123456789abcdef; kill -s TERM $$", &o, e);
}

static void check_exec_signal_result(int rc, why *w)
{
	if (rc == ASP_OK) {
		if (!xr)
			whyf(w, "exec returned ASP_OK without a result");
		else if (asp_exec_result_signal(xr) != 15 || asp_exec_result_exit_code(xr) != -1 ||
			 !output_is(xr, ASP_STDOUT, "0123cdef") || !asp_exec_result_truncated(xr, ASP_STDOUT) ||
			 asp_exec_result_output_total(xr, ASP_STDOUT) != 16)
			whyf(w, "exec gave a wrong result: exit %d, signal %d (want -1, 15)",
			     asp_exec_result_exit_code(xr), asp_exec_result_signal(xr));
	} else if (xr) {
		whyf(w, "a failed exec set *out");
		xr = NULL;
	}
	asp_exec_result_free(xr);
	xr = NULL;
}

static void check_exec_signal(int rc, why *w)
{
	asp_error e = { 0 };

	check_exec_signal_result(rc, w);
	rc = run_exec_signal(&e);
	if (rc != ASP_OK)
		whyf(w, "the handle is broken: exec again: %s: %s", asp_error_name(rc), e.message);
	check_exec_signal_result(rc, w);
}

static asp_stat_info st_got;

static int run_stat(asp_error *e)
{
	memset(&st_got, 0, sizeof(st_got));
	return asp_stat(&st_got, sb, "torture/a.bin", NULL, e);
}

static void check_stat(int rc, why *w)
{
	asp_error e = { 0 };

	if (rc == ASP_OK && (st_got.size != WRITE_LEN || st_got.type != ASP_TYPE_FILE))
		whyf(w, "stat gave size %llu type %u", (unsigned long long)st_got.size, st_got.type);
	if ((rc = run_stat(&e)) != ASP_OK || st_got.size != WRITE_LEN)
		whyf(w, "the handle is broken: stat again: %s: %s", asp_error_name(rc), e.message);
}

static asp_list *list_got;
#define LIST_FILES 40 /* more than one READDIR reply's worth in a small directory? OpenSSH sends up to 100 */

static int run_list(asp_error *e)
{
	list_got = NULL;
	return asp_list_dir(&list_got, sb, "torture/list", NULL, e);
}

static void check_list_result(int rc, why *w)
{
	if (rc == ASP_OK) {
		size_t n = asp_list_count(list_got);
		if (n != LIST_FILES)
			whyf(w, "list gave %zu entries, want %d", n, LIST_FILES);
		for (size_t i = 0; i < n && !w->text[0]; i++) {
			char want[32];
			snprintf(want, sizeof(want), "f%02zu", i);
			if (strcmp(asp_list_name(list_got, i), want))
				whyf(w, "list entry %zu is %s, want %s", i, asp_list_name(list_got, i), want);
		}
	} else if (list_got) {
		whyf(w, "a failed list set *out");
		list_got = NULL;
	}
	asp_list_free(list_got);
	list_got = NULL;
}

static void check_list(int rc, why *w)
{
	asp_error e = { 0 };

	check_list_result(rc, w);
	if ((rc = run_list(&e)) != ASP_OK)
		whyf(w, "the handle is broken: list again: %s: %s", asp_error_name(rc), e.message);
	check_list_result(rc, w);
}

/* mkdir -p, rename and a recursive remove, each undone or redone by its check. */
static int run_mkdir(asp_error *e)
{
	return asp_mkdir(sb, "torture/m/a/b/c", 0, ASP_MKDIR_PARENTS, NULL, e);
}

static void check_mkdir(int rc, why *w)
{
	asp_stat_info st;
	asp_error e = { 0 };

	if (rc == ASP_OK && (asp_stat(&st, sb, "torture/m/a/b/c", NULL, &e) || st.type != ASP_TYPE_DIR))
		whyf(w, "mkdir said OK but the directory is not there");
	if ((rc = asp_remove(sb, "torture/m", ASP_REMOVE_RECURSIVE, NULL, &e)) != ASP_OK && rc != ASP_ENOENT)
		whyf(w, "the handle is broken: remove: %s: %s", asp_error_name(rc), e.message);
}

static void prepare_rename(void)
{
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };

	asp_remove(sb, "torture/r2.txt", 0, NULL, NULL);
	if (asp_write(sb, "torture/r1.txt", "rename me", 9, &wo, &e) != ASP_OK)
		fprintf(stderr, "alloc: rename setup: %s\n", e.message);
}

static int run_rename(asp_error *e)
{
	return asp_rename(sb, "torture/r1.txt", "torture/r2.txt", NULL, e);
}

static void check_rename(int rc, why *w)
{
	asp_stat_info st;
	int from = asp_stat(&st, sb, "torture/r1.txt", NULL, NULL) == ASP_OK;
	int to = asp_stat(&st, sb, "torture/r2.txt", NULL, NULL) == ASP_OK;

	if (rc == ASP_OK && (from || !to))
		whyf(w, "rename said OK but source %s, target %s", from ? "exists" : "is gone",
		     to ? "exists" : "is missing");
	if (rc != ASP_OK && from == to)
		whyf(w, "a failed rename left source and target both %s", from ? "present" : "missing");
}

static void prepare_remove(void)
{
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };

	wo.flags |= ASP_WRITE_PARENTS;
	if (asp_write(sb, "torture/rm/x/y.txt", "y", 1, &wo, &e) != ASP_OK)
		fprintf(stderr, "alloc: remove setup: %s\n", e.message);
}

static int run_remove(asp_error *e)
{
	return asp_remove(sb, "torture/rm", ASP_REMOVE_RECURSIVE, NULL, e);
}

static void check_remove(int rc, why *w)
{
	asp_stat_info st;

	if (rc == ASP_OK && asp_stat(&st, sb, "torture/rm", NULL, NULL) != ASP_ENOENT)
		whyf(w, "remove said OK but torture/rm is still there");
}

static int run_info(asp_error *e)
{
	asp_sandbox_info info;

	memset(&info, 0, sizeof(info));
	info.version = ASP_SANDBOX_INFO_VERSION;
	return asp_sandbox_info_get(&info, sb, e);
}

static void check_nothing(int rc, why *w)
{
	(void)rc;
	(void)w;
}

static const scenario scenarios[] = {
	{ "check_config", ASP_OK, NULL, run_check_config, check_nothing },
	{ "check_config_invalid", ASP_ECONFIG, NULL, run_check_bad_config, check_nothing },
	{ "find_config", ASP_OK, NULL, run_find_config, check_nothing },
	{ "read_config", ASP_OK, NULL, run_read_config, check_nothing },
	{ "open", ASP_OK, NULL, run_open, check_open },
	{ "open_tofu", ASP_OK, prepare_tofu, run_open_tofu, check_open_tofu },
	{ "read", ASP_OK, NULL, run_read, check_read },
	{ "read_missing", ASP_ENOENT, NULL, run_read_missing, check_read_missing },
	{ "write", ASP_OK, NULL, run_write, check_write },
	{ "exec", ASP_OK, NULL, run_exec, check_exec },
	{ "exec_signal", ASP_OK, NULL, run_exec_signal, check_exec_signal },
	{ "stat", ASP_OK, NULL, run_stat, check_stat },
	{ "list", ASP_OK, NULL, run_list, check_list },
	{ "mkdir", ASP_OK, NULL, run_mkdir, check_mkdir },
	{ "rename", ASP_OK, prepare_rename, run_rename, check_rename },
	{ "remove", ASP_OK, prepare_remove, run_remove, check_remove },
	{ "info", ASP_OK, NULL, run_info, check_nothing },
};

/* ---------------------------------------------------------------- driver */

static void run_scenario(const scenario *s, int sticky)
{
	long n, allocs = 0;
	int ok_runs = 0, enomem_runs = 0, fail_before = failed;
	double t0 = now_s();

	for (n = 1; n <= MAX_N; n++) {
		asp_error e;
		why w = { { 0 } };
		int rc, tripped, leaks = 0;

		if (s->prepare)
			s->prepare();
		memset(&e, 0, sizeof(e));
		e.code = 12345; /* a failure must overwrite it */
		asp__alloc_test_arm(n, sticky);
		rc = s->run(&e);
		tripped = asp__alloc_test_tripped();
		allocs = asp__alloc_test_seen();
		asp__alloc_test_arm(0, 0);

		if (!tripped && rc != s->expect)
			whyf(&w, "no allocation failed, yet the call returned %s (want %s): %s",
			     asp_error_name(rc), asp_error_name(s->expect), e.message);
		else if (tripped && rc != s->expect && rc != ASP_ENOMEM)
			whyf(&w, "allocation %ld failed and the call returned %s (want %s or ASP_ENOMEM): %s", n,
			     asp_error_name(rc), asp_error_name(s->expect), e.message);
		if (rc != ASP_OK && (e.code != rc || !e.message[0]))
			whyf(&w, "returned %s but asp_error holds code %d, message \"%s\"", asp_error_name(rc),
			     e.code, e.message);
		if (rc == ASP_OK && e.code != 12345)
			whyf(&w, "succeeded but touched asp_error (code %d: %s)", e.code, e.message);
		s->check(rc, &w);
		if (leak_checks_on && __lsan_do_recoverable_leak_check()) {
			leaks = 1;
			leak_checks_on = 0; /* the leak stays reachable-less: later checks would repeat it */
			whyf(&w, "LeakSanitizer found a leak (report above)");
		}
		if (w.text[0])
			fail_run(s->name, n, "%s [%s, rc %s, tripped %d]", w.text, sticky ? "sticky" : "once",
				 asp_error_name(rc), tripped);
		else
			passed++;
		if (verbose)
			printf("alloc: %s %s N=%ld: %s%s%s\n", sticky ? "sticky" : "once", s->name, n,
			       asp_error_name(rc),
			       tripped ? " (allocation failed)" : "", leaks ? " LEAK" : "");
		if (rc == ASP_ENOMEM)
			enomem_runs++;
		else if (tripped)
			ok_runs++;
		if (!tripped)
			break;
	}
	if (n > MAX_N)
		fail_run(s->name, n, "still failing allocations after %d runs", MAX_N);
	printf("alloc: %-6s %-20s %4ld runs (%ld allocations), %3d ENOMEM, %3d recovered, %d failed, %.1f s\n",
	       sticky ? "sticky" : "once", s->name, n, allocs, enomem_runs, ok_runs, failed - fail_before,
	       now_s() - t0);
	fflush(stdout);
}

static int setup_files(void)
{
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_error e = { 0 };
	char path[400];
	int rc;

	snprintf(tmpdir, sizeof(tmpdir), "/tmp/asp-alloc.XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(cfg_good, sizeof(cfg_good), "%s/.asp.json", tmpdir);
	snprintf(cfg_bad, sizeof(cfg_bad), "%s/bad.json", tmpdir);
	snprintf(cfg_tofu, sizeof(cfg_tofu), "%s/tofu.json", tmpdir);
	snprintf(kh_path, sizeof(kh_path), "%s/kh/known_hosts", tmpdir);
	snprintf(path, sizeof(path), "%s/sub/dir", tmpdir);
	if (fx_run("mkdir -p '%s'", path) || fx_write_config(&fx, cfg_good, NULL) ||
	    fx_write_config(&fx, cfg_bad, &(fx_config_opts){ .port = 70000 }) ||
	    fx_write_config(&fx, cfg_tofu, &(fx_config_opts){ .host_key = FX_OMIT }))
		return -1;
	for (size_t i = 0; i < WRITE_LEN; i++) {
		content_a[i] = (unsigned char)(i * 7 + (i >> 8));
		content_b[i] = (unsigned char)(i * 13 + 1);
	}
	sb = open_plain(fx.config, NULL, &e, &rc);
	if (rc != ASP_OK) {
		fprintf(stderr, "alloc: asp_open: %s\n", e.message);
		return -1;
	}
	wo.flags |= ASP_WRITE_PARENTS;
	if ((rc = asp_write(sb, "torture/a.bin", content_a, WRITE_LEN, &wo, &e)))
		return -1;
	for (int i = 0; i < LIST_FILES; i++) {
		char name[64];
		snprintf(name, sizeof(name), "torture/list/f%02d", i);
		if ((rc = asp_write(sb, name, name, strlen(name), &wo, &e)))
			return -1;
	}
	return 0;
}

int main(void)
{
	const char *only = getenv("ALLOC_ONLY");
	double t0 = now_s();
	size_t i;

	verbose = getenv("ALLOC_VERBOSE") && *getenv("ALLOC_VERBOSE") == '1';
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (fx_sshd_start(&fx) || setup_files()) {
		fprintf(stderr, "alloc: setup failed\n");
		fx_sshd_stop(&fx);
		printf("alloc: 0 passed, 1 failed\n");
		return 1;
	}
	for (int sticky = 0; sticky < 2; sticky++)
		for (i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
			if (!only || !strcmp(only, scenarios[i].name))
				run_scenario(&scenarios[i], sticky);
	asp_close(sb);
	fx_sshd_stop(&fx);
	fx_run("rm -rf '%s'", tmpdir);
	printf("alloc: total %.1f s\n", now_s() - t0);
	printf("alloc: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
