/*
 * bench_common.h - what the C peers of bench/run.py share: key=value
 * arguments, clocks, CPU time, RSS, and the JSON lines they print.
 *
 * Every peer prints one JSON object per measured operation on stdout:
 *   {"peer": "...", "op": "...", "unit": "ms"|"s", "samples": [...],
 *    "cpu_s": <user+sys CPU of the timed section>, "wall_s": <its wall time>, ...}
 * and run.py turns the samples into medians, p99s and ratios. Header-only:
 * each peer is one translation unit.
 */
#ifndef ASP_BENCH_COMMON_H
#define ASP_BENCH_COMMON_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Wunused-function" /* header-only helpers; each peer uses some */

static int bench_argc;
static char **bench_argv;

static void bench_args(int argc, char **argv)
{
	bench_argc = argc;
	bench_argv = argv;
}

/* The value of key=value on the command line, or def. */
static const char *arg_s(const char *key, const char *def)
{
	size_t kl = strlen(key);

	for (int i = 1; i < bench_argc; i++)
		if (!strncmp(bench_argv[i], key, kl) && bench_argv[i][kl] == '=')
			return bench_argv[i] + kl + 1;
	return def;
}

static long arg_l(const char *key, long def)
{
	const char *v = arg_s(key, NULL);

	return v ? strtol(v, NULL, 10) : def;
}

/* Comma-separated integers ("1,4,16"); returns how many were stored. */
static int arg_list(const char *key, const char *def, long *out, int max)
{
	const char *v = arg_s(key, def);
	int n = 0;

	while (v && *v && n < max) {
		char *end;
		out[n++] = strtol(v, &end, 10);
		v = *end == ',' ? end + 1 : NULL;
	}
	return n;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	/* Not exit(): other threads may still be inside the library its exit handlers tear down. */
	fflush(stdout);
	_exit(1);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Sleep ms (an untimed pause between calls: pause_ms=). */
static void bench_pause(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (ms > 0 && nanosleep(&ts, &ts))
		;
}

/* User + system CPU time of this process, seconds. */
static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Resident set size now, KiB (VmRSS). */
static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* Bytes in use on the malloc heap (all arenas), KiB. */
#include <malloc.h>
static long heap_kb(void)
{
	struct mallinfo2 m = mallinfo2();

	return (long)((m.uordblks + m.hblkhd) / 1024);
}

typedef struct samples {
	double *v;
	size_t n, cap;
} samples;

static void samples_add(samples *s, double x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 64;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			die("out of memory");
	}
	s->v[s->n++] = x;
}

/* Print one result line. extra: NULL or raw JSON members ("\"callers\": 4"). */
static void emit(const char *peer, const char *op, const char *unit, const samples *s, double cpu,
		 double wall, const char *extra_fmt, ...) __attribute__((format(printf, 7, 8)));

static void emit(const char *peer, const char *op, const char *unit, const samples *s, double cpu,
		 double wall, const char *extra_fmt, ...)
{
	printf("{\"peer\": \"%s\", \"op\": \"%s\", \"unit\": \"%s\", \"cpu_s\": %.6f, \"wall_s\": %.6f",
	       peer, op, unit, cpu, wall);
	if (extra_fmt) {
		va_list ap;

		fputs(", ", stdout);
		va_start(ap, extra_fmt);
		vprintf(extra_fmt, ap);
		va_end(ap);
	}
	fputs(", \"samples\": [", stdout);
	for (size_t i = 0; s && i < s->n; i++)
		printf("%s%.4f", i ? ", " : "", s->v[i]);
	fputs("]}\n", stdout);
	fflush(stdout);
}

/*
 * Content check, outside every timed region: the workspace file `rel` (bench/run.py's
 * sandbox is on this machine, so its side of the bytes is a local file) must hold
 * exactly buf[0..len). A mismatch ends the peer with "content mismatch" (bench/run.py
 * then fails the run). Compared 64 KiB at a time: no second copy of a large file.
 */
static void verify_file(const char *what, const char *rel, const void *buf, size_t len)
{
	static unsigned char chunk[1 << 16];
	char p[1024];
	size_t off = 0, n;
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", arg_s("workspace", "."), rel);
	f = fopen(p, "rb");
	if (!f)
		die("%s: content check: cannot open %s", what, p);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
		if (n > len - off || memcmp(chunk, (const unsigned char *)buf + off, n)) {
			fclose(f);
			die("%s: content mismatch at or after byte %zu of %s", what, off, p);
		}
		off += n;
	}
	fclose(f);
	if (off != len)
		die("%s: content mismatch: %s has %zu bytes, not %zu", what, p, off, len);
}

/* A buffer of `len` pseudo-random bytes (not all zero: no compression games). */
static unsigned char *pattern(size_t len)
{
	unsigned char *b = malloc(len ? len : 1);
	unsigned int x = 2463534242u;

	if (!b)
		die("out of memory");
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		b[i] = (unsigned char)x;
	}
	return b;
}

/*
 * Threads on stacks we own and unmap after the join, so that a memory
 * measurement is not inflated by glibc's cache of dead threads' stacks.
 */
#include <pthread.h>
#define BENCH_STACK (512u * 1024u)

typedef struct bench_thread {
	pthread_t t;
	void *stack;
} bench_thread;

static void bench_thread_start(bench_thread *bt, void *(*fn)(void *), void *arg)
{
	pthread_attr_t a;

	bt->stack = mmap(NULL, BENCH_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
			 -1, 0);
	if (bt->stack == MAP_FAILED)
		die("mmap stack");
	pthread_attr_init(&a);
	pthread_attr_setstack(&a, bt->stack, BENCH_STACK);
	if (pthread_create(&bt->t, &a, fn, arg))
		die("pthread_create");
	pthread_attr_destroy(&a);
}

static void bench_thread_join(bench_thread *bt)
{
	pthread_join(bt->t, NULL);
	munmap(bt->stack, BENCH_STACK);
}

/* Run fn(arg) on n threads at once and wait for them all. */
static void bench_threads(long n, void *(*fn)(void *), void *arg)
{
	bench_thread *th = calloc((size_t)n, sizeof(*th));

	if (!th)
		die("calloc");
	for (long i = 0; i < n; i++)
		bench_thread_start(&th[i], fn, arg);
	for (long i = 0; i < n; i++)
		bench_thread_join(&th[i]);
	free(th);
}

#endif
