/*
 * test_debris.c - no temp file of an atomic write outlives the write that
 * made it once the server is reachable again. A real sshd is SIGKILLed
 * while a 64 MiB atomic write is half-way (a thread watches the temp file
 * grow in the workspace, then kills), and then:
 *   - the same handle's next call (a stat) removes the temp file;
 *   - the same handle's asp_close removes it;
 *   - the handle is closed while the server is down (the temp file stays),
 *     and a fresh handle's writes into that directory leave it while its
 *     writer could still be alive (its lease) and remove it once stale.
 * And a sweep of a directory by a fresh handle removes stale temp files but
 * never a live writer's (one stalled by a black-holed link, mid-write),
 * nor any file whose name is not exactly our pattern, nor a directory.
 * The target is intact throughout.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "asp.h"
#include "exec.h"
#include "fixture/fixture.h"
#include "sweep.h"
#include "helpers.h"
#include "fixture/proxy.h"
#include "tiers.h"

#define BIG_LEN (64u * 1024 * 1024)
#define KILL_AT (8u * 1024 * 1024)


static fx_sshd fx;
static fx_proxy px;

static void setup(void)
{
	memset(&fx, 0, sizeof(fx));
	memset(&px, 0, sizeof(px));
	px.ctl = -1;
	ck_assert_int_eq(fx_sshd_start(&fx), 0);
}

static void teardown(void)
{
	fx_proxy_stop(&px);
	fx_sshd_stop(&fx);
}

static asp_sandbox *open_sb(const char *config, unsigned int io_timeout_ms)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_error e = { 0 };
	asp_sandbox *sb = NULL;
	int rc;

	o.config_path = config;
	o.io_timeout_ms = io_timeout_ms;
	/* Every open here must succeed: valgrind on a loaded machine took more than 5 s to connect. */
	o.connect_timeout_ms = (unsigned int)(5000 * fx_slowdown());
	test_open_options(&o);
	rc = asp_open(&sb, &o, &e);
	ck_assert_msg(rc == ASP_OK, "asp_open: %s: %s", asp_error_name(rc), e.message);
	return sb;
}

static void write_text(asp_sandbox *sb, const char *path, const char *text)
{
	asp_error err = { 0 };
	int rc = asp_write(sb, path, text, strlen(text), NULL, &err);

	ASSERT_OK(rc, err, "asp_write");
}

/* How many entries of dir look like an atomic write's temp file of `name` (NULL: any). */
static int count_temps(const char *dir, const char *name)
{
	char prefix[256];
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	ck_assert_msg(d != NULL, "opendir %s: %s", dir, strerror(errno));
	snprintf(prefix, sizeof(prefix), ".%s.asp-", name ? name : "");
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);
		int match = name ? !strncmp(e->d_name, prefix, strlen(prefix))
				 : e->d_name[0] == '.' && strstr(e->d_name, ".asp-") != NULL;
		if (match && l > 4 && !strcmp(e->d_name + l - 4, ".tmp"))
			n++;
	}
	closedir(d);
	return n;
}

/* The first temp file of `name` in dir: its path in out, its size and mtime. 0 when none. */
static int find_temp(const char *dir, const char *name, char *out, size_t outlen, struct stat *st)
{
	char prefix[256];
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;

	ck_assert_msg(d != NULL, "opendir %s: %s", dir, strerror(errno));
	snprintf(prefix, sizeof(prefix), ".%s.asp-", name);
	while (!found && (e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)))
			continue;
		snprintf(out, outlen, "%s/%s", dir, e->d_name);
		found = stat(out, st) == 0;
	}
	closedir(d);
	return found;
}

static void expect_sha(const char *path, const char *want)
{
	size_t len = 0;
	char *text = fx_read_file(path, &len), sha[65];

	ck_assert_msg(text != NULL, "%s is gone", path);
	sha256_hex(text, len, sha);
	free(text);
	ck_assert_msg(!strcmp(sha, want), "%s holds neither what was there nor what was written", path);
}

/* ------------------------------------------------------------ crash mid-write */

typedef struct killer {
	const char *dir, *name;
	atomic_int stop;
	int killed;
} killer;

/* SIGKILL sshd once the write's temp file holds KILL_AT bytes. */
static void *kill_when_half_way(void *arg)
{
	killer *k = arg;
	long long deadline = fx_now_ms() + 60000;

	while (!atomic_load(&k->stop) && fx_now_ms() < deadline) {
		char path[600];
		struct stat st;
		if (find_temp(k->dir, k->name, path, sizeof(path), &st) && st.st_size >= (off_t)KILL_AT) {
			k->killed = fx_sshd_kill9(&fx) == 0;
			return NULL;
		}
		fx_sleep_ms(1);
	}
	return NULL;
}

/*
 * torn.bin holds 1 MiB; a 64 MiB atomic write to it through sb is cut by a
 * server crash half-way. Returns with sshd down, the temp file left behind,
 * and old_sha filled.
 */
static void crash_mid_write(asp_sandbox *sb, char old_sha[65])
{
	unsigned char *old = random_bytes(1u << 20, 1), *big = random_bytes(BIG_LEN, 2);
	asp_error err = { 0 };
	killer k = { fx.workspace, "torn.bin", 0, 0 };
	char path[400];
	pthread_t th;
	int rc;

	snprintf(path, sizeof(path), "%s/torn.bin", fx.workspace);
	sha256_hex(old, 1u << 20, old_sha);
	rc = asp_write(sb, "torn.bin", old, 1u << 20, NULL, &err);
	ASSERT_OK(rc, err, "asp_write");
	atomic_init(&k.stop, 0);
	ck_assert_int_eq(pthread_create(&th, NULL, kill_when_half_way, &k), 0);
	rc = asp_write(sb, "torn.bin", big, BIG_LEN, NULL, &err);
	atomic_store(&k.stop, 1);
	pthread_join(th, NULL);
	fprintf(stderr, "debris: 64 MiB write, sshd killed after 8 MiB -> %s (%s)\n",
		asp_error_name(rc), err.message);
	ck_assert_msg(k.killed, "sshd was not killed mid-write (the write returned %s)", asp_error_name(rc));
	ck_assert_msg(rc != ASP_OK, "the write succeeded although sshd was killed");
	expect_sha(path, old_sha);
	if (test_file_transport() == ASP_FILES_EXEC) {
		/*
		 * Over exec channels the remote script outlives sshd: its stdin ends
		 * short, it counts the bytes, removes its temp file and renames nothing.
		 */
		long long deadline = fx_now_ms() + 30000;
		while (count_temps(fx.workspace, "torn.bin") && fx_now_ms() < deadline)
			fx_sleep_ms(50);
		ck_assert_msg(count_temps(fx.workspace, "torn.bin") == 0,
			      "the remote write script left its temp file after its input ended short");
		expect_sha(path, old_sha);
	} else {
		ck_assert_msg(count_temps(fx.workspace, "torn.bin") >= 1, "the crash left no temp file to clean");
	}
	free(old);
	free(big);
}

/* Server back before the handle's next call: that call removes the temp file, whatever it is. */
START_TEST(test_crash_then_same_handle_next_call)
{
	asp_error err = { 0 };
	asp_stat_info st;
	char old_sha[65], path[400];
	asp_sandbox *sb = open_sb(fx.config, 4000);
	int rc;

	crash_mid_write(sb, old_sha);
	ck_assert_int_eq(fx_sshd_start_again(&fx), 0);
	if (test_file_transport() != ASP_FILES_EXEC)
		ck_assert_int_ge(count_temps(fx.workspace, "torn.bin"), 1);
	rc = asp_stat(&st, sb, "torn.bin", NULL, &err);
	ASSERT_OK(rc, err, "asp_stat");
	ck_assert_uint_eq(st.size, 1u << 20);
	ck_assert_int_eq(count_temps(fx.workspace, NULL), 0);
	snprintf(path, sizeof(path), "%s/torn.bin", fx.workspace);
	expect_sha(path, old_sha);
	asp_close(sb);
}
END_TEST

/* Server back, no further call: asp_close removes the temp file. */
START_TEST(test_crash_then_same_handle_close)
{
	char old_sha[65], path[400];
	asp_sandbox *sb;
	long long t0;

	if (skip_unless_sftp("test_crash_then_same_handle_close", "the remote script removes its own "
			     "temp file (crash_mid_write checks it); no leftover to close on"))
		return;
	sb = open_sb(fx.config, 4000);
	crash_mid_write(sb, old_sha);
	ck_assert_int_eq(fx_sshd_start_again(&fx), 0);
	ck_assert_int_ge(count_temps(fx.workspace, "torn.bin"), 1);
	t0 = fx_now_ms();
	asp_close(sb);
	fprintf(stderr, "debris: asp_close with a leftover, server up: %lld ms\n", fx_now_ms() - t0);
	ck_assert_int_eq(count_temps(fx.workspace, NULL), 0);
	snprintf(path, sizeof(path), "%s/torn.bin", fx.workspace);
	expect_sha(path, old_sha);
}
END_TEST

/*
 * The handle closes while the server is down, the temp
 * file stays; a fresh handle comes after the server is back. Its writes
 * into the directory keep the file while its writer's lease (io_timeout_ms
 * 4000: 4 s, stale after 2 x 4 + 3 s without a WRITE) could still be
 * running, and remove it once it is stale.
 */
static void close_while_down_then_fresh(int warm_route)
{
	char old_sha[65], path[400], temp[600];
	asp_sandbox *sb, *sb2;
	struct stat st;
	long long t0;
	time_t age;

	if (skip_unless_sftp("test_crash_close_while_down_then_fresh_handle", "the remote script "
			     "removes its own temp file (crash_mid_write checks it): nothing is left to sweep"))
		return;
	sb = open_sb(fx.config, 4000);
	crash_mid_write(sb, old_sha);
	t0 = fx_now_ms();
	asp_close(sb);
	fprintf(stderr, "debris: asp_close with a leftover, server down: %lld ms\n", fx_now_ms() - t0);
	ck_assert_int_ge(count_temps(fx.workspace, "torn.bin"), 1);
	ck_assert_int_eq(fx_sshd_start_again(&fx), 0);

	sb2 = open_sb(fx.config, 0);
	asp__route_force_files(warm_route);
	write_text(sb2, "other.txt", "one\n");
	ck_assert(find_temp(fx.workspace, "torn.bin", temp, sizeof(temp), &st));
	age = time(NULL) - st.st_mtime;
	fprintf(stderr, "debris: first write of a fresh handle, the temp file is %lld s old\n",
		(long long)age);
	/* Still within its writer's lease (if this machine was fast enough to get here in time). */
	if (age <= 8)
		ck_assert_int_ge(count_temps(fx.workspace, "torn.bin"), 1);

	/*
	 * Past the lease: a write into the directory removes it. The handle
	 * knows the server's clock from an earlier reply (a file's mtime, a
	 * listing's time), so it may run late by as long as that reply took
	 * to be used (seconds under valgrind), never early: each later write
	 * looks again, and one of the next few removes it.
	 */
	while (time(NULL) - st.st_mtime <= 2 * 4 + 3 + 1)
		fx_sleep_ms(200);
	for (int tries = 0;; tries++) {
		write_text(sb2, "other.txt", "two\n");
		if (count_temps(fx.workspace, "torn.bin") == 0 || tries == 10)
			break;
		fx_sleep_ms(1000);
	}
	ck_assert_msg(count_temps(fx.workspace, "torn.bin") == 0, "the stale temp file is still there "
		      "%lld s after its last write", (long long)(time(NULL) - st.st_mtime));
	ck_assert_int_eq(count_temps(fx.workspace, NULL), 0);
	snprintf(path, sizeof(path), "%s/torn.bin", fx.workspace);
	expect_sha(path, old_sha);
	asp_close(sb2);
	asp__route_force_files(0);
}

START_TEST(test_crash_close_while_down_then_fresh_handle)
{
	close_while_down_then_fresh(0);
}
END_TEST

/*
 * The same, with the fresh handle's small writes on the warm exec route (a
 * slow link, forced here; the connection still has SFTP): the files it
 * remembered are rechecked over SFTP, which needs the server's clock from
 * the exec route's listing.
 */
START_TEST(test_crash_close_while_down_then_fresh_handle_warm_route)
{
	close_while_down_then_fresh(1);
}
END_TEST

/* ------------------------------------------------------------ live writer, foreign names */

typedef struct writer {
	asp_sandbox *sb;
	const void *data;
	size_t len;
	int rc;
	asp_error err;
} writer;

static void *write_thread(void *arg)
{
	writer *w = arg;

	w->rc = asp_write(w->sb, "live/big.bin", w->data, w->len, NULL, &w->err);
	return NULL;
}

/* Create dir/name (a file, or a directory when dir_too) owned by the login user, mtime age_s ago. */
static void plant(const char *dir, const char *name, long age_s, int is_dir)
{
	char path[600];
	struct passwd *pw = getpwnam(fx.user);
	struct timeval tv[2];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (is_dir) {
		ck_assert_msg(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
	} else {
		FILE *f = fopen(path, "w");
		ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
		fputs("planted\n", f);
		fclose(f);
	}
	ck_assert(pw != NULL);
	ck_assert_int_eq(lchown(path, pw->pw_uid, pw->pw_gid), 0);
	gettimeofday(&tv[0], NULL);
	tv[0].tv_sec -= age_s;
	tv[1] = tv[0];
	ck_assert_int_eq(utimes(path, tv), 0);
}

static int exists(const char *dir, const char *name)
{
	char path[600];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return lstat(path, &st) == 0;
}

/* Names that only look like ours: never removed, however old. */
static const char *const foreign[] = {
	".planted.asp-0123456789AB-1.tmp",
	".planted.asp-backup.tmp",
	"planted.asp-0123456789ab-1.tmp",
	".planted.asp-0123456789ab-1.tmp.bak",
	"..asp-0123456789ab-1.tmp",
	".planted.asp-0123456789a-1.tmp",
	".planted.asp-0123456789ab-01.tmp",
};

/*
 * Writer A (through a proxy) is half-way through a 64 MiB atomic write
 * into live/ when its link goes black: its temp file stops growing. A fresh
 * handle B writes into live/ meanwhile, which sweeps the directory: the
 * stale temp files planted there go, A's stays (A's write then completes),
 * and nothing with a foreign name or a directory is touched.
 */
START_TEST(test_sweep_spares_live_writer_and_foreign_names)
{
	unsigned char *big = random_bytes(BIG_LEN, 7);
	char cfg[400], dir[400], temp[600], sha[65], path[600];
	asp_sandbox *a, *b;
	writer w;
	pthread_t th;
	struct stat st;
	long long deadline;
	size_t i;

	ck_assert_int_eq(fx_proxy_start(&px, fx.port), 0);
	snprintf(cfg, sizeof(cfg), "%s/proxy.asp.json", fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .port = px.port }), 0);
	a = open_sb(cfg, 10000);
	b = open_sb(fx.config, 0);
	{
		asp_error err = { 0 };
		int rc = asp_mkdir(b, "live", 0755, 0, NULL, &err);
		ASSERT_OK(rc, err, "asp_mkdir");
	}
	write_text(a, "live/big.bin", "old\n");
	snprintf(dir, sizeof(dir), "%s/live", fx.workspace);

	plant(dir, ".planted.asp-0123456789ab-1.tmp", 3600, 0);     /* stale: removed */
	plant(dir, ".legacy.asp-0123456789ab.tmp", 7200, 0);        /* no lease, 2 h: removed */
	plant(dir, ".legacy.asp-ba9876543210.tmp", 600, 0);         /* no lease, 10 min: kept */
	plant(dir, ".fresh.asp-0123456789ab-30.tmp", 5, 0);         /* lease 30 s, 5 s old: kept */
	plant(dir, ".dir.asp-0123456789ab-1.tmp", 7200, 1);         /* a directory: kept */
	for (i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++)
		plant(dir, foreign[i], 7200, 0);

	memset(&w, 0, sizeof(w));
	w.sb = a;
	w.data = big;
	w.len = BIG_LEN;
	ck_assert_int_eq(pthread_create(&th, NULL, write_thread, &w), 0);
	deadline = fx_now_ms() + 60000;
	while (!(find_temp(dir, "big.bin", temp, sizeof(temp), &st) && st.st_size >= (off_t)KILL_AT) &&
	       fx_now_ms() < deadline)
		fx_sleep_ms(1);
	ck_assert_int_eq(fx_proxy_set_mode(&px, FX_PROXY_BLACKHOLE, 0), 0);
	ck_assert_msg(find_temp(dir, "big.bin", temp, sizeof(temp), &st), "writer A has no temp file");
	fprintf(stderr, "debris: writer A stalled with %lld bytes in %s\n", (long long)st.st_size, temp);
	fx_sleep_ms(1500); /* A's file has not moved for a while: stalled, not dead */

	write_text(b, "live/b.txt", "from b\n");
	ck_assert_msg(access(temp, F_OK) == 0, "the sweep removed a live writer's temp file %s", temp);
	ck_assert_msg(!exists(dir, ".planted.asp-0123456789ab-1.tmp"), "a stale temp file survived the sweep");
	ck_assert_msg(!exists(dir, ".legacy.asp-0123456789ab.tmp"), "a stale old-style temp file survived");
	ck_assert(exists(dir, ".legacy.asp-ba9876543210.tmp"));
	ck_assert(exists(dir, ".fresh.asp-0123456789ab-30.tmp"));
	ck_assert(exists(dir, ".dir.asp-0123456789ab-1.tmp"));
	for (i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++)
		ck_assert_msg(exists(dir, foreign[i]), "%s (not our pattern) was removed", foreign[i]);

	ck_assert_int_eq(fx_proxy_set_mode(&px, FX_PROXY_PASS, 0), 0);
	pthread_join(th, NULL);
	ASSERT_OK(w.rc, w.err, "asp_write of live/big.bin (the writer thread)");
	snprintf(path, sizeof(path), "%s/big.bin", dir);
	sha256_hex(big, BIG_LEN, sha);
	expect_sha(path, sha);
	ck_assert_int_eq(count_temps(dir, "big.bin"), 0);
	asp_close(a);
	asp_close(b);
	free(big);
}
END_TEST

/*
 * Fresh handles of one process writing into one directory at once list it
 * for stale temp files once between them, not once each; another directory
 * gets its own sweep; a handle on another server (here the same sshd
 * through a proxy, which the library cannot tell from another sandbox)
 * sweeps for itself.
 */
#define FRESH_HANDLES 6

typedef struct fresh_writer {
	asp_sandbox *sb;
	char path[64];
	int rc;
	asp_error err;
} fresh_writer;

static void *fresh_write(void *arg)
{
	fresh_writer *f = arg;

	f->rc = asp_write(f->sb, f->path, "x\n", 2, NULL, &f->err);
	return NULL;
}

START_TEST(test_fresh_handles_share_one_sweep)
{
	fresh_writer w[FRESH_HANDLES];
	pthread_t th[FRESH_HANDLES];
	unsigned long n0, n1, n2, n3;
	char cfg[400];
	asp_sandbox *other;
	int i;

	asp__sweep_shared_reset();
	memset(w, 0, sizeof(w));
	for (i = 0; i < FRESH_HANDLES; i++) {
		w[i].sb = open_sb(fx.config, 0);
		snprintf(w[i].path, sizeof(w[i].path), "f%d.txt", i);
	}
	asp__sweep_stats(&n0);
	for (i = 0; i < FRESH_HANDLES; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, fresh_write, &w[i]), 0);
	for (i = 0; i < FRESH_HANDLES; i++) {
		pthread_join(th[i], NULL);
		ASSERT_OK(w[i].rc, w[i].err, "asp_write of a fresh handle");
	}
	asp__sweep_stats(&n1);
	fprintf(stderr, "debris: %d fresh handles, %lu directory listings\n", FRESH_HANDLES, n1 - n0);
	ck_assert_msg(n1 - n0 == 1, "%d fresh handles writing into one directory listed it %lu times",
		      FRESH_HANDLES, n1 - n0);
	{
		asp_error err = { 0 };
		int rc = asp_mkdir(w[0].sb, "sub", 0755, 0, NULL, &err);
		ASSERT_OK(rc, err, "asp_mkdir");
	}
	write_text(w[0].sb, "sub/f.txt", "y\n");
	asp__sweep_stats(&n2);
	ck_assert_msg(n2 - n1 == 1, "a write into another directory listed %lu directories", n2 - n1);

	ck_assert_int_eq(fx_proxy_start(&px, fx.port), 0);
	snprintf(cfg, sizeof(cfg), "%s/proxy.asp.json", fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .port = px.port }), 0);
	other = open_sb(cfg, 0);
	write_text(other, "f-other.txt", "z\n");
	asp__sweep_stats(&n3);
	ck_assert_msg(n3 - n2 == 1, "a handle on another server listed %lu directories", n3 - n2);
	asp_close(other);
	for (i = 0; i < FRESH_HANDLES; i++)
		asp_close(w[i].sb);
}
END_TEST

/*
 * A harness that forks worker processes while its threads write: a fork
 * that comes while another thread holds the lock of the process's table
 * of swept directories must not hand the child that lock held (the
 * child has no thread to give it back, and its first write would wait
 * for it forever). A thread holds it for 300 ms across the fork; the
 * child opens a handle of its own and writes (a sweep: the table).
 */
typedef struct table_holder {
	atomic_int held;
	pthread_t th;
} table_holder;

static void *hold_table(void *arg)
{
	table_holder *h = arg;

	asp__sweep_shared_hold(1);
	atomic_store(&h->held, 1);
	fx_sleep_ms(300);
	asp__sweep_shared_hold(0);
	return NULL;
}

START_TEST(test_fork_while_sweep_table_is_locked)
{
	table_holder h;
	pid_t pid;
	int status = 0;

	asp__sweep_shared_reset();
	atomic_init(&h.held, 0);
	ck_assert_int_eq(pthread_create(&h.th, NULL, hold_table, &h), 0);
	while (!atomic_load(&h.held))
		fx_sleep_ms(1);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The child: no ck_assert here (a failure would be the parent's to report). */
		asp_open_options o = ASP_OPEN_OPTIONS_INIT;
		asp_sandbox *mine = NULL;
		asp_error e = { 0 };

		o.config_path = fx.config;
		test_open_options(&o);
		if (asp_open(&mine, &o, &e) || asp_write(mine, "forked.txt", "child\n", 6, NULL, &e))
			_exit(10);
		asp_close(mine);
		_exit(0);
	}
	pthread_join(h.th, NULL);
	ck_assert_msg(fx_wait_child(pid, 20000, &status),
		      "the child hung: its first write waited for a lock held when it was forked");
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child: status %d", status);
	assert_local_content(ws_path(fx.workspace, "forked.txt"), "child\n", 6);
}
END_TEST

/*
 * A handle remembers the last 256 directories it swept (a ring): after
 * writes into 260 directories it sweeps none of the last 256 again, and
 * the first one again. The list grows as it fills (from a few entries).
 */
#define SWEEP_DIRS_KEPT 256

START_TEST(test_sweep_remembers_256_dirs)
{
	asp_sandbox *sb = open_sb(fx.config, 0);
	unsigned long n0, n1, n2, n3;
	char path[64];
	int i, ndirs = SWEEP_DIRS_KEPT + 4;

	for (i = 0; i < ndirs; i++) {
		snprintf(path, sizeof(path), "d%d", i);
		plant(fx.workspace, path, 0, 1);
	}
	asp__sweep_shared_reset();
	asp__sweep_stats(&n0);
	for (i = 0; i < ndirs; i++) {
		snprintf(path, sizeof(path), "d%d/f", i);
		write_text(sb, path, "1\n");
	}
	asp__sweep_stats(&n1);
	ck_assert_msg(n1 - n0 == (unsigned long)ndirs, "writes into %d directories listed %lu", ndirs, n1 - n0);
	/* Only what this handle remembers counts now: not what the process does. */
	asp__sweep_shared_reset();
	for (i = ndirs - 1; i >= ndirs - SWEEP_DIRS_KEPT; i--) {
		snprintf(path, sizeof(path), "d%d/f", i);
		write_text(sb, path, "2\n");
	}
	asp__sweep_stats(&n2);
	ck_assert_msg(n2 == n1, "the handle listed %lu of the last %d directories it swept again", n2 - n1,
		      SWEEP_DIRS_KEPT);
	write_text(sb, "d0/f", "3\n");
	asp__sweep_stats(&n3);
	ck_assert_msg(n3 - n2 == 1, "the oldest directory, out of the ring, was listed %lu times", n3 - n2);
	asp_close(sb);
}
END_TEST

/*
 * A sweep that finds temp files not stale yet remembers up to 64 of them and
 * removes those once they are; the rest wait for a later sweep of their
 * directory. 70 planted with lease 1 s (stale at 2 x 1 + 3 s old), 2 s
 * old: none goes at the write that sweeps; after 5 s, the next call
 * removes 64, and 6 stay.
 */
#define SWEEP_WAIT_KEPT 64

START_TEST(test_sweep_waits_on_64_temps)
{
	asp_sandbox *sb = open_sb(fx.config, 0);
	char dir[400], name[64];
	asp_stat_info st;
	asp_error err = { 0 };
	int i, n = SWEEP_WAIT_KEPT + 6, rc;

	plant(fx.workspace, "wait", 0, 1);
	snprintf(dir, sizeof(dir), "%s/wait", fx.workspace);
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), ".p%d.asp-0123456789ab-1.tmp", i);
		plant(dir, name, 2, 0);
	}
	asp__sweep_shared_reset();
	write_text(sb, "wait/x", "x\n");
	ck_assert_int_eq(count_temps(dir, NULL), n);
	fx_sleep_ms(5000);
	rc = asp_stat(&st, sb, "wait/x", NULL, &err);
	ASSERT_OK(rc, err, "asp_stat");
	ck_assert_msg(count_temps(dir, NULL) == n - SWEEP_WAIT_KEPT, "%d of %d waiting temp files left, not %d",
		      count_temps(dir, NULL), n, n - SWEEP_WAIT_KEPT);
	asp_close(sb);
}
END_TEST

Suite *suite_debris(void)
{
	TCase *slow;
	Suite *s = suite_create("debris");
	TCase *tc = tcase_create("debris");

	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_crash_then_same_handle_next_call);
	tcase_add_test(tc, test_crash_then_same_handle_close);
	tcase_add_test(tc, test_fresh_handles_share_one_sweep);
	tcase_add_test(tc, test_fork_while_sweep_table_is_locked);
	tcase_add_test(tc, test_sweep_remembers_256_dirs);
	tcase_add_test(tc, test_sweep_waits_on_64_temps);
	suite_add_tcase(s, tc);
	slow = slow_case(s, "debris-slow", FIXTURE_CHECKED, setup, teardown, 120);
	tcase_add_test(slow, test_crash_close_while_down_then_fresh_handle);
	tcase_add_test(slow, test_crash_close_while_down_then_fresh_handle_warm_route);
	tcase_add_test(slow, test_sweep_spares_live_writer_and_foreign_names);
	return s;
}
