/*
 * route.h - route policy (route.c): which way a call takes on a
 * connection, by the connection's measured round trip.
 */
#ifndef ASP_ROUTE_H
#define ASP_ROUTE_H

#include <stddef.h>

#include "routecost.h"

typedef struct asp_conn asp_conn; /* ssh.h */


/*
 * The route (ASP_COST_SFTP or ASP_COST_SHELL) the next call should take,
 * from what each has cost so far; `prior` is the guess while neither has
 * been measured. The route measured cheaper, except every
 * ASP_ROUTE_PROBE_EVERY calls, when the other is tried again so that a
 * changed cost is noticed (a sandbox that got busy, a link that got far);
 * a route never measured is tried after ASP_ROUTE_PROBE_FIRST calls of the
 * other. Pure: tests/unit/test_route.c.
 */
int asp__route_pick(const asp_route_costs *rc, int prior);

/* A call by `route` took `us` microseconds: the average moves, the probe count too. Pure. */
void asp__route_note(asp_route_costs *rc, int route, uint64_t us);

/* A call by `route` was taken but is no sample (it paid a one-off start): only the probe count moves. */
void asp__route_taken(asp_route_costs *rc, int route);

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

/* Tests only: small writes guess the shell route until routes are measured (1), or as the round trip says (0). */
void asp__route_prior_shell(int on);

/* Tests only: put small stdin_data in the exec request whatever the round trip (1) or not (0). */
void asp__route_force_inline(int on);
#endif

#endif
