/*
 * conn.h - one SSH connection to the sandbox, as seen by the pool and the
 * public entry points. No libssh2 type appears here (see ssh.h).
 */
#ifndef ASP_CONN_H
#define ASP_CONN_H

#include <stdint.h>

#include "common.h"
#include "config.h"
#include "hostkey.h"
#include "identity.h"
#include "log.h"

typedef struct asp_conn asp_conn;

typedef struct asp_conn_params {
	const asp_config *cfg;
	const asp_identity *identity; /* NULL: try ssh-agent */
	const asp_pin *pin;           /* NULL: trust on first use */
	const char *known_hosts;      /* store used when pin is NULL */
	unsigned int connect_timeout_ms;
	unsigned int io_timeout_ms;
	unsigned int keepalive_s;
	unsigned int file_transport; /* an asp_file_transport value */
	/*
	 * Under auto: set once a connection of the handle found no SFTP
	 * subsystem (refused, ended, or silent for io_timeout_ms); the handle's
	 * later connections then use shell commands without asking. NULL: ask
	 * on every connection.
	 */
	_Atomic int *no_sftp;
	const asp_log *log; /* the handle's trace (log.h) */
} asp_conn_params;

/* Process-wide libssh2 initialisation, once, thread-safe (asp__ssh_global_init). */
int asp__conn_global_init(asp_error *err);

/*
 * Connect, handshake, verify the host key (before any credential is sent),
 * authenticate. cancel_fd (or -1) aborts the attempt when readable;
 * op_deadline (asp__now_ms clock, 0 = none) cuts the connect deadline short.
 */
int asp__conn_open(asp_conn **out, const asp_conn_params *p, int cancel_fd, uint64_t op_deadline,
		   asp_error *err);

/*
 * The call now using c: its overall deadline (0 = none) and cancel token
 * (NULL = none) bound every wait for a reply until asp__conn_end_op.
 */
void asp__conn_begin_op(asp_conn *c, uint64_t deadline, asp_cancel *cancel);
void asp__conn_end_op(asp_conn *c);

/*
 * A step that cannot be taken back once sent comes next (an atomic
 * write's rename): the call's cancel stops counting until the next begin
 * or end (its deadline still counts). ASP_ECANCELLED or ASP_ETIMEOUT when
 * the call was stopped before, as asp__ssh_op_stopped; else 0.
 */
int asp__conn_commit(asp_conn *c, asp_error *err);

/* Disconnect politely within a short deadline, free everything. Accepts NULL. */
void asp__conn_close(asp_conn *c);

/* 1 when the connection has failed and must not be reused. */
int asp__conn_dead(const asp_conn *c);

/*
 * Cheap check of an idle connection before reuse: no network round trip;
 * notices a peer that has closed or reset the TCP stream. 1 alive, 0 dead.
 */
int asp__conn_check_idle(asp_conn *c);

/* Send a keepalive on an idle connection. 0, or <0 when it is dead. */
int asp__conn_keepalive(asp_conn *c);

/*
 * Running commands with a handle c had room for beside its other channels:
 * how many it carried when the server refused one more session; 0 while
 * not known. Read and set under the pool's lock (pool.c).
 */
unsigned int asp__conn_procs_room(const asp_conn *c);
void asp__conn_set_procs_room(asp_conn *c, unsigned int n);

/* When the connection was last used (asp__now_ms clock). */
uint64_t asp__conn_last_used(const asp_conn *c);
/* c is taken out of the pool for a call: bumps its uses counter (ssh.h). */
void asp__conn_taken(asp_conn *c);
void asp__conn_touch(asp_conn *c);

/* Which ways file calls on c took since the last take (ASP_ROUTE_* bits, log.h), for the trace; clears them. */
unsigned int asp__conn_routes_take(asp_conn *c);
void asp__conn_route_mark(asp_conn *c, unsigned int route);

/* What the connection established, for asp_sandbox_info_get. */
void asp__conn_info(const asp_conn *c, asp_sandbox_info *out);

#endif
