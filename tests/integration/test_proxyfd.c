/*
 * test_proxyfd.c - descriptors around connection.x-asp-proxy-command.
 *
 * The proxy is a real one: the fixture's own sshd in inetd mode
 * (`sshd -i -f DIR/sshd_config`) speaks SSH on the proxy's stdin and
 * stdout, so every byte of the session goes through the socket pair libasp
 * makes for the proxy. Before it execs sshd, the proxy's shell has a child
 * list the shell's descriptors (/proc/$PPID/fd) into a file.
 *
 * Claims (docs/SECURITY.md, "Descriptors"):
 * - the harness's end of the proxy socket pair is close-on-exec: a program
 *   the harness starts later does not inherit it;
 * - the proxy inherits nothing of the harness's but its stdin/stdout (the
 *   socket) and stderr (kept for diagnostics), not even a descriptor the
 *   harness left open without close-on-exec.
 * A positive control shows that such a descriptor does reach a child the
 * harness starts itself. And the proxy does not outlive the handle.
 */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "asp.h"
#include "fixture/fixture.h"

static fx_sshd fx;

static void proxyfd_setup(void)
{
	memset(&fx, 0, sizeof(fx));
	ck_assert_msg(fx_sshd_start(&fx) == 0, "the sshd fixture did not start");
}

static void proxyfd_teardown(void)
{
	fx_sshd_stop(&fx);
}

#define MAXFD 1024

static int fd_open(int fd)
{
	return fcntl(fd, F_GETFD) != -1;
}

/*
 * The descriptor numbers in a listing of /proc/PID/fd: `ls` (one number a
 * line) or `ls -l` ("... N -> target"); sockets[fd] is set for a socket.
 */
static int parse_fds(const char *path, char open_[MAXFD], char sockets[MAXFD])
{
	char *text = fx_read_file(path, NULL), *line, *save = NULL;
	int n = 0;

	ck_assert_msg(text != NULL, "no listing at %s", path);
	memset(open_, 0, MAXFD);
	if (sockets)
		memset(sockets, 0, MAXFD);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *arrow = strstr(line, " -> "), *p;
		int fd;

		if (arrow) {
			*arrow = '\0';
			p = strrchr(line, ' ');
			p = p ? p + 1 : line;
		} else {
			p = line;
		}
		if (sscanf(p, "%d", &fd) != 1 || fd < 0 || fd >= MAXFD)
			continue;
		open_[fd] = 1;
		if (sockets && arrow && !strncmp(arrow + 4, "socket:", 7))
			sockets[fd] = 1;
		n++;
	}
	free(text);
	return n;
}

/* Start `sh -c 'ls /proc/$$/fd > out'` from this process, as a harness would start a program. */
static void child_fds(const char *out, char open_[MAXFD])
{
	char cmd[400];
	pid_t pid;
	int st;

	/*
	 * The listing is made by a grandchild of the shell, about its parent: a
	 * shell applies a simple command's redirections in itself (and saves the
	 * old descriptor) before it forks, which would add descriptors of its own.
	 */
	snprintf(cmd, sizeof(cmd), "sh -c \"ls /proc/\\$PPID/fd > '%s'\"; true", out);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (status %d)", st);
	ck_assert_int_gt(parse_fds(out, open_, NULL), 0);
}

START_TEST(test_proxy_descriptors)
{
	char before[MAXFD], proxy[MAXFD], proxy_sock[MAXFD], child[MAXFD];
	char cfg[300], extra[2000], listing[300], pidfile[300], out[300], link[64], target[128];
	char proc[64];
	struct stat pst;
	long proxy_pid;
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_stat_info st;
	asp_error e = { 0 };
	int marker, rc, sockets = 0;
	char *text;

	snprintf(listing, sizeof(listing), "%s/proxy-fds", fx.dir);
	snprintf(pidfile, sizeof(pidfile), "%s/proxy-pid", fx.dir);
	snprintf(out, sizeof(out), "%s/child-fds", fx.dir);
	snprintf(cfg, sizeof(cfg), "%s/proxy.asp.json", fx.dir);
	snprintf(extra, sizeof(extra),
		 "\"x-asp-proxy-command\": \"sh -c 'echo $PPID > %s; ls -l /proc/$PPID/fd > %s'; "
		 "exec /usr/sbin/sshd -i -f %s/sshd_config -E %s/inetd.log\"", pidfile, listing, fx.dir,
		 fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .extra = extra }), 0);

	/* A descriptor of the harness's without close-on-exec. */
	marker = open("/dev/null", O_RDONLY);
	ck_assert_int_ge(marker, 3);
	ck_assert_int_eq(fcntl(marker, F_GETFD) & FD_CLOEXEC, 0);
	for (int fd = 0; fd < MAXFD; fd++)
		before[fd] = (char)fd_open(fd);

	o.config_path = cfg;
	rc = asp_open(&sb, &o, &e);
	ck_assert_msg(rc == ASP_OK, "asp_open through the proxy: %s: %s", asp_error_name(rc), e.message);
	/* The session really runs through the proxy. */
	rc = asp_stat(&st, sb, ".", NULL, &e);
	ck_assert_msg(rc == ASP_OK && st.type == ASP_TYPE_DIR, "stat through the proxy: %s: %s",
		      asp_error_name(rc), e.message);

	/* The proxy had 0, 1 (the socket) and 2, and nothing else; not the marker. */
	parse_fds(listing, proxy, proxy_sock);
	text = fx_read_file(listing, NULL);
	ck_assert_msg(proxy[0] && proxy[1] && proxy[2] && proxy_sock[0] && proxy_sock[1],
		      "the proxy's stdin/stdout are not the socket: [%s]", text);
	free(text);
	for (int fd = 3; fd < MAXFD; fd++)
		ck_assert_msg(!proxy[fd], "the proxy inherited descriptor %d%s", fd,
			      fd == marker ? " (the harness's marker, not close-on-exec)" : "");

	/* The harness's new descriptors: the proxy socket among them. */
	for (int fd = 0; fd < MAXFD; fd++) {
		ssize_t n;

		if (before[fd] || !fd_open(fd))
			continue;
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, target, sizeof(target) - 1);
		target[n > 0 ? n : 0] = '\0';
		sockets += !strncmp(target, "socket:", 7);
	}
	ck_assert_msg(sockets >= 1, "no new socket in the harness process (the proxy socket pair?)");

	/* A program the harness starts now: it gets the marker (positive control), no libasp descriptor. */
	child_fds(out, child);
	ck_assert_msg(child[marker], "the positive control failed: descriptor %d without "
		      "close-on-exec did not reach the child", marker);
	for (int fd = 3; fd < MAXFD; fd++)
		ck_assert_msg(!child[fd] || before[fd] || fd == marker || !fd_open(fd),
			      "a program the harness started inherited libasp's descriptor %d", fd);

	/* The proxy (now sshd -i, same pid) runs while the handle is open and is gone after asp_close. */
	text = fx_read_file(pidfile, NULL);
	ck_assert_msg(text && sscanf(text, "%ld", &proxy_pid) == 1 && proxy_pid > 1, "no proxy pid");
	free(text);
	snprintf(proc, sizeof(proc), "/proc/%ld", proxy_pid);
	ck_assert_msg(stat(proc, &pst) == 0, "the proxy %ld is not running", proxy_pid);
	asp_close(sb);
	ck_assert_msg(stat(proc, &pst) != 0, "the proxy %ld outlived asp_close", proxy_pid);
	close(marker);
}
END_TEST

/* connection.proxyCommand (the ASP RFC's name) runs the same way: sshd in inetd mode as the proxy. */
START_TEST(test_proxy_command_rfc_name)
{
	char cfg[300], extra[1200], pidfile[300];
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	long proxy_pid = 0;
	char *text;
	int rc;

	snprintf(pidfile, sizeof(pidfile), "%s/rfc-proxy-pid", fx.dir);
	snprintf(cfg, sizeof(cfg), "%s/rfc.asp.json", fx.dir);
	snprintf(extra, sizeof(extra),
		 "\"proxyCommand\": \"echo $$ > %s; exec /usr/sbin/sshd -i -f %s/sshd_config -E "
		 "%s/inetd.log\"", pidfile, fx.dir, fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .extra = extra }), 0);
	o.config_path = cfg;
	rc = asp_open(&sb, &o, &e);
	ck_assert_msg(rc == ASP_OK, "asp_open through proxyCommand: %s: %s", asp_error_name(rc),
		      e.message);
	rc = asp_exec(&r, sb, "echo through-the-proxy", NULL, &e);
	ck_assert_msg(rc == ASP_OK, "exec through proxyCommand: %s: %s", asp_error_name(rc), e.message);
	ck_assert_int_eq(asp_exec_result_exit_code(r), 0);
	asp_exec_result_free(r);
	/* The connection really ran through the command: it recorded its pid and is still running. */
	text = fx_read_file(pidfile, NULL);
	ck_assert_msg(text && sscanf(text, "%ld", &proxy_pid) == 1 && proxy_pid > 1,
		      "proxyCommand did not run (no pid in %s)", pidfile);
	free(text);
	ck_assert_msg(kill((pid_t)proxy_pid, 0) == 0, "the proxyCommand process %ld is not running",
		      proxy_pid);
	asp_close(sb);
}
END_TEST

Suite *suite_proxyfd(void)
{
	Suite *s = suite_create("proxyfd");
	TCase *tc = tcase_create("proxyfd");

	tcase_add_unchecked_fixture(tc, proxyfd_setup, proxyfd_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_proxy_descriptors);
	tcase_add_test(tc, test_proxy_command_rfc_name);
	suite_add_tcase(s, tc);
	return s;
}
