/*
 * fuzz_sftp.c - the SFTP reply path on hostile server bytes, without I/O.
 *
 * 1. The decoders (asp__sftp_get_*, asp__sftp_status, asp__sftp_fail) on
 *    the input as a reply body.
 * 2. The framing: requests are queued on a connection that has no channel
 *    (asp__sftp_begin/end only build bytes), and the input is the server's
 *    byte stream, put into the connection's receive buffer a few bytes at a
 *    time. With no channel to read from, asp__sftp_reply answers "no SFTP
 *    channel" when it needs more bytes, and the harness feeds the next
 *    chunk: packets split anywhere, several in one chunk, length prefixes
 *    too small or too big, ids out of order, discarded replies. Every
 *    outcome is checked against a reference framing of the whole stream:
 *    the reply handed out (type, id, body bytes), or the error, must be what
 *    the stream says at that point.
 *
 * Input: byte 0: number of requests (1..32); bytes 1-4: which are discarded
 * (a bit each); byte 5: chunk-size seed; the rest: the server's stream.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs_sftp.h"
#include "sftp.h"
#include "ssh.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PACKET (1024u * 1024u) /* sftp.c's SFTP_MAX_PACKET */

#define CHECK(x)                       \
	do {                               \
		if (!(x))                  \
			__builtin_trap();  \
	} while (0)

static void decoders(const uint8_t *data, size_t size)
{
	const unsigned char *p = data, *s;
	size_t len = size, sl;
	asp_sftp_attrs a;
	asp_sftp_reply r;
	asp_error err;
	uint32_t count, i;

	/* A NAME reply body: count, then name, long name, attrs per entry. */
	if (asp__sftp_get_u32(&p, &len, &count) == 0)
		for (i = 0; i < count && i < 10000; i++)
			if (asp__sftp_get_str(&p, &len, &s, &sl) || asp__sftp_get_str(&p, &len, &s, &sl) ||
			    asp__sftp_get_attrs(&p, &len, &a))
				break;
	CHECK(len <= size);
	/* The listing decoder: names checked, at most 100 entries kept. */
	{
		asp_list_entry *v = NULL;
		size_t n = 0, cap = 0;
		uint64_t held = 0;
		asp_list_caps caps = { 100, 100000 };
		asp_error e;
		int rc = asp__fs_sftp_list_decode(data, size, "/fuzz", &caps, &v, &n, &cap, &held, &e);
		if (n > 100 || (rc && rc != ASP_EPROTO && rc != ASP_ELIMIT && rc != ASP_ENOMEM))
			__builtin_trap();
		for (size_t k = 0; k < n; k++)
			if (!v[k].name[0] || strchr(v[k].name, '/'))
				__builtin_trap();
		asp__fsops_list_free(v, n);
	}
	r.type = size ? data[0] : 0;
	r.id = 1;
	r.p = data;
	r.len = size;
	(void)asp__sftp_status(&r);
	memset(&err, 0, sizeof(err));
	(void)asp__sftp_fail(&r, ASP_EIO, &err, "stat", "some/path");
	CHECK(memchr(err.message, '\0', sizeof(err.message)) != NULL);
}

/* The reference framing: what the stream holds at `pos`. */
enum { REF_PACKET, REF_INCOMPLETE, REF_BAD_LENGTH };

static int ref_packet(const uint8_t *st, size_t len, size_t pos, size_t *total)
{
	uint32_t n;

	if (len - pos < 4)
		return REF_INCOMPLETE;
	n = (uint32_t)st[pos] << 24 | (uint32_t)st[pos + 1] << 16 | (uint32_t)st[pos + 2] << 8 |
	    st[pos + 3];
	if (n > MAX_PACKET || n < 5)
		return REF_BAD_LENGTH;
	if (len - pos < (size_t)n + 4)
		return REF_INCOMPLETE;
	*total = (size_t)n + 4;
	return REF_PACKET;
}

static uint32_t ref_id(const uint8_t *st, size_t pos)
{
	return (uint32_t)st[pos + 5] << 24 | (uint32_t)st[pos + 6] << 16 | (uint32_t)st[pos + 7] << 8 |
	       st[pos + 8];
}

typedef struct feeder {
	asp_conn *c;
	const uint8_t *st;
	size_t len, fed;
	uint32_t seed;
} feeder;

/* Put the next chunk (1..64 bytes) into the receive buffer; 0 when the stream is all in. */
static int feed(feeder *f)
{
	size_t n;

	if (f->fed == f->len)
		return 0;
	f->seed = f->seed * 1103515245u + 12345u;
	n = 1 + (f->seed >> 16) % 64;
	if (n > f->len - f->fed)
		n = f->len - f->fed;
	CHECK(asp__buf_put(&f->c->sftp.in, f->st + f->fed, n) == 0);
	f->fed += n;
	return 1;
}

/* Wait for a reply as the library does, feeding chunks while it asks for more. */
static int reply(feeder *f, asp_sftp_reply *r, uint32_t id, asp_error *err)
{
	for (;;) {
		int rc = asp__sftp_reply(f->c, r, id, err);
		if (rc != ASP_ECONNLOST || f->c->dead || !feed(f))
			return rc;
	}
}

/*
 * What the reference framing says a wait for request `want` (or a drain,
 * want < 0) ends with, from stream position *pos and request *req on; moves
 * both past the packets consumed. Returns 0 (a reply for want, or the drain
 * done), ASP_ECONNLOST (more bytes needed), or one of the two EPROTO cases.
 */
enum { WANT_BAD_LENGTH = 1000, WANT_OUT_OF_ORDER };

/* Does the library's result match what the reference wants? */
static int same(int rc, const asp_error *err, int want)
{
	if (want == WANT_BAD_LENGTH)
		return rc == ASP_EPROTO && strstr(err->message, "malformed SFTP packet length");
	if (want == WANT_OUT_OF_ORDER)
		return rc == ASP_EPROTO && strstr(err->message, "out of order");
	if (want == ASP_ECONNLOST)
		return rc == want && strstr(err->message, "no SFTP channel");
	return rc == want;
}

static int ref_wait(const feeder *f, const uint32_t *ids, uint32_t discard_bits, size_t k,
		    long want, size_t *pos, size_t *req, size_t *total)
{
	for (;;) {
		int ref;

		if (want < 0 && *req == k)
			return 0;
		ref = ref_packet(f->st, f->len, *pos, total);
		if (ref == REF_INCOMPLETE)
			return ASP_ECONNLOST;
		if (ref == REF_BAD_LENGTH)
			return WANT_BAD_LENGTH;
		if (want >= 0 && ref_id(f->st, *pos) != ids[*req])
			return WANT_OUT_OF_ORDER;
		if (want >= 0 && *req == (size_t)want)
			return 0; /* the caller consumes it after comparing */
		CHECK(want < 0 || (discard_bits >> *req & 1));
		*pos += *total;
		(*req)++;
	}
}

static void framing(const uint8_t *data, size_t size)
{
	asp_conn c;
	asp_error err;
	asp_sftp_reply r;
	feeder f;
	uint32_t ids[32], discard_bits;
	size_t k, i, kept = 0, pos = 0, req = 0, total = 0;
	int rc, want;

	if (size < 6)
		return;
	memset(&c, 0, sizeof(c));
	c.sock = -1;
	c.op_cancel_fd = -1;
	c.where = (char *)"fuzz";
	c.sftp.next_id = 1;
	k = 1 + data[0] % 32;
	discard_bits = (uint32_t)data[1] << 24 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 8 | data[4];
	for (i = 0; i < k; i++) {
		CHECK(asp__sftp_begin(&c, SSH_FXP_STAT) == 0);
		CHECK(asp__sftp_cstr(&c, "x") == 0);
		CHECK(asp__sftp_end(&c, (int)(discard_bits >> i & 1), &ids[i], &err) == 0);
		CHECK(ids[i] == i + 1);
		kept += !(discard_bits >> i & 1);
	}
	CHECK(asp__sftp_pending(&c) == kept);
	f.c = &c;
	f.st = data + 6;
	f.len = size - 6;
	f.fed = 0;
	f.seed = data[5];

	/* Each kept request in order; the discarded ones before it are consumed on the way. */
	for (i = 0; i < k; i++) {
		if (discard_bits >> i & 1)
			continue;
		memset(&err, 0, sizeof(err));
		rc = reply(&f, &r, ids[i], &err);
		want = ref_wait(&f, ids, discard_bits, k, (long)i, &pos, &req, &total);
		CHECK(same(rc, &err, want));
		CHECK(!rc || err.code == rc); /* a success may follow "need more bytes" errors */
		if (rc) {
			/* A broken stream gives the connection up; lacking bytes does not. */
			CHECK(!c.dead == (rc == ASP_ECONNLOST));
			goto out;
		}
		CHECK(r.id == ids[i]);
		CHECK(r.type == f.st[pos + 4]);
		CHECK(r.len == total - 9);
		CHECK(!r.len || !memcmp(r.p, f.st + pos + 9, r.len));
		pos += total;
		req++;
	}
	/* The rest (discarded replies after the last kept one) is drained. */
	for (;;) {
		rc = asp__sftp_drain(&c, &err);
		if (rc != ASP_ECONNLOST || c.dead || !feed(&f))
			break;
	}
	want = ref_wait(&f, ids, discard_bits, k, -1, &pos, &req, &total);
	CHECK(same(rc, &err, want));
	CHECK(rc || (c.sftp.headexpect == c.sftp.nexpect && asp__sftp_pending(&c) == 0));
out:
	asp__buf_free(&c.sftp.in);
	asp__buf_free(&c.sftp.out);
	asp__free(c.sftp.expect);
	asp__free(c.sftp.discard);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	decoders(data, size);
	framing(data, size);
	return 0;
}
