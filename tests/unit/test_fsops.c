/*
 * test_fsops.c - both file transports fill every slot of the ops table
 * (fsops.h): the slots come from one list (ASP_FSOPS_SLOTS), so a call added
 * to the table and left out of a backend fails here, not on the first
 * connection that takes that backend.
 */
#include <check.h>
#include <string.h>

#include "fsops.h"

static const asp_fsops *const backends[] = { &asp__fs_sftp_ops, &asp__shfs_ops };

/* The NULL slots of t, by name, comma-separated into out; how many. */
static int null_slots(const asp_fsops *t, char *out, size_t size)
{
	int n = 0;

	out[0] = '\0';
#define CHECK_SLOT(name, params)                                                        \
	if (!t->name) {                                                                  \
		n++;                                                                     \
		strncat(out, n > 1 ? ", " #name : #name, size - strlen(out) - 1);       \
	}
	ASP_FSOPS_SLOTS(CHECK_SLOT)
#undef CHECK_SLOT
	return n;
}

START_TEST(test_fsops_every_slot_filled)
{
	char missing[512];
	size_t i;

	for (i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		ck_assert_ptr_nonnull(backends[i]->name);
		ck_assert_msg(null_slots(backends[i], missing, sizeof(missing)) == 0,
			      "the %s backend leaves slots NULL: %s", backends[i]->name, missing);
	}
}
END_TEST

/* The check itself can fail: a table with a slot left out is found, by name. */
START_TEST(test_fsops_null_slot_found)
{
	asp_fsops t = asp__shfs_ops;
	char missing[512];

	t.lstat_many = NULL;
	ck_assert_int_eq(null_slots(&t, missing, sizeof(missing)), 1);
	ck_assert_str_eq(missing, "lstat_many");
}
END_TEST

/* The two backends are different tables, with different names. */
START_TEST(test_fsops_backends_differ)
{
	ck_assert(asp__fs_sftp_ops.read != asp__shfs_ops.read);
	ck_assert_str_ne(asp__fs_sftp_ops.name, asp__shfs_ops.name);
}
END_TEST

Suite *suite_fsops(void)
{
	Suite *s = suite_create("fsops");
	TCase *tc = tcase_create("fsops");

	tcase_add_test(tc, test_fsops_every_slot_filled);
	tcase_add_test(tc, test_fsops_null_slot_found);
	tcase_add_test(tc, test_fsops_backends_differ);
	suite_add_tcase(s, tc);
	return s;
}
