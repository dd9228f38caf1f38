/*
 * pool.h - the sandbox's connections: lazy connect, exclusive checkout,
 * reuse, health check, replacement, keepalive and idle close.
 */
#ifndef ASP_POOL_H
#define ASP_POOL_H

#include "conn.h"

typedef struct asp_pool asp_pool;

/* params must outlive the pool. */
int asp__pool_new(asp_pool **out, const asp_conn_params *params, unsigned int max,
		  unsigned int idle_close_s, asp_error *err);

/* How asp__pool_get chooses (bits). */
#define ASP_POOL_FRESH 1u /* never reuse an idle connection (the last one died) */
#define ASP_POOL_ROOM 2u  /* one with room for another session (the last one had none):
			     ASP_EBUSY when every connection is full (asp__pool_full) */

/*
 * Check out a connection for exclusive use: an idle one that looks alive
 * (most recently used first; one carrying running commands only when the
 * cap leaves no room for another, and not a full one while another may have
 * room), else a new one when under the cap, else wait for one to be
 * returned. `how`: ASP_POOL_* bits.
 */
int asp__pool_get(asp_pool *p, asp_conn **out, unsigned int how, const asp_cancel *cancel,
		  uint64_t deadline, asp_error *err);

/*
 * asp__pool_get without waiting: an idle connection, else a new one when
 * under the cap, else 1 (all in use; nothing done).
 */
int asp__pool_try_get(asp_pool *p, asp_conn **out, const asp_cancel *cancel, uint64_t deadline,
		      asp_error *err);

/*
 * Connect, one connection after another in this thread, until the pool holds
 * n (idle, checked out or being connected; at most the cap), leaving the new
 * ones idle. Idle ones the server has dropped are closed first, not counted.
 * The first failure returns its error; the connections made before it stay.
 */
int asp__pool_fill(asp_pool *p, unsigned int n, const asp_cancel *cancel, uint64_t deadline,
		   asp_error *err);

/*
 * Running commands with a handle (proc.c) ride on c: asp__pool_hold counts
 * one more (c checked out by the caller), asp__pool_unhold one less. The
 * pool then never closes c for idleness, hands it to other calls only when
 * the cap leaves no other choice, and when c dies keeps it (out of the
 * pool, its slot freed) until the last command lets go. 0 or ASP_ENOMEM.
 */
int asp__pool_hold(asp_pool *p, asp_conn *c);
void asp__pool_unhold(asp_pool *p, asp_conn *c);

/*
 * The server refused c (checked out) one more session: c is full while it
 * carries as many running commands as now (a server allows so many sessions
 * per connection: OpenSSH's MaxSessions), and calls go to other connections
 * meanwhile. 1, or 0 when c carries none (nothing learned).
 */
int asp__pool_full(asp_pool *p, asp_conn *c);

/*
 * Check out c itself, a held connection, waiting while another call has
 * it, until deadline (0: none): 0, ASP_ETIMEOUT, or ASP_ECONNLOST when c
 * died (it is no longer in the pool). Return it with asp__pool_put.
 */
int asp__pool_take(asp_pool *p, asp_conn *c, uint64_t deadline);

/* Checkouts so far (any connection): when unchanged, nobody read a socket meanwhile. */
unsigned long asp__pool_takes(asp_pool *p);

/* Return a connection; a dead one is closed and its slot freed. */
void asp__pool_put(asp_pool *p, asp_conn *c);

/* Close every connection; the pool leaves the maintenance thread (the last one ends it). Accepts NULL. */
void asp__pool_free(asp_pool *p);

#endif
