/*
 * sandbox.h - what sandbox.c (the public API) offers the files beside it
 * in libasp/ (bg.c), beyond include/asp.h.
 */
#ifndef ASP_SANDBOX_H
#define ASP_SANDBOX_H

#include "common.h"

/*
 * asp_exec of one of libasp's own scripts: no watchdog (its forks cost 5
 * to 7 ms in a small sandbox), and the script may end in `exit`. For
 * scripts that end on their own in a bounded time.
 */
int asp__exec_own(asp_exec_result **out, asp_sandbox *sb, const char *script, const asp_exec_options *opts,
		  asp_error *err);

#endif
