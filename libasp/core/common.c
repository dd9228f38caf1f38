/*
 * common.c - allocation, error filling, buffers, clock, base64, randomness,
 * the home directory.
 */
#include "common.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

int asp__verror(asp_error *err, int code, const char *fmt, va_list ap)
{
	if (err) {
		err->code = code;
		vsnprintf(err->message, sizeof(err->message), fmt, ap);
	}
	return code;
}

int asp__error(asp_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	asp__verror(err, code, fmt, ap);
	va_end(ap);
	return code;
}

void asp__error_prefix(asp_error *err, const char *fmt, ...)
{
	char prefix[ASP_ERROR_MESSAGE_MAX], old[ASP_ERROR_MESSAGE_MAX];
	va_list ap;
	size_t n;

	if (!err)
		return;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->message, sizeof(old));
	old[sizeof(old) - 1] = '\0';
	n = strlen(prefix);
	if (n > sizeof(err->message) - 3)
		n = sizeof(err->message) - 3;
	memcpy(err->message, prefix, n);
	memcpy(err->message + n, ": ", 2);
	memcpy(err->message + n + 2, old, sizeof(err->message) - n - 3);
	err->message[sizeof(err->message) - 1] = '\0';
}

#ifdef ASP_ALLOC_TEST
/*
 * Allocation-failure testing (tests/alloc/torture.c), compiled in only with
 * -DASP_ALLOC_TEST: after asp__alloc_test_arm(n, sticky), the n-th allocation
 * through the functions below fails -- once, or with sticky that one and
 * every later one -- whichever thread makes it. libssh2's allocations come
 * here too (conn.c), so its internal failures are counted.
 */
#include <execinfo.h>
#include <pthread.h>
#include <stdatomic.h>

static atomic_long alloc_countdown; /* > 0: armed */
static atomic_long alloc_seen;      /* allocations since arming */
static atomic_int alloc_tripped;
static atomic_int alloc_sticky;
/* The failed allocation's stack and thread: written by the one thread that trips, read after. */
static void *trip_pcs[24];
static int trip_depth;
static pthread_t armer, tripper;

void asp__alloc_test_arm(long n, int sticky)
{
	atomic_store(&alloc_countdown, 0);
	atomic_store(&alloc_tripped, 0);
	atomic_store(&alloc_seen, 0);
	atomic_store(&alloc_sticky, n > 0 && sticky);
	if (n > 0) { /* a disarm keeps the last trip's stack for the report */
		trip_depth = 0;
		armer = pthread_self();
	}
	atomic_store(&alloc_countdown, n > 0 ? n : 0);
}

int asp__alloc_test_trip_stack(void *const **pcs, int *caller)
{
	*pcs = trip_pcs;
	*caller = !trip_depth || pthread_equal(tripper, armer);
	return trip_depth;
}

int asp__alloc_test_tripped(void)
{
	return atomic_load(&alloc_tripped);
}

long asp__alloc_test_seen(void)
{
	return atomic_load(&alloc_seen);
}

static int alloc_fails(void)
{
	long v = atomic_load(&alloc_countdown);

	atomic_fetch_add(&alloc_seen, 1);
	if (atomic_load(&alloc_sticky) && atomic_load(&alloc_tripped))
		return 1;
	while (v > 0) {
		if (atomic_compare_exchange_weak(&alloc_countdown, &v, v - 1)) {
			if (v != 1)
				return 0;
			trip_depth = backtrace(trip_pcs, 24);
			tripper = pthread_self();
			atomic_store(&alloc_tripped, 1);
			return 1;
		}
	}
	return 0;
}
#define ALLOC_FAILS() alloc_fails()
#else
#define ALLOC_FAILS() 0
#endif

void *asp__malloc(size_t n)
{
	if (ALLOC_FAILS())
		return NULL;
	return malloc(n ? n : 1);
}

void *asp__calloc(size_t count, size_t n)
{
	if (ALLOC_FAILS())
		return NULL;
	return calloc(count ? count : 1, n ? n : 1);
}

void *asp__realloc(void *p, size_t n)
{
	if (ALLOC_FAILS())
		return NULL;
	return realloc(p, n ? n : 1);
}

/*
 * A buffer of megabytes about to be filled (a large read's result): ask for
 * huge pages over the 2 MiB-aligned part of it. Where transparent huge pages
 * are on request only (THP "madvise", the default of several distributions),
 * filling 64 MiB of fresh memory otherwise takes 16384 page faults: 172 ms
 * against 10 ms with the advice, measured in a VM whose faults are dear
 * (docs/ARCHITECTURE.md, "Large buffers"). Advice only: an error (no THP in
 * the kernel, memory not ours to advise) changes nothing and is ignored.
 */
void asp__mem_fill_hint(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
	const uintptr_t huge = (uintptr_t)2 << 20;
	uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + n) & ~(huge - 1);

	if (n >= ASP_MEM_LARGE && e > a)
		(void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
	(void)p;
	(void)n;
#endif
}

static int page_is_zero(const unsigned char *p, size_t n)
{
	return !p[0] && !memcmp(p, p + 1, n - 1); /* every byte equals the next, the first is 0 */
}

/*
 * Give back to the kernel the whole pages of [p, p + n) that hold only
 * zeros. Private anonymous memory, which malloc's is, reads as zeros again
 * where advised MADV_DONTNEED, so nothing changes but the resident size,
 * until a page is written again. For a block made zeroed and mostly left
 * so: libssh2 1.10's session is 58 KiB, 50 of them two packet buffers that
 * it writes only as far as its packets reach (docs/ARCHITECTURE.md, "Memory
 * per connection"). Advice only: an error changes nothing.
 */
void asp__mem_release_zeros(void *p, size_t n)
{
	const uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t)p + ps - 1) & ~(ps - 1), e = ((uintptr_t)p + n) & ~(ps - 1);

	while (a < e) { /* a run of zero pages from a, then the page that ends it */
		uintptr_t z = a;

		while (z < e && page_is_zero((const unsigned char *)z, ps))
			z += ps;
		if (z > a)
			(void)madvise((void *)a, z - a, MADV_DONTNEED);
		a = z + ps;
	}
}

char *asp__strndup(const char *s, size_t n)
{
	char *d = asp__malloc(n + 1);

	if (!d)
		return NULL;
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

char *asp__strdup(const char *s)
{
	return asp__strndup(s, strlen(s));
}

char *asp__sprintf(const char *fmt, ...)
{
	va_list ap;
	int n;
	char *s;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !(s = asp__malloc((size_t)n + 1)))
		return NULL;
	va_start(ap, fmt);
	vsnprintf(s, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return s;
}

void asp__free(void *p)
{
	free(p);
}

void asp__free_secret(void *p, size_t n)
{
	if (!p)
		return;
	OPENSSL_cleanse(p, n);
	free(p);
}

int asp__buf_grow(asp_buf *b, size_t extra)
{
	size_t need, cap;
	unsigned char *d;

	if (extra > SIZE_MAX - b->len - 1)
		return ASP_ENOMEM;
	need = b->len + extra + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	if (!(d = asp__realloc(b->data, cap)))
		return ASP_ENOMEM;
	b->data = d;
	b->cap = cap;
	return 0;
}

int asp__buf_reserve(asp_buf *b, size_t total)
{
	unsigned char *d;

	if (total <= b->cap)
		return 0;
	if (!(d = asp__realloc(b->data, total)))
		return ASP_ENOMEM;
	asp__mem_fill_hint(d, total);
	b->data = d;
	b->cap = total;
	return 0;
}

int asp__buf_put_capped(asp_buf *b, const void *data, size_t len, uint64_t cap)
{
	size_t need = b->len + len + 1, nc;
	unsigned char *p;

	if (need > b->cap) {
		nc = b->cap ? b->cap : 4096;
		while (nc < need)
			nc = nc > SIZE_MAX / 2 ? need : nc * 2;
		if (cap < SIZE_MAX && (uint64_t)nc > cap + 1)
			nc = (size_t)cap + 1 > need ? (size_t)cap + 1 : need;
		if (!(p = asp__realloc(b->data, nc)))
			return ASP_ENOMEM;
		b->data = p;
		b->cap = nc;
	}
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

int asp__buf_put(asp_buf *b, const void *data, size_t len)
{
	if (asp__buf_grow(b, len))
		return ASP_ENOMEM;
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

int asp__buf_puts(asp_buf *b, const char *s)
{
	return asp__buf_put(b, s, strlen(s));
}

int asp__buf_printf(asp_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || asp__buf_grow(b, (size_t)n))
		return ASP_ENOMEM;
	va_start(ap, fmt);
	vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

unsigned char *asp__buf_detach(asp_buf *b, size_t *len)
{
	unsigned char *d;

	if (!b->data && asp__buf_grow(b, 0))
		return NULL;
	/* Callers rely on the terminator, also for an empty or rewound buffer. */
	b->data[b->len] = '\0';
	d = b->data;
	if (len)
		*len = b->len;
	b->data = NULL;
	b->len = b->cap = 0;
	return d;
}

void asp__buf_free(asp_buf *b)
{
	asp__free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

int asp__read_fd(asp_buf *b, int fd, size_t max)
{
	ssize_t n;

	for (;;) {
		if (b->len > max)
			return ASP_EINVAL;
		if (asp__buf_grow(b, 65536))
			return ASP_ENOMEM;
		n = read(fd, b->data + b->len, 65536);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return ASP_EIO;
		if (n == 0)
			return 0;
		b->len += (size_t)n;
		b->data[b->len] = '\0';
	}
}

uint64_t asp__now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t asp__now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *asp__base64_encode(const unsigned char *data, size_t len, int pad)
{
	size_t i, o = 0;
	char *out = asp__malloc(((len + 2) / 3) * 4 + 1);

	if (!out)
		return NULL;
	for (i = 0; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8 | data[i + 2];
		out[o++] = b64[v >> 18];
		out[o++] = b64[(v >> 12) & 63];
		out[o++] = b64[(v >> 6) & 63];
		out[o++] = b64[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)data[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)data[i + 1] << 8;
		out[o++] = b64[v >> 18];
		out[o++] = b64[(v >> 12) & 63];
		if (i + 1 < len)
			out[o++] = b64[(v >> 6) & 63];
		else if (pad)
			out[o++] = '=';
		if (pad)
			out[o++] = '=';
	}
	out[o] = '\0';
	return out;
}

static int b64_value(unsigned char c)
{
	const char *p;

	if (!c || !(p = strchr(b64, c)))
		return -1;
	return (int)(p - b64);
}

int asp__base64_decode(unsigned char **out, size_t *out_len, const char *text, size_t len)
{
	unsigned char *d;
	size_t i, o = 0, n = len;
	uint32_t acc = 0;
	int bits = 0;

	while (n > 0 && text[n - 1] == '=')
		n--;
	if (len - n > 2 || n % 4 == 1)
		return ASP_EINVAL;
	if (!(d = asp__malloc(n * 3 / 4 + 1)))
		return ASP_ENOMEM;
	for (i = 0; i < n; i++) {
		int v = b64_value((unsigned char)text[i]);
		if (v < 0) {
			asp__free_secret(d, n * 3 / 4 + 1); /* the decoded part may be a key */
			return ASP_EINVAL;
		}
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			d[o++] = (unsigned char)(acc >> bits);
		}
	}
	*out = d;
	*out_len = o;
	return 0;
}

int asp__random(void *buf, size_t n)
{
	return RAND_bytes(buf, (int)n) == 1 ? 0 : ASP_ERROR;
}

int asp__looks_like_key_text(const char *s, size_t len)
{
	static const char *const marks[] = {
		"-----", "PRIVATE KEY", "PuTTY-User-Key-File",
		"b3BlbnNzaC1rZXktdjE", /* base64 of "openssh-key-v1\0", how an OpenSSH key's body starts */
	};
	size_t i, part = 0;

	for (i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
		if (memmem(s, len, marks[i], strlen(marks[i])))
			return 1;
	for (i = 0; i < len; i++) {
		part = s[i] == '/' ? 0 : part + 1;
		if (part > 255)
			return 1;
	}
	return 0;
}

int asp__is_env_name(const char *s)
{
	if (!s || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
		return 0;
	for (s++; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
		      (*s >= '0' && *s <= '9') || *s == '_'))
			return 0;
	return 1;
}

/*
 * Length of the valid UTF-8 sequence at p (1..4), or 0. Counted as invalid
 * (so each of their bytes is escaped): C1 controls (U+0080..U+009F), the
 * line and paragraph separators (U+2028, U+2029, line breaks to some log
 * viewers), and the bidirectional formatting controls (U+200E, U+200F,
 * U+202A..U+202E, U+2066..U+2069), which reorder how a line is displayed.
 */
static size_t utf8_len(const unsigned char *p, size_t n)
{
	size_t len, i;
	uint32_t cp;

	if (p[0] < 0xc2 || p[0] > 0xf4)
		return 0;
	len = p[0] < 0xe0 ? 2 : p[0] < 0xf0 ? 3 : 4;
	if (len > n)
		return 0;
	cp = p[0] & (0x7f >> len);
	for (i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp < 0xa0)
		return 0;
	if (cp == 0x200e || cp == 0x200f || cp == 0x2028 || cp == 0x2029 ||
	    (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
		return 0;
	return len;
}

/* The shown form of the character at p[0..n): into piece (up to 4 bytes); *adv bytes consumed. */
static size_t show_piece(const unsigned char *p, size_t n, char piece[4], size_t *adv)
{
	static const char hex[] = "0123456789abcdef";

	if (p[0] >= 0x20 && p[0] < 0x7f && p[0] != '\\') {
		piece[0] = (char)p[0];
		return *adv = 1;
	}
	if (p[0] >= 0x80 && (*adv = utf8_len(p, n))) {
		memcpy(piece, p, *adv);
		return *adv;
	}
	piece[0] = '\\';
	piece[1] = 'x';
	piece[2] = hex[p[0] >> 4];
	piece[3] = hex[p[0] & 15];
	*adv = 1;
	return 4;
}

/* Bytes that asp__show_text makes of data, uncut. */
static size_t shown_len(const unsigned char *p, size_t len)
{
	size_t i = 0, o = 0, adv;
	char piece[4];

	while (i < len) {
		o += show_piece(p + i, len - i, piece, &adv);
		i += adv;
	}
	return o;
}

const char *asp__show_text(char *out, size_t cap, const void *data, size_t len)
{
	const unsigned char *p = data;
	size_t o = 0, i = 0;

	if (!cap)
		return out;
	while (i < len) {
		char piece[4];
		size_t adv, pl = show_piece(p + i, len - i, piece, &adv);

		/* Keep room for a "..." after the piece unless it is the last one. */
		if (o + pl + (i + adv < len ? 3 : 0) + 1 > cap) {
			if (o + 4 <= cap) {
				memcpy(out + o, "...", 3);
				o += 3;
			}
			break;
		}
		memcpy(out + o, piece, pl);
		o += pl;
		i += adv;
	}
	out[o] = '\0';
	return out;
}

const char *asp__path_show(char out[ASP_PATH_SHOW_MAX + 4], const char *path)
{
	const unsigned char *p = (const unsigned char *)path;
	size_t n = strlen(path), half = ASP_PATH_SHOW_MAX / 2, tail = ASP_PATH_SHOW_MAX - half;
	size_t k, o, from;

	if (shown_len(p, n) <= ASP_PATH_SHOW_MAX)
		return asp__show_text(out, ASP_PATH_SHOW_MAX + 1, p, n);
	/* The head, cut by asp__show_text with its "..." ... */
	asp__show_text(out, half + 1, p, n);
	o = strlen(out);
	/* ... then the longest tail whose shown form fits, starting on a character. */
	for (k = n < tail ? n : tail, from = n; k > 0; k--) {
		from = n - k;
		while (from < n && (p[from] & 0xc0) == 0x80 && from - (n - k) < 3)
			from++;
		if (shown_len(p + from, n - from) <= tail)
			break;
	}
	asp__show_text(out + o, tail + 1, p + from, k ? n - from : 0);
	return out;
}

size_t asp__longest_component(const char *path)
{
	size_t best = 0, cur = 0;

	for (; *path; path++) {
		cur = *path == '/' ? 0 : cur + 1;
		if (cur > best)
			best = cur;
	}
	return best;
}

const char *asp__home_dir(char *buf, size_t size)
{
	const char *home = getenv("HOME");
	struct passwd pw, *res = NULL;
	char tmp[4096];

	if (home && home[0] == '/')
		return home;
	if (getpwuid_r(getuid(), &pw, tmp, sizeof(tmp), &res) || !res || !pw.pw_dir ||
	    pw.pw_dir[0] != '/' || strlen(pw.pw_dir) >= size)
		return NULL;
	memcpy(buf, pw.pw_dir, strlen(pw.pw_dir) + 1);
	return buf;
}
