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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
	CHECK_ZERO_IS_DEFAULT(asp_proc_options, ASP_PROC_OPTIONS_INIT, ASP_PROC_OPTIONS_VERSION,
			      asp_proc_options_init);
}
END_TEST

/*
 * A caller built against version 1 of asp_open_options (before config_text
 * and max_list_bytes) passes a smaller struct, as that header declared it:
 * the library reads and writes only version 1's bytes of it, and the
 * fields it does not have keep their defaults. On the heap at exactly that
 * size plus a guard, so ASan and the guard see any byte beyond.
 */
typedef struct open_options_v1 {
	unsigned int version;
	const char *config_path, *start_dir, *known_hosts;
	unsigned int max_connections, connect_timeout_ms, io_timeout_ms, keepalive_s, idle_close_s;
	unsigned int flags, op_timeout_ms;
	uint64_t max_read_bytes;
	size_t max_output;
	unsigned int max_list_entries, file_transport;
} open_options_v1;
#define OPEN_V1_SIZE sizeof(open_options_v1)

START_TEST(test_older_version_accepted)
{
	open_options_v1 *v1 = malloc(OPEN_V1_SIZE + 8);
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	unsigned char *guard;
	char path[] = "/tmp/asp-api-v1.XXXXXX";
	int fd;

	ck_assert_ptr_nonnull(v1);
	guard = (unsigned char *)v1 + OPEN_V1_SIZE;
	memset(guard, 0xa5, 8);
	ck_assert_int_eq(asp_open_options_init((asp_open_options *)v1, 1), ASP_OK);
	ck_assert_uint_eq(v1->version, 1);
	for (int i = 0; i < 8; i++)
		ck_assert_msg(guard[i] == 0xa5, "asp_open_options_init(1) wrote past version 1's size");

	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert(dprintf(fd, "{\"version\":\"0\",\"transport\":\"ssh\",\"connection\":{\"host\":"
			  "\"127.0.0.1\",\"port\":1,\"user\":\"v1\"},\"workspace\":\"/w\"}") > 0);
	close(fd);
	v1->config_path = path;
	v1->flags = ASP_OPEN_LAZY;
	ck_assert_msg(asp_open(&sb, (const asp_open_options *)v1, &e) == ASP_OK, "a version 1 caller: %s", e.message);
	ck_assert_str_eq(asp_sandbox_workspace(sb), "/w");
	asp_close(sb);
	unlink(path);

	ck_assert_uint_eq(OPEN_V1_SIZE, offsetof(asp_open_options, config_text));
	/* Newer than this library, or 0: refused, naming what is supported. */
	v1->version = ASP_OPEN_OPTIONS_VERSION + 1;
	ck_assert_int_eq(asp_open(&sb, (const asp_open_options *)v1, &e), ASP_EINVAL);
	ck_assert_msg(strstr(e.message, "asp_open_options.version") && strstr(e.message, "1 to"),
		      "%s", e.message);
	v1->version = 0;
	ck_assert_int_eq(asp_open(&sb, (const asp_open_options *)v1, &e), ASP_EINVAL);
	free(v1);
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
	tcase_add_test(tc, test_older_version_accepted);
	suite_add_tcase(s, tc);
	return s;
}
