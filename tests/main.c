/*
 * main.c - one check runner for a generated list of suites
 * (ASP_SUITES names a header of ASP_SUITE(fn) lines, one per test file).
 * Set ASP_TEST_SUITE=name to run one suite, CK_RUN_CASE for one case.
 * ASP_TEST_ROUTES=far makes every connection take the routes of a link of
 * 10 ms or more (exec.h: small files and small stdin inside exec requests),
 * as a loaded machine's loopback connection can (`make check-routes`);
 * a test that sets a route itself does so in its own forked process.
 * A name that matches no suite, or a run in which no test ran, is a
 * failure, not an empty (passing) run.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "exec.h"

#define ASP_SUITE(fn) Suite *fn(void);
#include ASP_SUITES
#undef ASP_SUITE

int main(void)
{
	SRunner *sr = srunner_create(NULL);
	const char *only = getenv("ASP_TEST_SUITE");
	const char *routes = getenv("ASP_TEST_ROUTES");
	const char *slow = getenv("CK_TIMEOUT_MULTIPLIER");
	int failed, added = 0;

	/* Under ASan or valgrind the library's default timeouts stretch as check's do. */
	if (slow && atoi(slow) > 1)
		asp__test_slowdown((unsigned int)atoi(slow));

	if (routes && *routes && strcmp(routes, "auto")) {
		if (strcmp(routes, "far")) {
			fprintf(stderr, "ASP_TEST_ROUTES=%s: expected far or auto\n", routes);
			srunner_free(sr);
			return EXIT_FAILURE;
		}
		asp__route_force_files(1);
		asp__route_force_inline(1);
	}

#define ASP_SUITE(fn)                                                      \
	if (!only || !strcmp(only, #fn + sizeof("suite_") - 1)) {          \
		srunner_add_suite(sr, fn());                               \
		added++;                                                   \
	}
#include ASP_SUITES
#undef ASP_SUITE

	if (!added) {
		fprintf(stderr, "ASP_TEST_SUITE=%s: no such suite; this binary has:", only ? only : "");
#define ASP_SUITE(fn) fprintf(stderr, " %s", #fn + sizeof("suite_") - 1);
#include ASP_SUITES
#undef ASP_SUITE
		fputc('\n', stderr);
		srunner_free(sr);
		return EXIT_FAILURE;
	}
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	if (srunner_ntests_run(sr) == 0) {
		/* e.g. a CK_RUN_CASE or CK_RUN_SUITE that names nothing */
		fprintf(stderr, "no test ran (CK_RUN_CASE=%s, CK_RUN_SUITE=%s)\n",
			getenv("CK_RUN_CASE") ? getenv("CK_RUN_CASE") : "",
			getenv("CK_RUN_SUITE") ? getenv("CK_RUN_SUITE") : "");
		failed = 1;
	}
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
