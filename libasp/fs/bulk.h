/*
 * bulk.h - large reads and atomic writes spread over several pooled
 * connections: the file is cut into parts that the calling connection and
 * helper threads (each with a connection of its own, taken from the pool
 * without waiting) read or write at their offsets. Below BULK_MIN bytes,
 * or when the connection's file calls use shell commands (asp__files_transport),
 * the calls are fs.c's.
 */
#ifndef ASP_BULK_H
#define ASP_BULK_H

#include "fs.h"
#include "pool.h"

/* One call's context: where helper connections come from and what bounds them. */
typedef struct asp_bulk_call {
	asp_pool *pool;
	unsigned int max_conns;      /* the pool's cap: at most this many connections work at once */
	asp_cancel *cancel;          /* the call's token, or NULL */
	uint64_t deadline;           /* the call's deadline (asp__now_ms clock) */
} asp_bulk_call;

/* Process-wide counts, read by the tests: read parts read again after a helper's connection died. */
typedef struct asp_bulk_stats {
	unsigned long parts_redone;
} asp_bulk_stats;

#ifdef ASP_TEST_HOOKS
void asp__bulk_stats(asp_bulk_stats *out);
#endif

/* asp__fs_read, in parallel ranges when the file is large. */
int asp__bulk_read(asp_conn *c, const asp_bulk_call *bc, const char *path, uint64_t offset,
		   uint64_t limit, uint64_t cap, asp_buf *out, asp_error *err);

/* asp__fs_write; an atomic write of a large file writes its parts in parallel. */
int asp__bulk_write(asp_conn *c, const asp_bulk_call *bc, const char *path, const void *data,
		    size_t len, const asp_write_options *o, char **orphan, asp_sweep *sw,
		    asp_error *err);

#endif
