/*
 * helpers.h - assertions and sandbox helpers shared by the integration
 * suites (tests/helpers.c; linked into build/tests/test-integration).
 * Every helper fails the calling test through check, naming the path,
 * command or call involved and the library's message.
 */
#ifndef ASP_TESTS_HELPERS_H
#define ASP_TESTS_HELPERS_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "asp.h"
#include "fixture/fixture.h"

/* rc is ASP_OK; otherwise fail naming the line, `what` (a string), the code and err.message. */
#define ASSERT_OK(rc, err, what)                                                            \
	ck_assert_msg((rc) == ASP_OK, "line %d: %s: expected ASP_OK, got %s: %s", __LINE__,   \
		      (what), asp_error_name(rc), (err).message)

/* rc and err.code are `want`, and the message mentions `needle` (when not NULL). */
void check_err(int line, int rc, const asp_error *e, int want, const char *needle);
#define ASSERT_ERR(rc, e, want, needle) check_err(__LINE__, (rc), &(e), (want), (needle))

/*
 * ASP_TEST_FILE_TRANSPORT=exec|sftp|auto (unset: auto) forces the file
 * transport of every sandbox the suites open: sb_open and
 * suite_sshd_start apply it, and so must a suite that fills its own
 * asp_open_options (test_open_options).
 */
unsigned int test_file_transport(void);
void test_open_options(asp_open_options *o);
/*
 * In exec mode, a test that is SFTP by nature (crafted SFTP replies, the
 * SFTP sweep) skips itself: prints "SKIP file_transport=exec: TEST: WHY"
 * and returns 1 (fails instead under ASP_TEST_NO_SKIP). 0 otherwise.
 */
int skip_unless_sftp(const char *test, const char *why);
/*
 * Under ThreadSanitizer (the TSAN=1 build), a test whose subject the
 * sanitizer changes (its own threads counted, its shadow memory resident,
 * threads started after a fork from a threaded process) skips itself:
 * prints "SKIP tsan: TEST: WHY" and returns 1 (tests/tiers.sh counts those
 * lines; ASP_TEST_NO_SKIP fails instead). 0 in every other build.
 */
int skip_under_tsan(const char *test, const char *why);

/* asp_open with only config_path set (and the transport above); fails the test unless ASP_OK. */
asp_sandbox *sb_open(const char *config);

/* asp_open with these options, as they are; fails the test unless ASP_OK. */
asp_sandbox *sb_open_opts(const asp_open_options *o);

/* asp_open of config with this file_transport (ASP_FILES_*), nothing else set. */
asp_sandbox *sb_open_transport(const char *config, unsigned int transport);

/*
 * A suite's unchecked fixture: start the sshd fixture into *fx and open its
 * config once, so that a broken fixture fails early and once.
 */
void suite_sshd_start(fx_sshd *fx);

/* SHA-256 of data as 64 lowercase hex digits and a NUL. */
void sha256_hex(const void *data, size_t len, char out[65]);

/* ------------------------------------------------------ local processes */

/* A local process (the fixture's sandbox is this machine) exists and is not a zombie. */
int pid_alive(pid_t pid);
/* Waits up to ms for pid to be gone (or a zombie); 1 when it is. */
int wait_gone(pid_t pid, long ms);
/* The parent and process group of pid, from /proc/PID/stat; 0 each when it is gone. */
void proc_ids(pid_t pid, pid_t *ppid, pid_t *pgrp);

/* A process (not this one) whose command line holds needle; 0 when none. */
pid_t find_process(const char *needle);
/* The same, holding both needle and also. */
pid_t find_process_with(const char *needle, const char *also);
/* The same, among the descendants of ancestor only (a suite's own sshd: other suites run beside
 * it); ancestor 0: any process. */
pid_t find_process_under(const char *needle, pid_t ancestor);
/* Waits up to ms for a process "sleep ARG" under ancestor (a test's unique sleep); 0 when none came. */
pid_t wait_sleep_under(const char *arg, pid_t ancestor, long ms);

/* This process's memory, for the caps' tests: a field of /proc/self/status in kB
 * ("VmHWM", "VmRSS", "VmSize"), or -1; reset_peak sets VmHWM to the current RSS. */
long status_kb(const char *field);

/* 1 when s holds no raw C0 byte, DEL, UTF-8 C1 or bidi/line separator: escaped message text. */
int text_is_clean(const char *s);
int reset_peak(void);
/* Bytes malloc has handed out and not got back (ASan's count under ASan; under valgrind, whose
 * allocator glibc does not see, it does not move). */
size_t test_heap_in_use(void);

/*
 * A machine-wide resource that parallel test jobs share (make check-deep runs
 * a suite plain, on far routes, under ASan and valgrind at once): an exclusive
 * flock on /run/lock/asp-test-NAME.lock, held until the returned descriptor is
 * closed or the test's process ends, however it ends.
 */
int test_lock(const char *name);

/* ------------------------------------------------------ local files and bytes */

/* workspace/rel in one of 8 rotating static buffers (tests are single-threaded). */
const char *ws_path(const char *workspace, const char *rel);
int local_exists(const char *path);
struct stat local_lstat(const char *path);
/* Exact byte comparison that reports where the first difference is. */
void assert_bytes(const char *what, const void *got, size_t glen, const void *want, size_t wlen);
/* Deterministic pseudo-random bytes (xorshift64), different for every seed; malloc'd. */
unsigned char *random_bytes(size_t len, uint64_t seed);
/* `reps` copies of the bytes 0x00..0xff; malloc'd. */
unsigned char *all_bytes(size_t reps, size_t *len);
void assert_local_content(const char *local, const void *want, size_t wlen);

/* ------------------------------------------------------ sandbox operations that must succeed */

void put_opts(asp_sandbox *sb, const char *path, const void *data, size_t len,
	      const asp_write_options *o);
void put(asp_sandbox *sb, const char *path, const char *text);
/* Read the whole file; checks the documented NUL terminator too. Free with asp_free. */
unsigned char *get(asp_sandbox *sb, const char *path, size_t *len);
void assert_content(asp_sandbox *sb, const char *path, const void *want, size_t wlen);
asp_stat_info stat_ok(asp_sandbox *sb, const char *path);
void mkdir_ok(asp_sandbox *sb, const char *path, unsigned int mode, int parents);
void remove_ok(asp_sandbox *sb, const char *path, int recursive);
void rename_ok(asp_sandbox *sb, const char *from, const char *to);
/* asp_stat says ENOENT, naming the path (bytes < 0x20, >= 0x7f and '\\' shown as \\xNN). */
void assert_missing(asp_sandbox *sb, const char *path);
/* The index of `name` in the listing, or -1. */
long list_find(const asp_list *l, const char *name);
asp_list *list_ok(asp_sandbox *sb, const char *path);
/* No atomic-write temporary file (".asp-") in `dir` (relative to workspace), remotely and locally. */
void assert_no_temp_files(asp_sandbox *sb, const char *workspace, const char *dir);
/* No file named prefix plus one digit appeared anywhere in the workspace (injection probes). */
void assert_not_injected(const char *workspace, const char *prefix);

/* ------------------------------------------------------ exec */

asp_exec_result *run_opts(asp_sandbox *sb, const char *cmd, const asp_exec_options *o);
asp_exec_result *run(asp_sandbox *sb, const char *cmd);
/* The stream is exactly want, its total is wlen, and it is not truncated. */
void assert_stream(const asp_exec_result *r, asp_stream stream, const void *want, size_t wlen);
void assert_exited(const asp_exec_result *r, int code);
/* Run with options; expect exit 0, exactly `want` on stdout and nothing on stderr. */
void expect_stdout_opts(asp_sandbox *sb, const char *cmd, const asp_exec_options *o,
			const void *want, size_t wlen);
void expect_stdout(asp_sandbox *sb, const char *cmd, const char *want);

/* ------------------------------------------------------ the trace */

/*
 * A collector for asp_open_options.log_fn (thread-safe: the library calls it
 * from its pool thread too): each line as "LEVEL: text\n" into one buffer.
 * trace_on empties the buffer and sets o->log_fn; trace_text is what came
 * so far ("" for nothing), valid until the next trace_on.
 */
void trace_on(asp_open_options *o);
const char *trace_text(void);

#endif
