/*
 * common.h - internal helpers shared by every libasp source file:
 * allocation, argument checks, error filling, growable buffers, clocks.
 * Internal symbols are named asp__* (two underscores) and are not exported
 * from the shared library (-fvisibility=hidden).
 */
#ifndef ASP_COMMON_H
#define ASP_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "asp.h"

#if defined(__GNUC__)
#define ASP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define ASP_UNUSED __attribute__((unused))
#else
#define ASP_PRINTF(f, a)
#define ASP_UNUSED
#endif

/*
 * Fill err (when not NULL) with code and a formatted message; returns code
 * so that callers can write `return asp__error(err, ASP_EINVAL, "...")`.
 */
int asp__error(asp_error *err, int code, const char *fmt, ...) ASP_PRINTF(3, 4);
int asp__verror(asp_error *err, int code, const char *fmt, va_list ap);

/* 1 when err is set to code. */
#define asp__error_is(err, c) ((err) && (err)->code == (c))

/* Prefix an already filled message: "<prefix>: <old message>". */
void asp__error_prefix(asp_error *err, const char *fmt, ...) ASP_PRINTF(2, 3);

/* Reject a bad argument with ASP_EINVAL naming the expression. */
#define ASP_ASSERT_ARG(expr)                                                     \
	do {                                                                     \
		if (!(expr))                                                     \
			return asp__error(err, ASP_EINVAL, "invalid argument: %s", \
					  #expr);                                \
	} while (0)

/* Allocation: every allocation in libasp goes through these. */
void *asp__malloc(size_t n);
void *asp__calloc(size_t count, size_t n);
void *asp__realloc(void *p, size_t n);
/* Buffers of at least this many bytes get asp__mem_fill_hint's advice. */
#define ASP_MEM_LARGE ((size_t)4 << 20)
void asp__mem_fill_hint(void *p, size_t n);
/* Release the pages of a block that hold only zeros (they read as zeros again). */
void asp__mem_release_zeros(void *p, size_t n);
char *asp__strdup(const char *s);
char *asp__strndup(const char *s, size_t n);
/* printf into a new string; NULL on allocation failure. */
char *asp__sprintf(const char *fmt, ...) ASP_PRINTF(1, 2);
void asp__free(void *p);
/* Overwrite n bytes so secrets do not linger, then free. */
void asp__free_secret(void *p, size_t n);

/*
 * Test hooks: what exists only so that tests can reach in (a timer made
 * shorter, a route forced, a counter read) is compiled only with
 * -DASP_TEST_HOOKS, which the tests' copy of the library has
 * (build/tests/libasp-hooks.a) and the release library has not: there a
 * hook's setting is a constant and its counting nothing (tests/meta.sh
 * checks that no hook symbol is left in it). The Makefile compiles twice
 * each libasp source file that says ASP_TEST_ (these macros or the #ifdef), and
 * only those: keep hook code in .c files, a header only declares.
 * ASP_TEST_COUNT(v) / ASP_TEST_ADD(v, n) count into a hook's counter v.
 */
#ifdef ASP_TEST_HOOKS
#define ASP_TEST_COUNT(v) ((void)((v)++))
#define ASP_TEST_ADD(v, n) ((void)((v) += (n)))
/*
 * How many times slower than a plain build this run is (ASan, valgrind;
 * tests/main.c passes check's CK_TIMEOUT_MULTIPLIER). The defaults a caller
 * left at 0 (connect_timeout_ms, io_timeout_ms) are multiplied by it; a value
 * the caller set never is. In sandbox.c.
 */
void asp__test_slowdown(unsigned int n);
#else
#define ASP_TEST_COUNT(v) ((void)0)
#define ASP_TEST_ADD(v, n) ((void)0)
#endif

#ifdef ASP_ALLOC_TEST
/*
 * Test builds only (-DASP_ALLOC_TEST, tests/alloc/): make the n-th allocation
 * from now fail, once or (sticky) with every one after it; n <= 0 disarms.
 * Whether one has failed since arming; how many were made since arming.
 */
void asp__alloc_test_arm(long n, int sticky);
int asp__alloc_test_tripped(void);
long asp__alloc_test_seen(void);
/*
 * Where the last failed allocation was asked for (kept when disarmed, until
 * the next arming): its return addresses, innermost first (*pcs, up to 24;
 * the count is returned, 0 when none failed), and whether the thread that
 * armed the failure made it (*caller; else another thread, the pool's
 * maintenance thread or a bulk transfer's helper).
 */
int asp__alloc_test_trip_stack(void *const **pcs, int *caller);
#endif

/* A growable byte buffer. Zero-initialise; data is NUL-terminated when len > 0. */
typedef struct asp_buf {
	unsigned char *data;
	size_t len;
	size_t cap;
} asp_buf;

int asp__buf_grow(asp_buf *b, size_t extra);                      /* 0 or ASP_ENOMEM */
int asp__buf_reserve(asp_buf *b, size_t total);                   /* cap >= total (with the NUL); 0 or ASP_ENOMEM */
int asp__buf_put(asp_buf *b, const void *data, size_t len);        /* 0 or ASP_ENOMEM */
/* Append and NUL-terminate, growing b no further than cap + 1 bytes (a read's cap). */
int asp__buf_put_capped(asp_buf *b, const void *data, size_t len, uint64_t cap);
int asp__buf_puts(asp_buf *b, const char *s);                     /* 0 or ASP_ENOMEM */
int asp__buf_printf(asp_buf *b, const char *fmt, ...) ASP_PRINTF(2, 3);
/* Give the data away (caller frees with asp__free); b is reset. Never NULL on success. */
unsigned char *asp__buf_detach(asp_buf *b, size_t *len);
void asp__buf_free(asp_buf *b);

/*
 * Append everything readable from fd to b (NUL-terminated), retrying on
 * EINTR. Returns 0; ASP_ENOMEM; ASP_EIO with errno set; or ASP_EINVAL once
 * b holds more than max bytes (reading stops there).
 */
int asp__read_fd(asp_buf *b, int fd, size_t max);

/* Monotonic clock in milliseconds. */
uint64_t asp__now_ms(void);
/* The same clock in microseconds (route costs, route.c). */
uint64_t asp__now_us(void);

/* Base64 (standard alphabet). Encode with or without '=' padding. */
char *asp__base64_encode(const unsigned char *data, size_t len, int pad);
/* Decode; accepts missing padding; returns ASP_EINVAL on bad input. */
int asp__base64_decode(unsigned char **out, size_t *out_len, const char *text, size_t len);

/* Fill buf with n cryptographically random bytes. 0 or ASP_ERROR. */
int asp__random(void *buf, size_t n);

/*
 * 1 if s[0..len) looks like private key text rather than a path or a
 * variable's name: armour ("-----", "PRIVATE KEY"), a PuTTY key, the
 * base64 of an OpenSSH key's magic, or a '/'-separated part longer than
 * any file name (255 bytes), such as a pasted base64 body.
 */
int asp__looks_like_key_text(const char *s, size_t len);

/* 1 if s names a valid environment variable: ^[A-Za-z_][A-Za-z0-9_]*$ */
int asp__is_env_name(const char *s);

/*
 * A path for a message, escaped as asp__show_text does (a path may come
 * from the agent or the sandbox): whole when that takes up to
 * ASP_PATH_SHOW_MAX bytes, else its head and tail around "...", so that the
 * reason after it still fits in an asp_error. Returns out.
 */
#define ASP_PATH_SHOW_MAX 200
const char *asp__path_show(char out[ASP_PATH_SHOW_MAX + 4], const char *path);

/*
 * Text from the sandbox (server messages, stderr, names) for a message:
 * control bytes (C0, DEL, UTF-8-encoded C1), the Unicode line and
 * paragraph separators and bidirectional formatting controls, bytes that
 * are not valid UTF-8, and '\\' are shown as \\xNN (each byte), so nothing
 * the sandbox sends can drive the harness's terminal or forge lines in its
 * logs. Writes at most
 * cap bytes including the NUL (cut at a whole escape, "..." marks a cut).
 * Returns out.
 */
const char *asp__show_text(char *out, size_t cap, const void *data, size_t len);

/*
 * The user's home directory: $HOME when it is an absolute path, else the
 * password database's entry (copied into buf, size bytes) when that is
 * absolute and fits. NULL when there is none. The one rule for "~" and the
 * known_hosts default alike.
 */
const char *asp__home_dir(char *buf, size_t size);

/* The length of the longest '/'-separated component of path. */
size_t asp__longest_component(const char *path);

#endif
