/*
 * test_cli_master.c - asp-exec's connection-sharing master: a killed client's
 * command cancelled, reuse, start race, idle exit, stale socket, --stop, per-config
 * masters, no inherited fds, another user kept out, garbage on the socket.
 *
 * Each test gets its own sshd and its own XDG_RUNTIME_DIR, so masters of
 * different tests never meet; teardown stops them. Running asp-exec:
 * tests/integration/cli_run.h.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "helpers.h"
#include "integration/cli_run.h"

START_TEST(test_client_killed_cancels)
{
	proc p;
	result r;
	pid_t shell;

	spawn(&p, cli_argv(ARGS("echo $$; exec sleep 60")), -1);
	shell = read_pid(p.out);
	assert_alive(shell, "the command");
	kill(p.pid, SIGKILL);
	r = finish(&p, NULL, 0, 10000);
	ck_assert_int_eq(r.status, 128 + SIGKILL);
	ck_assert_msg(wait_gone(shell, 5000), "the master did not cancel an orphaned command");
	result_free(&r);
}
END_TEST

/* A closed stdout stops the command, as a closed pipe stops a local one. */
/* ---------------------------------------------------------------- the master */

START_TEST(test_master_reuses_connection)
{
	int before;
	result r;

	r = CLI("true");
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	before = count_in_log("Accepted publickey");
	ck_assert_int_eq(before, 1);
	for (int i = 0; i < 5; i++) {
		r = CLI("echo $((40 + 2))");
		ck_assert_str_eq(r.out, "42\n");
		result_free(&r);
	}
	r = CLI("--read", ".asp-none");
	result_free(&r);
	ck_assert_int_eq(count_in_log("Accepted publickey"), 1);
	ck_assert_int_eq(find_masters(NULL, 0), 1);

	use_master = 0;
	r = CLI("true");
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	ck_assert_int_eq(count_in_log("Accepted publickey"), 2);
}
END_TEST

/* Clients racing to start the master: exactly one starts. */
START_TEST(test_master_start_race)
{
	proc p[6];
	result r;

	for (int i = 0; i < 6; i++)
		spawn(&p[i], cli_argv(ARGS("echo ok")), -1);
	for (int i = 0; i < 6; i++) {
		r = finish(&p[i], NULL, 0, RUN_TIMEOUT_MS);
		ck_assert_msg(r.status == 0, "client %d: %d %s", i, r.status, r.err);
		ck_assert_str_eq(r.out, "ok\n");
		result_free(&r);
	}
	ck_assert_int_eq(find_masters(NULL, 0), 1);
}
END_TEST

START_TEST(test_master_idle_exit)
{
	char sock[256];
	pid_t m;
	result r = CLI("--persist", "1", "true");

	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	m = the_master();
	the_socket(sock, sizeof(sock));
	ck_assert_msg(wait_gone(m, 5000), "the master outlived --persist 1");
	ck_assert_int_eq(access(sock, F_OK), -1);
}
END_TEST

START_TEST(test_master_stale_socket)
{
	char sock[256];
	pid_t old, fresh;
	result r = CLI("true");

	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	old = the_master();
	the_socket(sock, sizeof(sock));
	kill(old, SIGKILL);
	ck_assert(wait_gone(old, 3000));
	ck_assert_int_eq(access(sock, F_OK), 0); /* left behind, nothing listens */
	r = CLI("echo again");
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "again\n");
	ck_assert_uint_eq(r.err_len, 0);
	result_free(&r);
	fresh = the_master();
	ck_assert_int_ne(fresh, old);
}
END_TEST

START_TEST(test_master_stop)
{
	char sock[256];
	pid_t m;
	result r = CLI("true");

	result_free(&r);
	m = the_master();
	the_socket(sock, sizeof(sock));
	r = CLI("--stop");
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	ck_assert_int_eq(access(sock, F_OK), -1);
	ck_assert(wait_gone(m, 3000));
	r = CLI("--stop");
	ck_assert_int_eq(r.status, 1);
	assert_one_error_line(&r, "no master");
	result_free(&r);
}
END_TEST

/* An edited configuration is another master; so is another identity in the environment. */
START_TEST(test_master_per_config_contents)
{
	result r = CLI("true");

	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 1);
	ck_assert_int_eq(fx_run("echo ' ' >> '%s'", fx.config), 0);
	r = CLI("true");
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 2);
}
END_TEST

/* The master must not hold on to descriptors a harness gave the first client. */
START_TEST(test_master_does_not_keep_fds)
{
	int fds[2];
	proc p;
	result r;
	char b;

	ck_assert_int_eq(pipe(fds), 0);
	spawn(&p, cli_argv(ARGS("true")), fds[1]);
	close(fds[1]);
	r = finish(&p, NULL, 0, RUN_TIMEOUT_MS);
	ck_assert_int_eq(r.status, 0);
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 1);
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	ck_assert_msg(read(fds[0], &b, 1) == 0, "the master kept the harness's pipe open");
	close(fds[0]);
}
END_TEST

/* A directory others can enter is refused; the call still runs, without a master. */
START_TEST(test_master_refuses_open_dir)
{
	char dir[128];
	result r;

	snprintf(dir, sizeof(dir), "%s/asp", rundir);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	chmod(dir, 0755);
	r = CLI("echo still-runs");
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "still-runs\n");
	assert_one_error_line(&r, "not sharing connections");
	result_free(&r);
	ck_assert_int_eq(find_masters(NULL, 0), 0);
}
END_TEST

/* In a child as user nobody: connect to sock; 0 connected and got EOF (kicked out),
 * 1 connected and not kicked out, 2 + errno-ish codes for connect failures. */
static int connect_as_nobody(const char *sock)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		struct pollfd f;
		int fd;
		char b;

		if (setgroups(0, NULL) || setresgid(NOBODY_GID, NOBODY_GID, NOBODY_GID) ||
		    setresuid(NOBODY_UID, NOBODY_UID, NOBODY_UID))
			_exit(10);
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			_exit(errno == EACCES ? 3 : 4);
		f.fd = fd;
		f.events = POLLIN;
		if (poll(&f, 1, 3000) == 1 && read(fd, &b, 1) == 0)
			_exit(0);
		_exit(1);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return decode_status(st);
}

START_TEST(test_master_other_user)
{
	char sock[256], dir[128];
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct pollfd f;
	result r;
	int fd;

	if (geteuid() != 0)
		return; /* needs root to become nobody */
	r = CLI("true");
	result_free(&r);
	the_socket(sock, sizeof(sock));
	snprintf(dir, sizeof(dir), "%s/asp", rundir);
	/* The directory is 0700: another user cannot even reach the socket. */
	chmod(rundir, 0755);
	ck_assert_int_eq(connect_as_nobody(sock), 3);

	/* Opened up by mistake: the master still hangs up on them (SO_PEERCRED). */
	chmod(dir, 0755);
	chmod(sock, 0777);
	ck_assert_int_eq(connect_as_nobody(sock), 0);
	/* ...but not on us. */
	ck_assert_int_lt(snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock), (int)sizeof(a.sun_path));
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	f.fd = fd;
	f.events = POLLIN;
	ck_assert_int_eq(poll(&f, 1, 300), 0);
	close(fd);
	chmod(dir, 0700);
}
END_TEST

/* Send bytes with our stdin/stdout/stderr attached, as a client does; then wait for EOF. */
static int master_hangs_up_on(const char *sock, const void *bytes, size_t len, int with_fds)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(3 * sizeof(int))];
	} ctl;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct iovec iov = { (void *)bytes, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct pollfd f;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0), fds[3] = { 0, 1, 2 }, eof;
	char b[8];

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	if (with_fds) {
		memset(&ctl, 0, sizeof(ctl));
		m.msg_control = ctl.buf;
		m.msg_controllen = sizeof(ctl.buf);
		CMSG_FIRSTHDR(&m)->cmsg_level = SOL_SOCKET;
		CMSG_FIRSTHDR(&m)->cmsg_type = SCM_RIGHTS;
		CMSG_FIRSTHDR(&m)->cmsg_len = CMSG_LEN(sizeof(fds));
		memcpy(CMSG_DATA(CMSG_FIRSTHDR(&m)), fds, sizeof(fds));
	}
	ck_assert_int_eq(sendmsg(fd, &m, MSG_NOSIGNAL), (ssize_t)len);
	shutdown(fd, SHUT_WR);
	f.fd = fd;
	f.events = POLLIN;
	/* Closed with our bytes unread, the connection is reset rather than ended. */
	eof = poll(&f, 1, 12000) == 1 && (read(fd, b, sizeof(b)) == 0 || errno == ECONNRESET);
	close(fd);
	return eof;
}

/* Malformed requests are refused (the connection closed, nothing run) and the master lives on. */
START_TEST(test_master_rejects_garbage)
{
	static const unsigned char bad_magic[] = "\0\0\0\x0cXXXX\x02\x01\0\0\0\0\0\0";
	static const unsigned char bad_version[] = "\0\0\0\x0c" "ASPX\x63\x01\0\0\0\0\0\0";
	static const unsigned char bad_mode[] = "\0\0\0\x0c" "ASPX\x02\x09\0\0\0\0\0\0";
	static const unsigned char too_long[] = "\x7f\xff\xff\xff" "ASPX";
	static const unsigned char short_list[] = "\0\0\0\x14" "ASPX\x02\x01\0\0\0\0\0\0"
						  "\0\0\0\0\xff\xff\0\0";
	char sock[256];
	pid_t m;
	result r = CLI("true");

	result_free(&r);
	m = the_master();
	the_socket(sock, sizeof(sock));
	ck_assert(master_hangs_up_on(sock, bad_magic, sizeof(bad_magic) - 1, 0));
	ck_assert(master_hangs_up_on(sock, bad_magic, sizeof(bad_magic) - 1, 1));
	ck_assert(master_hangs_up_on(sock, bad_version, sizeof(bad_version) - 1, 1));
	ck_assert(master_hangs_up_on(sock, bad_mode, sizeof(bad_mode) - 1, 1));
	ck_assert(master_hangs_up_on(sock, too_long, sizeof(too_long) - 1, 1));
	ck_assert(master_hangs_up_on(sock, short_list, sizeof(short_list) - 1, 1));
	ck_assert(master_hangs_up_on(sock, "\0\0", 2, 1)); /* truncated length */
	r = CLI("echo alive");
	ck_assert_str_eq(r.out, "alive\n");
	result_free(&r);
	ck_assert_int_eq(the_master(), m);
}
END_TEST

/* The same calls through the master and without it: byte-identical results. */
START_TEST(test_master_and_direct_agree)
{
	const char *const *cases[] = {
		ARGS("printf 'a\\000b'; echo err >&2; exit 7"),
		ARGS("--", "printf", "%s|", "x y", "$(z)", "\xff"),
		ARGS("--cwd", "/", "--env", "A=1", "pwd; echo $A"),
		ARGS("--read", "nope"),
		ARGS("kill -USR1 $$"),
		ARGS("--timeout", "0.3", "sleep 5"),
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		result a, b;

		use_master = 1;
		a = cli_in(NULL, 0, cases[i]);
		use_master = 0;
		b = cli_in(NULL, 0, cases[i]);
		ck_assert_msg(a.status == b.status, "case %zu: %d vs %d", i, a.status, b.status);
		ck_assert_uint_eq(a.out_len, b.out_len);
		ck_assert(memcmp(a.out, b.out, a.out_len) == 0);
		ck_assert_str_eq(a.err, b.err);
		result_free(&a);
		result_free(&b);
	}
}
END_TEST

/* ---------------------------------------------------------------- suite */

Suite *suite_cli_master(void);

Suite *suite_cli_master(void)
{
	Suite *s = suite_create("cli_master");
	TCase *master = tcase_create("cli-master");

	tcase_add_unchecked_fixture(master, cli_runner_setup, cli_runner_cleanup);
	tcase_add_checked_fixture(master, cli_setup, cli_teardown);
	tcase_set_timeout(master, 120);
	tcase_add_test(master, test_client_killed_cancels);
	tcase_add_test(master, test_master_reuses_connection);
	tcase_add_test(master, test_master_start_race);
	tcase_add_test(master, test_master_idle_exit);
	tcase_add_test(master, test_master_stale_socket);
	tcase_add_test(master, test_master_stop);
	tcase_add_test(master, test_master_per_config_contents);
	tcase_add_test(master, test_master_does_not_keep_fds);
	tcase_add_test(master, test_master_refuses_open_dir);
	tcase_add_test(master, test_master_other_user);
	tcase_add_test(master, test_master_rejects_garbage);
	tcase_add_test(master, test_master_and_direct_agree);
	suite_add_tcase(s, master);
	return s;
}
