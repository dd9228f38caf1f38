/*
 * proc.h - a running command with a handle (asp_proc, proc.c): exec.c's
 * run driven a step at a time on a connection that stays in the pool
 * between the proc's calls.
 */
#ifndef ASP_PROC_H
#define ASP_PROC_H

#include "conn.h"
#include "pool.h"

/*
 * Start `command` in `cwd` (absolute; copied) on c, a connection checked
 * out of `pool` by the caller, which puts it back after: the proc holds it
 * in the pool (asp__pool_hold). opts are checked by the caller (sandbox.c);
 * max_output is already the handle's default when it was 0. *started as
 * asp__exec_run's.
 */
int asp__proc_start(asp_proc **out, asp_pool *pool, asp_conn *c, const char *command, const char *cwd,
		    const asp_proc_options *opts, int *started, asp_error *err);

#ifdef ASP_TEST_HOOKS
/* Tests: how many looks asp_proc_wait_any has made at its commands, in this process. */
unsigned long asp__proc_any_looks(void);
#endif

#endif
