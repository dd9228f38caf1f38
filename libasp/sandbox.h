/*
 * sandbox.h - what sandbox.c (the public API) offers the files beside it
 * in libasp/ (bg.c), beyond include/asp.h.
 */
#ifndef ASP_SANDBOX_H
#define ASP_SANDBOX_H

#include "common.h"

/*
 * One background-process call (bg.c). It goes to the connection's bg
 * helper (exec/helper.h) when `request` is set and a helper can take it,
 * else the exec route runs `script`: as libasp's own (own 1: no watchdog,
 * its forks cost 5 to 7 ms in a small sandbox, and the script may end in
 * `exit`; for scripts that end on their own in a bounded time) or with
 * the watchdog (a wait, which may last). Either way the call is inert:
 * it does not make a helper stale (sandbox.c's change count). start: the
 * request launches a command (it needs a fresh helper, and is never run
 * twice). cwd and env: the exec route's (the start request has its own).
 * *status: the script's exit status; out (empty): its stdout, at most
 * max_out bytes (more is ASP_EPROTO); errout: its stderr's start.
 */
typedef struct asp_bg_run {
	const char *script;
	int own;
	const asp_buf *request;
	int start;
	const asp_call_options *call;
	const char *cwd;
	const char *const *env;
	size_t max_out;
} asp_bg_run;
int asp__bg_run(asp_sandbox *sb, const asp_bg_run *r, int *status, asp_buf *out, char *errout, size_t errcap,
		asp_error *err);

/* cwd (NULL: the workspace) made absolute as asp_exec does: *abs to free with asp__free. */
int asp__sandbox_cwd(asp_sandbox *sb, const char *cwd, char **abs, asp_error *err);

#endif
