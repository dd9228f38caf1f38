/*
 * exec.h - running one command on one connection.
 */
#ifndef ASP_EXEC_H
#define ASP_EXEC_H

#include "cancel.h"
#include "conn.h"

/* SIGTERM, then SIGKILL after this long, when asp_exec_options.kill_grace_ms is 0 (docs/api.md). */
#define ASP_KILL_GRACE_DEFAULT_MS 2000u

/*
 * Run `command` in `cwd` (absolute) on connection c, filling a new result
 * in *out. *started becomes 1 once the request may have reached the server:
 * from then on a failure must not be retried.
 */
int asp__exec_run(asp_exec_result **out, asp_conn *c, const char *command, const char *cwd,
		  const asp_exec_options *o, int *started, asp_error *err);

/*
 * Process-wide counts, read by the tests (a hook: common.h): session channels opened for
 * commands (warm ones included), commands started on a warm channel, warm
 * channels found closed by the server before use, requests sent once more
 * on a new channel because a warm one closed under them, commands whose
 * stdin went inside the exec request, and warm channel confirmations taken
 * as round-trip samples.
 */
typedef struct asp_exec_stats {
	unsigned long opens, warm_used, warm_closed, resent;
	unsigned long stdin_inline; /* commands whose stdin_data rode in the exec request */
	unsigned long rtt_samples;  /* warm channel confirmations taken as round-trip samples */
	/* primed shells (exec.c): started, used by a command, found closed before use, told to end unused */
	unsigned long primed, primed_used, primed_closed, primed_unused;
	unsigned long side_kills;   /* kills sent on a connection of their own (kill_elsewhere) */
} asp_exec_stats;

#ifdef ASP_TEST_HOOKS
void asp__exec_stats(asp_exec_stats *out);
#endif

/*
 * A call of the handle begins on c (gen: how many of the handle's calls had
 * ended when it began), and ends (gen: that count with it; alone: no other
 * call of the handle runs). When the call came after a pause and ran
 * alone, its end primes a shell for the next command on c (exec.c).
 */
void asp__chan_call_begin(asp_conn *c, uint64_t gen);
void asp__chan_call_end(asp_conn *c, uint64_t gen, int alone);

#ifdef ASP_TEST_HOOKS
/* Tests only: what counts as a pause before a call, in ms past the round trip (0: the default). */
void asp__exec_prime_pause(unsigned int ms);

/* Tests only: put small stdin_data in the exec request whatever the round trip (1) or not (0). */
void asp__exec_force_inline(int on);
#endif

/*
 * 1 when an atomic write of write_len bytes is faster as a shell command on
 * the warm channel than over SFTP on c: the file transport is auto and the
 * round trip is long (see exec.c).
 */
int asp__exec_files_faster(const asp_conn *c, size_t write_len);

/*
 * 1 when a read is faster as a shell command than over SFTP on c: only on
 * a long round trip when SFTP cannot make it one round trip (see exec.c).
 */
int asp__exec_reads_faster(const asp_conn *c);

/*
 * 1 when rc is a command's failure because the login shell cannot run the
 * command wrapper (fish, csh): none of the command ran, the connection
 * lives, and asp__exec_files_faster says 0 from then on. A small read or
 * write taken as a shell command for speed then goes over SFTP (fs.c).
 */
int asp__exec_shell_refused(const asp_conn *c, int rc);

#ifdef ASP_TEST_HOOKS
/* Tests only: take that route whatever the round trip (1) or not (0). */
void asp__exec_force_files(int on);
#endif

#ifdef ASP_TEST_HOOKS
/*
 * Tests only: fn (or NULL) is called between the reads of a channel's two
 * streams, with helper 0 for a command's channel and 1 for a helper
 * script's (asp__exec_simple); it may sleep, so that the second read takes
 * in from the socket what the first stream was waiting for.
 */
void asp__exec_stream_gap(void (*fn)(int helper));
#endif

/*
 * Run a short helper script (no stdin, no cwd change) and collect its
 * output (out, errout: NULL or buffers for the first 4 KiB of stdout and
 * stderr); used for recursive removal. *status is its exit code.
 */
int asp__exec_simple(asp_conn *c, const char *script, int *status, asp_buf *out, asp_buf *errout,
		     asp_error *err);

/*
 * Run a script of the shell-command file transport (shfs.c) with
 * in/inlen as its stdin, under the current call's deadline and cancel
 * token (asp__conn_begin_op): either one stops it and kills its process
 * group (ASP_ETIMEOUT, ASP_ECANCELLED). stdout and stderr go to cb only;
 * cb returning non-zero stops the script too (then 0). *status is its
 * exit code, -1 when a signal ended it.
 */
int asp__exec_file_script(asp_conn *c, const char *script, const void *in, size_t inlen,
			  asp_output_cb cb, void *ud, int *status, asp_error *err);

#endif
