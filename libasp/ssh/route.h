/*
 * route.h - route policy (route.c): which way a call takes on a
 * connection, by the connection's measured round trip.
 */
#ifndef ASP_ROUTE_H
#define ASP_ROUTE_H

#include <stddef.h>

typedef struct asp_conn asp_conn; /* ssh.h */

/*
 * 1 when an atomic write of write_len bytes is faster as a shell command on
 * the warm channel than over SFTP on c: the file transport is auto and the
 * round trip is long.
 */
int asp__route_files_faster(const asp_conn *c, size_t write_len);

/*
 * 1 when a read is faster as a shell command than over SFTP on c: only on
 * a long round trip when SFTP cannot make it one round trip.
 */
int asp__route_reads_faster(const asp_conn *c);

/*
 * 1 when rc is a command's failure because the login shell cannot run the
 * command wrapper (fish, csh): none of the command ran, the connection
 * lives, and asp__route_files_faster says 0 from then on. A small read or
 * write taken as a shell command for speed then goes over SFTP (fs.c).
 */
int asp__route_shell_refused(const asp_conn *c, int rc);

/* 1 when a command's small stdin_data is worth putting inside its exec request on c (exec.c). */
int asp__route_stdin_inline(const asp_conn *c);

#ifdef ASP_TEST_HOOKS
/* Tests only: take the shell-command file route whatever the round trip (1) or not (0). */
void asp__route_force_files(int on);

/* Tests only: put small stdin_data in the exec request whatever the round trip (1) or not (0). */
void asp__route_force_inline(int on);
#endif

#endif
