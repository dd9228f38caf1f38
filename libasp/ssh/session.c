/*
 * session.c - the SSH session helpers behind ssh.h: libssh2's global
 * init, the single libssh2 -> asp error map, the allocation callbacks that
 * wipe what libssh2 frees, the send/recv callbacks that stamp traffic, and
 * waiting on the non-blocking session with deadlines and keepalives.
 */
#include "cancel.h"
#include "errtext.h"
#include "ssh.h"
#include "kexinit.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <openssl/crypto.h>

/* ------------------------------------------------------------ init */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_rc;

static void ssh_init(void)
{
	init_rc = libssh2_init(0);
}

int asp__ssh_global_init(asp_error *err)
{
	pthread_once(&init_once, ssh_init);
	if (init_rc)
		return asp__error(err, ASP_ERROR, "libssh2_init failed (%d)", init_rc);
	return 0;
}

/* ------------------------------------------------------------ errors */

int asp__ssh_is_transport_error(int rc)
{
	switch (rc) {
	case LIBSSH2_ERROR_SOCKET_NONE:
	case LIBSSH2_ERROR_SOCKET_SEND:
	case LIBSSH2_ERROR_SOCKET_RECV:
	case LIBSSH2_ERROR_SOCKET_DISCONNECT:
	case LIBSSH2_ERROR_SOCKET_TIMEOUT:
	case LIBSSH2_ERROR_BAD_SOCKET:
	case LIBSSH2_ERROR_INVALID_MAC:
	case LIBSSH2_ERROR_DECRYPT:
	case LIBSSH2_ERROR_ENCRYPT:
	case LIBSSH2_ERROR_PROTO:
	case LIBSSH2_ERROR_TIMEOUT:
	case LIBSSH2_ERROR_KEX_FAILURE:
	case LIBSSH2_ERROR_BANNER_RECV:
	case LIBSSH2_ERROR_BANNER_SEND:
	case LIBSSH2_ERROR_KEY_EXCHANGE_FAILURE:
		return 1;
	default:
		return 0;
	}
}

int asp__ssh_error(asp_conn *c, int rc, asp_error *err, const char *what)
{
	char *msg = NULL;
	int code;

	if (c && c->session)
		libssh2_session_last_error(c->session, &msg, NULL, 0);
	if (!msg || !*msg)
		msg = (char *)"unknown libssh2 error";
	if ((c && c->alloc_failed) || rc == LIBSSH2_ERROR_ALLOC) {
		/* libssh2 reports some allocation failures as other errors (a failed kex, a lost channel). */
		if (c)
			c->dead = 1;
		code = ASP_ENOMEM;
		if (c && c->alloc_failed)
			msg = (char *)"out of memory inside libssh2";
	} else if (asp__ssh_is_transport_error(rc)) {
		if (c)
			c->dead = 1;
		code = ASP_ECONNLOST;
	} else if (rc == LIBSSH2_ERROR_AUTHENTICATION_FAILED ||
		   rc == LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED || rc == LIBSSH2_ERROR_FILE) {
		code = ASP_EAUTH;
	} else if (rc == LIBSSH2_ERROR_HOSTKEY_INIT || rc == LIBSSH2_ERROR_HOSTKEY_SIGN) {
		code = ASP_EHOSTKEY;
	} else if (rc == LIBSSH2_ERROR_CHANNEL_CLOSED || rc == LIBSSH2_ERROR_CHANNEL_EOF_SENT) {
		code = ASP_ECONNLOST;
	} else {
		code = ASP_EPROTO;
	}
	return asp__error(err, code, "%s: %s%s%s (libssh2 %d)", c && c->where ? c->where : "ssh",
			  what, *what ? ": " : "", msg, rc);
}

int asp__ssh_op_result(asp_conn *c, int rc, asp_error *err)
{
	if (!c->alloc_failed || rc == ASP_ENOMEM)
		return rc;
	c->dead = 1;
	return asp__error(err, ASP_ENOMEM, "%s: out of memory inside libssh2 (what it could not store is lost)",
			  c->where);
}

/* ------------------------------------------------------------ memory */

/*
 * libssh2 allocates through libasp's allocator, so an allocation failure
 * inside libssh2 is seen here whatever libssh2 then reports: the session is
 * given up (dead), waits on it stop at once and asp__ssh_error says
 * ASP_ENOMEM. *abstract is the session's abstract pointer, our asp_conn.
 */
static void note_alloc_failure(void **abstract)
{
	asp_conn *c = abstract ? *abstract : NULL;

	if (c) {
		c->alloc_failed = 1;
		c->dead = 1;
	}
}

/*
 * Every block libssh2 allocates is linked into its session's list
 * (c->ssh_blocks), so that what libssh2 still holds after freeing the
 * session is wiped and freed by asp__ssh_session_free: libssh2 1.10 keeps a
 * key exchange's curve25519 key pair in the exchange's state and frees it
 * only when the exchange ends, so a session given up in the middle of one (a
 * connect timeout, a cancel, a bulk helper no longer needed) kept it for the
 * life of the process, unwiped.
 */
#ifdef ASP_TEST_HOOKS
static _Atomic unsigned long stat_live, stat_reclaimed;

unsigned long asp__ssh_allocs_live(void)
{
	return stat_live;
}

unsigned long asp__ssh_allocs_reclaimed(void)
{
	return stat_reclaimed;
}
#endif

static void *block_data(asp_ssh_block *b)
{
	return (unsigned char *)b + sizeof(*b);
}

static asp_ssh_block *data_block(void *p)
{
	return (asp_ssh_block *)(void *)((unsigned char *)p - sizeof(asp_ssh_block));
}

static size_t block_size(asp_ssh_block *b)
{
	return malloc_usable_size(b) - sizeof(*b);
}

/*
 * Unlink b, wipe and free it. release: b is the session's own block, whose
 * wiped pages go back to the kernel (asp__mem_release_zeros): freed, 58 KiB
 * of the wipe's zeros would stay resident until malloc hands it out again.
 */
static void block_free(asp_ssh_block *b, int release)
{
	b->prev->next = b->next;
	b->next->prev = b->prev;
	OPENSSL_cleanse(b, malloc_usable_size(b));
	if (release)
		asp__mem_release_zeros(b, malloc_usable_size(b));
	asp__free(b);
	ASP_TEST_ADD(stat_live, -1);
}

static LIBSSH2_ALLOC_FUNC(ssh_alloc)
{
	asp_conn *c = *abstract;
	asp_ssh_block *b = count <= SIZE_MAX - sizeof(*b) ? asp__malloc(sizeof(*b) + count) : NULL;

	if (!b) {
		note_alloc_failure(abstract);
		return NULL;
	}
	b->prev = &c->ssh_blocks;
	b->next = c->ssh_blocks.next;
	b->next->prev = b;
	c->ssh_blocks.next = b;
	ASP_TEST_COUNT(stat_live);
	return block_data(b);
}

/*
 * Everything libssh2 frees is wiped first: it does not always clear what it
 * held (libssh2 1.10 frees a copy of the private key's seed as is, found by
 * tests/secrets/wipe.c), and its packets hold decrypted session data.
 */
static LIBSSH2_FREE_FUNC(ssh_free)
{
	asp_conn *c = *abstract;

	if (ptr)
		block_free(data_block(ptr), ptr == (void *)c->session);
}

/* A move by realloc() would leave the old block unwiped: move it ourselves. */
static LIBSSH2_REALLOC_FUNC(ssh_realloc)
{
	void *p = ssh_alloc(count, abstract);

	if (p && ptr) {
		size_t old = block_size(data_block(ptr));

		memcpy(p, ptr, old < count ? old : count);
		ssh_free(ptr, abstract);
	}
	return p;
}

/* ------------------------------------------------------------ waiting */

/* libssh2 sends keepalives at whole-second intervals of at least 2 s. */
uint64_t asp__ssh_keepalive_ms(const asp_conn *c)
{
	return (uint64_t)(c->keepalive_s < 2 ? 2 : c->keepalive_s) * 1000u;
}

/* Stamping sent bytes tells asp__ssh_wait since when a reply is due. */
static LIBSSH2_SEND_FUNC(conn_send)
{
	asp_conn *c = *abstract;
	ssize_t n = send(socket, buffer, length, flags);

	if (n > 0) {
		c->last_tx_ms = asp__now_ms();
		c->tx_bytes += (uint64_t)n;
		c->sent_this_call = c->one_flight;
		return n;
	}
	return n < 0 ? -errno : 0;
}

/*
 * Keep the server's first bytes until its KEXINIT is complete (bounded):
 * they are plain text and binary, and name the algorithms it offers.
 */
static void capture_kexinit(asp_conn *c, const void *data, size_t n)
{
	asp_kexinit k;

	if (n > ASP_KEXINIT_CAPTURE_MAX - c->kex_capture_len)
		n = ASP_KEXINIT_CAPTURE_MAX - c->kex_capture_len;
	if (c->kex_capture_len + n > c->kex_capture_cap) {
		size_t cap = c->kex_capture_cap;
		unsigned char *p;

		while (cap < c->kex_capture_len + n)
			cap *= 2;
		if (cap > ASP_KEXINIT_CAPTURE_MAX)
			cap = ASP_KEXINIT_CAPTURE_MAX;
		p = asp__realloc(c->kex_capture, cap);
		if (!p) { /* optional: stop capturing, keep what we have */
			c->kex_capture_done = 1;
			return;
		}
		c->kex_capture = p;
		c->kex_capture_cap = cap;
	}
	memcpy(c->kex_capture + c->kex_capture_len, data, n);
	c->kex_capture_len += n;
	if (c->kex_capture_len == ASP_KEXINIT_CAPTURE_MAX ||
	    asp__kexinit_parse(c->kex_capture, c->kex_capture_len, &k) != ASP_KEXINIT_MORE)
		c->kex_capture_done = 1;
}

/* Counting received bytes is how we notice a silent peer (see asp__ssh_wait). */
static LIBSSH2_RECV_FUNC(conn_recv)
{
	asp_conn *c = *abstract;
	ssize_t n;

	if (c->sent_this_call)
		return -EAGAIN;
	n = recv(socket, buffer, length, flags);

	if (n > 0) {
		c->last_rx_ms = asp__now_ms();
		c->rx_bytes += (uint64_t)n;
		if (c->kex_capture && !c->kex_capture_done)
			capture_kexinit(c, buffer, (size_t)n);
		if (c->quickack) {
			int one = 1;

			setsockopt(socket, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
		}
		return n;
	}
	return n < 0 ? -errno : 0;
}

/* ------------------------------------------------------------ session */

static void set_io_callbacks(LIBSSH2_SESSION *session)
{
	LIBSSH2_RECV_FUNC((*rfn)) = conn_recv;
	LIBSSH2_SEND_FUNC((*sfn)) = conn_send;
	void *cb;

	/* libssh2 takes callbacks as void *; ISO C has no cast for that, memcpy is the portable way. */
	memcpy(&cb, &rfn, sizeof(cb));
	libssh2_session_callback_set(session, LIBSSH2_CALLBACK_RECV, cb);
	memcpy(&cb, &sfn, sizeof(cb));
	libssh2_session_callback_set(session, LIBSSH2_CALLBACK_SEND, cb);
}

LIBSSH2_SESSION *asp__ssh_session_new(asp_conn *c)
{
	LIBSSH2_SESSION *session;

	c->ssh_blocks.prev = c->ssh_blocks.next = &c->ssh_blocks;
	session = libssh2_session_init_ex(ssh_alloc, ssh_free, ssh_realloc, c);

	if (session) {
		set_io_callbacks(session);
		/* Most of it is packet buffers, zero until packets reach that far. */
		if (block_data(c->ssh_blocks.next) == (void *)session)
			asp__mem_release_zeros(session, block_size(c->ssh_blocks.next));
	}
	/* Optional: without it an algorithm mismatch is reported as libssh2 words it. */
	/*
	 * It starts small and grows to at most ASP_KEXINIT_CAPTURE_MAX: a banner and
	 * KEXINIT take 1-2 KiB, and a program opening hundreds of sandboxes at once
	 * has that many handshakes in flight (64 KiB each was 32 MiB at 500).
	 */
	if (session && !c->kex_capture) {
		c->kex_capture = asp__malloc(ASP_KEXINIT_CAPTURE_START);
		c->kex_capture_cap = c->kex_capture ? ASP_KEXINIT_CAPTURE_START : 0;
		c->kex_capture_len = 0;
		c->kex_capture_done = 0;
	}
	return session;
}

void asp__ssh_session_free(asp_conn *c)
{
	if (!c->session)
		return;
	/* Bounded: EAGAIN again and again leaves the session to the reclaim below. */
	for (int i = 0; i < 100 && libssh2_session_free(c->session) == LIBSSH2_ERROR_EAGAIN; i++)
		;
	c->session = NULL;
	while (c->ssh_blocks.next != &c->ssh_blocks) {
		block_free(c->ssh_blocks.next, 0);
		ASP_TEST_COUNT(stat_reclaimed);
	}
}

#ifdef ASP_TEST_HOOKS
static _Atomic unsigned long stat_ran_out;

unsigned long asp__ssh_waits_ran_out(void)
{
	return stat_ran_out;
}
#endif

int asp__ssh_wait(asp_conn *c, uint64_t deadline, int cancel_fd, struct pollfd *extra,
		  int nextra, int mode, asp_error *err)
{
	struct pollfd pfd[8];
	uint64_t now = asp__now_ms(), limit, silence;
	int n = 0, i, dirs, timeout, rc, op_deadline = 0, op_cancel = 0;

	if (c->alloc_failed)
		return asp__error(err, ASP_ENOMEM, "%s: out of memory inside libssh2", c->where);
	if (mode == ASP_WAIT_REPLY && c->op_deadline && (!deadline || c->op_deadline <= deadline)) {
		deadline = c->op_deadline;
		op_deadline = 1;
	}
	if (mode == ASP_WAIT_REPLY && cancel_fd < 0 && c->op_cancel_fd >= 0) {
		cancel_fd = c->op_cancel_fd;
		op_cancel = 1;
	}
	if (deadline && now >= deadline) {
		if (!op_deadline)
			return asp__error(err, ASP_ETIMEOUT, "%s: deadline passed", c->where);
		c->dead = 1; /* a reply is still due: the connection cannot be reused */
		return asp__error(err, ASP_ETIMEOUT, "%s: the call's deadline passed", c->where);
	}
	if (mode == ASP_WAIT_REPLY) {
		/* A reply is due since we last sent something (or heard something, if later). */
		uint64_t since = c->last_tx_ms > c->last_rx_ms ? c->last_tx_ms : c->last_rx_ms;
		silence = since + c->io_timeout_ms;
		if (now >= silence) {
			c->dead = 1;
			return asp__error(err, ASP_ETIMEOUT, "%s: no answer from the server for %u ms",
					  c->where, c->io_timeout_ms);
		}
	} else {
		/*
		 * A quiet command: after keepalive_s of silence ask the server for a
		 * reply (libssh2 paces the keepalives itself, in whole seconds, at
		 * least 2 s apart), and give up when nothing at all comes back.
		 */
		uint64_t ka = asp__ssh_keepalive_ms(c);
		silence = c->last_rx_ms + ka + 1000 + c->io_timeout_ms;
		if (now >= silence) {
			c->dead = 1;
			return asp__error(err, ASP_ECONNLOST, "%s: no sign of life from the server for %llu ms",
					  c->where, (unsigned long long)(now - c->last_rx_ms));
		}
		if (now >= c->last_rx_ms + ka) {
			int next = 0;
			libssh2_keepalive_config(c->session, 1, (unsigned int)(ka / 1000));
			rc = libssh2_keepalive_send(c->session, &next);
			if (rc && rc != LIBSSH2_ERROR_EAGAIN)
				return asp__ssh_error(c, rc, err, "sending keepalive");
			if (now + 1000 < silence)
				silence = now + 1000; /* look again soon: libssh2 decides when one is due */
		} else {
			silence = c->last_rx_ms + ka; /* wake up when a keepalive is due */
		}
	}
	limit = silence;
	if (deadline && deadline < limit)
		limit = deadline;

	dirs = libssh2_session_block_directions(c->session);
	pfd[n].fd = c->sock;
	pfd[n].events = (short)(((dirs & LIBSSH2_SESSION_BLOCK_INBOUND) || !dirs ? POLLIN : 0) |
				((dirs & LIBSSH2_SESSION_BLOCK_OUTBOUND) ? POLLOUT : 0));
	pfd[n++].revents = 0;
	if (cancel_fd >= 0) {
		pfd[n].fd = cancel_fd;
		pfd[n].events = POLLIN;
		pfd[n++].revents = 0;
	}
	for (i = 0; i < nextra && n < 8; i++) {
		extra[i].revents = 0;
		pfd[n++] = extra[i];
	}
	timeout = limit > now ? (int)(limit - now > 60000 ? 60000 : limit - now) : 0;
	if (c->rx_bytes != c->rx_polled)
		timeout = 0; /* what came in may be what the caller waits for: it looks again first */
	c->rx_polled = c->rx_bytes;
	rc = poll(pfd, (nfds_t)n, timeout);
	if (rc < 0 && errno != EINTR)
		return asp__error(err, ASP_ERROR, "%s: poll: %s", c->where, ASP_ERRNO_TEXT(errno));
	if (rc == 0 && timeout > 0)
		ASP_TEST_COUNT(stat_ran_out);
	if (cancel_fd >= 0 && (pfd[1].revents & POLLIN)) {
		if (op_cancel)
			c->dead = 1; /* a reply is still due: the connection cannot be reused */
		return asp__error(err, ASP_ECANCELLED, "%s: cancelled", c->where);
	}
	for (i = 0; i < nextra && i + 1 + (cancel_fd >= 0) < n; i++)
		extra[i].revents = pfd[i + 1 + (cancel_fd >= 0)].revents;
	return 0;
}

int asp__ssh_op_stopped(asp_conn *c, asp_error *err)
{
	if (c->op_cancel && asp_cancel_is_triggered(c->op_cancel)) {
		c->dead = 1;
		return asp__error(err, ASP_ECANCELLED, "%s: cancelled", c->where);
	}
	if (c->op_deadline && asp__now_ms() >= c->op_deadline) {
		c->dead = 1;
		return asp__error(err, ASP_ETIMEOUT, "%s: the call's deadline passed", c->where);
	}
	return 0;
}

asp_cancel *asp__ssh_op_cancel_swap(asp_conn *c, asp_cancel *cancel)
{
	asp_cancel *old = c->op_cancel;

	c->op_cancel = cancel;
	c->op_cancel_fd = asp__cancel_fd(cancel);
	return old;
}

void asp__ssh_rtt_sample(asp_conn *c, uint64_t ms)
{
	if (ms > UINT_MAX)
		ms = UINT_MAX;
	if (!c->rtt_samples++ || ms < c->rtt_ms)
		c->rtt_ms = (unsigned int)ms;
}
