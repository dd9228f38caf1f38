/*
 * test_listbounds.c - a listing's bytes are bounded, not only its entries.
 * Against a real sshd whose SFTP subsystem is hostile
 * (tests/fixture/hostile_sftp.py: every directory holds TOTAL names of
 * NAME_BYTES bytes, PER_REPLY in each READDIR answer):
 *  - names of 1,000,000 bytes, one per answer, 300 of them: ASP_ELIMIT at
 *    the first (no name over 4096 bytes), the harness's peak RSS within
 *    SLACK_KB of where it started;
 *  - 25,000 names of 4000 bytes (100 MB): ASP_ELIMIT at the default
 *    max_list_bytes (32 MiB), the peak within that plus SLACK_KB;
 *  - max_list_bytes raises and lowers the cap, on SFTP and (against the
 *    plain fixture, with real files) on shell commands.
 * The peak is measured in a forked child with its own sandbox, its VmHWM
 * reset by /proc/self/clear_refs once connected, as test_limits.c does.
 * SLACK_KB: the SFTP channel window libssh2 may hold unread (16 MiB), the
 * reply buffer (one packet of at most 1 MiB, doubled by growth) and heap
 * slack. Without the caps the first two grow the harness by 300 MB and
 * 100 MB.
 */
#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "asp.h"
#include "fixture/fixture.h"
#include "helpers.h"

#pragma GCC diagnostic ignored "-Wformat-truncation"

#define MiB (1024ull * 1024ull)
#define SLACK_KB (24L * 1024L)
#define SERVER "tests/fixture/hostile_sftp.py"

static fx_sshd fx;
static char scripts[64]; /* a 0755 directory the login user can read the server from */

static void lb_teardown(void)
{
	fx_sshd_stop(&fx);
	if (scripts[0])
		fx_run("rm -rf '%s'", scripts);
	scripts[0] = '\0';
}

/* Start sshd with the hostile SFTP subsystem listing `total` names of `bytes` bytes. */
static void start_hostile(unsigned int bytes, unsigned int per_reply, unsigned int total)
{
	char src[PATH_MAX], extra[512];

	memset(&fx, 0, sizeof(fx));
	ck_assert_msg(realpath(SERVER, src), "%s not found (run from the source tree)", SERVER);
	strcpy(scripts, "/tmp/asp-listbounds-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(scripts));
	ck_assert_int_eq(chmod(scripts, 0755), 0);
	ck_assert_int_eq(fx_run("cp '%s' '%s/srv.py' && chmod 644 '%s/srv.py'", src, scripts, scripts), 0);
	snprintf(extra, sizeof(extra), "Subsystem sftp /usr/bin/python3 %s/srv.py %u %u %u\n", scripts,
		 bytes, per_reply, total);
	ck_assert_msg(fx_sshd_start_with(&fx, extra) == 0, "the hostile sshd did not start");
}

typedef struct outcome {
	int setup_failed;
	int rc;
	char message[ASP_ERROR_MESSAGE_MAX];
	long base_kb, peak_kb;
	size_t count;
} outcome;

static void child_list(unsigned int transport, uint64_t max_bytes, outcome *r)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_list *l = NULL;
	asp_error e = { 0 };

	o.config_path = fx.config;
	o.file_transport = transport;
	o.max_list_bytes = max_bytes;
	if (asp_open(&sb, &o, &e) || reset_peak()) {
		snprintf(r->message, sizeof(r->message), "%s", e.message);
		r->setup_failed = 1;
		asp_close(sb);
		return;
	}
	r->base_kb = status_kb("VmHWM");
	r->rc = asp_list_dir(&l, sb, fx.workspace, NULL, &e);
	r->peak_kb = status_kb("VmHWM");
	if (r->rc == ASP_OK)
		r->count = asp_list_count(l);
	asp_list_free(l);
	memcpy(r->message, e.message, sizeof(r->message));
	asp_close(sb);
}

/* List the workspace in a forked child; its outcome comes back through a pipe. */
static outcome measured(unsigned int transport, uint64_t max_bytes)
{
	outcome r;
	int p[2], status;
	pid_t pid;
	ssize_t got = 0, n;

	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		child_list(transport, max_bytes, &r);
		n = write(p[1], &r, sizeof(r));
		_exit(n == (ssize_t)sizeof(r) ? 0 : 1);
	}
	close(p[1]);
	while ((size_t)got < sizeof(r) && (n = read(p[0], (char *)&r + got, sizeof(r) - (size_t)got)) > 0)
		got += n;
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0 && got == (ssize_t)sizeof(r),
		      "the measured child failed (status %d)", status);
	ck_assert_msg(!r.setup_failed, "the measured child could not open a sandbox: %s", r.message);
	return r;
}

/*
 * Under AddressSanitizer RSS measures the sanitizer more than libasp (a
 * 256 MiB quarantine of freed blocks, every SSH packet among them; copies
 * on realloc; shadow memory): as test_limits.c does, the sanitized build
 * only checks that the growth stays in proportion to the cap. The plain
 * build is the real measure.
 */
#if defined(__SANITIZE_ADDRESS__)
#define ASAN_KB(cap_kb) (3 * (cap_kb) + 320L * 1024L)
#else
#define ASAN_KB(cap_kb) 0L
#endif

/* Under valgrind (its preload is mapped) RSS holds its shadow memory too: once more the cap. */
static int under_valgrind(void)
{
	char line[512];
	int found = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, "vgpreload") != NULL;
	if (f)
		fclose(f);
	return found;
}

/* The peak RSS grew by at most cap_kb + SLACK_KB. */
static void expect_peak_within(const outcome *r, long cap_kb)
{
	long grew = r->peak_kb - r->base_kb - ASAN_KB(cap_kb) - (under_valgrind() ? cap_kb : 0);

	ck_assert_msg(r->base_kb > 0 && r->peak_kb > 0, "no VmHWM");
	if (getenv("ASP_TEST_VERBOSE"))
		fprintf(stderr, "peak RSS grew %ld kB (cap %ld kB)\n", grew, cap_kb);
	ck_assert_msg(grew <= cap_kb + SLACK_KB, "the harness grew by %ld kB, more than %ld kB + %ld kB",
		      grew, cap_kb, SLACK_KB);
}

static void expect_limit(const outcome *r, const char *what)
{
	ck_assert_msg(r->rc == ASP_ELIMIT, "expected ASP_ELIMIT, got %s (%zu entries): %s",
		      asp_error_name(r->rc), r->count, r->message);
	ck_assert_msg(strstr(r->message, fx.workspace) && strstr(r->message, what),
		      "the message lacks the directory or \"%s\": %s", what, r->message);
}

/* One name of 1,000,000 bytes per READDIR answer, 300 answers. */
START_TEST(test_list_huge_names)
{
	outcome r;

	start_hostile(1000000, 1, 300);
	r = measured(ASP_FILES_SFTP, 0);
	expect_limit(&r, "1000000 bytes");
	ck_assert_msg(strstr(r.message, "4096"), "the message lacks the cap: %s", r.message);
	expect_peak_within(&r, 0);
}
END_TEST

/* 25,000 names of 4000 bytes: stopped at the default 32 MiB of names. */
START_TEST(test_list_bytes_default_cap)
{
	outcome r;

	start_hostile(4000, 200, 25000);
	r = measured(ASP_FILES_SFTP, 0);
	expect_limit(&r, "more than 33554432 bytes");
	ck_assert_msg(strstr(r.message, "asp_open_options.max_list_bytes"), "no remedy: %s", r.message);
	expect_peak_within(&r, (long)(32 * MiB / 1024));
}
END_TEST

/* 500 names of 4000 bytes (2,000,000): over a 1 MiB cap, within a 4 MiB one. */
START_TEST(test_list_bytes_option_sftp)
{
	outcome r;

	start_hostile(4000, 100, 500);
	r = measured(ASP_FILES_SFTP, MiB);
	expect_limit(&r, "more than 1048576 bytes");
	r = measured(ASP_FILES_SFTP, 4 * MiB);
	ck_assert_msg(r.rc == ASP_OK && r.count == 500, "%s, %zu entries: %s", asp_error_name(r.rc),
		      r.count, r.message);
}
END_TEST

/* Real files, shell commands: 40 names of 200 bytes (8000) pass a cap of 8000, not of 7999. */
START_TEST(test_list_bytes_option_shell)
{
	char name[201];
	outcome r;

	memset(&fx, 0, sizeof(fx));
	ck_assert_msg(fx_sshd_start(&fx) == 0, "the sshd fixture did not start");
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "%03d", i);
		memset(name + 3, 'y', 197);
		name[200] = '\0';
		ck_assert_int_eq(fx_run("touch '%s/%s'", fx.workspace, name), 0);
	}
	r = measured(ASP_FILES_EXEC, 7999);
	expect_limit(&r, "more than 7999 bytes");
	r = measured(ASP_FILES_EXEC, 8000);
	ck_assert_msg(r.rc == ASP_OK && r.count == 40, "%s, %zu entries: %s", asp_error_name(r.rc),
		      r.count, r.message);
}
END_TEST

Suite *suite_listbounds(void);

Suite *suite_listbounds(void)
{
	Suite *s = suite_create("listbounds");
	TCase *tc = tcase_create("listbounds");

	tcase_add_checked_fixture(tc, NULL, lb_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_list_huge_names);
	tcase_add_test(tc, test_list_bytes_default_cap);
	tcase_add_test(tc, test_list_bytes_option_sftp);
	tcase_add_test(tc, test_list_bytes_option_shell);
	suite_add_tcase(s, tc);
	return s;
}
