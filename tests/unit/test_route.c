/*
 * test_route.c - the route policy over observed costs (asp__route_pick,
 * asp__route_note, asp__route_taken): which of SFTP and a shell command
 * a small file call takes, from what each has cost on the connection.
 * Pure functions: no connection, no clock.
 */
#include <check.h>
#include <string.h>

#include "common.h"
#include "route.h"

/* Take n calls as the policy picks them, route r costing cost[r] µs; returns calls by shell. */
static unsigned int run(asp_route_costs *rc, int prior, unsigned int n, const uint64_t cost[2])
{
	unsigned int shell = 0;

	for (unsigned int i = 0; i < n; i++) {
		int r = asp__route_pick(rc, prior);
		shell += r == ASP_COST_SHELL;
		asp__route_note(rc, r, cost[r]);
	}
	return shell;
}

START_TEST(test_route_prior_until_measured)
{
	asp_route_costs rc;

	memset(&rc, 0, sizeof(rc));
	ck_assert_int_eq(asp__route_pick(&rc, ASP_COST_SHELL), ASP_COST_SHELL);
	ck_assert_int_eq(asp__route_pick(&rc, ASP_COST_SFTP), ASP_COST_SFTP);
	/* A one-off (SFTP started by the call) moves nothing but the count. */
	asp__route_taken(&rc, ASP_COST_SFTP);
	ck_assert_int_eq(asp__route_pick(&rc, ASP_COST_SHELL), ASP_COST_SHELL);
	ck_assert_uint_eq(rc.samples[ASP_COST_SFTP], 0);
}
END_TEST

/* One route measured: kept for ASP_ROUTE_PROBE_FIRST calls, then the other is tried once. */
START_TEST(test_route_unmeasured_other_tried)
{
	asp_route_costs rc;
	unsigned int i;

	memset(&rc, 0, sizeof(rc));
	for (i = 0; i < ASP_ROUTE_PROBE_FIRST; i++) {
		ck_assert_int_eq(asp__route_pick(&rc, ASP_COST_SHELL), ASP_COST_SHELL);
		asp__route_note(&rc, ASP_COST_SHELL, 5000);
	}
	ck_assert_int_eq(asp__route_pick(&rc, ASP_COST_SHELL), ASP_COST_SFTP);
	asp__route_note(&rc, ASP_COST_SFTP, 1000);
	/* SFTP measured cheaper: taken from now on. */
	ck_assert_int_eq(asp__route_pick(&rc, ASP_COST_SHELL), ASP_COST_SFTP);
}
END_TEST

/* Dear process starts (shell 20 ms, SFTP 2 ms): nearly every call by SFTP, whatever the prior. */
START_TEST(test_route_dear_processes_go_sftp)
{
	const uint64_t cost[2] = { [ASP_COST_SFTP] = 2000, [ASP_COST_SHELL] = 20000 };
	asp_route_costs rc;
	unsigned int shell;

	memset(&rc, 0, sizeof(rc));
	shell = run(&rc, ASP_COST_SHELL, 1000, cost);
	/* The first calls (prior), then one probe every ASP_ROUTE_PROBE_EVERY + 1 calls. */
	ck_assert_uint_le(shell, ASP_ROUTE_PROBE_FIRST + 1000 / ASP_ROUTE_PROBE_EVERY + 1);
	ck_assert_uint_ge(shell, 1000 / (ASP_ROUTE_PROBE_EVERY + 1) - 1);
}
END_TEST

/* A far link (SFTP 2 RTT = 100 ms, shell 1 RTT + starts = 55 ms): by shell, whatever the prior. */
START_TEST(test_route_far_link_goes_shell)
{
	const uint64_t cost[2] = { [ASP_COST_SFTP] = 100000, [ASP_COST_SHELL] = 55000 };
	asp_route_costs rc;
	unsigned int shell;

	memset(&rc, 0, sizeof(rc));
	shell = run(&rc, ASP_COST_SFTP, 1000, cost);
	ck_assert_uint_ge(shell, 1000 - ASP_ROUTE_PROBE_FIRST - 1000 / ASP_ROUTE_PROBE_EVERY - 1);
}
END_TEST

/* A cost that changes is noticed by the probes: the route follows within a few probes. */
START_TEST(test_route_follows_a_change)
{
	const uint64_t near[2] = { [ASP_COST_SFTP] = 2000, [ASP_COST_SHELL] = 6000 };
	const uint64_t far[2] = { [ASP_COST_SFTP] = 100000, [ASP_COST_SHELL] = 55000 };
	asp_route_costs rc;

	memset(&rc, 0, sizeof(rc));
	run(&rc, ASP_COST_SFTP, 200, near);
	ck_assert_int_eq(asp__route_pick(&rc, ASP_COST_SFTP), ASP_COST_SFTP);
	/* The link turns far: SFTP's own samples rise at once, and the shell's probe is cheaper. */
	run(&rc, ASP_COST_SFTP, 8 * (ASP_ROUTE_PROBE_EVERY + 1), far);
	ck_assert_int_eq(asp__route_pick(&rc, ASP_COST_SFTP), ASP_COST_SHELL);
	/* And back. */
	run(&rc, ASP_COST_SFTP, 8 * (ASP_ROUTE_PROBE_EVERY + 1), near);
	ck_assert_int_eq(asp__route_pick(&rc, ASP_COST_SFTP), ASP_COST_SFTP);
}
END_TEST

START_TEST(test_route_ewma)
{
	asp_route_costs rc;

	memset(&rc, 0, sizeof(rc));
	asp__route_note(&rc, ASP_COST_SFTP, 4000);
	ck_assert_uint_eq(rc.ewma_us[ASP_COST_SFTP], 4000);
	asp__route_note(&rc, ASP_COST_SFTP, 8000); /* a quarter of the way */
	ck_assert_uint_eq(rc.ewma_us[ASP_COST_SFTP], 5000);
	asp__route_note(&rc, ASP_COST_SFTP, 1000);
	ck_assert_uint_eq(rc.ewma_us[ASP_COST_SFTP], 4000);
	/* No overflow on a huge sample. */
	asp__route_note(&rc, ASP_COST_SHELL, UINT64_MAX);
	ck_assert_uint_eq(rc.ewma_us[ASP_COST_SHELL], UINT32_MAX);
	asp__route_note(&rc, ASP_COST_SHELL, UINT64_MAX);
	ck_assert_uint_eq(rc.ewma_us[ASP_COST_SHELL], UINT32_MAX);
	ck_assert_int_eq(asp__route_pick(&rc, ASP_COST_SHELL), ASP_COST_SFTP);
}
END_TEST

/*
 * The guess before any file call is measured: the shell on a long round
 * trip, unless a shell's start measured a round trip or more (a busy
 * sandbox on loopback looks like a far link).
 */
START_TEST(test_route_prior_weighs_shell_start)
{
	asp_start_cost sc;

	memset(&sc, 0, sizeof(sc));
	ck_assert_int_eq(asp__route_prior(2, &sc), ASP_COST_SFTP);   /* near, nothing measured */
	ck_assert_int_eq(asp__route_prior(50, &sc), ASP_COST_SHELL); /* far, nothing measured */
	asp__route_start_note(&sc, 6);                               /* a quick shell: far stays shell */
	ck_assert_uint_eq(sc.ewma_ms, 6);
	ck_assert_int_eq(asp__route_prior(50, &sc), ASP_COST_SHELL);
	ck_assert_int_eq(asp__route_prior(5, &sc), ASP_COST_SFTP);
	memset(&sc, 0, sizeof(sc));
	asp__route_start_note(&sc, 80);                              /* a busy sandbox */
	ck_assert_int_eq(asp__route_prior(20, &sc), ASP_COST_SFTP);
	ck_assert_int_eq(asp__route_prior(80, &sc), ASP_COST_SFTP);  /* a start of a round trip saves nothing */
	ck_assert_int_eq(asp__route_prior(100, &sc), ASP_COST_SHELL);
	/* The average follows the sandbox: a quarter of the way per sample. */
	asp__route_start_note(&sc, 0);
	ck_assert_uint_eq(sc.ewma_ms, 60);
	asp__route_start_note(&sc, UINT64_MAX);
	ck_assert_uint_ge(sc.ewma_ms, 60);
	ck_assert_uint_eq(sc.samples, 3);
}
END_TEST

Suite *suite_route(void)
{
	Suite *s = suite_create("route");
	TCase *tc = tcase_create("route");

	tcase_add_test(tc, test_route_prior_until_measured);
	tcase_add_test(tc, test_route_unmeasured_other_tried);
	tcase_add_test(tc, test_route_dear_processes_go_sftp);
	tcase_add_test(tc, test_route_far_link_goes_shell);
	tcase_add_test(tc, test_route_follows_a_change);
	tcase_add_test(tc, test_route_ewma);
	tcase_add_test(tc, test_route_prior_weighs_shell_start);
	suite_add_tcase(s, tc);
	return s;
}
