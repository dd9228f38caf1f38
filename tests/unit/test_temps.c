/*
 * test_temps.c - which directory entries are libasp's atomic-write temp
 * files (asp__temp_parse) and when one is stale (asp__temp_stale):
 * the rule the sweep of a directory removes files by. No I/O.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "temp.h"

static int parse(const char *name, uint32_t *lease)
{
	*lease = 12345;
	return asp__temp_parse(name, strlen(name), lease);
}

START_TEST(test_temp_names_ours)
{
	uint32_t lease;
	char longbase[200];

	ck_assert(parse(".torn.bin.asp-0123456789ab-30.tmp", &lease));
	ck_assert_uint_eq(lease, 30);
	ck_assert(parse(".a.asp-ffffffffffff-1.tmp", &lease));
	ck_assert_uint_eq(lease, 1);
	ck_assert(parse(".x.asp-000000000000-999999999.tmp", &lease));
	ck_assert_uint_eq(lease, 999999999);
	/* Earlier versions: no lease. */
	ck_assert(parse(".torn.bin.asp-0123456789ab.tmp", &lease));
	ck_assert_uint_eq(lease, 0);
	/* An all-digit random part is still the random part. */
	ck_assert(parse(".f.asp-012345678901.tmp", &lease));
	ck_assert_uint_eq(lease, 0);
	/* A name holding ".asp-" itself. */
	ck_assert(parse(".n.asp-x.asp-0123456789ab-5.tmp", &lease));
	ck_assert_uint_eq(lease, 5);
	/* The longest base temp_name writes: 100 bytes. */
	memset(longbase, 'b', sizeof(longbase));
	longbase[0] = '.';
	strcpy(longbase + 101, ".asp-0123456789ab-7.tmp");
	ck_assert(parse(longbase, &lease));
}
END_TEST

START_TEST(test_temp_names_not_ours)
{
	static const char *const names[] = {
		"torn.bin.asp-0123456789ab-30.tmp",   /* not hidden */
		"..asp-0123456789ab-30.tmp",          /* empty base */
		".asp-0123456789ab-30.tmp",           /* no base at all */
		".t.asp-0123456789AB-30.tmp",         /* upper-case hex */
		".t.asp-0123456789a-30.tmp",          /* 11 hex digits */
		".t.asp-0123456789abc-30.tmp",        /* 13 hex digits */
		".t.asp-0123456789ab-030.tmp",        /* leading zero */
		".t.asp-0123456789ab-0.tmp",          /* zero lease */
		".t.asp-0123456789ab-.tmp",           /* empty lease */
		".t.asp-0123456789ab-1234567890.tmp", /* 10-digit lease */
		".t.asp-0123456789ab-30.tmp.bak",     /* another suffix */
		".t.asp-0123456789ab-30.TMP",
		".t.asp-0123456789ab_30.tmp",
		".t.asp-0123456789ab--30.tmp",
		".t.asp-0123456789ab-3x.tmp",
		".t.asp0123456789ab-30.tmp",          /* no dash after asp */
		".t.ASP-0123456789ab-30.tmp",
		".t.asp-backup.tmp",
		".tmp",
		"",
	};
	uint32_t lease;
	char longbase[200];
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		ck_assert_msg(!parse(names[i], &lease), "\"%s\" taken for a temp file", names[i]);
	/* A base longer than temp_name ever writes (101 bytes). */
	memset(longbase, 'b', sizeof(longbase));
	longbase[0] = '.';
	strcpy(longbase + 102, ".asp-0123456789ab-7.tmp");
	ck_assert(!parse(longbase, &lease));
	/* NUL or '/' inside. */
	ck_assert(!asp__temp_parse(".t\0.asp-0123456789ab-1.tmp", 26, &lease));
	ck_assert(!asp__temp_parse(".t/.asp-0123456789ab-1.tmp", 26, &lease));
}
END_TEST

START_TEST(test_temp_staleness)
{
	/* Lease L: stale once older than 2 L + 3 s. */
	ck_assert(!asp__temp_stale(1000, 30, 1000));
	ck_assert(!asp__temp_stale(1000, 30, 1063));
	ck_assert(asp__temp_stale(1000, 30, 1064));
	ck_assert(!asp__temp_stale(1000, 1, 1005));
	ck_assert(asp__temp_stale(1000, 1, 1006));
	/* A future mtime is never stale. */
	ck_assert(!asp__temp_stale(5000, 1, 1000));
	/* No lease (earlier versions): an hour. */
	ck_assert(!asp__temp_stale(1000, 0, 4600));
	ck_assert(asp__temp_stale(1000, 0, 4601));
	/* The largest lease does not overflow. */
	ck_assert(!asp__temp_stale(0, 999999999u, 1999999999ull));
	ck_assert(asp__temp_stale(0, 999999999u, 2000000002ull));
}
END_TEST

Suite *suite_temps(void)
{
	Suite *s = suite_create("temps");
	TCase *tc = tcase_create("temps");

	tcase_add_test(tc, test_temp_names_ours);
	tcase_add_test(tc, test_temp_names_not_ours);
	tcase_add_test(tc, test_temp_staleness);
	suite_add_tcase(s, tc);
	return s;
}
