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

/* A shell started in ms (exec.c, a command's wrapper not primed ahead): the average moves. Pure. */
void asp__route_start_note(asp_start_cost *sc, uint64_t ms);

/*
 * The guess for a small file call while neither route has been measured
 * on the connection: the shell command saves a round trip over SFTP and
 * pays a shell's start in the sandbox. So the shell when the round trip is
 * long (rtt_ms >= ASP_EXEC_FILES_RTT_MS) unless a shell's start has been
 * measured at a round trip or more (a busy or CPU-limited sandbox, where a
 * loopback round trip also looks long). Pure.
 */
int asp__route_prior(unsigned int rtt_ms, const asp_start_cost *sc);

/*
 * 1 when an atomic write of write_len bytes is faster as a shell command on
 * the warm channel than over SFTP on c: the file transport is auto, and
 * the route measured cheaper on c (asp__route_pick), or asp__route_prior's
 * guess.
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

/* Tests only: small writes guess as on a link of 1 s round trip until routes are measured (1), or as the
 * connection's round trip says (0). */
void asp__route_prior_shell(int on);

/* Tests only: put small stdin_data in the exec request whatever the round trip (1) or not (0). */
void asp__route_force_inline(int on);
#endif

#endif
