/*
 * chan.c - the session channels of a connection: every channel a command
 * uses is opened here (its own, the kill channel, helper scripts, file
 * calls over exec), the warm channel kept ready, the primed shell after a
 * pause, the exec request and its resend, closing and freeing.
 */
#include "chan.h"

#include "quote.h"
#include "ssh.h"

#define ASP_PRIME_PAUSE_MS 100u      /* see asp__chan_call_begin */

/* What asp__chan_stats reports (tests: a hook, common.h). */
#ifdef ASP_TEST_HOOKS
static _Atomic unsigned long stat_opens, stat_warm_used, stat_warm_closed, stat_resent, stat_rtt,
	stat_primed, stat_primed_used, stat_primed_closed, stat_primed_unused;

void asp__chan_stats(asp_chan_stats *out)
{
	out->opens = stat_opens;
	out->warm_used = stat_warm_used;
	out->warm_closed = stat_warm_closed;
	out->resent = stat_resent;
	out->rtt_samples = stat_rtt;
	out->primed = stat_primed;
	out->primed_used = stat_primed_used;
	out->primed_closed = stat_primed_closed;
	out->primed_unused = stat_primed_unused;
}
#endif

/*
 * Every session channel a command uses (its own, the kill channel, helper
 * scripts, file calls over exec) comes from here, so that the warm channel
 * serves them all and libssh2's single channel-open state is never used by
 * two opens at once.
 *
 * The warm channel: right after a command's exec request goes out, the
 * CHANNEL_OPEN for the next command's channel follows in the same flight;
 * its confirmation comes back with the command's answer and is taken before
 * the call returns. The next call sends its exec request at once: one round
 * trip instead of two. It holds one of the server's sessions (OpenSSH
 * MaxSessions) while idle; a server that refuses it gets no more warm
 * channels on that connection. A warm channel the server closed (Dropbear
 * does; OpenSSH 9.2's ChannelTimeout never expires a channel with no
 * request) is noticed before use, or, when the close crosses the request,
 * by the server's answer: a request the server did not acknowledge started
 * nothing and goes once more on a new channel.
 */

int asp__chan_close(asp_conn *c, LIBSSH2_CHANNEL *ch, asp_error *err)
{
	int rc;

	while ((rc = libssh2_channel_close(ch)) == LIBSSH2_ERROR_EAGAIN)
		if ((rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
			return rc;
	if (rc)
		return asp__ssh_error(c, rc, err, "closing the command channel");
	while ((rc = libssh2_channel_wait_closed(ch)) == LIBSSH2_ERROR_EAGAIN)
		if ((rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
			return rc;
	return rc ? asp__ssh_error(c, rc, err, "closing the command channel") : 0;
}

void asp__chan_free(asp_conn *c, LIBSSH2_CHANNEL *ch)
{
	uint64_t deadline = asp__now_ms() + 1000;

	if (!ch)
		return;
	if (c->dead) {
		/* Nothing can be sent: libssh2 frees locally when the socket is gone. */
		libssh2_channel_free(ch);
		return;
	}
	while (libssh2_channel_free(ch) == LIBSSH2_ERROR_EAGAIN)
		if (asp__ssh_wait(c, deadline, -1, NULL, 0, ASP_WAIT_REPLY, NULL))
			break;
}

static LIBSSH2_CHANNEL *open_window(asp_conn *c, unsigned int window)
{
	return libssh2_channel_open_ex(c->session, "session", 7, window, ASP_PACKET_SIZE, NULL, 0);
}

static LIBSSH2_CHANNEL *open_step(asp_conn *c)
{
	return open_window(c, ASP_EXEC_WINDOW);
}

/* Take the warm channel's confirmation if it came; never waits. */
static void warm_poll(asp_conn *c)
{
	LIBSSH2_CHANNEL *ch;
	int rc;

	if (!c->chan.warm_opening)
		return;
	if ((ch = open_step(c))) {
		c->chan.warm = ch;
		c->chan.warm_opening = 0;
		asp__ssh_rtt_sample(c, asp__now_ms() - c->chan.warm_sent_ms);
		ASP_TEST_COUNT(stat_rtt);
		return;
	}
	if ((rc = libssh2_session_last_errno(c->session)) == LIBSSH2_ERROR_EAGAIN)
		return;
	/*
	 * Refused (the server's session limit) or the link failed: the next call
	 * will see which. A primed shell holds a session: then the shells stop.
	 */
	c->chan.warm_opening = 0;
	if (c->chan.shell || c->chan.spent)
		c->chan.shell_off = 1;
	else
		c->chan.warm_off = 1;
	if (asp__ssh_is_transport_error(rc))
		c->dead = 1;
}

void asp__chan_warm_start(asp_conn *c)
{
	/* Only behind a packet that went out whole: libssh2 sends one packet at a time. */
	if (c->chan.warm || c->chan.warm_opening || c->chan.warm_off || c->dead ||
	    (libssh2_session_block_directions(c->session) & LIBSSH2_SESSION_BLOCK_OUTBOUND))
		return;
	c->chan.warm_opening = 1;
	c->chan.warm_sent_ms = asp__now_ms();
	ASP_TEST_COUNT(stat_opens);
	warm_poll(c);
}

int asp__chan_settle(asp_conn *c, asp_error *err)
{
	int rc;

	for (;;) {
		warm_poll(c);
		if (!c->chan.warm_opening)
			return 0;
		if ((rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
			return rc;
	}
}

/*
 * ch, kept ready, unless the server has closed it meanwhile (a zero-byte
 * read takes in what arrived while it waited): then NULL, ch is freed, and
 * *lost counts it (two in a row set *off). The caller counts which.
 */
static LIBSSH2_CHANNEL *still_open(asp_conn *c, LIBSSH2_CHANNEL *ch, int *lost, int *off)
{
	char b;

	libssh2_channel_read_ex(ch, 0, &b, 0);
	if (!libssh2_channel_eof(ch) && !c->dead) {
		*lost = 0;
		return ch;
	}
	if (++*lost >= 2)
		*off = 1;
	asp__chan_free(c, ch);
	return NULL;
}

/*
 * The warm channel, unless the server has closed it meanwhile (Dropbear
 * closes a session channel with no request once another one's command
 * ends). NULL when there is none.
 */
static LIBSSH2_CHANNEL *warm_take(asp_conn *c)
{
	LIBSSH2_CHANNEL *ch = c->chan.warm;

	c->chan.warm = NULL;
	if (!ch)
		return NULL;
	if (!(ch = still_open(c, ch, &c->chan.warm_lost, &c->chan.warm_off)))
		ASP_TEST_COUNT(stat_warm_closed);
	return ch;
}

/*
 * A server at its session limit refuses the open. OpenSSH frees a closed
 * channel's session only after it has handled the packets that came with
 * the close, so an open that follows a close closely can be refused for a
 * slot that is free a moment later: try again a few times, a little later.
 */
int asp__chan_open(asp_conn *c, unsigned int window, const char *what, LIBSSH2_CHANNEL **out, asp_error *err)
{
	static const unsigned int later_ms[] = { 2, 10, 50, 200 };
	unsigned int refused = 0;
	int rc;

	ASP_TEST_COUNT(stat_opens);
	c->chan.refused = 0;
	while (!(*out = open_window(c, window))) {
		rc = libssh2_session_last_errno(c->session);
		if (rc == LIBSSH2_ERROR_CHANNEL_FAILURE && !c->dead && c->chan.spent) {
			/* A shell told to end still holds its session: wait for its close. */
			asp__chan_free(c, c->chan.spent);
			c->chan.spent = NULL;
			ASP_TEST_COUNT(stat_opens);
			continue;
		}
		if (rc == LIBSSH2_ERROR_CHANNEL_FAILURE && !c->dead &&
		    refused < sizeof(later_ms) / sizeof(later_ms[0])) {
			uint64_t until = asp__now_ms() + later_ms[refused++];
			while (asp__now_ms() < until)
				if ((rc = asp__ssh_wait(c, until, -1, NULL, 0, ASP_WAIT_PATIENT, err)) &&
				    rc != ASP_ETIMEOUT)
					return rc;
			ASP_TEST_COUNT(stat_opens);
			continue;
		}
		if (rc == LIBSSH2_ERROR_CHANNEL_FAILURE && !c->dead && c->chan.helper) {
			/* Still refused: the bg helper holds a session the server's limit wants for commands. */
			asp__chan_free(c, c->chan.helper);
			c->chan.helper = NULL;
			c->chan.helper_off = 1;
			ASP_TEST_COUNT(stat_opens);
			continue;
		}
		if (rc != LIBSSH2_ERROR_EAGAIN) {
			c->chan.refused = rc == LIBSSH2_ERROR_CHANNEL_FAILURE && !c->dead;
			return asp__ssh_error(c, rc, err, what);
		}
		if ((rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
			return rc;
	}
	return 0;
}

int asp__chan_refused(const asp_conn *c)
{
	return c->chan.refused;
}

/* A channel for a command: the warm one when it is still open, else a new one. */
int asp__chan_take(asp_conn *c, LIBSSH2_CHANNEL **out, int *warm, asp_error *err)
{
	int rc;

	*warm = 0;
	if (c->dead)
		return asp__error(err, ASP_ECONNLOST, "%s: connection is closed", c->where);
	if ((rc = asp__chan_settle(c, err)))
		return rc;
	if ((*out = warm_take(c))) {
		*warm = 1;
		ASP_TEST_COUNT(stat_warm_used);
		return 0;
	}
	if (c->dead)
		return asp__error(err, ASP_ECONNLOST, "%s: connection is closed", c->where);
	return asp__chan_open(c, ASP_EXEC_WINDOW, "opening a channel", out, err);
}

/*
 * The primed shell. A command on the warm channel still waits for the
 * sandbox to start it: sshd forks, the login shell starts and reads its
 * startup files, the wrapper runs (9 to 11 ms on the benchmark's virtual
 * machine, 0.2 round trips at 50 ms). A caller that pauses between calls
 * (an agent: the model thinks between tool calls) can have that done
 * during the pause. When a command that came after a pause ends and no
 * other call of the handle runs, the warm channel gets its exec request at once,
 * asp__prime_boot(): the login shell starts, starts the watchdog for the
 * call it will run (that call's token is chosen now), and waits for a
 * script on stdin (quote.h); a new warm channel is opened behind it. The
 * next command sends its wrapper, framed, as data: one round trip and what
 * the command itself costs.
 *
 * What a shell started after the previous call ended sees is what a shell
 * started at the next call would see, unless a call ended in between: a
 * call that ends makes every primed shell of the handle stale (the call
 * may have changed a startup file, ~/.ssh/environment, the login shell),
 * and a stale one is told to end, never used. So one call after another
 * from one caller runs on shells that saw everything before them; calls
 * made in a burst (no pause) do not prime at all, and run on the warm
 * channel as before. A file call does not prime either: one after a pause
 * is as often followed by another file call (a write, then its read back)
 * or by the handle's close, and the shell it primed was a login shell's
 * start for nothing (bench "many" with 16 threads: one per sandbox, about
 * 10% of the sandbox side's CPU).
 *
 * Never twice: a primed shell found closed (ChannelTimeout, a kill in the
 * sandbox) before any byte of the script was sent ran nothing, and the
 * command goes the usual way. Once bytes were sent, an end without the
 * wrapper's marker is reported as a lost channel, as for any command
 * (no_marker). Two shells in a row found closed stop the priming on that
 * connection (sshd's ChannelTimeout closes a quiet session channel once
 * it runs something).
 */

_Static_assert(sizeof(((asp_chan_state *)0)->shell_token) == ASP_TOKEN_SIZE, "a call token");

/* Take the primed shell's answer if it came; never waits. */
static void shell_poll(asp_conn *c)
{
	asp_buf boot = { 0 };
	int rc;

	if (!c->chan.shell || c->chan.shell_ready)
		return;
	/* The request's bytes again, as libssh2 wants them on each call until it is done. */
	rc = asp__prime_boot(&boot, c->chan.shell_token)
		     ? LIBSSH2_ERROR_ALLOC
		     : libssh2_channel_process_startup(c->chan.shell, "exec", 4, (char *)boot.data,
						       (unsigned int)boot.len);
	asp__buf_free(&boot);
	if (!rc) {
		c->chan.shell_ready = 1;
		return;
	}
	if (rc == LIBSSH2_ERROR_EAGAIN && !libssh2_channel_eof(c->chan.shell))
		return;
	/* Refused, closed before answering, or the link failed. */
	if (asp__ssh_is_transport_error(rc))
		c->dead = 1;
	c->chan.shell_off = 1;
	asp__chan_free(c, c->chan.shell);
	c->chan.shell = NULL;
}

/* A shell told to end closes soon after: free it once it has. */
static void shell_reap(asp_conn *c)
{
	char b;

	if (!c->chan.spent)
		return;
	libssh2_channel_read_ex(c->chan.spent, 0, &b, 0);
	if (libssh2_channel_eof(c->chan.spent) || c->dead) {
		asp__chan_free(c, c->chan.spent);
		c->chan.spent = NULL;
	}
}

/* Tell the primed shell to end: EOF on its stdin, before its script's "." line, runs nothing. */
static void shell_retire(asp_conn *c)
{
	LIBSSH2_CHANNEL *ch = c->chan.shell;

	c->chan.shell = NULL;
	ASP_TEST_COUNT(stat_primed_unused);
	asp__chan_retire(c, ch);
}

void asp__chan_retire(asp_conn *c, LIBSSH2_CHANNEL *ch)
{
	int rc;

	if (c->chan.spent) {
		asp__chan_free(c, c->chan.spent);
		c->chan.spent = NULL;
	}
	while ((rc = libssh2_channel_send_eof(ch)) == LIBSSH2_ERROR_EAGAIN)
		if (asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, NULL))
			break;
	if (rc && !c->dead) {
		asp__chan_free(c, ch);
		return;
	}
	c->chan.spent = ch;
}

/* The token the primed shell's watchdog runs for (see chan.h). */
const char *asp__chan_shell_token(const asp_conn *c)
{
	return c->chan.shell ? c->chan.shell_token : NULL;
}

/*
 * The primed shell for the current call: ready, primed since the last call
 * of the handle ended, still open. NULL otherwise (a stale or unanswered
 * one stays, told to end when the call ends).
 */
LIBSSH2_CHANNEL *asp__chan_shell_take(asp_conn *c)
{
	LIBSSH2_CHANNEL *ch;

	shell_poll(c);
	if (!(ch = c->chan.shell) || !c->chan.shell_ready || c->chan.shell_gen != c->chan.call_gen)
		return NULL;
	c->chan.shell = NULL;
	if ((ch = still_open(c, ch, &c->chan.shell_lost, &c->chan.shell_off)))
		ASP_TEST_COUNT(stat_primed_used);
	else
		ASP_TEST_COUNT(stat_primed_closed);
	return ch;
}

/* Tests: the pause after which a call primes a shell. */
#ifdef ASP_TEST_HOOKS
static _Atomic unsigned int prime_pause_ms = ASP_PRIME_PAUSE_MS;

void asp__chan_prime_pause(unsigned int ms)
{
	prime_pause_ms = ms ? ms : ASP_PRIME_PAUSE_MS;
}

static void (*exec_sent_fn)(void *arg);
static void *exec_sent_arg;

void asp__chan_on_exec_sent(void (*fn)(void *arg), void *arg)
{
	exec_sent_fn = fn;
	exec_sent_arg = arg;
}
#else
#define prime_pause_ms ASP_PRIME_PAUSE_MS
#endif

void asp__chan_call_begin(asp_conn *c, uint64_t gen)
{
	/* A pause: longer than a shell needs to be ready (a round trip and its start). */
	c->chan.call_gen = gen;
	c->chan.paused = c->chan.last_end_ms &&
		    asp__now_ms() - c->chan.last_end_ms >= (uint64_t)c->rtt_ms + prime_pause_ms;
}

void asp__chan_call_end(asp_conn *c, uint64_t gen, int alone, int command)
{
	LIBSSH2_CHANNEL *ch;
	asp_buf boot = { 0 };
	int rc;

	c->chan.last_end_ms = asp__now_ms();
	if (c->dead)
		return;
	shell_reap(c);
	if (c->chan.shell)
		shell_retire(c); /* primed before this call ended: stale */
	if (!alone || !command || !c->chan.paused || c->chan.shell_off || c->shell_bad ||
	    c->chan.warm_opening || !c->chan.warm ||
	    (libssh2_session_block_directions(c->session) & LIBSSH2_SESSION_BLOCK_OUTBOUND) ||
	    asp__call_token(c->chan.shell_token) || asp__prime_boot(&boot, c->chan.shell_token)) {
		asp__buf_free(&boot);
		return;
	}
	ch = c->chan.warm;
	c->chan.warm = NULL;
	while ((rc = libssh2_channel_process_startup(ch, "exec", 4, (char *)boot.data, (unsigned int)boot.len)) ==
		       LIBSSH2_ERROR_EAGAIN &&
	       (libssh2_session_block_directions(c->session) & LIBSSH2_SESSION_BLOCK_OUTBOUND))
		/* Sent in part: libssh2 must finish this packet before any other. */
		if (asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, NULL))
			break;
	asp__buf_free(&boot);
	if ((rc && rc != LIBSSH2_ERROR_EAGAIN) || c->dead) {
		c->chan.shell_off = 1;
		asp__chan_free(c, ch);
		return;
	}
	c->chan.shell = ch;
	c->chan.shell_ready = !rc;
	c->chan.shell_gen = gen;
	ASP_TEST_COUNT(stat_primed);
	asp__chan_warm_start(c);
}

/* The server answered neither yes nor no: it closed the channel instead (nothing ran). */
#define NOT_ANSWERED ASP__CHAN_NOT_ANSWERED
#define REFUSED 2

/*
 * Send the exec request and wait for the server's answer; the next warm
 * channel's CHANNEL_OPEN follows the request. *sent becomes 1 once bytes of
 * the request may have reached the server. 0 when the server acknowledged
 * it (the command runs), REFUSED or NOT_ANSWERED when it started nothing,
 * else an ASP_E* code.
 */
static int send_exec(asp_conn *c, LIBSSH2_CHANNEL *ch, const asp_buf *script, int *sent, asp_error *err)
{
	uint64_t tx = c->tx_bytes;
	int rc;

	for (;;) {
		rc = libssh2_channel_process_startup(ch, "exec", 4, (const char *)script->data,
						     (unsigned int)script->len);
		if (c->tx_bytes != tx && !*sent) {
			*sent = 1;
#ifdef ASP_TEST_HOOKS
			if (exec_sent_fn)
				exec_sent_fn(exec_sent_arg);
#endif
		}
		if (rc != LIBSSH2_ERROR_EAGAIN)
			break;
		/*
		 * libssh2 returns the answer as soon as it is read, so a close
		 * already seen came before any answer: the request was not acted on.
		 */
		if (libssh2_channel_eof(ch))
			return NOT_ANSWERED;
		asp__chan_warm_start(c);
		if ((rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
			return rc;
	}
	if (rc == LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED)
		return REFUSED;
	if (rc)
		return asp__ssh_error(c, rc, err, "starting the command");
	asp__chan_warm_start(c); /* when the answer came at once: the command runs meanwhile */
	return 0;
}

/*
 * Once sent, the request may start the command, and then only a kill
 * stops it: a cancel that comes while the answer is due is the run's to
 * act on (exec.c and proc.c kill the group and say cancelled), not a
 * reason to give the connection up. One that came before runs nothing.
 * The call's deadline still bounds the wait.
 */
static int request_exec(asp_conn *c, LIBSSH2_CHANNEL *ch, const asp_buf *script, int *sent,
			asp_error *err)
{
	asp_cancel *cancel;
	int rc;

	if (asp_cancel_is_triggered(c->op_cancel))
		return asp__error(err, ASP_ECANCELLED, "%s: cancelled", c->where);
	cancel = asp__ssh_op_cancel_swap(c, NULL);
	rc = send_exec(c, ch, script, sent, err);
	asp__ssh_op_cancel_swap(c, cancel);
	return rc;
}

int asp__chan_start(asp_conn *c, const asp_buf *script, LIBSSH2_CHANNEL **out, int *started,
		      asp_error *err)
{
	return asp__chan_start_with(c, script, NULL, NULL, out, started, err);
}

/*
 * Take a channel, run `before` on it (a terminal request), and start
 * `script` on it. A warm channel that the server closed, or that refused
 * or went unanswered, started nothing: the requests go once more on a new
 * channel. *started becomes 1 once the request may have been acted on:
 * from then on a failure is never retried.
 */
int asp__chan_start_with(asp_conn *c, const asp_buf *script, asp_chan_hook before, void *ctx,
			 LIBSSH2_CHANNEL **out, int *started, asp_error *err)
{
	int attempt, warm = 0, sent, rc = 0;

	*out = NULL;
	for (attempt = 0; attempt < 2; attempt++) {
		sent = 0;
		if ((rc = asp__chan_take(c, out, &warm, err)))
			return rc;
		if (before && (rc = before(c, *out, ctx, err)) && rc != ASP__CHAN_NOT_ANSWERED) {
			asp__chan_free(c, *out);
			*out = NULL;
			return rc;
		}
		if (!rc)
			rc = request_exec(c, *out, script, &sent, err);
		if (rc != REFUSED && rc != NOT_ANSWERED) {
			*started = sent;
			return rc;
		}
		asp__chan_free(c, *out);
		*out = NULL;
		if (!warm)
			break;
		ASP_TEST_COUNT(stat_resent);
	}
	if (rc == REFUSED)
		return asp__error(err, ASP_EACCES, "%s: the server refused to run commands", c->where);
	return asp__error(err, ASP_ECONNLOST, "%s: the server closed the command's channel before "
			  "answering its exec request; the command did not start", c->where);
}

/* The kill channel, one step at a time: the warm channel when there is one. */
LIBSSH2_CHANNEL *asp__chan_kill_open_step(asp_conn *c, int *begun, int *failed)
{
	LIBSSH2_CHANNEL *ch;
	int rc;

	*failed = 0;
	warm_poll(c);
	if (c->chan.warm_opening)
		return NULL;
	if (!*begun && (ch = warm_take(c)))
		return ch;
	if (!*begun) {
		*begun = 1;
		ASP_TEST_COUNT(stat_opens);
	}
	if ((ch = open_step(c)))
		return ch;
	if ((rc = libssh2_session_last_errno(c->session)) != LIBSSH2_ERROR_EAGAIN)
		*failed = 1;
	return NULL;
}
