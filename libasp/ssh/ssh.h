/*
 * ssh.h - the SSH layer's shared internals (session.c, chan.c, conn.c,
 * sftp.c, exec.c): the connection structure, the session helpers of
 * session.c (creating a session, waiting on it with deadlines, the single
 * libssh2 -> asp error map, the round trip). Only these files include
 * libssh2.h. It sits below conn.h: conn.c includes it, not the reverse.
 */
#ifndef ASP_SSH_H
#define ASP_SSH_H

#include <libssh2.h>
#include <poll.h>
#include <stddef.h>
#include <sys/types.h>

#include "common.h"
#include "log.h"
#include "pin.h"
#include "routecost.h"

typedef struct asp_conn asp_conn;    /* also in conn.h (the API above the SSH layer) */
struct asp_conn_params;              /* conn.h */

/* Receive windows: large ones keep bulk transfers from stalling on round trips. */
#define ASP_SFTP_WINDOW (16u * 1024 * 1024)
#define ASP_EXEC_WINDOW (4u * 1024 * 1024)
#define ASP_PACKET_SIZE 32768u
#define ASP_SFTP_GUESS_MAX 8u /* OpenSSH's handles are 4 bytes; longer ones are not guessed */

typedef struct asp_sftp_state {
	LIBSSH2_CHANNEL *chan;    /* the long-lived "sftp" subsystem channel, or NULL */
	uint32_t next_id;
	int posix_rename;         /* server offers posix-rename@openssh.com */
	int fsync;                /* server offers fsync@openssh.com */
	int starting;             /* waiting for VERSION: a channel that ends means no SFTP */
	asp_buf in;               /* received bytes; the unparsed ones start at in_off */
	size_t in_off;
	size_t in_front;          /* size of the reply handed out last, consumed on the next call */
	asp_buf out;              /* bytes queued for the channel */
	size_t out_off;           /* how much of out is already written */
	size_t out_mark;          /* where the request being built starts in out */
	int ok_mem;               /* 0 once building the current request ran out of memory */
	uint32_t *expect;         /* ids of replies still to come, in order */
	unsigned char *discard;   /* per expected reply: drop it when it comes */
	size_t nexpect, capexpect, headexpect;
	uint8_t building;         /* the type of the request being built */
	/*
	 * Guessing the next handle (asp__sftp_guess): how many handles the
	 * server may hold for us (OPEN or OPENDIR sent, CLOSE not yet: one whose
	 * reply went unread stays counted), the handle an OPEN made while none
	 * was held last returned, and guesses missed in a row.
	 */
	unsigned int held;
	unsigned char guess[ASP_SFTP_GUESS_MAX];
	uint8_t guess_len;
	uint8_t guess_missed;
} asp_sftp_state;

/*
 * The channels a connection keeps ready for commands (chan.c).
 *
 * The warm channel: a session channel opened ahead of the next command, so
 * that a call costs one round trip (the exec request). While warm_opening,
 * libssh2's one channel-open state is taken: every other channel open on
 * this session must go through asp__chan_settle first.
 *
 * The primed shell: when a call came after a pause, the warm channel gets
 * its exec request as that call ends, and the login shell waits there for
 * the next command's script on stdin.
 */
typedef struct asp_chan_state {
	LIBSSH2_CHANNEL *warm;    /* open, no request sent on it yet; or NULL */
	int warm_opening;         /* its CHANNEL_OPEN is out, the confirmation not yet taken */
	int warm_off;             /* the server refused one (its session limit), or closed two in a
				     row before use: open on demand only */
	int warm_lost;            /* warm channels in a row found closed by the server */
	uint64_t warm_sent_ms;    /* when the warm channel's CHANNEL_OPEN went out */
	LIBSSH2_CHANNEL *shell;   /* its exec request out (shell_ready 0) or answered (1); or NULL */
	LIBSSH2_CHANNEL *spent;   /* a shell told to end (EOF sent), freed once it has closed */
	int refused;              /* the last asp__chan_open was refused: the server's session limit */
	int shell_ready;
	int shell_off;            /* no more primed shells on this connection */
	int shell_lost;           /* primed shells in a row found closed by the server */
	int paused;               /* the current call came after a pause */
	uint64_t shell_gen;       /* calls of the handle ended when the shell was primed */
	char shell_token[40];     /* the token of the call it will run (its watchdog's: asp__prime_boot) */
	uint64_t call_gen;        /* calls of the handle ended when the current call began */
	uint64_t last_end_ms;     /* when the last call on this connection ended, or 0 */
	/* The bg helper (exec/helper.c): a long-lived bash for background-process calls. */
	LIBSSH2_CHANNEL *helper;  /* its exec request out (helper_ready 0) or answered (1); or NULL */
	int helper_ready;
	int helper_hello;         /* its hello line seen: it reads requests */
	int helper_off;           /* no helper on this connection (refused, no bash, session limit) */
	int helper_lost;          /* helpers in a row that ended before their hello */
	uint64_t helper_gen;      /* the handle's change count (sandbox.c) when it started */
	char helper_tok[40];      /* its hello line's token */
} asp_chan_state;

/* The link before each block libssh2 allocates (session.c). */
typedef struct asp_ssh_block {
	_Alignas(max_align_t) struct asp_ssh_block *prev;
	struct asp_ssh_block *next;
} asp_ssh_block;

struct asp_conn {
	int sock;
	int quickack;             /* a TCP socket still connecting: ACK every read at once (session.c) */
	pid_t proxy_pid;          /* x-asp-proxy-command child, or 0 */
	LIBSSH2_SESSION *session;
	asp_ssh_block ssh_blocks; /* the session's allocations: a ring through this head */
	char *where;              /* "host:port" for messages */
	unsigned int io_timeout_ms;
	unsigned int keepalive_s;
	uint64_t last_rx_ms;      /* last time bytes arrived from the server */
	uint64_t last_tx_ms;      /* last time bytes were sent to the server */
	uint64_t tx_bytes;        /* bytes sent to the server so far */
	uint64_t rx_bytes;        /* bytes received from the server so far */
	uint64_t rx_polled;       /* rx_bytes when asp__ssh_wait last polled (see there) */
	uint64_t last_used_ms;
	uint64_t op_deadline;     /* the current call's overall deadline (0 = none), see asp__ssh_wait */
	int op_cancel_fd;         /* the current call's cancel token's fd (-1 = none) */
	asp_cancel *op_cancel;    /* that token (NULL = none), for commands run for the call */
	unsigned int files_want;  /* asp_conn_params.file_transport; file_transport: decided */
	_Atomic int *no_sftp;     /* asp_conn_params.no_sftp */
	const struct asp_conn_params *params; /* what it was opened with (the handle's): for a side connection */
	int dead;
	/*
	 * Bumped at each use of the session by anyone (a pool take, the
	 * maintenance thread's idle check and keepalive): libssh2 may then have
	 * taken in bytes of any of its channels, which a poll of the socket no
	 * longer shows (asp_proc_wait_any looks at its commands only then).
	 */
	_Atomic unsigned long uses;
	unsigned int routes;      /* ASP_ROUTE_* bits (log.h) since asp__conn_routes_take (the trace) */
	int alloc_failed;         /* an allocation inside libssh2 failed: the session is not trusted again */
	unsigned char *kex_capture; /* during the handshake: the server's first bytes, up to its KEXINIT */
	size_t kex_capture_len;   /* (kexinit.h; explains an algorithm mismatch), or NULL */
	size_t kex_capture_cap;   /* its allocated size (grows to ASP_KEXINIT_CAPTURE_MAX) */
	int kex_capture_done;
	unsigned int procs_room;  /* asp__conn_procs_room (conn.h); under the pool's lock */
	int shell_bad;            /* the login shell did not run the command wrapper (fish, csh):
				     small files stay on SFTP (asp__route_files_faster) */
	asp_chan_state chan;      /* the warm channel and the primed shell (chan.c) */
	/*
	 * The round trip: the least of every sample taken (asp__ssh_rtt_sample),
	 * 0 before the first. Each sample is a request's answer time, at least
	 * one round trip: a stall on either end only inflates one sample.
	 */
	unsigned int rtt_ms;
	unsigned int rtt_samples;
	asp_start_cost shell_start; /* a shell's start here (route.c: asp__route_shell_started) */
	/*
	 * What small atomic writes and small reads have cost here by SFTP and
	 * by a shell command: which route the next one takes (route.c), noted
	 * by fs.c. Touched only by the call that holds the connection.
	 */
	asp_route_costs cost_write, cost_read;
	int one_flight;           /* while set, a send ends the libssh2 call: reads answer EAGAIN
				     until it is cleared (conn.c counts authentication's flights) */
	int sent_this_call;       /* a send happened during the current libssh2 call (one_flight) */
	asp_sftp_state sftp;
	/*
	 * What asp_sandbox_info reports of this connection; asp__conn_info adds
	 * what the session itself knows (methods, banner). Kept small: every
	 * pooled connection holds it.
	 */
	int trust;                /* an asp_trust value */
	int auth;                 /* an asp_auth value */
	int file_transport;       /* ASP_FILES_SFTP or ASP_FILES_EXEC once decided, else 0 */
	const char *known_hosts;  /* the store consulted (asp_conn_params'), or NULL when pinned */
	char host_key_type[32];
	char host_key_fingerprint[ASP_FINGERPRINT_MAX];
};

/* Process-wide libssh2 initialisation, once, thread-safe (conn.h: asp__conn_global_init). */
int asp__ssh_global_init(asp_error *err);

/* How asp__ssh_wait treats silence from the server. */
enum {
	ASP_WAIT_REPLY = 0,  /* a reply is due: silence longer than io_timeout fails */
	ASP_WAIT_PATIENT = 1 /* a command may be quiet: send keepalives, fail only on no sign of life */
};

/*
 * Wait until the session can make progress (the socket is ready in the
 * direction libssh2 is blocked on), one of `extra` fds is ready, or it is
 * time to re-check. deadline (asp__now_ms clock, 0 = none) returns
 * ASP_ETIMEOUT when passed. cancel_fd (or -1) returns ASP_ECANCELLED when
 * readable. A dead peer marks the connection dead and returns
 * ASP_ETIMEOUT (REPLY) or ASP_ECONNLOST (PATIENT).
 *
 * In REPLY mode the current call's own deadline and cancel token
 * (c->op_deadline, c->op_cancel_fd, set by asp__conn_begin_op) bound the
 * wait too, whatever the server sends meanwhile (a server that trickles
 * keepalives is never silent); when one of them ends the wait, a reply is
 * still due, so the connection is marked dead. PATIENT waits (a running
 * command) answer to the command's own timeout and cancel only.
 *
 * libssh2 queues what a read takes in from the socket, whichever channel
 * and stream it is for: a caller that read stream A, then stream B, may
 * hold in libssh2's queue what A waits for, and the socket then stays
 * quiet. So when bytes came in since the last wait, the wait only looks
 * (a poll that does not sleep) and the caller goes round once more.
 */
int asp__ssh_wait(asp_conn *c, uint64_t deadline, int cancel_fd, struct pollfd *extra,
		  int nextra, int mode, asp_error *err);

/*
 * The call's cancel or deadline (asp__conn_begin_op), looked at without
 * waiting: ASP_ECANCELLED or ASP_ETIMEOUT (the connection is marked dead:
 * replies are still due), else 0. For loops that read replies: a reader
 * whose socket is always full never waits, so it must look itself.
 */
int asp__ssh_op_stopped(asp_conn *c, asp_error *err);

/* Put cancel (NULL: none) in the call's token's place, for a step a cancel must not cut; returns the old one. */
asp_cancel *asp__ssh_op_cancel_swap(asp_conn *c, asp_cancel *cancel);

#ifdef ASP_TEST_HOOKS
/* Tests only: how many waits so far slept until their time limit (the poll timed out). */
unsigned long asp__ssh_waits_ran_out(void);

/*
 * Tests only: libssh2 allocations alive now (all sessions), and how many a
 * session still held when libssh2 had freed it (reclaimed by libasp).
 */
unsigned long asp__ssh_allocs_live(void);
unsigned long asp__ssh_allocs_reclaimed(void);
#endif

/*
 * A non-blocking-ready session for c: libssh2 allocates through libasp's
 * allocator (what it frees is wiped; an allocation failure marks c dead)
 * and sends/receives through callbacks that stamp c's traffic times.
 * The receive callback also keeps the server's first bytes, up to its
 * KEXINIT, in c->kex_capture (allocated here; conn.c frees it after the
 * handshake). *abstract is c. NULL when out of memory.
 */
LIBSSH2_SESSION *asp__ssh_session_new(asp_conn *c);

/*
 * Free c's session (the socket should be shut down first: libssh2 then
 * gives up on sending channel closes at once), then wipe and free whatever
 * of its allocations libssh2 did not free. c->session is NULL after.
 */
void asp__ssh_session_free(asp_conn *c);

/* The keepalive interval libssh2 is given: keepalive_s, at least 2 s, in ms. */
uint64_t asp__ssh_keepalive_ms(const asp_conn *c);

/*
 * The single libssh2 -> asp error map. rc is a libssh2 error code; `what`
 * says what was being done ("opening a channel"). Transport failures mark
 * the connection dead and map to ASP_ECONNLOST.
 */
int asp__ssh_error(asp_conn *c, int rc, asp_error *err, const char *what);

/*
 * A call's code once it is over on c: rc, or ASP_ENOMEM when an allocation
 * inside libssh2 failed meanwhile. libssh2 drops a packet it cannot store,
 * another channel's among them (a command's output, read while a channel
 * opened), and a call whose data had all arrived ends without waiting
 * again: without this it returned ASP_OK with that output missing.
 */
int asp__ssh_op_result(asp_conn *c, int rc, asp_error *err);

/* 1 when a libssh2 error code means the transport failed (the map's ASP_ECONNLOST). */
int asp__ssh_is_transport_error(int rc);

/*
 * A round-trip sample of ms milliseconds (session.c): authentication's key
 * query (conn.c), and each warm channel's CHANNEL_OPEN until its
 * confirmation was taken (chan.c). c->rtt_ms keeps the least.
 */
void asp__ssh_rtt_sample(asp_conn *c, uint64_t ms);

#endif
