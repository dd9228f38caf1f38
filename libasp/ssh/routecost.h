/*
 * routecost.h - what a route has cost on a connection (a member of
 * asp_conn, ssh.h; read and moved by route.c).
 */
#ifndef ASP_ROUTECOST_H
#define ASP_ROUTECOST_H

#include <stdint.h>

/*
 * What a kind of small file call (an atomic write, a read) has cost on one
 * connection by each route: an exponentially weighted moving average of
 * the observed latencies (weight ASP_ROUTE_EWMA_SHIFT: each new sample
 * counts 1/4), how many samples, and the calls since the route not taken
 * was last tried. All zero: nothing observed yet.
 */
enum { ASP_COST_SFTP, ASP_COST_SHELL, ASP_COST_ROUTES };
#define ASP_ROUTE_EWMA_SHIFT 2
#define ASP_ROUTE_SMALL 65536u   /* bytes: the calls whose cost is noted (the shell route's bound) */
#define ASP_ROUTE_PROBE_FIRST 3u /* calls on one route before the unmeasured other is tried */
#define ASP_ROUTE_PROBE_EVERY 32u /* calls on the cheaper route between two tries of the other */

typedef struct asp_route_costs {
	uint32_t ewma_us[ASP_COST_ROUTES];
	uint32_t samples[ASP_COST_ROUTES];
	uint32_t since_other;     /* calls since the other route than the cheaper one was taken */
} asp_route_costs;

/*
 * What starting a shell has cost on one connection: from the answer to a
 * command's exec request to the wrapper's first line (sshd's fork, the
 * login shell and its startup files: the processes every shell-command
 * route pays before its own programs). An average as above, in ms; all zero
 * before the first sample.
 */
typedef struct asp_start_cost {
	uint32_t ewma_ms;
	uint32_t samples;
} asp_start_cost;

#endif
