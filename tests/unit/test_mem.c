/*
 * test_mem.c - buffers sized once (asp__buf_reserve) and the huge-page
 * advice large ones get (asp__mem_fill_hint), read back from the kernel's
 * own account of this process's mappings (/proc/self/smaps, "VmFlags: hg").
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/*
 * 1 when the mapping that holds addr carries the MADV_HUGEPAGE flag ("hg"
 * in its VmFlags line), 0 when it does not; fails the test when no mapping
 * holds addr.
 */
static int advised_huge(const void *addr)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int inside = 0, found = 0, hg = 0;
	uintptr_t a = (uintptr_t)addr;

	ck_assert_msg(f != NULL, "cannot open /proc/self/smaps");
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
			inside = a >= lo && a < hi;
			found |= inside;
			continue;
		}
		if (inside && !strncmp(line, "VmFlags:", 8)) {
			hg = strstr(line, " hg") != NULL;
			break;
		}
	}
	fclose(f);
	ck_assert_msg(found, "no mapping in /proc/self/smaps holds %p", addr);
	return hg;
}

static int kernel_has_thp(void)
{
	return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
}

START_TEST(test_reserve_sizes_once)
{
	asp_buf b = { 0 };
	unsigned char *d;

	ck_assert_int_eq(asp__buf_put(&b, "abc", 3), 0);
	ck_assert_int_eq(asp__buf_reserve(&b, 1000), 0);
	ck_assert_uint_eq(b.cap, 1000);
	ck_assert_uint_eq(b.len, 3);
	ck_assert_mem_eq(b.data, "abc", 4);
	/* Appends up to the reserve do not move the buffer. */
	d = b.data;
	for (int i = 0; i < 99; i++)
		ck_assert_int_eq(asp__buf_put(&b, "0123456789", 10), 0);
	ck_assert_ptr_eq(b.data, d);
	ck_assert_uint_eq(b.len, 993);
	/* A smaller reserve changes nothing. */
	ck_assert_int_eq(asp__buf_reserve(&b, 10), 0);
	ck_assert_uint_eq(b.cap, 1000);
	ck_assert_ptr_eq(b.data, d);
	asp__buf_free(&b);
}
END_TEST

START_TEST(test_large_reserve_asks_for_huge_pages)
{
	const size_t big = (size_t)16 << 20, huge = (size_t)2 << 20;
	unsigned char *plain;
	asp_buf b = { 0 };
	uintptr_t inner;

	if (!kernel_has_thp()) {
		fprintf(stderr, "SKIP mem: this kernel has no transparent huge pages "
			"(/sys/kernel/mm/transparent_hugepage)\n");
		ck_assert_msg(!getenv("ASP_TEST_NO_SKIP"), "skipped under ASP_TEST_NO_SKIP");
		return;
	}
	/* The control: a buffer of the same size that nobody advised. */
	plain = malloc(big);
	ck_assert_ptr_nonnull(plain);
	inner = ((uintptr_t)plain + huge - 1) & ~(uintptr_t)(huge - 1);
	ck_assert_msg(!advised_huge((void *)inner), "a plain malloc'd buffer is already advised: "
		      "this check could not tell");
	free(plain);

	ck_assert_int_eq(asp__buf_reserve(&b, big), 0);
	inner = ((uintptr_t)b.data + huge - 1) & ~(uintptr_t)(huge - 1);
	ck_assert_msg(advised_huge((void *)inner), "a %zu-byte reserve carries no huge-page advice", big);
	asp__buf_free(&b);
}
END_TEST

Suite *suite_mem(void)
{
	Suite *s = suite_create("mem");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_reserve_sizes_once);
	tcase_add_test(tc, test_large_reserve_asks_for_huge_pages);
	suite_add_tcase(s, tc);
	return s;
}
