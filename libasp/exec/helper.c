/*
 * helper.c - the bg helper (helper.h). A background-process call on the
 * exec route costs a round trip plus a session in the sandbox: sshd forks,
 * the login shell starts, the script defines its functions and starts its
 * programs (measured at 50 ms RTT: 1.5 to 1.8 round trips per call). The
 * helper is a bash started once per connection, on a session channel of
 * its own, with every bg function defined: a call is one short request
 * written to its stdin, run in a subshell (a fork), and its answer read
 * back until the request's end token. One round trip and what the request
 * itself runs.
 *
 * Framing. A request goes out as "END-TOKEN TEXT\0"; the answer is the
 * text's stdout, then "END-TOKEN STATUS MESSAGE\n". The token is 16 random
 * bytes in hex, new for each request and sent only inside the encrypted
 * channel, so no output of a sandbox process (a background command's
 * output is what a read returns) can end an answer early. Before its
 * first answer a new helper prints its hello line, once its functions are
 * defined; a login script's noise before it is dropped, and a helper that
 * ends without it ran nothing (no bash, a login shell that is not POSIX).
 *
 * Its first request is written right behind its exec request, before the
 * server has answered it: sshd handles a channel's packets in order, so
 * the data reaches the program the request started; a refused request
 * leaves the data unread, and nothing ran.
 *
 * What the helper's bash saw of the sandbox is what a session saw when it
 * started: a start must launch its command with what a session started
 * now sees (a call may have changed ~/.bashrc or ~/.ssh/environment), so
 * a start asks for a helper no older than the handle's last call that was
 * not a bg call (sandbox.c counts them), and an older one is told to end
 * and a new one started for it. Reads, signals, removes and lists touch
 * only ~/.asp/bg, and any helper serves them.
 *
 * The helper holds one of the server's sessions (OpenSSH MaxSessions)
 * while idle; a channel open that the limit refuses ends it and turns it
 * off on that connection (chan.c). The helper ends with its channel (EOF
 * on stdin), so with its connection.
 */
#include "helper.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "chan.h"
#include "quote.h"
#include "ssh.h"

#define HELPER_HELLO "asp-helper-ready"
#define HELPER_READ 16384u
#define HELPER_NOISE_MAX 65536u /* login-script noise before the hello line */
#define HELPER_TRAILER_MAX 512u /* " STATUS MESSAGE\n" after the token */

#ifdef ASP_TEST_HOOKS
static _Atomic unsigned long stat_boots, stat_calls, stat_none, stat_lost, stat_retired;

static _Atomic int test_off;

void asp__helper_test_off(int off)
{
	test_off = off;
}

void asp__helper_stats(asp_helper_stats *out)
{
	out->boots = stat_boots;
	out->calls = stat_calls;
	out->none = stat_none;
	out->lost = stat_lost;
	out->retired = stat_retired;
}
#endif

static asp_buf boot_text;
static pthread_once_t boot_once = PTHREAD_ONCE_INIT;

static void boot_build(void)
{
	if (asp__helper_boot(&boot_text, HELPER_HELLO))
		asp__buf_free(&boot_text);
}

/* Forget c's helper: free its channel (drop), or tell it to end (retire: idle, nothing unread). */
static void helper_drop(asp_conn *c, int retire)
{
	LIBSSH2_CHANNEL *ch = c->chan.helper;

	c->chan.helper = NULL;
	if (!ch)
		return;
	if (retire && !c->dead)
		asp__chan_retire(c, ch);
	else
		asp__chan_free(c, ch);
}

/* No helper on c from now on; nothing of the current request ran. */
static int helper_none(asp_conn *c, int *started)
{
	helper_drop(c, 0);
	c->chan.helper_off = 1;
	*started = 0;
	ASP_TEST_COUNT(stat_none);
	return ASP__HELPER_NONE;
}

/* Start c's helper: its exec request goes out, the answer is taken later (settle). */
static int boot(asp_conn *c, uint64_t gen, asp_error *err)
{
	LIBSSH2_CHANNEL *ch;
	asp_error e;
	int warm, rc;

	pthread_once(&boot_once, boot_build);
	if (!boot_text.len)
		return asp__error(err, ASP_ENOMEM, "out of memory");
	if ((rc = asp__chan_take(c, &ch, &warm, &e))) {
		if (c->dead) {
			if (err)
				*err = e;
			return rc;
		}
		c->chan.helper_off = 1; /* no channel for it (the server's session limit) */
		ASP_TEST_COUNT(stat_none);
		return ASP__HELPER_NONE;
	}
	libssh2_channel_handle_extended_data2(ch, LIBSSH2_CHANNEL_EXTENDED_DATA_IGNORE);
	/* libssh2 sends one packet at a time: this one goes out whole before anything else. */
	while ((rc = libssh2_channel_process_startup(ch, "exec", 4, (const char *)boot_text.data,
						     (unsigned int)boot_text.len)) == LIBSSH2_ERROR_EAGAIN &&
	       (libssh2_session_block_directions(c->session) & LIBSSH2_SESSION_BLOCK_OUTBOUND))
		if ((rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err))) {
			asp__chan_free(c, ch);
			return rc;
		}
	if (rc && rc != LIBSSH2_ERROR_EAGAIN) {
		if (asp__ssh_is_transport_error(rc)) {
			asp__chan_free(c, ch);
			return asp__ssh_error(c, rc, err, "starting the background-process helper");
		}
		asp__chan_free(c, ch);
		c->chan.helper_off = 1;
		ASP_TEST_COUNT(stat_none);
		return ASP__HELPER_NONE;
	}
	c->chan.helper = ch;
	c->chan.helper_ready = !rc;
	c->chan.helper_hello = 0;
	c->chan.helper_gen = gen;
	ASP_TEST_COUNT(stat_boots);
	asp__chan_warm_start(c);
	return 0;
}

/* The server's answer to the helper's exec request: 0 (it runs), NONE (nothing ran), or an error. */
static int settle(asp_conn *c, int *started, asp_error *err)
{
	int rc;

	while (!c->chan.helper_ready) {
		/* The request went out whole (boot): libssh2 only waits for its answer, the text is not read. */
		rc = libssh2_channel_process_startup(c->chan.helper, "exec", 4, (const char *)boot_text.data,
						     (unsigned int)boot_text.len);
		if (!rc) {
			c->chan.helper_ready = 1;
			break;
		}
		if (rc == LIBSSH2_ERROR_EAGAIN && !libssh2_channel_eof(c->chan.helper)) {
			if ((rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
				return rc;
			continue;
		}
		if (asp__ssh_is_transport_error(rc))
			return asp__ssh_error(c, rc, err, "starting the background-process helper");
		return helper_none(c, started); /* refused, or closed before answering */
	}
	return 0;
}

/* An idle helper the sandbox ended (killed, sshd's ChannelTimeout): gone, and nothing was sent to it. */
static void check_alive(asp_conn *c)
{
	char b;

	if (!c->chan.helper || !c->chan.helper_ready)
		return;
	libssh2_channel_read_ex(c->chan.helper, 0, &b, 0);
	if (libssh2_channel_eof(c->chan.helper) && !c->dead)
		helper_drop(c, 0);
}

static int send_request(asp_conn *c, const asp_buf *rec, int *started, asp_error *err)
{
	size_t off = 0;
	ssize_t w;
	int rc;

	while (off < rec->len) {
		w = libssh2_channel_write_ex(c->chan.helper, 0, (const char *)rec->data + off, rec->len - off);
		if (w == LIBSSH2_ERROR_EAGAIN) {
			if ((rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
				return rc;
			continue;
		}
		if (w < 0) {
			if (asp__ssh_is_transport_error((int)w))
				return asp__ssh_error(c, (int)w, err, "sending to the background-process helper");
			/* The channel closed under the request: nothing of it was read if nothing went. */
			if (!*started)
				return helper_none(c, started);
			helper_drop(c, 0);
			ASP_TEST_COUNT(stat_lost);
			return ASP__HELPER_LOST;
		}
		*started = 1;
		off += (size_t)w;
	}
	return 0;
}

/*
 * The answer in out: drop the noise before the hello line (a new helper),
 * and when the trailer has come whole, cut it off into *status and
 * errout. 1: complete; 0: more to read; -1: malformed.
 */
static int take_answer(asp_conn *c, asp_buf *out, const char *tok, size_t *scan, int *status, char *errout,
		       size_t errcap)
{
	size_t tl = strlen(tok), from;
	unsigned char *t, *nl, *p;
	long v;

	if (!c->chan.helper_hello) {
		static const char hello[] = HELPER_HELLO "\n";
		unsigned char *h = memmem(out->data, out->len, hello, sizeof(hello) - 1);
		if (!h)
			return out->len > HELPER_NOISE_MAX ? -1 : 0;
		c->chan.helper_hello = 1;
		from = (size_t)(h - out->data) + sizeof(hello) - 1;
		memmove(out->data, out->data + from, out->len - from);
		out->len -= from;
		*scan = 0;
	}
	from = *scan > tl ? *scan - tl : 0;
	if (!(t = memmem(out->data + from, out->len - from, tok, tl))) {
		*scan = out->len;
		return 0;
	}
	p = t + tl;
	if (!(nl = memchr(p, '\n', out->len - (size_t)(p - out->data))))
		return out->len - (size_t)(t - out->data) > tl + HELPER_TRAILER_MAX ? -1 : 0;
	if (nl + 1 != out->data + out->len || *p != ' ')
		return -1; /* bytes after the trailer: not an answer to one request */
	*nl = 0;
	v = strtol((char *)p + 1, (char **)&p, 10);
	if (v < 0 || v > 255 || (*p && *p != ' '))
		return -1;
	*status = (int)v;
	if (errout && errcap)
		asp__show_text(errout, errcap, *p ? p + 1 : p, strlen((char *)(*p ? p + 1 : p)));
	out->len = (size_t)(t - out->data);
	out->data[out->len] = 0;
	return 1;
}

static int read_answer(asp_conn *c, const char *tok, size_t max_out, int *status, asp_buf *out, char *errout,
		       size_t errcap, int *started, asp_error *err)
{
	size_t scan = 0;
	ssize_t n;
	int rc;

	for (;;) {
		if (asp__buf_grow(out, HELPER_READ))
			return asp__error(err, ASP_ENOMEM, "out of memory");
		n = libssh2_channel_read_ex(c->chan.helper, 0, (char *)out->data + out->len, HELPER_READ);
		if (n > 0) {
			out->len += (size_t)n;
			if ((rc = take_answer(c, out, tok, &scan, status, errout, errcap)) > 0)
				return 0;
			if (rc < 0 || out->len > max_out + strlen(tok) + HELPER_TRAILER_MAX) {
				helper_drop(c, 0);
				return asp__error(err, ASP_EPROTO, "%s: the background-process helper's answer is %s",
						  c->where, rc < 0 ? "malformed" : "over the call's limit");
			}
			continue;
		}
		if (n == LIBSSH2_ERROR_EAGAIN && !libssh2_channel_eof(c->chan.helper)) {
			if ((rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
				return rc;
			continue;
		}
		if (n < 0 && n != LIBSSH2_ERROR_EAGAIN && asp__ssh_is_transport_error((int)n))
			return asp__ssh_error(c, (int)n, err, "reading the background-process helper's answer");
		/* It ended before answering. */
		if (!c->chan.helper_hello)
			return helper_none(c, started);
		helper_drop(c, 0);
		ASP_TEST_COUNT(stat_lost);
		return ASP__HELPER_LOST;
	}
}

int asp__helper_call(asp_conn *c, const asp_buf *request, uint64_t gen, int fresh, size_t max_out, int *status,
		     asp_buf *out, char *errout, size_t errcap, int *started, asp_error *err)
{
	unsigned char rnd[16];
	char tok[48];
	asp_buf rec = { 0 };
	size_t i;
	int rc;

	*started = 0;
	*status = 0;
	if (errout && errcap)
		errout[0] = 0;
	if (c->dead)
		return asp__error(err, ASP_ECONNLOST, "%s: connection is closed", c->where);
#ifdef ASP_TEST_HOOKS
	if (test_off)
		return ASP__HELPER_NONE;
#endif
	if (c->shell_bad || c->chan.helper_off) {
		ASP_TEST_COUNT(stat_none);
		return ASP__HELPER_NONE;
	}
	if (c->chan.helper && fresh && c->chan.helper_gen != gen) {
		ASP_TEST_COUNT(stat_retired);
		helper_drop(c, c->chan.helper_ready && c->chan.helper_hello);
	}
	check_alive(c);
	if (!c->chan.helper && (rc = boot(c, gen, err)))
		return rc;
	if (asp__random(rnd, sizeof(rnd)))
		return asp__error(err, ASP_ERROR, "no randomness for a request's end token");
	memcpy(tok, "asp-end-", 8);
	for (i = 0; i < sizeof(rnd); i++) {
		static const char hex[] = "0123456789abcdef";
		tok[8 + 2 * i] = hex[rnd[i] >> 4];
		tok[9 + 2 * i] = hex[rnd[i] & 15];
	}
	tok[8 + 2 * sizeof(rnd)] = 0;
	if (asp__buf_puts(&rec, tok) || asp__buf_put(&rec, " ", 1) ||
	    asp__buf_put(&rec, request->data, request->len) || asp__buf_put(&rec, "", 1)) {
		asp__buf_free(&rec);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	ASP_TEST_COUNT(stat_calls);
	rc = send_request(c, &rec, started, err);
	asp__buf_free(&rec);
	if (!rc && (rc = settle(c, started, err)) == 0)
		rc = read_answer(c, tok, max_out, status, out, errout, errcap, started, err);
	if (rc)
		out->len = 0;
	return rc;
}
