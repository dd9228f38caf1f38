/*
 * route.c - which way a call goes, by what each way costs on the
 * connection (its round trip, the least sample: asp__ssh_rtt_sample): a
 * small file call over SFTP or as one shell command on the warm channel,
 * a command's small stdin inside its exec request or on its channel.
 */
#include "route.h"

#include "sftp.h"
#include "ssh.h"

#define ASP_EXEC_FILES_RTT_MS 10u     /* see asp__route_files_faster */
#define ASP_EXEC_FILES_WRITE_MAX ASP_ROUTE_SMALL
#ifndef ASP_INLINE_STDIN_RTT_MS
#define ASP_INLINE_STDIN_RTT_MS 5u  /* a subshell's fork in the sandbox costs less than this */
#endif

/* Tests: the small-stdin and small-file routes taken whatever the round trip. */
#ifdef ASP_TEST_HOOKS
static _Atomic int force_inline;

void asp__route_force_inline(int on)
{
	force_inline = on;
}

static _Atomic int force_files;

void asp__route_force_files(int on)
{
	force_files = on;
}

static _Atomic int prior_shell;

void asp__route_prior_shell(int on)
{
	prior_shell = on;
}
#define ASP_TEST_FAR_RTT_MS 1000u /* the round trip small writes guess by under asp__route_prior_shell */
#else
#define ASP_TEST_FAR_RTT_MS 0u
#define force_inline 0
#define force_files 0
#define prior_shell 0
#endif

/*
 * Measured at 50 ms round trip (bench/delayproxy, OpenSSH 9.2): an atomic
 * 4 KiB write costs 2 round trips over SFTP (LSTAT+OPEN, then the rest)
 * and 1 plus the processes it starts in the sandbox as one shell command
 * (its data inside the request); stat 1 either way, so it stays on SFTP.
 * On loopback the shell's start in the sandbox (a few ms) makes SFTP far
 * faster. So with file_transport auto, atomic writes of at most
 * ASP_EXEC_FILES_WRITE_MAX bytes go over exec when the connection's round
 * trip (c->rtt_ms, the least sample) is ASP_EXEC_FILES_RTT_MS or more,
 * unless the login shell was found unable to run the wrapper (c->shell_bad):
 * SFTP needs no shell of ours, so fs.c sends the call there instead.
 */
static int shell_route_open(const asp_conn *c)
{
	return c->files_want == ASP_FILES_AUTO && !c->dead && !c->shell_bad;
}

int asp__route_files_faster(const asp_conn *c, size_t write_len)
{
	if (!shell_route_open(c) || write_len > ASP_EXEC_FILES_WRITE_MAX)
		return 0;
	if (force_files)
		return 1;
	return asp__route_pick(&c->cost_write, asp__route_prior(prior_shell ? ASP_TEST_FAR_RTT_MS : c->rtt_ms,
								&c->shell_start)) == ASP_COST_SHELL;
}

void asp__route_start_note(asp_start_cost *sc, uint64_t ms)
{
	uint32_t v = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
	int64_t d = (int64_t)v - (int64_t)sc->ewma_ms;

	sc->ewma_ms = sc->samples ? (uint32_t)((int64_t)sc->ewma_ms + d / (1 << ASP_ROUTE_EWMA_SHIFT)) : v;
	if (sc->samples < UINT32_MAX)
		sc->samples++;
}

/*
 * Measured under load (bench/run.py's "many" workload, 100 sandboxes on
 * the 2-core machine at once): every loopback round trip took 10 ms or
 * more, so every first write took the shell route and paid a login shell
 * and `mv` in a sandbox whose CPU was the bottleneck (about 40 ms of its
 * CPU per write, against SFTP's few syscalls); a shell's start measured
 * there was several round trips.
 */
int asp__route_prior(unsigned int rtt_ms, const asp_start_cost *sc)
{
	if (rtt_ms < ASP_EXEC_FILES_RTT_MS || (sc->samples && sc->ewma_ms >= rtt_ms))
		return ASP_COST_SFTP;
	return ASP_COST_SHELL;
}

/* The route the next call would take but for probes: the cheaper measured, or the only one measured. */
static int favourite(const asp_route_costs *rc, int otherwise)
{
	int s = rc->samples[ASP_COST_SFTP] != 0, x = rc->samples[ASP_COST_SHELL] != 0;

	if (s && x)
		return rc->ewma_us[ASP_COST_SHELL] < rc->ewma_us[ASP_COST_SFTP] ? ASP_COST_SHELL : ASP_COST_SFTP;
	return s ? ASP_COST_SFTP : x ? ASP_COST_SHELL : otherwise;
}

int asp__route_pick(const asp_route_costs *rc, int prior)
{
	int both = rc->samples[ASP_COST_SFTP] && rc->samples[ASP_COST_SHELL];
	int fav = favourite(rc, prior);

	if (!rc->samples[ASP_COST_SFTP] && !rc->samples[ASP_COST_SHELL])
		return prior;
	if (rc->since_other >= (both ? ASP_ROUTE_PROBE_EVERY : ASP_ROUTE_PROBE_FIRST))
		return !fav;
	return fav;
}

void asp__route_taken(asp_route_costs *rc, int route)
{
	if (route == favourite(rc, route)) {
		if (rc->since_other < UINT32_MAX)
			rc->since_other++;
	} else {
		rc->since_other = 0;
	}
}

void asp__route_note(asp_route_costs *rc, int route, uint64_t us)
{
	uint32_t v = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
	int probe = route != favourite(rc, route);
	int64_t d;

	asp__route_taken(rc, route);
	/* A probe's sample replaces the route's average: the old one is as old as the last probe. */
	if (!rc->samples[route] || probe) {
		rc->ewma_us[route] = v;
	} else {
		d = (int64_t)v - (int64_t)rc->ewma_us[route];
		rc->ewma_us[route] = (uint32_t)((int64_t)rc->ewma_us[route] + d / (1 << ASP_ROUTE_EWMA_SHIFT));
	}
	if (rc->samples[route] < UINT32_MAX)
		rc->samples[route]++;
}

/*
 * A read over SFTP costs one round trip once the connection can guess the
 * handle its OPEN will get (asp__sftp_guess: the READs go out behind the
 * OPEN), and starts no process in the sandbox; as a shell command it costs
 * one round trip plus the shell's processes (3 to 5 of them: 13 to 21 ms
 * on a slow virtual machine). So reads stay on SFTP, opening it first when
 * the connection has not yet, and take the exec route only on a long round
 * trip when SFTP cannot guess (two misses in a row, or a handle of ours
 * still open).
 */
int asp__route_reads_faster(const asp_conn *c)
{
	const unsigned char *g;

	if (!shell_route_open(c))
		return 0;
	if (force_files)
		return 1;
	return asp__route_pick(&c->cost_read, asp__route_prior(c->rtt_ms, &c->shell_start) == ASP_COST_SHELL &&
				c->file_transport == ASP_FILES_SFTP && !asp__sftp_guess(c, &g)
				? ASP_COST_SHELL : ASP_COST_SFTP) == ASP_COST_SHELL;
}

/*
 * OpenSSH opens a session channel's window only when its command starts,
 * so stdin sent on the channel waits for the exec request's answer: a
 * round trip more. Small stdin riding in the request instead costs a
 * subshell's fork in the sandbox, less than ASP_INLINE_STDIN_RTT_MS.
 */
int asp__route_stdin_inline(const asp_conn *c)
{
	return force_inline || c->rtt_ms >= ASP_INLINE_STDIN_RTT_MS;
}

int asp__route_shell_refused(const asp_conn *c, int rc)
{
	return rc == ASP_EPROTO && c->shell_bad && !c->dead;
}
