/*
 * sweep.h - the temp files atomic writes leave behind when their writer
 * dies (sweep.c): found after a write in its directory, remembered until
 * stale, removed through the connection's file transport (fsops.h).
 */
#ifndef ASP_SWEEP_H
#define ASP_SWEEP_H

#include "fsops.h"

/*
 * Temp-file bookkeeping of one handle (thread-safe): the lease written into
 * its temp names (io_timeout_ms in whole seconds), the directories it has
 * swept for stale temp files, and the temp files it saw that were not stale
 * yet. See temp.c for the rule.
 */
typedef struct asp_sweep asp_sweep;

/*
 * server names the sandbox (its user, host, port and proxy command): one
 * handle's sweep of a directory then stands for every handle of the
 * process on that sandbox for a while (sweep.c). NULL: this handle's only.
 */
int asp__sweep_new(asp_sweep **out, unsigned int io_timeout_ms, const char *server);
void asp__sweep_free(asp_sweep *sw);
/* The lease written into this handle's temp names, in seconds (30 without a handle: sw NULL). */
unsigned int asp__sweep_lease(asp_sweep *sw);
/* 1 when a remembered temp file may have become stale (asp__sweep_run_due would look). */
int asp__sweep_due(asp_sweep *sw);
/*
 * LSTAT the remembered temp files that may be stale now through ops and
 * remove those that are; ops NULL (the transport is not known): they wait
 * again. Best effort. sw may be NULL.
 */
void asp__sweep_run_due(asp_conn *c, asp_sweep *sw, const asp_fsops *ops);
/*
 * After an atomic write renamed into path: sweep its directory for stale
 * temp files through ops, the first time sw sees it. now_s is
 * the server's clock as the write learned it (0: unknown). sw may be NULL.
 */
void asp__sweep_after_write(asp_conn *c, asp_sweep *sw, const asp_fsops *ops, const char *path,
			    uint64_t now_s);

/*
 * An atomic write to path failed (its temp file may be left): the next
 * handle of the process to write into its directory sweeps it, whatever
 * another handle swept lately.
 */
void asp__sweep_write_failed(asp_sweep *sw, const char *path);

#ifdef ASP_TEST_HOOKS
/* Tests only: how many directory listings sweeps have asked for, in the whole process. */
void asp__sweep_stats(unsigned long *dirs_listed);
/* Tests only: forget every directory any handle of the process swept. */
void asp__sweep_shared_reset(void);
/* Tests only: take (1) or give back (0) the lock of that table, from one thread. */
void asp__sweep_shared_hold(int hold);
#endif

#endif
