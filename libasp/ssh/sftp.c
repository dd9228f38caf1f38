/*
 * sftp.c - SFTP v3 request/reply engine over a libssh2 channel.
 *
 * libssh2's own SFTP layer waits for each reply before the next request
 * and cannot use posix-rename@openssh.com; speaking the protocol directly
 * lets every operation pipeline its requests (see fs.c).
 */
#include "sftp.h"

#include <stdatomic.h>
#include <string.h>

#include "chan.h"
#include "ssh.h"

#define SFTP_MAX_PACKET (1024u * 1024u) /* larger replies are a protocol violation */

/* ------------------------------------------------------------ building */

/* Builders record an allocation failure and report it once, from asp__sftp_end. */
static int out_put(asp_conn *c, const void *p, size_t n)
{
	if (asp__buf_put(&c->sftp.out, p, n)) {
		c->sftp.ok_mem = 0;
		return ASP_ENOMEM;
	}
	return 0;
}

int asp__sftp_u32(asp_conn *c, uint32_t v)
{
	unsigned char b[4] = { (unsigned char)(v >> 24), (unsigned char)(v >> 16),
			       (unsigned char)(v >> 8), (unsigned char)v };
	return out_put(c, b, 4);
}

int asp__sftp_u64(asp_conn *c, uint64_t v)
{
	return asp__sftp_u32(c, (uint32_t)(v >> 32)) | asp__sftp_u32(c, (uint32_t)v);
}

int asp__sftp_str(asp_conn *c, const void *s, size_t len)
{
	return asp__sftp_u32(c, (uint32_t)len) | out_put(c, s, len);
}

int asp__sftp_cstr(asp_conn *c, const char *s)
{
	return asp__sftp_str(c, s, strlen(s));
}

int asp__sftp_attrs(asp_conn *c, uint32_t flags, uint32_t perm)
{
	int rc = asp__sftp_u32(c, flags);

	if (flags & SSH_FILEXFER_ATTR_PERMISSIONS)
		rc |= asp__sftp_u32(c, perm);
	return rc;
}

int asp__sftp_begin(asp_conn *c, uint8_t type)
{
	c->routes |= ASP_ROUTE_SFTP;
	c->sftp.ok_mem = 1;
	c->sftp.out_mark = c->sftp.out.len;
	c->sftp.building = type;
	/* length placeholder, type, id */
	return asp__sftp_u32(c, 0) | out_put(c, &type, 1) | asp__sftp_u32(c, c->sftp.next_id);
}

static int expect_push(asp_sftp_state *s, uint32_t id, int discard)
{
	if (s->headexpect > 0 && s->headexpect == s->nexpect) {
		s->headexpect = s->nexpect = 0;
	}
	if (s->nexpect == s->capexpect) {
		size_t cap = s->capexpect ? s->capexpect * 2 : 64;
		uint32_t *e = asp__realloc(s->expect, cap * sizeof(*e));
		unsigned char *d;
		if (!e)
			return ASP_ENOMEM;
		s->expect = e;
		if (!(d = asp__realloc(s->discard, cap)))
			return ASP_ENOMEM;
		s->discard = d;
		s->capexpect = cap;
	}
	s->expect[s->nexpect] = id;
	s->discard[s->nexpect++] = (unsigned char)discard;
	return 0;
}

int asp__sftp_end(asp_conn *c, int discard, uint32_t *id, asp_error *err)
{
	asp_sftp_state *s = &c->sftp;
	size_t n;
	unsigned char *p;

	if (!s->ok_mem || expect_push(s, s->next_id, discard)) {
		s->out.len = s->out_mark;
		return asp__error(err, ASP_ENOMEM, "out of memory building an SFTP request");
	}
	n = s->out.len - s->out_mark - 4;
	p = s->out.data + s->out_mark;
	p[0] = (unsigned char)(n >> 24);
	p[1] = (unsigned char)(n >> 16);
	p[2] = (unsigned char)(n >> 8);
	p[3] = (unsigned char)n;
	if (id)
		*id = s->next_id;
	s->next_id++;
	if (s->building == SSH_FXP_OPEN || s->building == SSH_FXP_OPENDIR)
		s->held++;
	else if (s->building == SSH_FXP_CLOSE && s->held)
		s->held--;
	return 0;
}

/*
 * One-round-trip reads (fs.c) send READs on the handle the OPEN before them
 * will return, before its reply. OpenSSH's sftp-server numbers handles by
 * slot, lowest free first: with no handle open, the next OPEN gets the one
 * the last such OPEN got. A wrong guess is harmless only while the server
 * holds no handle of ours (then a READ on it finds none and fails, and the
 * read goes on with the real handle): so no guess while one may be held,
 * and none after two misses in a row (a server with other handles).
 */
#ifdef ASP_TEST_HOOKS
static _Atomic unsigned long stat_hit, stat_missed;
static unsigned char forced[ASP_SFTP_GUESS_MAX];
static _Atomic size_t forced_len;
#endif

size_t asp__sftp_guess(const asp_conn *c, const unsigned char **h)
{
	const asp_sftp_state *s = &c->sftp;

	if (s->held || s->guess_missed >= 2 || !s->guess_len)
		return 0;
#ifdef ASP_TEST_HOOKS
	if (forced_len) {
		*h = forced;
		return forced_len;
	}
#endif
	*h = s->guess;
	return s->guess_len;
}

void asp__sftp_got_handle(asp_conn *c, const unsigned char *h, size_t hl)
{
	asp_sftp_state *s = &c->sftp;

	if (s->held != 1) /* another handle may be open: this one tells nothing */
		return;
	s->guess_len = hl <= sizeof(s->guess) ? (uint8_t)hl : 0;
	memcpy(s->guess, h, s->guess_len);
}

void asp__sftp_no_handle(asp_conn *c)
{
	if (c->sftp.held)
		c->sftp.held--;
}

void asp__sftp_guessed(asp_conn *c, int hit)
{
	if (hit) {
		ASP_TEST_COUNT(stat_hit);
		c->sftp.guess_missed = 0;
	} else {
		ASP_TEST_COUNT(stat_missed);
		if (c->sftp.guess_missed < 2)
			c->sftp.guess_missed++;
	}
}

#ifdef ASP_TEST_HOOKS
void asp__sftp_guess_stats(unsigned long *hit, unsigned long *missed)
{
	*hit = stat_hit;
	*missed = stat_missed;
}

static void (*data_fn)(size_t n, void *arg);
static void *data_arg;
static void (*sent_fn)(const void *data, size_t n, void *arg);
static void *sent_arg;

void asp__sftp_on_data(void (*fn)(size_t n, void *arg), void *arg)
{
	data_fn = fn;
	data_arg = arg;
}

void asp__sftp_on_sent(void (*fn)(const void *data, size_t n, void *arg), void *arg)
{
	sent_fn = fn;
	sent_arg = arg;
}

void asp__sftp_force_guess(const void *h, size_t len)
{
	forced_len = 0;
	if (h && len && len <= sizeof(forced)) {
		memcpy(forced, h, len);
		forced_len = len;
	}
}
#endif

void asp__sftp_forget(asp_conn *c)
{
	asp_sftp_state *s = &c->sftp;
	size_t i;

	for (i = s->headexpect; i < s->nexpect; i++)
		s->discard[i] = 1;
}

/* ------------------------------------------------------------ I/O */

static int write_some(asp_conn *c, asp_error *err)
{
	asp_sftp_state *s = &c->sftp;

	while (s->out_off < s->out.len) {
		ssize_t n = libssh2_channel_write(s->chan, (const char *)s->out.data + s->out_off,
						  s->out.len - s->out_off);
		if (n == LIBSSH2_ERROR_EAGAIN)
			return 0;
		if (n < 0)
			return asp__ssh_error(c, (int)n, err, "sending an SFTP request");
#ifdef ASP_TEST_HOOKS
		if (sent_fn)
			sent_fn(s->out.data + s->out_off, (size_t)n, sent_arg);
#endif
		s->out_off += (size_t)n;
	}
	s->out.len = s->out_off = 0;
	return 0;
}

int asp__sftp_flush(asp_conn *c, asp_error *err)
{
	return write_some(c, err);
}

/* The unparsed bytes start at in_off: consuming a packet moves the offset, not the bytes. */
static unsigned char *front(asp_sftp_state *s)
{
	return s->in.data + s->in_off;
}

/* Bytes of a complete packet at the front of `in`, or 0. */
static size_t complete_packet(asp_sftp_state *s, int *too_big)
{
	const unsigned char *d = front(s);
	size_t n, avail = s->in.len - s->in_off;

	*too_big = 0;
	if (avail < 4)
		return 0;
	n = (size_t)d[0] << 24 | (size_t)d[1] << 16 | (size_t)d[2] << 8 | d[3];
	if (n > SFTP_MAX_PACKET || n < 5) {
		*too_big = 1;
		return 0;
	}
	return avail >= n + 4 ? n + 4 : 0;
}

static int read_some(asp_conn *c, asp_error *err)
{
	asp_sftp_state *s = &c->sftp;
	ssize_t n;

	/* Move what is left to the start only when room runs short: once per buffer, not per packet. */
	if (s->in_off && s->in.cap - s->in.len < 65536 + 1) {
		memmove(s->in.data, s->in.data + s->in_off, s->in.len - s->in_off);
		s->in.len -= s->in_off;
		s->in_off = 0;
	}
	if (asp__buf_grow(&s->in, 65536)) {
		/* Replies are due that cannot be read: the stream is out of step from here. */
		c->dead = 1;
		return asp__error(err, ASP_ENOMEM, "out of memory reading an SFTP reply");
	}
	n = libssh2_channel_read(s->chan, (char *)s->in.data + s->in.len, s->in.cap - s->in.len - 1);
	if (n == LIBSSH2_ERROR_EAGAIN)
		return 1;
	if (n < 0)
		return asp__ssh_error(c, (int)n, err, "reading an SFTP reply");
	if (n == 0) {
		if (libssh2_channel_eof(s->chan)) {
			if (s->starting)
				return 2; /* the subsystem's program ended before VERSION: no SFTP here */
			c->dead = 1;
			return asp__error(err, ASP_ECONNLOST, "%s: the SFTP server closed its channel", c->where);
		}
		return 1;
	}
	s->in.len += (size_t)n;
#ifdef ASP_TEST_HOOKS
	if (data_fn)
		data_fn((size_t)n, data_arg);
#endif
	return 0;
}

/* Drop the packet at the front of `in`. */
static void consume(asp_sftp_state *s, size_t n)
{
	s->in_off += n;
	if (s->in_off == s->in.len)
		s->in_off = s->in.len = 0;
}

/*
 * Wait for the next packet; returns its size in *n (still at the front of
 * in). deadline (0 = none) as for asp__ssh_wait; while starting, 2 when
 * the channel ended first.
 */
static int next_packet(asp_conn *c, size_t *n, uint64_t deadline, asp_error *err)
{
	asp_sftp_state *s = &c->sftp;
	int too_big, rc;

	for (;;) {
		if ((*n = complete_packet(s, &too_big)) > 0)
			return 0;
		if (too_big) {
			c->dead = 1;
			return asp__error(err, ASP_EPROTO, "%s: malformed SFTP packet length", c->where);
		}
		if (!s->chan) /* no channel to read more from (also how tests/fuzz feeds bytes) */
			return asp__error(err, ASP_ECONNLOST, "%s: no SFTP channel", c->where);
		if ((rc = write_some(c, err)) != 0)
			return rc;
		/*
		 * A reader whose socket stays full never waits: it looks at the
		 * cancel and deadline before it reads more. Not after: bytes
		 * already taken in may hold the reply, which then counts.
		 */
		if ((rc = asp__ssh_op_stopped(c, err)) != 0)
			return rc;
		rc = read_some(c, err);
		if (rc < 0 || rc == 2)
			return rc;
		if (rc == 1 && (rc = asp__ssh_wait(c, deadline, -1, NULL, 0, ASP_WAIT_REPLY, err)) != 0)
			return rc;
	}
}


int asp__sftp_reply(asp_conn *c, asp_sftp_reply *r, uint32_t id, asp_error *err)
{
	asp_sftp_state *s = &c->sftp;
	size_t n;
	int rc;

	if (s->in_front) {
		consume(s, s->in_front);
		s->in_front = 0;
	}
	for (;;) {
		uint32_t want;
		int drop;

		if (s->headexpect >= s->nexpect)
			return asp__error(err, ASP_ERROR, "%s: internal error: no SFTP reply expected", c->where);
		if ((rc = next_packet(c, &n, 0, err)) != 0)
			return rc;
		want = s->expect[s->headexpect];
		drop = s->discard[s->headexpect];
		s->headexpect++;
		r->type = front(s)[4];
		r->id = (uint32_t)front(s)[5] << 24 | (uint32_t)front(s)[6] << 16 |
			(uint32_t)front(s)[7] << 8 | front(s)[8];
		if (n < 9 || r->id != want) {
			c->dead = 1;
			return asp__error(err, ASP_EPROTO, "%s: SFTP reply %u out of order (expected %u)",
					  c->where, r->id, want);
		}
		if (drop) {
			consume(s, n);
			continue;
		}
		if (r->id != id) {
			c->dead = 1;
			return asp__error(err, ASP_ERROR, "%s: internal error: reply %u read for request %u",
					  c->where, r->id, id);
		}
		r->p = front(s) + 9;
		r->len = n - 9;
		s->in_front = n;
		return 0;
	}
}

/* Tests (the fuzz target): the engine's count of replies to come. */
#ifdef ASP_TEST_HOOKS
size_t asp__sftp_pending(const asp_conn *c)
{
	const asp_sftp_state *s = &c->sftp;
	size_t i, n = 0;

	for (i = s->headexpect; i < s->nexpect; i++)
		n += !s->discard[i];
	return n;
}
#endif

int asp__sftp_drain(asp_conn *c, asp_error *err)
{
	asp_sftp_state *s = &c->sftp;
	size_t n;
	int rc;

	asp__sftp_forget(c);
	if (s->in_front) {
		consume(s, s->in_front);
		s->in_front = 0;
	}
	while (s->headexpect < s->nexpect) {
		if ((rc = next_packet(c, &n, 0, err)) != 0)
			return rc;
		s->headexpect++;
		consume(s, n);
	}
	return 0;
}

/* ------------------------------------------------------------ decoding */

int asp__sftp_get_u32(const unsigned char **p, size_t *len, uint32_t *v)
{
	if (*len < 4)
		return ASP_EPROTO;
	*v = (uint32_t)(*p)[0] << 24 | (uint32_t)(*p)[1] << 16 | (uint32_t)(*p)[2] << 8 | (*p)[3];
	*p += 4;
	*len -= 4;
	return 0;
}

int asp__sftp_get_u64(const unsigned char **p, size_t *len, uint64_t *v)
{
	uint32_t hi, lo;

	if (asp__sftp_get_u32(p, len, &hi) || asp__sftp_get_u32(p, len, &lo))
		return ASP_EPROTO;
	*v = (uint64_t)hi << 32 | lo;
	return 0;
}

int asp__sftp_get_str(const unsigned char **p, size_t *len, const unsigned char **s, size_t *slen)
{
	uint32_t n;

	if (asp__sftp_get_u32(p, len, &n) || n > *len)
		return ASP_EPROTO;
	*s = *p;
	*slen = n;
	*p += n;
	*len -= n;
	return 0;
}

int asp__sftp_get_attrs(const unsigned char **p, size_t *len, asp_sftp_attrs *a)
{
	uint32_t skip, count, i;
	const unsigned char *s;
	size_t sl;

	memset(a, 0, sizeof(*a));
	if (asp__sftp_get_u32(p, len, &a->flags))
		return ASP_EPROTO;
	if ((a->flags & SSH_FILEXFER_ATTR_SIZE) && asp__sftp_get_u64(p, len, &a->size))
		return ASP_EPROTO;
	if ((a->flags & SSH_FILEXFER_ATTR_UIDGID) &&
	    (asp__sftp_get_u32(p, len, &skip) || asp__sftp_get_u32(p, len, &skip)))
		return ASP_EPROTO;
	if ((a->flags & SSH_FILEXFER_ATTR_PERMISSIONS) && asp__sftp_get_u32(p, len, &a->perm))
		return ASP_EPROTO;
	if ((a->flags & SSH_FILEXFER_ATTR_ACMODTIME) &&
	    (asp__sftp_get_u32(p, len, &skip) || asp__sftp_get_u32(p, len, &a->mtime)))
		return ASP_EPROTO;
	if (a->flags & SSH_FILEXFER_ATTR_EXTENDED) {
		if (asp__sftp_get_u32(p, len, &count))
			return ASP_EPROTO;
		for (i = 0; i < count; i++)
			if (asp__sftp_get_str(p, len, &s, &sl) || asp__sftp_get_str(p, len, &s, &sl))
				return ASP_EPROTO;
	}
	return 0;
}

int asp__sftp_status(const asp_sftp_reply *r)
{
	const unsigned char *p = r->p;
	size_t len = r->len;
	uint32_t code;

	if (r->type != SSH_FXP_STATUS || asp__sftp_get_u32(&p, &len, &code))
		return -1;
	return (int)code;
}

int asp__sftp_fail(const asp_sftp_reply *r, int fallback, asp_error *err, const char *what,
		   const char *path)
{
	int st = asp__sftp_status(r);
	const unsigned char *p = r->p, *msg = NULL;
	size_t len = r->len, mlen = 0, longest = asp__longest_component(path), full = strlen(path);
	uint32_t code;
	char shown[ASP_PATH_SHOW_MAX + 4], said[128];

	path = asp__path_show(shown, path); /* a huge path must not push the reason out of the message */
	if (st < 0)
		return asp__error(err, ASP_EPROTO, "%s %s: unexpected SFTP reply type %u", what, path,
				  r->type);
	asp__sftp_get_u32(&p, &len, &code);
	if (asp__sftp_get_str(&p, &len, &msg, &mlen))
		mlen = 0;
	/* The server's words are the sandbox's: escaped, and short enough to leave the path room. */
	asp__show_text(said, sizeof(said), msg, mlen);
	switch (st) {
	case SSH_FX_BAD_MESSAGE:
		/*
		 * Our requests are well formed: OpenSSH's sftp-server answers this
		 * for ENAMETOOLONG and EINVAL from the file system, i.e. a path the
		 * sandbox cannot use.
		 */
		if (longest > 255 || full >= 4096)
			return asp__error(err, ASP_EINVAL, "%s %s: file name too long (%zu bytes, the longest "
					  "name %zu; the usual limits are 4095 and 255)", what, path, full,
					  longest);
		return asp__error(err, ASP_EINVAL, "%s %s: the sandbox rejected the path as invalid or too "
				  "long (%s, SFTP status 5)", what, path, mlen ? said : "bad message");
	case SSH_FX_NO_SUCH_FILE:
		return asp__error(err, ASP_ENOENT, "%s %s: no such file or directory", what, path);
	case SSH_FX_PERMISSION_DENIED:
		return asp__error(err, ASP_EACCES, "%s %s: permission denied", what, path);
	case SSH_FX_EOF:
		return asp__error(err, fallback, "%s %s: unexpected end of file", what, path);
	default:
		return asp__error(err, fallback, "%s %s: %s (SFTP status %d)", what, path,
				  mlen ? said : "failure", st);
	}
}

/* ------------------------------------------------------------ channel */

static int parse_version(asp_conn *c, const unsigned char *p, size_t len, asp_error *err)
{
	uint32_t ver = 0;
	const unsigned char *name, *data;
	size_t nl, dl;

	if (asp__sftp_get_u32(&p, &len, &ver) || ver < 3)
		return asp__error(err, ASP_EPROTO, "%s: SFTP server speaks version %u, need 3", c->where, ver);
	/* OpenSSH's first handle: slot 0 */
	c->sftp.guess_len = 4;
	memset(c->sftp.guess, 0, 4);
	while (len > 0) {
		if (asp__sftp_get_str(&p, &len, &name, &nl) || asp__sftp_get_str(&p, &len, &data, &dl))
			return asp__error(err, ASP_EPROTO, "%s: malformed SFTP VERSION", c->where);
		if (nl == 24 && !memcmp(name, "posix-rename@openssh.com", 24))
			c->sftp.posix_rename = 1;
		else if (nl == 17 && !memcmp(name, "fsync@openssh.com", 17))
			c->sftp.fsync = 1;
	}
	return 0;
}

/* Give up a channel that will not speak SFTP, and the engine state it left. */
static void drop_channel(asp_conn *c, LIBSSH2_CHANNEL *ch)
{
	asp_sftp_state *s = &c->sftp;
	uint64_t deadline = asp__now_ms() + 1000;

	while (libssh2_channel_free(ch) == LIBSSH2_ERROR_EAGAIN)
		if (asp__ssh_wait(c, deadline, -1, NULL, 0, ASP_WAIT_REPLY, NULL))
			break;
	s->chan = NULL;
	s->in.len = s->in_off = s->in_front = 0;
	s->out.len = s->out_off = 0;
	s->nexpect = s->headexpect = 0;
}

/*
 * Open the SFTP channel and do INIT/VERSION. 1 (why says why) when the
 * server has no SFTP: it refuses the subsystem, its program ends at once,
 * or it does not answer INIT within io_timeout_ms. The connection stays
 * usable then.
 */
static int open_sftp(asp_conn *c, const char **why, asp_error *err)
{
	asp_sftp_state *s = &c->sftp;
	LIBSSH2_CHANNEL *ch;
	unsigned char init[9] = { 0, 0, 0, 5, SSH_FXP_INIT, 0, 0, 0, 3 };
	uint64_t deadline;
	size_t n;
	int rc;

	if (c->dead)
		return asp__error(err, ASP_ECONNLOST, "%s: connection is closed", c->where);
	if ((rc = asp__chan_settle(c, err))) /* libssh2 opens one channel at a time */
		return rc;
	if ((rc = asp__chan_open(c, ASP_SFTP_WINDOW, "opening the SFTP channel", &ch, err)))
		return rc;
	while ((rc = libssh2_channel_process_startup(ch, "subsystem", 9, "sftp", 4)) ==
	       LIBSSH2_ERROR_EAGAIN)
		if ((rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
			return rc;
	if (rc == LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED) {
		drop_channel(c, ch);
		*why = "it refused the sftp subsystem";
		return 1;
	}
	if (rc) {
		libssh2_channel_free(ch);
		return asp__ssh_error(c, rc, err, "starting the sftp subsystem");
	}
	/*
	 * Unread stderr hides the channel's EOF from libssh2_channel_eof: a
	 * server whose sftp-server is missing ("not found" on stderr, exit 127)
	 * would look silent until io_timeout instead of closed.
	 */
	libssh2_channel_handle_extended_data2(ch, LIBSSH2_CHANNEL_EXTENDED_DATA_IGNORE);
	s->chan = ch;
	s->next_id = 1;
	if (asp__buf_put(&s->out, init, sizeof(init)))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	/*
	 * A silent subsystem is no SFTP either: our own deadline, just inside the
	 * silence bound, ends the wait without declaring the connection dead.
	 */
	deadline = asp__now_ms() + (c->io_timeout_ms > 1 ? c->io_timeout_ms - 1 : 1);
	s->starting = 1;
	rc = next_packet(c, &n, deadline, err);
	s->starting = 0;
	if (rc == 2 || (rc == ASP_ETIMEOUT && !c->dead)) {
		drop_channel(c, ch);
		*why = rc == 2 ? "its sftp subsystem ended without answering"
			       : "its sftp subsystem did not answer INIT";
		return 1;
	}
	if (rc)
		goto fail;
	if (front(s)[4] != SSH_FXP_VERSION) {
		rc = asp__error(err, ASP_EPROTO, "%s: SFTP server did not answer INIT with VERSION", c->where);
		goto fail;
	}
	rc = parse_version(c, front(s) + 5, n - 5, err);
	consume(s, n);
	if (rc)
		goto fail;
	return 0;
fail:
	c->dead = 1;
	return rc;
}

int asp__files_transport(asp_conn *c, asp_error *err)
{
	const char *why = "";
	int rc;

	if (c->file_transport)
		return c->file_transport;
	if (c->files_want == ASP_FILES_EXEC ||
	    (c->files_want == ASP_FILES_AUTO && c->no_sftp && atomic_load(c->no_sftp)))
		return c->file_transport = ASP_FILES_EXEC;
	if ((rc = open_sftp(c, &why, err)) < 0)
		return rc;
	if (!rc)
		return c->file_transport = ASP_FILES_SFTP;
	if (c->files_want == ASP_FILES_AUTO && c->no_sftp)
		atomic_store(c->no_sftp, 1);
	if (c->files_want == ASP_FILES_SFTP)
		return asp__error(err, ASP_EPROTO, "%s: the server has no SFTP subsystem (%s); "
				  "file_transport is sftp: with auto (the default) or exec, file calls "
				  "use shell commands instead (asp_open_options.file_transport)",
				  c->where, why);
	return c->file_transport = ASP_FILES_EXEC;
}

int asp__sftp_has_posix_rename(const asp_conn *c)
{
	return c->sftp.posix_rename;
}

void asp__sftp_idle(asp_conn *c)
{
	asp_sftp_state *s = &c->sftp;

	if (s->in_front) {
		consume(s, s->in_front);
		s->in_front = 0;
	}
	/* Replies still to come (a CLOSE's) are read into a fresh buffer later. */
	if (s->in_off == s->in.len) {
		asp__buf_free(&s->in);
		s->in_off = 0;
	}
	if (s->out_off == s->out.len) {
		asp__buf_free(&s->out);
		s->out_off = s->out_mark = 0;
	}
}

void asp__sftp_free_state(asp_conn *c)
{
	asp__buf_free(&c->sftp.in);
	asp__buf_free(&c->sftp.out);
	asp__free(c->sftp.expect);
	asp__free(c->sftp.discard);
}
