/*
 * main.c - one check runner for a generated list of suites
 * (ASP_SUITES names a header of ASP_SUITE(fn) lines, one per test file).
 * Set ASP_TEST_SUITE=name to run one suite, CK_RUN_CASE for one case.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#define ASP_SUITE(fn) Suite *fn(void);
#include ASP_SUITES
#undef ASP_SUITE

int main(void)
{
	SRunner *sr = srunner_create(NULL);
	const char *only = getenv("ASP_TEST_SUITE");
	int failed;

#define ASP_SUITE(fn)                                                      \
	if (!only || !strcmp(only, #fn + sizeof("suite_") - 1))            \
		srunner_add_suite(sr, fn());
#include ASP_SUITES
#undef ASP_SUITE

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
