/*
 * exec.h - running one command on one connection.
 */
#ifndef ASP_EXEC_H
#define ASP_EXEC_H

#include "cancel.h"
#include "conn.h"
#include "route.h"

/* SIGTERM, then SIGKILL after this long, when asp_exec_options.kill_grace_ms is 0 (docs/api.md). */
#define ASP_KILL_GRACE_DEFAULT_MS 2000u

/*
 * Run `command` in `cwd` (absolute) on connection c, filling a new result
 * in *out. *started becomes 1 once the request may have reached the server:
 * from then on a failure must not be retried. own: command is one of
 * libasp's own scripts (quote.h: asp__exec_script), which runs without the
 * watchdog and may end in `exit`.
 */
int asp__exec_run(asp_exec_result **out, asp_conn *c, const char *command, const char *cwd,
		  const asp_exec_options *o, int own, int *started, asp_error *err);

/*
 * A running command with a handle (proc.c drives it): asp__exec_run cut in
 * steps. asp__run_start starts `command` as asp__exec_run does (o must
 * outlive the run; o->on_output receives the output as it is read, and the
 * result keeps it as an exec's does), with a terminal when pty is not NULL,
 * and its stdin left open: asp__run_write queues bytes that the next pass
 * sends, asp__run_close_stdin sends EOF once they are out. A pass does one
 * round of exec's loop without waiting (*done: the command ended and its
 * kill, if any, ran; *next: the latest time to come back, 0 for "when the
 * socket says"); asp__run_wait waits on the socket until `deadline`.
 * asp__run_end builds the result (rc: the loop's failure, or 0) and frees
 * the run. Every call needs the connection checked out.
 */
typedef struct asp_run asp_run;
typedef struct asp_run_pty {
	const char *term;
	unsigned int cols, rows;
} asp_run_pty;

int asp__run_start(asp_run **out, asp_conn *c, const char *command, const char *cwd,
		   const asp_exec_options *o, const asp_run_pty *pty, int *started, asp_error *err);
int asp__run_pass(asp_run *x, int *progress, int *done, uint64_t *next, asp_error *err);
int asp__run_wait(asp_run *x, uint64_t deadline, asp_error *err);
int asp__run_end(asp_exec_result **out, asp_run *x, int rc, asp_error *err);
int asp__run_write(asp_run *x, const void *data, size_t len, asp_error *err);
size_t asp__run_stdin_pending(const asp_run *x);
void asp__run_close_stdin(asp_run *x);
/* 0 once the EOF went out. */
int asp__run_stdin_open(const asp_run *x);
/* While set, output stays in libssh2 (and its window closes): the reader is behind. */
void asp__run_hold_output(asp_run *x, int hold);
/* Kill the process group as a cancel does (the result reports cancelled). */
void asp__run_kill(asp_run *x);
/* 1 once the wrapper reported its process group (or a missing cwd). */
int asp__run_started(const asp_run *x);
/* Send the signal `name` (a name asp__signal_number knows) to the process group; one round trip. */
int asp__run_signal(asp_run *x, const char *name, asp_error *err);
/* Tell the terminal its new size (no reply awaited). */
int asp__run_resize(asp_run *x, unsigned int cols, unsigned int rows, asp_error *err);
/* The number of a signal name ("TERM" or "SIGTERM"), or 0 when it is not one libasp sends. */
int asp__signal_number(const char *name);

/*
 * Process-wide counts, read by the tests (a hook: common.h): those of the channels (chan.h:
 * asp_chan_stats, the same names), commands whose stdin went inside the
 * exec request, and kills sent on a connection of their own.
 */
typedef struct asp_exec_stats {
	unsigned long opens, warm_used, warm_closed, resent;
	unsigned long stdin_inline; /* commands whose stdin_data rode in the exec request */
	unsigned long rtt_samples;  /* warm channel confirmations taken as round-trip samples */
	/* primed shells (chan.c): started, used by a command, found closed before use, told to end unused */
	unsigned long primed, primed_used, primed_closed, primed_unused;
	unsigned long side_kills;   /* kills sent on a connection of their own (kill_elsewhere) */
	unsigned long cut_checks;   /* ends without the end line and exit 0, asked about (check_cut): an exec each */
} asp_exec_stats;

#ifdef ASP_TEST_HOOKS
void asp__exec_stats(asp_exec_stats *out);

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
