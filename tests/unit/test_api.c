/*
 * test_api.c - promises of the public API that need no sandbox: every
 * options struct zero-initialised with only its version set is byte for
 * byte its ASP_*_INIT macro and what its *_init() function gives, so no
 * default can hide in a non-zero INIT value again (C99 code that writes
 * `{ .version = V, .timeout_ms = 5000 }` gets the defaults); the init
 * functions refuse NULL and unknown versions; the enums the bindings pass
 * as int are int-sized.
 */
#include <check.h>
#include <stddef.h>
#include <string.h>

#include "asp.h"

/* Offset of the first byte where a and b differ, or -1. */
static long first_diff(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;
	size_t i;

	for (i = 0; i < n; i++)
		if (x[i] != y[i])
			return (long)i;
	return -1;
}

/*
 * zero: memset to 0, then only .version. by_macro: a static object, whose
 * padding is zero. by_fn: memset to 0, then the init function.
 */
#define CHECK_ZERO_IS_DEFAULT(T, INIT, VERSION, init_fn)                                     \
	do {                                                                                 \
		static const T by_macro = INIT;                                              \
		T zero, by_fn;                                                               \
		long at;                                                                     \
		memset(&zero, 0, sizeof(zero));                                              \
		zero.version = VERSION;                                                      \
		memset(&by_fn, 0, sizeof(by_fn));                                            \
		ck_assert_int_eq(init_fn(&by_fn, VERSION), ASP_OK);                          \
		at = first_diff(&zero, &by_macro, sizeof(T));                                \
		ck_assert_msg(at < 0, #T ": zeroed with only .version differs from " #INIT   \
			      " at byte %ld of %zu: " #INIT " sets a non-zero default",      \
			      at, sizeof(T));                                                \
		at = first_diff(&zero, &by_fn, sizeof(T));                                   \
		ck_assert_msg(at < 0, #T ": zeroed with only .version differs from " #init_fn \
			      "() at byte %ld of %zu", at, sizeof(T));                       \
		ck_assert_int_eq(init_fn(NULL, VERSION), ASP_EINVAL);                        \
		ck_assert_int_eq(init_fn(&by_fn, 0), ASP_EINVAL);                            \
		ck_assert_int_eq(init_fn(&by_fn, VERSION + 1), ASP_EINVAL);                  \
	} while (0)

START_TEST(test_zero_is_default)
{
	CHECK_ZERO_IS_DEFAULT(asp_open_options, ASP_OPEN_OPTIONS_INIT, ASP_OPEN_OPTIONS_VERSION,
			      asp_open_options_init);
	CHECK_ZERO_IS_DEFAULT(asp_call_options, ASP_CALL_OPTIONS_INIT, ASP_CALL_OPTIONS_VERSION,
			      asp_call_options_init);
	CHECK_ZERO_IS_DEFAULT(asp_write_options, ASP_WRITE_OPTIONS_INIT, ASP_WRITE_OPTIONS_VERSION,
			      asp_write_options_init);
	CHECK_ZERO_IS_DEFAULT(asp_exec_options, ASP_EXEC_OPTIONS_INIT, ASP_EXEC_OPTIONS_VERSION,
			      asp_exec_options_init);
	CHECK_ZERO_IS_DEFAULT(asp_sandbox_info, ASP_SANDBOX_INFO_INIT, ASP_SANDBOX_INFO_VERSION,
			      asp_sandbox_info_init);
}
END_TEST

/* The bindings pass these as C int (ctypes c_int, koffi 'int'). */
START_TEST(test_enums_are_int_sized)
{
	ck_assert_uint_eq(sizeof(asp_stream), sizeof(int));
	ck_assert_uint_eq(sizeof(asp_file_type), sizeof(int));
	ck_assert_uint_eq(sizeof(asp_trust), sizeof(int));
	ck_assert_uint_eq(sizeof(asp_auth), sizeof(int));
	ck_assert_uint_eq(sizeof(asp_error_code), sizeof(int));
	ck_assert_int_eq(ASP_STDOUT, 1);
	ck_assert_int_eq(ASP_STDERR, 2);
	ck_assert_int_eq(ASP_TYPE_FILE, 1);
	ck_assert_int_eq(ASP_TYPE_DIR, 2);
	ck_assert_int_eq(ASP_TYPE_SYMLINK, 3);
	ck_assert_int_eq(ASP_TYPE_OTHER, 4);
}
END_TEST

Suite *suite_api(void)
{
	Suite *s = suite_create("api");
	TCase *tc = tcase_create("api");

	tcase_add_test(tc, test_zero_is_default);
	tcase_add_test(tc, test_enums_are_int_sized);
	suite_add_tcase(s, tc);
	return s;
}
