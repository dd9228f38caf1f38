/*
 * helper.h - the bg helper: one long-lived bash per connection that runs
 * background-process calls (bg.c) sent to it as short requests, so that a
 * call costs a round trip and what it does in the sandbox, not a session
 * started by sshd and a login shell. The sandbox side is quote.h's
 * asp__helper_boot.
 */
#ifndef ASP_HELPER_H
#define ASP_HELPER_H

#include "conn.h"

/*
 * No helper serves this call, and nothing of it was sent: run it the usual
 * way (an exec of the bg script). The connection has no helper, or cannot
 * have one (the server refused it, no bash, a POSIX-less login shell, the
 * server's session limit), or `fresh` asked for one newer than `gen` and
 * none could be started.
 */
#define ASP__HELPER_NONE 1
/* The helper ended after it read the request and before it answered: it may have run. */
#define ASP__HELPER_LOST 2

/*
 * Run `request` (asp__bg_*_request) on c's helper, starting one first when
 * c has none. gen: the handle's change count now (sandbox.c); fresh: the
 * request needs a helper started at that count (a start: the command must
 * see what a shell started now would), and an older one is told to end.
 * *status: the request's exit status; out: its stdout (over max_out bytes
 * is ASP_EPROTO); errout: the start of its stderr when the status is not
 * 0. out is empty when called. *started: the request may have been read by the sandbox. 0, one of
 * the two codes above, or an ASP_E* error (a dead connection, the call's
 * deadline or cancel: the connection is then dead, and the helper with it).
 */
int asp__helper_call(asp_conn *c, const asp_buf *request, uint64_t gen, int fresh, size_t max_out, int *status,
		     asp_buf *out, char *errout, size_t errcap, int *started, asp_error *err);

#ifdef ASP_TEST_HOOKS
typedef struct asp_helper_stats {
	unsigned long boots, calls, none, lost, retired;
} asp_helper_stats;
void asp__helper_stats(asp_helper_stats *out);
/* Non-zero: no call goes to a helper (the exec route's scripts, tested in every login shell). */
void asp__helper_test_off(int off);
#endif

#endif
