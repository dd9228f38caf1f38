/*
 * test_discover_race.c - a discovered .asp.json is judged and read through
 * one descriptor, and every directory above it counts.
 *
 * The attack: a project directory sits in a shared directory whose group
 * may rename entries (mode 2775, not sticky). A second user (asp-test, the
 * user tools/setup-deps.sh creates) swaps the victim's project directory
 * with their own in a loop (renameat2 RENAME_EXCHANGE). Discovery that
 * judges one lookup of the path and reads another can judge the victim's
 * .asp.json and then parse the attacker's, whose
 * connection.x-asp-proxy-command runs as the harness user. Here that
 * command creates a marker file; the claim is that it never runs, through
 * asp_open and through asp-exec (with its master and with --no-master).
 * Python and Node are tested from their own suites.
 *
 * The shared directory is listed in ASP_SAFE_DIRS, so that the ancestor
 * check lets the victim's own file through; the swapped-in directory is
 * the attacker's and is refused. Every run must end in one of the two
 * honest outcomes: the victim's file (its connect to port 1 is refused) or
 * a refusal; at least one refusal shows the swap reached discovery.
 *
 * Claims (docs/SECURITY.md, "Configuration trust"):
 * - discovery under a racing renamer never uses the attacker's file;
 * - a directory above the file that group or others can write (and is not
 *   sticky) is refused, naming it and ASP_SAFE_DIRS.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "asp.h"
#include "fixture/fixture.h"

/*
 * 1,000 of each in a plain run, which shows the race is never won; under
 * ASan and valgrind (fx_slowdown() > 1), which look for memory errors on
 * the same paths, 100.
 */
#define RACE_RUNS (fx_slowdown() > 1 ? 100 : 1000)
#define RACE_OPENS RACE_RUNS    /* asp_open calls */
#define RACE_CLI_RUNS RACE_RUNS /* asp-exec runs, each way */
#define TEST_USER "asp-test"

static char base[64], shared[128], victim[PATH_MAX], attacker[PATH_MAX];
static char marker[PATH_MAX], rundir[PATH_MAX], exe[PATH_MAX];
static uid_t test_uid;
static gid_t test_gid;
static pid_t racer = -1;
static volatile unsigned long *swaps; /* shared with the racer */
static int have_user;

static void write_file(const char *path, const char *text, uid_t uid, gid_t gid)
{
	FILE *f = fopen(path, "w");

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(path, 0644), 0);
	ck_assert_int_eq(chown(path, uid, gid), 0);
}

static void make_dir(const char *path, mode_t mode, uid_t uid, gid_t gid)
{
	ck_assert_msg(mkdir(path, 0700) == 0, "%s: %s", path, strerror(errno));
	ck_assert_int_eq(chown(path, uid, gid), 0);
	ck_assert_int_eq(chmod(path, mode), 0); /* after chown, which clears set-gid */
}

static void race_setup(void)
{
	struct passwd *pw = getpwnam(TEST_USER);
	char path[PATH_MAX + 32], text[PATH_MAX + 512];
	ssize_t n;

	have_user = geteuid() == 0 && pw != NULL;
	if (!have_user) {
		ck_assert_msg(!getenv("ASP_TEST_NO_SKIP"), "the race needs root and user %s",
			      TEST_USER);
		fprintf(stderr, "SKIP discover_race: needs root and the user %s "
			"(tools/setup-deps.sh)\n", TEST_USER);
		return;
	}
	test_uid = pw->pw_uid;
	test_gid = pw->pw_gid;
	strcpy(base, "/tmp/asp-race-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(base));
	ck_assert_int_eq(chmod(base, 0755), 0);
	snprintf(shared, sizeof(shared), "%s/shared", base);
	snprintf(victim, sizeof(victim), "%s/victim", shared);
	snprintf(attacker, sizeof(attacker), "%s/attacker", shared);
	snprintf(marker, sizeof(marker), "%s/foreign-command-ran", base);
	snprintf(rundir, sizeof(rundir), "%s/run", base);
	make_dir(shared, 02775, 0, test_gid);
	make_dir(victim, 0755, 0, 0);
	make_dir(attacker, 0755, test_uid, test_gid);
	make_dir(rundir, 0700, 0, 0);
	snprintf(path, sizeof(path), "%s/.asp.json", victim);
	write_file(path, "{\"version\":\"0\",\"transport\":\"ssh\",\"connection\":{\"host\":"
		   "\"127.0.0.1\",\"port\":1,\"user\":\"victim\"},\"workspace\":\"/w\"}\n", 0, 0);
	snprintf(path, sizeof(path), "%s/.asp.json", attacker);
	snprintf(text, sizeof(text), "{\"version\":\"0\",\"transport\":\"ssh\",\"connection\":"
		 "{\"host\":\"127.0.0.1\",\"port\":1,\"user\":\"attacker\",\"x-asp-proxy-command\":"
		 "\"touch %s; exit 1\"},\"workspace\":\"/w\"}\n", marker);
	write_file(path, text, test_uid, test_gid);
	unsetenv("ASP_CONFIG");
	setenv("ASP_SAFE_DIRS", shared, 1);
	snprintf(path, sizeof(path), "%s/known_hosts", base);
	setenv("ASP_KNOWN_HOSTS", path, 1);
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 32);
	ck_assert_int_gt(n, 0);
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0'; /* BUILD/tests */
	*strrchr(exe, '/') = '\0'; /* BUILD */
	strcat(exe, "/bin/asp-exec");
	swaps = mmap(NULL, sizeof(*swaps), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne((void *)swaps, MAP_FAILED);
	*swaps = 0;
}

static void stop_racer(void)
{
	if (racer > 0) {
		kill(racer, SIGKILL);
		waitpid(racer, NULL, 0);
	}
	racer = -1;
}

static void race_teardown(void)
{
	char cmd[128];

	if (!have_user)
		return;
	stop_racer();
	munmap((void *)swaps, sizeof(*swaps));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "discover_race: could not remove %s\n", base);
	unsetenv("ASP_SAFE_DIRS");
	unsetenv("ASP_KNOWN_HOSTS");
}

/*
 * The second user: swaps the two project directories until killed. Under
 * ASan and valgrind, where an open takes 100 ms and more, it swaps for
 * RACER_BURST_MS and then rests as long with the victim's directory in
 * place: a racer that never rests saw every one of 100 opens under ASan
 * refused (no run used the victim's file), on a CI machine busy with
 * other jobs. The plain run's 1,000 races are not paced.
 */
#define RACER_BURST_MS 20
static void start_racer(void)
{
	racer = fork();
	ck_assert_int_ge(racer, 0);
	if (racer == 0) {
		int pace = fx_slowdown() > 1, swapped;
		long long burst_end = fx_now_ms() + RACER_BURST_MS;
		struct stat st;

		if (setgroups(0, NULL) || setgid(test_gid) || setuid(test_uid) || getuid() == 0)
			_exit(2);
		if (stat(victim, &st))
			_exit(4);
		swapped = st.st_uid == test_uid; /* the attacker's directory is at the victim's path */
		for (;;) {
			if (renameat2(AT_FDCWD, victim, AT_FDCWD, attacker, RENAME_EXCHANGE))
				_exit(3);
			(*swaps)++;
			swapped = !swapped;
			if (pace && !swapped && fx_now_ms() >= burst_end) {
				usleep(RACER_BURST_MS * 1000);
				burst_end = fx_now_ms() + RACER_BURST_MS;
			}
		}
	}
	/* The race counts only once the racer is swapping. */
	while (*swaps < 10) {
		int st;

		ck_assert_msg(waitpid(racer, &st, WNOHANG) == 0, "the racer exited (status %d)", st);
		usleep(1000);
	}
}

/* Did the attacker's command run since the last call? (Removes the marker.) */
static int foreign_ran(void)
{
	return unlink(marker) == 0;
}

typedef struct tally {
	int victim, refused, other, foreign;
} tally;

static void report(const char *what, int n, const tally *t)
{
	fprintf(stderr, "discover_race: %s: %d runs: %d victim, %d refused, %d other; "
		"the attacker's command ran %d times; %lu swaps\n", what, n, t->victim, t->refused,
		t->other, t->foreign, *swaps);
	ck_assert_msg(t->foreign == 0, "%s: the attacker's x-asp-proxy-command ran %d of %d times",
		      what, t->foreign, n);
	ck_assert_msg(t->refused > 0, "%s: no run saw the attacker's directory: the race did "
		      "not happen", what);
	ck_assert_msg(t->victim > 0, "%s: no run used the victim's file", what);
}

START_TEST(race_asp_open)
{
	tally t = { 0 };
	int i, rc;

	if (!have_user)
		return;
	start_racer();
	for (i = 0; i < RACE_OPENS; i++) {
		asp_open_options o = ASP_OPEN_OPTIONS_INIT;
		asp_sandbox *sb = NULL;
		asp_error e = { 0 };

		o.start_dir = victim;
		o.connect_timeout_ms = 5000;
		rc = asp_open(&sb, &o, &e);
		asp_close(sb);
		if (foreign_ran())
			t.foreign++;
		if (rc == ASP_ECONNECT && strstr(e.message, "127.0.0.1"))
			t.victim++;
		else if (rc == ASP_ECONFIG || rc == ASP_ENOCONFIG)
			t.refused++;
		else
			t.other++;
	}
	stop_racer();
	report("asp_open", RACE_OPENS, &t);
}
END_TEST

/* Run asp-exec in the victim's project with args; its exit status. */
static int run_cli(const char *const *args)
{
	pid_t pid = fork();
	int st;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		setenv("XDG_RUNTIME_DIR", rundir, 1);
		if (chdir(victim) != 0)
			_exit(100);
		execv(exe, (char *const *)args);
		_exit(101);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void race_cli(int master)
{
	const char *const direct[] = { exe, "--no-master", "--", "true", NULL };
	const char *const via[] = { exe, "--persist", "1", "--", "true", NULL };
	const char *const stop[] = { exe, "--stop", NULL };
	tally t = { 0 };
	int i, status;

	if (!have_user)
		return;
	ck_assert_msg(access(exe, X_OK) == 0, "%s is not built (make tools)", exe);
	start_racer();
	for (i = 0; i < RACE_CLI_RUNS; i++) {
		status = run_cli(master ? via : direct);
		if (master) {
			/*
			 * The next run starts its own master. The stop runs no command,
			 * so the racer rests meanwhile: it spins a core, and on a busy
			 * machine that core is every other test's.
			 */
			ck_assert_int_eq(kill(racer, SIGSTOP), 0);
			run_cli(stop);
			ck_assert_int_eq(kill(racer, SIGCONT), 0);
		}
		if (foreign_ran())
			t.foreign++;
		if (status == 254)
			t.victim++;
		else if (status == 251)
			t.refused++;
		else
			t.other++;
	}
	stop_racer();
	report(master ? "asp-exec (master)" : "asp-exec --no-master", RACE_CLI_RUNS, &t);
}

START_TEST(race_asp_exec_master)
{
	race_cli(1);
}
END_TEST

START_TEST(race_asp_exec_direct)
{
	race_cli(0);
}
END_TEST

/* Without ASP_SAFE_DIRS, the 2775 directory above the victim's project is refused. */
START_TEST(shared_ancestor_refused)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	char remedy[PATH_MAX + 32];
	int rc;

	if (!have_user)
		return;
	unsetenv("ASP_SAFE_DIRS");
	o.start_dir = victim;
	o.flags = ASP_OPEN_LAZY;
	rc = asp_open(&sb, &o, &e);
	asp_close(sb);
	ck_assert_msg(rc == ASP_ECONFIG, "got %d (%s)", rc, e.message);
	snprintf(remedy, sizeof(remedy), "in %s,", shared);
	ck_assert_msg(strstr(e.message, remedy) != NULL, "%s does not name %s", e.message, shared);
	snprintf(remedy, sizeof(remedy), "add %s to ASP_SAFE_DIRS", shared);
	ck_assert_msg(strstr(e.message, remedy) != NULL, "%s does not say: %s", e.message, remedy);
	/* The control: listing it lets the victim's own file through. */
	setenv("ASP_SAFE_DIRS", shared, 1);
	rc = asp_open(&sb, &o, &e);
	ck_assert_msg(rc == 0, "got %d (%s)", rc, e.message);
	asp_close(sb);
}
END_TEST

Suite *suite_discover_race(void);

Suite *suite_discover_race(void)
{
	Suite *s = suite_create("discover_race");
	TCase *tc = tcase_create("race");     /* in this process: asp_open */
	TCase *cli = tcase_create("race_cli"); /* in asp-exec (valgrind does not follow it) */

	tcase_add_checked_fixture(tc, race_setup, race_teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, race_asp_open);
	tcase_add_test(tc, shared_ancestor_refused);
	suite_add_tcase(s, tc);
	tcase_add_checked_fixture(cli, race_setup, race_teardown);
	tcase_set_timeout(cli, 600); /* 1,000 asp-exec runs take 2-4 minutes on a busy 2-core machine */
	tcase_add_test(cli, race_asp_exec_master);
	tcase_add_test(cli, race_asp_exec_direct);
	suite_add_tcase(s, cli);
	return s;
}
