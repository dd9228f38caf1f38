/*
 * test_rofs.c - a read-only file system gives every call that writes the
 * same code, ASP_EROFS, and the same message over SFTP and over shell
 * commands (as test_fs.c's test_errors_same_over_both_transports does for
 * the other failures). The read-only file system is a tmpfs mounted in the
 * suite's workspace and remounted read-only (the tests run as root; the
 * sshd fixture shares the host's mount namespace); teardown unmounts it.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asp.h"
#include "fixture/fixture.h"
#include "helpers.h"

static fx_sshd fx;
static const char *const made[] = { "", "/file", "/dir", "/full", "/full/inside" };
static char ro_dir[400];
static int mounted;

/* ro/ holds a file, an empty directory and a full one, then becomes read-only. */
static void rofs_setup(void)
{
	struct stat ws;
	char p[480];
	FILE *f;

	suite_sshd_start(&fx);
	if (geteuid() != 0 || stat(fx.workspace, &ws) < 0)
		return;
	snprintf(ro_dir, sizeof(ro_dir), "%s/ro", fx.workspace);
	if (mkdir(ro_dir, 0755) < 0 || mount("asp-rofs", ro_dir, "tmpfs", 0, "size=1m,mode=0755") < 0)
		return;
	mounted = 1;
	snprintf(p, sizeof(p), "%s/file", ro_dir);
	if ((f = fopen(p, "w")) != NULL) {
		fputs("x", f);
		fclose(f);
	}
	/* Everything owned by the login user: only the mount's read-only flag stops a write. */
	for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", ro_dir, made[i]);
		if ((i > 1 && mkdir(p, 0755) < 0) || chown(p, ws.st_uid, ws.st_gid) < 0)
			fprintf(stderr, "rofs: %s: %s\n", p, strerror(errno));
	}
	if (mount("asp-rofs", ro_dir, "tmpfs", MS_REMOUNT | MS_RDONLY, "") < 0) {
		fprintf(stderr, "rofs: remount %s read-only: %s\n", ro_dir, strerror(errno));
		umount2(ro_dir, MNT_DETACH);
		mounted = 0;
	}
}

static void rofs_teardown(void)
{
	if (mounted && umount2(ro_dir, MNT_DETACH) < 0)
		fprintf(stderr, "rofs: umount %s: %s\n", ro_dir, strerror(errno));
	mounted = 0;
	fx_sshd_stop(&fx);
}

#define NO_SUCH_CASE 1000

/* Call number i that writes into the read-only file system; NO_SUCH_CASE past the last. */
static int writing_call(asp_sandbox *sb, int i, asp_error *e)
{
	asp_write_options in_place = ASP_WRITE_OPTIONS_INIT, parents = ASP_WRITE_OPTIONS_INIT;

	in_place.flags = ASP_WRITE_IN_PLACE;
	parents.flags = ASP_WRITE_PARENTS;
	switch (i) {
	case 0: return asp_write(sb, "ro/new", "y", 1, NULL, e);
	case 1: return asp_write(sb, "ro/file", "y", 1, NULL, e);
	case 2: return asp_write(sb, "ro/file", "y", 1, &in_place, e);
	case 3: return asp_write(sb, "ro/new", "y", 1, &in_place, e);
	case 4: return asp_write(sb, "ro/a/b/new", "y", 1, &parents, e);
	case 5: return asp_mkdir(sb, "ro/newdir", 0, 0, NULL, e);
	case 6: return asp_mkdir(sb, "ro/a/b", 0, ASP_MKDIR_PARENTS, NULL, e);
	case 7: return asp_remove(sb, "ro/file", 0, NULL, e);
	case 8: return asp_remove(sb, "ro/dir", 0, NULL, e);
	case 9: return asp_remove(sb, "ro/full", ASP_REMOVE_RECURSIVE, NULL, e);
	case 10: return asp_rename(sb, "ro/file", "ro/moved", NULL, e);
	default: return NO_SUCH_CASE;
	}
}

START_TEST(test_read_only_same_over_both_transports)
{
	asp_sandbox *sftp, *sh;
	asp_stat_info st;
	int i, rc1, rc2;

	if (!mounted) {
		fprintf(stderr, "SKIP test_read_only_same_over_both_transports: no read-only tmpfs "
			"(needs root)\n");
		return;
	}
	sftp = sb_open_transport(fx.config, ASP_FILES_SFTP);
	sh = sb_open_transport(fx.config, ASP_FILES_EXEC);
	/* The file system is really read-only, and the files are there. */
	ck_assert(access(ro_dir, W_OK) < 0 && errno == EROFS);
	ck_assert_int_eq(asp_stat(&st, sftp, "ro/file", NULL, NULL), ASP_OK);
	for (i = 0;; i++) {
		asp_error e1 = { 0 }, e2 = { 0 };
		if ((rc1 = writing_call(sftp, i, &e1)) == NO_SUCH_CASE)
			break;
		rc2 = writing_call(sh, i, &e2);
		ck_assert_msg(rc1 == ASP_EROFS && rc2 == ASP_EROFS,
			      "case %d: SFTP %s \"%s\", shell %s \"%s\"; want ASP_EROFS", i, asp_error_name(rc1),
			      e1.message, asp_error_name(rc2), e2.message);
		ck_assert_msg(!strcmp(e1.message, e2.message), "case %d: SFTP \"%s\", shell \"%s\"", i,
			      e1.message, e2.message);
		ck_assert_msg(strstr(e1.message, "read-only file system"), "case %d: \"%s\"", i, e1.message);
		if (i == 10)
			ck_assert_msg(strstr(e1.message, "ro/file") && strstr(e1.message, "ro/moved"),
				      "rename names both paths: \"%s\"", e1.message);
	}
	ck_assert_int_eq(i, 11);
	/* Nothing changed. */
	assert_content(sftp, "ro/file", "x", 1);
	asp_close(sftp);
	asp_close(sh);
}
END_TEST

/* A permission failure on a writable file system stays ASP_EACCES: the check tells them apart. */
START_TEST(test_permission_denied_is_not_read_only)
{
	asp_sandbox *sftp = sb_open_transport(fx.config, ASP_FILES_SFTP);
	asp_sandbox *sh = sb_open_transport(fx.config, ASP_FILES_EXEC);
	asp_exec_result *r;
	asp_error e1 = { 0 }, e2 = { 0 };
	int rc1, rc2;

	mkdir_ok(sftp, "shut", 0755, 0);
	r = run(sftp, "chmod 555 shut");
	assert_exited(r, 0);
	asp_exec_result_free(r);
	rc1 = asp_mkdir(sftp, "shut/x", 0, 0, NULL, &e1);
	rc2 = asp_mkdir(sh, "shut/x", 0, 0, NULL, &e2);
	ck_assert_msg(rc1 == ASP_EACCES && rc2 == ASP_EACCES, "SFTP %s \"%s\", shell %s \"%s\"",
		      asp_error_name(rc1), e1.message, asp_error_name(rc2), e2.message);
	r = run(sftp, "chmod 755 shut");
	asp_exec_result_free(r);
	asp_close(sftp);
	asp_close(sh);
}
END_TEST

Suite *suite_rofs(void)
{
	Suite *s = suite_create("rofs");
	TCase *tc = tcase_create("rofs");

	tcase_add_unchecked_fixture(tc, rofs_setup, rofs_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_read_only_same_over_both_transports);
	tcase_add_test(tc, test_permission_denied_is_not_read_only);
	suite_add_tcase(s, tc);
	return s;
}
