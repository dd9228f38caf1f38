/*
 * test_fixture.c - the sshd fixture itself, checked with the OpenSSH client:
 * it starts, serves the login user, restarts, crashes and comes back,
 * rotates its host key, cleans up after itself, and writes .asp.json files.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "helpers.h"

#define SSH_OPTS                                                                       \
	"-F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=5 "     \
	"-o LogLevel=ERROR"

/* ---------------------------------------------------------------- helpers */

/* Run `remote` over ssh with the fixture's client key, host key unchecked. */
static int ssh_run(const fx_sshd *fx, const char *remote)
{
	return fx_run("ssh " SSH_OPTS " -i '%s' -p %d -o UserKnownHostsFile=/dev/null "
		      "-o StrictHostKeyChecking=no %s@127.0.0.1 '%s' </dev/null >/dev/null 2>&1",
		      fx->client_key, fx->port, fx->user, remote);
}

/* Same, but the host key must match the known_hosts file `kh`. */
static int ssh_run_pinned(const fx_sshd *fx, const char *kh)
{
	return fx_run("ssh " SSH_OPTS " -i '%s' -p %d -o UserKnownHostsFile='%s' "
		      "-o StrictHostKeyChecking=yes %s@127.0.0.1 true </dev/null >/dev/null 2>&1",
		      fx->client_key, fx->port, kh, fx->user);
}

/* Start `ssh ... remote` in the background; returns the client's pid. */
static pid_t ssh_spawn(const fx_sshd *fx, const char *remote)
{
	char port[16], dest[96];
	pid_t pid;

	snprintf(port, sizeof(port), "%d", fx->port);
	snprintf(dest, sizeof(dest), "%s@127.0.0.1", fx->user);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);

		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execlp("ssh", "ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o",
		       "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no", "-i",
		       fx->client_key, "-p", port, dest, remote, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Exit status of child `pid` if it ends within `ms`, else -1. */
static int wait_exit(pid_t pid, long ms)
{
	int status;

	for (long waited = 0; waited <= ms; waited += 10) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		fx_sleep_ms(10);
	}
	return -1;
}

/* Wait for a file to appear and read the number in it. */
static long read_number_file(const char *path, long ms)
{
	for (long waited = 0; waited <= ms; waited += 10) {
		char *text = fx_read_file(path, NULL);
		long value = text && *text ? strtol(text, NULL, 10) : 0;

		free(text);
		if (value > 0)
			return value;
		fx_sleep_ms(10);
	}
	return -1;
}

static int dir_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static uid_t login_uid(const fx_sshd *fx)
{
	struct passwd *pw = getpwnam(fx->user);

	ck_assert_ptr_nonnull(pw);
	return pw->pw_uid;
}

static void write_known_hosts(const fx_sshd *fx, const char *path)
{
	ck_assert_int_eq(fx_run("printf '[127.0.0.1]:%d %s\\n' > '%s'", fx->port,
				fx->host_key_line, path),
			 0);
}

/* -------------------------------------------------------------- lifecycle */

START_TEST(test_start_and_ssh)
{
	fx_sshd fx;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	ck_assert(dir_exists(fx.dir));
	ck_assert_int_gt(fx.port, 0);
	ck_assert_int_gt(fx.pid, 0);
	ck_assert_str_eq(fx.user, geteuid() == 0 ? "asp-test" : getpwuid(geteuid())->pw_name);
	ck_assert_int_eq(strncmp(fx.host_key_line, "ssh-ed25519 AAAA", 16), 0);
	ck_assert_ptr_null(strchr(fx.host_key_line + 12, ' '));
	ck_assert_int_eq(ssh_run(&fx, "true"), 0);
	ck_assert_int_eq(ssh_run(&fx, "test \"$(id -un)\" = \"$USER\""), 0);
	ck_assert_int_eq(ssh_run(&fx, "exit 7"), 7);
	ck_assert(fx_log_contains(&fx, "Accepted publickey for"));
	ck_assert(!fx_log_contains(&fx, "no such text in the log"));
	fx_sshd_stop(&fx);
}
END_TEST

START_TEST(test_files_and_ownership)
{
	fx_sshd fx;
	char path[400];
	struct stat st;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	ck_assert_int_eq(stat(fx.workspace, &st), 0);
	ck_assert_int_eq(st.st_uid, login_uid(&fx));
	ck_assert_int_eq(stat(fx.client_key, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	ck_assert_int_eq(st.st_uid, geteuid());
	snprintf(path, sizeof(path), "%s/authorized_keys", fx.dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0644);
	ck_assert_int_eq(stat(fx.dir, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0755);

	snprintf(path, sizeof(path), "touch %s/made-remotely", fx.workspace);
	ck_assert_int_eq(ssh_run(&fx, path), 0);
	snprintf(path, sizeof(path), "%s/made-remotely", fx.workspace);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_uid, login_uid(&fx));
	if (geteuid() == 0) {
		/* Permission errors are real: the login user cannot write root's files. */
		snprintf(path, sizeof(path), "touch %s/not-allowed", fx.dir);
		ck_assert_int_ne(ssh_run(&fx, path), 0);
	}
	fx_sshd_stop(&fx);
}
END_TEST

START_TEST(test_sftp_subsystem)
{
	fx_sshd fx;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	ck_assert_int_eq(fx_run("echo 'put %s %s/up' | sftp -b - -F /dev/null -o BatchMode=yes "
				"-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no "
				"-i '%s' -P %d %s@127.0.0.1 >/dev/null 2>&1",
				fx.config, fx.workspace, fx.client_key, fx.port, fx.user),
			 0);
	ck_assert_int_eq(fx_run("cmp -s '%s' '%s/up'", fx.config, fx.workspace), 0);
	fx_sshd_stop(&fx);
}
END_TEST

START_TEST(test_restart)
{
	fx_sshd fx;
	char line[512];
	int port;
	pid_t pid;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	port = fx.port;
	pid = fx.pid;
	snprintf(line, sizeof(line), "%s", fx.host_key_line);
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	ck_assert_int_eq(fx.port, port);
	ck_assert_int_ne(fx.pid, pid);
	ck_assert(!pid_alive(pid));
	ck_assert_str_eq(fx.host_key_line, line);
	ck_assert_int_eq(ssh_run(&fx, "true"), 0);
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	ck_assert_int_eq(ssh_run(&fx, "true"), 0);
	fx_sshd_stop(&fx);
}
END_TEST

START_TEST(test_restart_cuts_connections)
{
	fx_sshd fx;
	pid_t client;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	client = ssh_spawn(&fx, "sleep 30");
	ck_assert_int_gt(client, 0);
	ck_assert_int_eq(wait_exit(client, 500), -1);
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	ck_assert_int_ne(wait_exit(client, 5000), -1);
	ck_assert_int_eq(ssh_run(&fx, "true"), 0);
	fx_sshd_stop(&fx);
}
END_TEST

START_TEST(test_kill9_and_start_again)
{
	fx_sshd fx;
	char remote[600], pidfile[400];
	pid_t client, old_pid;
	long sleeper;
	int port;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	port = fx.port;
	old_pid = fx.pid;
	snprintf(pidfile, sizeof(pidfile), "%s/sleeper.pid", fx.workspace);
	snprintf(remote, sizeof(remote), "echo $$ > %s; exec sleep 37", pidfile);
	client = ssh_spawn(&fx, remote);
	sleeper = read_number_file(pidfile, 5000);
	ck_assert_int_gt(sleeper, 0);

	ck_assert_int_eq(fx_sshd_kill9(&fx), 0);
	ck_assert_int_eq(fx.pid, 0);
	ck_assert(!pid_alive(old_pid));
	/* The connection's sshd processes died with the listener: the client sees it. */
	ck_assert_int_eq(wait_exit(client, 5000), 255);
	ck_assert_int_eq(ssh_run(&fx, "true"), 255);
	/* Like a real crash, the user's command survives the server. */
	ck_assert(pid_alive((pid_t)sleeper));

	ck_assert_int_eq(fx_sshd_start_again(&fx), 0);
	ck_assert_int_eq(fx.port, port);
	ck_assert_int_eq(ssh_run(&fx, "true"), 0);
	fx_sshd_stop(&fx);
	/* ...and stop kills it. */
	ck_assert(wait_gone((pid_t)sleeper, 2000));
}
END_TEST

/* While sshd is down, something else holds its port for a moment: start_again waits it out. */
START_TEST(test_start_again_waits_for_port)
{
	fx_sshd fx;
	char marker[400];

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	snprintf(marker, sizeof(marker), "%s/port-taken", fx.dir);
	ck_assert_int_eq(fx_sshd_kill9(&fx), 0);
	ck_assert_int_eq(fx_run("python3 -c 'import socket, time\n"
				"s = socket.socket()\n"
				"s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
				"s.bind((\"127.0.0.1\", %d))\n"
				"s.listen()\n"
				"open(\"%s\", \"w\").close()\n"
				"time.sleep(0.7)' >/dev/null 2>&1 &",
				fx.port, marker),
			 0);
	/* A hang detector: python3 starts slowly on a loaded machine. */
	for (long long t = fx_now_ms(); access(marker, F_OK) != 0 && fx_now_ms() - t < 30000 * fx_slowdown();)
		fx_sleep_ms(10);
	ck_assert_int_eq(access(marker, F_OK), 0);
	ck_assert_int_eq(fx_sshd_start_again(&fx), 0);
	ck_assert(fx_log_contains(&fx, "Address already in use"));
	ck_assert_int_eq(ssh_run(&fx, "true"), 0);
	fx_sshd_stop(&fx);
}
END_TEST

/* A server that cannot start says why, and leaves nothing behind. */
START_TEST(test_start_failure_cleans_up)
{
	fx_sshd fx;

	ck_assert_int_eq(fx_sshd_start_with(&fx, "NoSuchOption yes\n"), -1);
	ck_assert_int_eq(fx.dir[0], '\0');
	ck_assert_int_eq(fx.pid, 0);
	fx_sshd_stop(&fx);
}
END_TEST

START_TEST(test_rotate_host_key)
{
	fx_sshd fx;
	char old_line[512], old_key[300], kh_old[400], kh_new[400];
	char *config;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	snprintf(old_line, sizeof(old_line), "%s", fx.host_key_line);
	snprintf(old_key, sizeof(old_key), "%s", fx.host_key);
	snprintf(kh_old, sizeof(kh_old), "%s/kh_old", fx.dir);
	snprintf(kh_new, sizeof(kh_new), "%s/kh_new", fx.dir);
	write_known_hosts(&fx, kh_old);
	ck_assert_int_eq(ssh_run_pinned(&fx, kh_old), 0);

	ck_assert_int_eq(fx_sshd_rotate_host_key(&fx), 0);
	ck_assert_str_ne(fx.host_key_line, old_line);
	ck_assert_str_ne(fx.host_key, old_key);
	ck_assert_int_eq(access(fx.host_key, R_OK), 0);
	ck_assert_int_eq(ssh_run_pinned(&fx, kh_old), 255);
	write_known_hosts(&fx, kh_new);
	ck_assert_int_eq(ssh_run_pinned(&fx, kh_new), 0);

	/* fx.config keeps pinning the old key, for mismatch tests. */
	config = fx_read_file(fx.config, NULL);
	ck_assert_ptr_nonnull(config);
	ck_assert_ptr_nonnull(strstr(config, old_line));
	free(config);

	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	ck_assert_int_eq(ssh_run_pinned(&fx, kh_new), 0);
	fx_sshd_stop(&fx);
}
END_TEST

START_TEST(test_stop_cleans_up)
{
	fx_sshd fx, zero;
	char dir[256];
	pid_t pid;
	int port;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	snprintf(dir, sizeof(dir), "%s", fx.dir);
	pid = fx.pid;
	port = fx.port;
	ck_assert_int_eq(ssh_run(&fx, "true"), 0);
	fx_sshd_stop(&fx);
	ck_assert(!dir_exists(dir));
	ck_assert(!pid_alive(pid));
	ck_assert_int_eq(fx.pid, 0);
	fx.port = port;
	ck_assert_int_eq(ssh_run(&fx, "true"), 255);
	fx_sshd_stop(&fx);
	memset(&zero, 0, sizeof(zero));
	fx_sshd_stop(&zero);
}
END_TEST

START_TEST(test_extra_sshd_config)
{
	fx_sshd fx;

	/* Lines before the defaults override them (sshd keeps the first value). */
	ck_assert_int_eq(fx_sshd_start_with(&fx, "PubkeyAuthentication no\n"), 0);
	ck_assert_int_eq(ssh_run(&fx, "true"), 255);
	fx_sshd_stop(&fx);

	/* A Match block goes to the end, and survives a restart. */
	ck_assert_int_eq(fx_sshd_start_with(&fx, "Match all\n\tForceCommand echo forced\n"), 0);
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	ck_assert_int_eq(fx_run("ssh " SSH_OPTS " -i '%s' -p %d -o UserKnownHostsFile=/dev/null "
				"-o StrictHostKeyChecking=no %s@127.0.0.1 'echo hi' </dev/null "
				"2>/dev/null | grep -qx forced",
				fx.client_key, fx.port, fx.user),
			 0);
	fx_sshd_stop(&fx);
}
END_TEST

/* --------------------------------------------------------------- .asp.json */

static cJSON *load_json(const char *path)
{
	char *text = fx_read_file(path, NULL);
	cJSON *json;

	ck_assert_ptr_nonnull(text);
	json = cJSON_Parse(text);
	free(text);
	ck_assert_ptr_nonnull(json);
	return json;
}

static const char *conn_str(const cJSON *json, const char *key)
{
	const cJSON *conn = cJSON_GetObjectItemCaseSensitive(json, "connection");
	const cJSON *item = cJSON_GetObjectItemCaseSensitive(conn, key);

	return cJSON_IsString(item) ? item->valuestring : NULL;
}

static const cJSON *conn_item(const cJSON *json, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(json, "connection"), key);
}

START_TEST(test_default_config)
{
	fx_sshd fx;
	cJSON *json;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	json = load_json(fx.config);
	ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(json, "version")->valuestring, "0");
	ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(json, "transport")->valuestring, "ssh");
	ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(json, "workspace")->valuestring,
			 fx.workspace);
	ck_assert_str_eq(conn_str(json, "host"), "127.0.0.1");
	ck_assert_int_eq(conn_item(json, "port")->valueint, fx.port);
	ck_assert_str_eq(conn_str(json, "user"), fx.user);
	ck_assert_str_eq(conn_str(json, "identity"), fx.client_key);
	ck_assert_str_eq(conn_str(json, "host_key"), fx.host_key_line);
	cJSON_Delete(json);
	fx_sshd_stop(&fx);
}
END_TEST

START_TEST(test_config_variants)
{
	fx_sshd fx;
	char path[400], fpr[128];
	cJSON *json;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	snprintf(path, sizeof(path), "%s/variant.json", fx.dir);
	ck_assert_int_eq(fx_host_fingerprint(&fx, fpr, sizeof(fpr)), 0);
	ck_assert_int_eq(strncmp(fpr, "SHA256:", 7), 0);
	ck_assert_int_eq(fx_run("ssh-keyscan -p %d -t ed25519 127.0.0.1 2>/dev/null | "
				"ssh-keygen -l -E sha256 -f - | grep -qF '%s'",
				fx.port, fpr),
			 0);

	ck_assert_int_eq(fx_write_config(&fx, path,
					 &(fx_config_opts){ .host_key = fpr,
							    .identity = "ASP_TEST_KEY",
							    .port = 2222,
							    .extra = "\"x-note\": \"a\\\"b\"",
							    .top_extra = "\"x-top\": true" }),
			 0);
	json = load_json(path);
	ck_assert_str_eq(conn_str(json, "host_key"), fpr);
	ck_assert_str_eq(conn_str(json, "identity"), "ASP_TEST_KEY");
	ck_assert_int_eq(conn_item(json, "port")->valueint, 2222);
	ck_assert_str_eq(conn_str(json, "x-note"), "a\"b");
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(json, "x-top")));
	cJSON_Delete(json);

	ck_assert_int_eq(fx_write_config(&fx, path,
					 &(fx_config_opts){ .host_key = FX_OMIT,
							    .identity = FX_OMIT,
							    .port = -1,
							    .user = "tok\"en\\1" }),
			 0);
	json = load_json(path);
	ck_assert_ptr_null(conn_item(json, "host_key"));
	ck_assert_ptr_null(conn_item(json, "identity"));
	ck_assert_ptr_null(conn_item(json, "port"));
	ck_assert_str_eq(conn_str(json, "user"), "tok\"en\\1");
	cJSON_Delete(json);

	ck_assert_int_eq(fx_write_config(&fx, path, NULL), 0);
	ck_assert_int_eq(fx_run("cmp -s '%s' '%s'", path, fx.config), 0);
	fx_sshd_stop(&fx);
}
END_TEST

/* ------------------------------------------------------- process ownership */

/* A fixture dir whose creator is gone is removed by the next start; a new one is kept. */
START_TEST(test_sweeps_stale_dirs)
{
	char stale[] = "/tmp/asp-fx.XXXXXX", fresh[] = "/tmp/asp-fx.XXXXXX";
	fx_sshd fx;

	ck_assert_ptr_nonnull(mkdtemp(stale));
	ck_assert_ptr_nonnull(mkdtemp(fresh));
	/* pid 1 never has start time 0: the owner is dead. */
	ck_assert_int_eq(fx_run("echo '1 0' > %s/.fx-owner && touch %s/sshd.log", stale, stale), 0);
	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	ck_assert(!dir_exists(stale));
	ck_assert(dir_exists(fresh));
	ck_assert(dir_exists(fx.dir));
	fx_sshd_stop(&fx);
	rmdir(fresh);
}
END_TEST

/* A child's exit (atexit cleanup included) leaves its parent's server alone. */
START_TEST(test_child_exit_keeps_parent_server)
{
	fx_sshd fx;
	pid_t child;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	fflush(NULL);
	child = fork();
	if (child == 0)
		exit(0);
	ck_assert_int_eq(wait_exit(child, 5000), 0);
	ck_assert(pid_alive(fx.pid));
	ck_assert(dir_exists(fx.dir));
	ck_assert_int_eq(ssh_run(&fx, "true"), 0);
	fx_sshd_stop(&fx);
}
END_TEST

/* A child that restarts its parent's server stops it at exit, but leaves the dir. */
START_TEST(test_child_restart_leaves_parent_dir)
{
	fx_sshd fx;
	pid_t child;

	ck_assert_int_eq(fx_sshd_start(&fx), 0);
	fflush(NULL);
	child = fork();
	if (child == 0)
		exit(fx_sshd_restart(&fx) == 0 ? 0 : 1);
	ck_assert_int_eq(wait_exit(child, 15000), 0);
	ck_assert(dir_exists(fx.dir));
	ck_assert_int_eq(access(fx.config, R_OK), 0);
	/* The server the child started went with it; ours is long gone. */
	ck_assert(!pid_alive(fx.pid));
	ck_assert_int_eq(fx_sshd_start_again(&fx), 0);
	ck_assert_int_eq(ssh_run(&fx, "true"), 0);
	fx_sshd_stop(&fx);
}
END_TEST

/* Start a server in a child, report it through `fd`, then leave as `how` says. */
static void child_starts_server(int fd, int how)
{
	fx_sshd fx;

	if (fx_sshd_start(&fx) != 0)
		_exit(1);
	if (write(fd, &fx, sizeof(fx)) != (ssize_t)sizeof(fx))
		_exit(1);
	if (how == SIGKILL)
		kill(getpid(), SIGKILL);
	exit(0);
}

static void check_child_server_gone(int how)
{
	int fds[2];
	fx_sshd fx;
	pid_t child;

	ck_assert_int_eq(pipe(fds), 0);
	fflush(NULL);
	child = fork();
	if (child == 0)
		child_starts_server(fds[1], how);
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &fx, sizeof(fx)), (ssize_t)sizeof(fx));
	close(fds[0]);
	ck_assert_int_ne(wait_exit(child, 10000), -1);
	ck_assert(wait_gone(fx.pid, 5000));
	if (how == SIGKILL)
		fx_run("rm -rf '%s'", fx.dir); /* no atexit ran: only sshd went away */
	else
		ck_assert(!dir_exists(fx.dir));
}

START_TEST(test_child_exit_stops_its_server)
{
	check_child_server_gone(0);
}
END_TEST

START_TEST(test_child_killed_stops_its_server)
{
	check_child_server_gone(SIGKILL);
}
END_TEST

/* ----------------------------------------- shared server (unchecked fixture) */

static fx_sshd shared;

static void shared_setup(void)
{
	ck_assert_int_eq(fx_sshd_start(&shared), 0);
}

static void shared_teardown(void)
{
	fx_sshd_stop(&shared);
}

/* Each test runs in its own child: the second proves the first's exit spared the server. */
START_TEST(test_shared_server)
{
	ck_assert_int_eq(ssh_run(&shared, "true"), 0);
}
END_TEST

/* ------------------------------------------------------------------ suite */

Suite *suite_fixture(void);

static TCase *new_case(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return tc;
}

Suite *suite_fixture(void)
{
	Suite *s = suite_create("fixture");
	TCase *tc = new_case(s, "lifecycle");

	tcase_add_test(tc, test_start_and_ssh);
	tcase_add_test(tc, test_files_and_ownership);
	tcase_add_test(tc, test_sftp_subsystem);
	tcase_add_test(tc, test_restart);
	tcase_add_test(tc, test_restart_cuts_connections);
	tcase_add_test(tc, test_kill9_and_start_again);
	tcase_add_test(tc, test_start_again_waits_for_port);
	tcase_add_test(tc, test_start_failure_cleans_up);
	tcase_add_test(tc, test_rotate_host_key);
	tcase_add_test(tc, test_stop_cleans_up);
	tcase_add_test(tc, test_extra_sshd_config);

	tc = new_case(s, "config");
	tcase_add_test(tc, test_default_config);
	tcase_add_test(tc, test_config_variants);

	tc = new_case(s, "ownership");
	tcase_add_test(tc, test_sweeps_stale_dirs);
	tcase_add_test(tc, test_child_exit_keeps_parent_server);
	tcase_add_test(tc, test_child_restart_leaves_parent_dir);
	tcase_add_test(tc, test_child_exit_stops_its_server);
	tcase_add_test(tc, test_child_killed_stops_its_server);

	tc = new_case(s, "shared");
	tcase_add_unchecked_fixture(tc, shared_setup, shared_teardown);
	tcase_add_loop_test(tc, test_shared_server, 0, 2);
	return s;
}
