/*
 * sftp.h - a small pipelining SFTP v3 client engine over the connection's
 * long-lived "sftp" subsystem channel. Requests are queued and sent without
 * waiting; replies come back in order and are matched against the ids sent.
 * A request can be marked "discard": its reply is consumed and dropped
 * later (used for CLOSE, so a read does not pay a round trip to close).
 */
#ifndef ASP_SFTP_H
#define ASP_SFTP_H

#include <stdint.h>

#include "common.h"

typedef struct asp_conn asp_conn; /* ssh.h */

enum {
	SSH_FXP_INIT = 1, SSH_FXP_VERSION = 2, SSH_FXP_OPEN = 3, SSH_FXP_CLOSE = 4,
	SSH_FXP_READ = 5, SSH_FXP_WRITE = 6, SSH_FXP_LSTAT = 7, SSH_FXP_FSTAT = 8,
	SSH_FXP_SETSTAT = 9, SSH_FXP_FSETSTAT = 10, SSH_FXP_OPENDIR = 11, SSH_FXP_READDIR = 12,
	SSH_FXP_REMOVE = 13, SSH_FXP_MKDIR = 14, SSH_FXP_RMDIR = 15, SSH_FXP_REALPATH = 16,
	SSH_FXP_STAT = 17, SSH_FXP_RENAME = 18, SSH_FXP_STATUS = 101, SSH_FXP_HANDLE = 102,
	SSH_FXP_DATA = 103, SSH_FXP_NAME = 104, SSH_FXP_ATTRS = 105, SSH_FXP_EXTENDED = 200,
	SSH_FXP_EXTENDED_REPLY = 201
};

enum {
	SSH_FXF_READ = 0x01, SSH_FXF_WRITE = 0x02, SSH_FXF_APPEND = 0x04, SSH_FXF_CREAT = 0x08,
	SSH_FXF_TRUNC = 0x10, SSH_FXF_EXCL = 0x20
};

enum {
	SSH_FILEXFER_ATTR_SIZE = 0x01, SSH_FILEXFER_ATTR_UIDGID = 0x02,
	SSH_FILEXFER_ATTR_PERMISSIONS = 0x04, SSH_FILEXFER_ATTR_ACMODTIME = 0x08
};
#define SSH_FILEXFER_ATTR_EXTENDED 0x80000000u

enum {
	SSH_FX_OK = 0, SSH_FX_EOF = 1, SSH_FX_NO_SUCH_FILE = 2, SSH_FX_PERMISSION_DENIED = 3,
	SSH_FX_FAILURE = 4, SSH_FX_BAD_MESSAGE = 5, SSH_FX_NO_CONNECTION = 6,
	SSH_FX_CONNECTION_LOST = 7, SSH_FX_OP_UNSUPPORTED = 8
};

/* A reply. p/len is the payload after the id; valid until the next reply call. */
typedef struct asp_sftp_reply {
	uint8_t type;
	uint32_t id;
	const unsigned char *p;
	size_t len;
} asp_sftp_reply;

/* Decoded file attributes. */
typedef struct asp_sftp_attrs {
	uint32_t flags;
	uint64_t size;
	uint32_t perm;   /* st_mode: type and permission bits */
	uint32_t mtime;
} asp_sftp_attrs;

/*
 * How this connection does file calls: ASP_FILES_SFTP (the channel is
 * open) or ASP_FILES_EXEC, decided once (asp_open_options.file_transport:
 * auto tries SFTP and falls back when the server has none; sftp makes that
 * ASP_EPROTO; exec never opens SFTP), or an error.
 */
int asp__files_transport(asp_conn *c, asp_error *err);


/*
 * Free the engine's buffers, when the connection is closed (the channel
 * goes with the session).
 */
void asp__sftp_free_state(asp_conn *c);

/*
 * Between calls: give back the engine's buffers (they grow to megabytes
 * during a bulk transfer) unless bytes are still held in them. Replies
 * still due (a CLOSE's) are read into a new buffer by the next call.
 */
void asp__sftp_idle(asp_conn *c);

/* Does the server offer posix-rename@openssh.com? (after asp__files_transport said SFTP) */
int asp__sftp_has_posix_rename(const asp_conn *c);

/* Build a request: begin, add fields, end. end() queues it and returns its id. */
int asp__sftp_begin(asp_conn *c, uint8_t type);
int asp__sftp_u32(asp_conn *c, uint32_t v);
int asp__sftp_u64(asp_conn *c, uint64_t v);
int asp__sftp_str(asp_conn *c, const void *s, size_t len);
int asp__sftp_cstr(asp_conn *c, const char *s);
int asp__sftp_attrs(asp_conn *c, uint32_t flags, uint32_t perm);
int asp__sftp_end(asp_conn *c, int discard, uint32_t *id, asp_error *err);

/* Send what is queued without waiting for replies (best effort, non-blocking). */
int asp__sftp_flush(asp_conn *c, asp_error *err);

/* Wait for the next kept reply (dropping discarded ones) and check its id. */
int asp__sftp_reply(asp_conn *c, asp_sftp_reply *r, uint32_t id, asp_error *err);

#ifdef ASP_TEST_HOOKS
/* Tests: the number of kept replies still to come. */
size_t asp__sftp_pending(const asp_conn *c);
#endif

/* Consume every outstanding reply, kept or not. */
int asp__sftp_drain(asp_conn *c, asp_error *err);

/* Drop every outstanding reply when it comes, without waiting for it. */
void asp__sftp_forget(asp_conn *c);

/*
 * The handle the next OPEN will return, when it can be guessed safely (see
 * sftp.c): its length, with *h pointing at it; else 0. The OPEN's reply
 * goes to asp__sftp_got_handle or asp__sftp_no_handle (any OPEN's or
 * OPENDIR's), and a guess's outcome to asp__sftp_guessed.
 */
size_t asp__sftp_guess(const asp_conn *c, const unsigned char **h);
void asp__sftp_got_handle(asp_conn *c, const unsigned char *h, size_t hl);
void asp__sftp_no_handle(asp_conn *c);
void asp__sftp_guessed(asp_conn *c, int hit);

#ifdef ASP_TEST_HOOKS
/* Tests only: guesses that hit and missed (every connection), and a guess to make instead (NULL: none). */
void asp__sftp_guess_stats(unsigned long *hit, unsigned long *missed);
void asp__sftp_force_guess(const void *h, size_t len);
/* Tests only: fn(bytes, arg) runs after each read of reply bytes, on the reading thread (NULL: none). */
void asp__sftp_on_data(void (*fn)(size_t n, void *arg), void *arg);
/* Tests only: fn(bytes, n, arg) runs after each send of request bytes, on the sending thread (NULL: none). */
void asp__sftp_on_sent(void (*fn)(const void *data, size_t n, void *arg), void *arg);
#endif

/* Reply decoding. */
int asp__sftp_get_u32(const unsigned char **p, size_t *len, uint32_t *v);
int asp__sftp_get_u64(const unsigned char **p, size_t *len, uint64_t *v);
int asp__sftp_get_str(const unsigned char **p, size_t *len, const unsigned char **s, size_t *slen);
int asp__sftp_get_attrs(const unsigned char **p, size_t *len, asp_sftp_attrs *a);

/* The status code of a STATUS reply, or -1 if r is not a STATUS reply. */
int asp__sftp_status(const asp_sftp_reply *r);

/*
 * Turn a failed reply (a STATUS other than OK, or an unexpected type) into
 * an asp error for `path`: NO_SUCH_FILE -> ASP_ENOENT, PERMISSION_DENIED ->
 * ASP_EACCES, others -> `fallback` (the caller knows the likely errno).
 */
int asp__sftp_fail(const asp_sftp_reply *r, int fallback, asp_error *err, const char *what,
		   const char *path);

#endif
