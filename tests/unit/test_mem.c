/*
 * test_mem.c - buffers sized once (asp__buf_reserve) and the huge-page
 * advice large ones get (asp__mem_fill_hint), read back from the kernel's
 * own account of this process's mappings (/proc/self/smaps, "VmFlags: hg"),
 * and the zero pages asp__mem_release_zeros gives back (mincore).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

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

/* 1 when the page that holds addr is in memory (mincore). */
static int resident(const void *addr)
{
	const uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
	unsigned char v = 0;

	ck_assert_int_eq(mincore((void *)((uintptr_t)addr & ~(ps - 1)), ps, &v), 0);
	return v & 1;
}

/*
 * A block of 12 pages starting mid-page, all written (in memory), zeros
 * but a byte in page 3 and the first and last bytes of the block: the
 * zero pages wholly inside it leave memory, the others stay, and every
 * byte reads as before. The control: the same block unreleased stays.
 */
START_TEST(test_release_zeros_keeps_every_byte)
{
	const size_t ps = (size_t)sysconf(_SC_PAGESIZE), n = 12 * ps;
	unsigned char *map = mmap(NULL, 14 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char *b;

	ck_assert_ptr_ne(map, MAP_FAILED);
	b = map + ps / 2;
	memset(map, 0, 14 * ps);
	b[0] = 1;
	b[3 * ps] = 2;
	b[n - 1] = 3;
	for (size_t i = 0; i < 14; i++)
		ck_assert_msg(resident(map + i * ps), "page %zu of the control is not in memory", i);
	asp__mem_release_zeros(b, n);
	/* Pages of the mapping: 0 holds b[0], 3 b[3 * ps], 12 b[n - 1]; 1-2 and 4-11 are zeros. */
	for (size_t i = 0; i < 14; i++) {
		int keep = i == 0 || i == 3 || i >= 12;
		ck_assert_msg(resident(map + i * ps) == keep, "page %zu: %s", i,
			      keep ? "released, but it holds data or lies partly outside the block"
				   : "still in memory, though all zeros inside the block");
	}
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(b[i] == (i == 0 ? 1 : i == 3 * ps ? 2 : i == n - 1 ? 3 : 0),
			      "byte %zu reads %d", i, b[i]);
	munmap(map, 14 * ps);
}
END_TEST

Suite *suite_mem(void)
{
	Suite *s = suite_create("mem");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_reserve_sizes_once);
	tcase_add_test(tc, test_large_reserve_asks_for_huge_pages);
	tcase_add_test(tc, test_release_zeros_keeps_every_byte);
	suite_add_tcase(s, tc);
	return s;
}
