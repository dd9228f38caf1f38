/*
 * proto.h - how a client and the master talk over the Unix socket.
 *
 * client -> master: one request frame, u32 length + payload (below), sent
 *                   with the client's stdin, stdout and stderr attached
 *                   (SCM_RIGHTS, as OpenSSH's mux does); later, CANCEL
 *                   frames when the client gets SIGINT/SIGTERM/SIGHUP.
 * master -> client: ACCEPTED once the request is read (before that, a
 *                   client may safely retry elsewhere: nothing has run),
 *                   then STATUS with asp-exec's exit status. The client
 *                   hanging up cancels the request.
 * Small frames are 4 bytes: type, value, 0, 0.
 *
 * Payload (integers big-endian; a string is u32 length + bytes, no NUL; a
 * list is u32 count + strings):
 *   "ASPX" u8 version u8 mode u8 flags u8 0 u32 timeout_ms
 *   [string cwd if FLAG_CWD] [string path if FLAG_PATH] list env, list args
 * The command goes as its words; the side that runs it makes shell text.
 */
#ifndef ASP_CLI_PROTO_H
#define ASP_CLI_PROTO_H

#include <stddef.h>

#include "cli.h"

#define PROTO_VERSION 2
#define PROTO_MAX_PAYLOAD (16u << 20)
#define PROTO_MAX_LIST 65536

enum proto_frame { FRAME_ACCEPTED = 'A', FRAME_STATUS = 'S', FRAME_CANCEL = 'C' };

/* Encode req as a length-prefixed frame (malloc'd, *len bytes); NULL when out of memory. */
unsigned char *proto_encode(const cli_request *req, size_t *len);

/* Decode a payload (without its length prefix); NULL when malformed or out of memory. */
cli_request *proto_decode(const unsigned char *p, size_t len);

/* Send a request frame with fds[0..2] attached. 0 or -1. */
int proto_send_request(int sock, const cli_request *req, const int fds[3]);

/*
 * Receive a request frame and its three descriptors (close-on-exec). 0, or
 * -1 with nothing left open.
 */
int proto_recv_request(int sock, cli_request **req, int fds[3]);

/* A 4-byte frame; MSG_NOSIGNAL, and async-signal-safe (for CANCEL). 0 or -1. */
int proto_send_frame(int sock, int type, int value);

/* Read one 4-byte frame. 1 when read, 0 at EOF, -1 on error (errno). EINTR is retried. */
int proto_recv_frame(int sock, int *type, int *value);

#endif
