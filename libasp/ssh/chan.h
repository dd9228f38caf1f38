/*
 * chan.h - the session channels of a connection (chan.c): the warm channel
 * kept ready for the next command, the primed shell after a pause, and
 * every channel a command uses. Their state is asp_conn's `chan`
 * (asp_chan_state, ssh.h).
 *
 * The functions that take or give a libssh2 channel are for the SSH layer
 * (exec.c, which includes ssh.h); the header itself does not include
 * libssh2.h, so sandbox.c can begin and end calls without it.
 */
#ifndef ASP_CHAN_H
#define ASP_CHAN_H

#include <stdint.h>

#include "common.h"

typedef struct asp_conn asp_conn; /* ssh.h */
typedef struct _LIBSSH2_CHANNEL LIBSSH2_CHANNEL; /* libssh2.h's own typedef */

/*
 * Process-wide counts, read by the tests through asp__exec_stats: session
 * channels opened (warm ones and SFTP's included), commands started on a
 * warm channel, warm channels found closed by the server before use,
 * requests sent once more on a new channel because a warm one closed under
 * them, warm channel confirmations taken as round-trip samples, and primed
 * shells started, used by a command, found closed before use, told to end
 * unused.
 */
typedef struct asp_chan_stats {
	unsigned long opens, warm_used, warm_closed, resent, rtt_samples;
	unsigned long primed, primed_used, primed_closed, primed_unused;
} asp_chan_stats;

#ifdef ASP_TEST_HOOKS
void asp__chan_stats(asp_chan_stats *out);
#endif

/*
 * The warm channel. asp__chan_warm_start sends the CHANNEL_OPEN for the
 * next one when the connection has none (never waits); asp__chan_settle
 * waits for its confirmation, and must be called before any other channel
 * is opened on the session.
 */
void asp__chan_warm_start(asp_conn *c);
int asp__chan_settle(asp_conn *c, asp_error *err);

/*
 * A call of the handle begins on c (gen: how many of the handle's calls had
 * ended when it began), and ends (gen: that count with it; alone: no other
 * call of the handle runs; command: it ran a command, not a file call).
 * When a command came after a pause and ran alone, its end primes a shell
 * for the next command on c.
 */
void asp__chan_call_begin(asp_conn *c, uint64_t gen);
void asp__chan_call_end(asp_conn *c, uint64_t gen, int alone, int command);

#ifdef ASP_TEST_HOOKS
/* Tests only: what counts as a pause before a call, in ms past the round trip (0: the default). */
void asp__chan_prime_pause(unsigned int ms);
/* Tests only: fn(arg) runs on the calling thread once an exec request was sent (NULL: none). */
void asp__chan_on_exec_sent(void (*fn)(void *arg), void *arg);
#endif

/*
 * Take a channel (the warm one when it is still open) and start `script`
 * on it with an exec request. A warm channel that the server closed, or
 * that refused or went unanswered, started nothing: the request goes once
 * more on a new channel. *started becomes 1 once the request may have been
 * acted on: from then on a failure is never retried.
 */
int asp__chan_start(asp_conn *c, const asp_buf *script, LIBSSH2_CHANNEL **out, int *started,
		    asp_error *err);

/*
 * asp__chan_start with `before` run on the channel ahead of the exec
 * request (a terminal request): it returns 0, ASP__CHAN_NOT_ANSWERED when
 * the server closed the channel instead of answering (nothing started: a
 * warm channel is tried once more as a new one), or an ASP_E* code.
 */
#define ASP__CHAN_NOT_ANSWERED 1
typedef int (*asp_chan_hook)(asp_conn *c, LIBSSH2_CHANNEL *ch, void *ctx, asp_error *err);
int asp__chan_start_with(asp_conn *c, const asp_buf *script, asp_chan_hook before, void *ctx,
			 LIBSSH2_CHANNEL **out, int *started, asp_error *err);

/*
 * The primed shell for the current call: ready, primed since the last call
 * of the handle ended, still open. NULL otherwise.
 */
LIBSSH2_CHANNEL *asp__chan_shell_take(asp_conn *c);

/*
 * The token of the call the primed shell will run (its watchdog runs for
 * it since the shell's boot), or NULL when there is no primed shell. A call
 * that takes the shell must use it; one that does not never meets this
 * shell again (it is told to end when the call ends).
 */
const char *asp__chan_shell_token(const asp_conn *c);

/*
 * The kill channel, one step at a time (never waits): the warm channel when
 * there is one. NULL while opening (*begun: an open is out), or on failure
 * (*failed: the server refused it or the link failed).
 */
LIBSSH2_CHANNEL *asp__chan_kill_open_step(asp_conn *c, int *begun, int *failed);

/*
 * Open a session channel with this receive window (the caller has settled
 * the warm channel's open: libssh2 opens one channel at a time). An open
 * the server refuses for its session limit (MaxSessions) is tried again a
 * few times, a little later: OpenSSH frees a closed channel's session only
 * once it has handled the close. `what` names the open in an error.
 */
/* 1 when the last asp__chan_open on c failed because the server refused it (its session limit). */
int asp__chan_refused(const asp_conn *c);

/*
 * A channel for a command: the warm one when it is still open (*warm 1),
 * else a new one (asp__chan_open).
 */
int asp__chan_take(asp_conn *c, LIBSSH2_CHANNEL **out, int *warm, asp_error *err);
int asp__chan_open(asp_conn *c, unsigned int window, const char *what, LIBSSH2_CHANNEL **out, asp_error *err);

/* Close ch and wait for the server's close. */
int asp__chan_close(asp_conn *c, LIBSSH2_CHANNEL *ch, asp_error *err);

/* Free ch (NULL: nothing), waiting a little for libssh2 to send what it must. */
void asp__chan_free(asp_conn *c, LIBSSH2_CHANNEL *ch);
/*
 * Tell the program on ch to end (EOF on its stdin) without waiting: ch is
 * freed once the server has closed it (at a call's end, or when a channel
 * open needs its session).
 */
void asp__chan_retire(asp_conn *c, LIBSSH2_CHANNEL *ch);

#endif
