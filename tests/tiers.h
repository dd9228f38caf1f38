/*
 * tiers.h - the two test tiers.
 *
 * `make check` is the functional run a newcomer waits for; `make check-deep`
 * adds what is slow by nature: tests that wait on real timers (keepalives,
 * deadlines, a server that says nothing), move hundreds of MiB, or try every
 * byte. Such a test goes into a test case made by slow_case(): the same
 * fixture as its suite's other cases, tagged "slow". `make check` runs the
 * integration binary with CK_EXCLUDE_TAGS=slow, `make check-deep` with
 * CK_INCLUDE_TAGS=slow, so every test runs in exactly one tier.
 */
#ifndef ASP_TESTS_TIERS_H
#define ASP_TESTS_TIERS_H

#include <check.h>

#define SLOW_TAG "slow"

enum { FIXTURE_CHECKED, FIXTURE_UNCHECKED };

/* A "slow" test case in s: kind says whether setup/teardown run around each test or once. */
static inline TCase *slow_case(Suite *s, const char *name, int kind, SFun setup, SFun teardown,
			       double timeout)
{
	TCase *tc = tcase_create(name);

	tcase_set_tags(tc, SLOW_TAG);
	if (kind == FIXTURE_CHECKED)
		tcase_add_checked_fixture(tc, setup, teardown);
	else
		tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, timeout);
	suite_add_tcase(s, tc);
	return tc;
}

#endif
