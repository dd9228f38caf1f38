/*
 * bg.h - background processes (asp_bg_*): commands that outlive the call,
 * the connection and the harness. Above the public API: each operation is
 * one asp_exec of a script from quote.c, and all state lives in the
 * sandbox (quote.h, "Background processes"), none in the handle.
 */
#ifndef ASP_BG_H
#define ASP_BG_H

#include "common.h"

/*
 * asp_exec of one of libasp's own scripts (sandbox.c): no watchdog (its
 * forks cost 5 to 7 ms in a small sandbox), and the script may end in
 * `exit`. For scripts that end on their own in a bounded time.
 */
int asp__exec_own(asp_exec_result **out, asp_sandbox *sb, const char *script, const asp_exec_options *opts,
		  asp_error *err);

/* An id as asp_bg_start makes them and every call accepts: 1 to 64 of [A-Za-z0-9_-], a letter or digit first. */
int asp__bg_id_ok(const char *id);

#endif
