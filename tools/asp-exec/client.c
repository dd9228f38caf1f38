/*
 * client.c - a request through the connection-sharing master: connect to
 * the configuration's socket (starting a master under a lock when nothing
 * listens), send the request with our stdin/stdout/stderr attached, and
 * wait for the exit status. The master writes the output straight to our
 * descriptors, so we only wait; a signal becomes a CANCEL frame.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "proto.h"

#define MASTER_START_MS 5000
#define READY_FD 3
#define CONFIG_FD 4

char *cli_core_path(void)
{
	char self[PATH_MAX], *slash, *core;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return NULL;
	self[n] = '\0';
	if (!(slash = strrchr(self, '/')))
		return NULL;
	*slash = '\0';
	return asprintf(&core, "%s/%s", self, CLI_CORE_NAME) < 0 ? NULL : core;
}

/* Connected socket, or -1 with errno (ENOENT/ECONNREFUSED: nothing listens). */
static int try_connect(const char *path)
{
	struct sockaddr_un a;
	int fd, saved;

	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	memcpy(a.sun_path, path, strlen(path) + 1); /* cli_paths keeps it short enough */
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
		return fd;
	saved = errno;
	close(fd);
	errno = saved;
	return -1;
}

/* In the grandchild: become the master, detached from our session and descriptors. */
static void exec_master(const cli_paths *p, const char *config, int config_fd,
			unsigned int persist_s, int ready)
{
	char persist[16], fd_text[8], config_text[8], *core = cli_core_path();
	int null = open("/dev/null", O_RDWR);
	sigset_t none;

	setsid();
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
		_exit(127);
	/* Only the ready pipe survives: a harness's pipe inherited by a long-lived
	 * master would never see EOF. */
	if (config_fd == READY_FD && (config_fd = fcntl(config_fd, F_DUPFD_CLOEXEC, CONFIG_FD + 1)) < 0)
		_exit(127);
	if (ready == READY_FD ? fcntl(READY_FD, F_SETFD, 0) < 0 : dup2(ready, READY_FD) < 0)
		_exit(127);
	/* ... and the configuration the client judged: the master reads it, never its path. */
	if (config_fd == CONFIG_FD ? fcntl(CONFIG_FD, F_SETFD, 0) < 0 : dup2(config_fd, CONFIG_FD) < 0)
		_exit(127);
	close_range(CONFIG_FD + 1, ~0U, 0);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGTERM, SIG_DFL);
	snprintf(persist, sizeof(persist), "%u", persist_s);
	snprintf(fd_text, sizeof(fd_text), "%d", READY_FD);
	snprintf(config_text, sizeof(config_text), "%d", CONFIG_FD);
	if (core)
		execl(core, "asp-exec", "--master", p->sock, "--config", config, "--config-fd",
		      config_text, "--persist", persist, "--ready-fd", fd_text, (char *)NULL);
	_exit(127);
}

/* 1 when fd delivers a byte within ms. */
static int wait_ready(int fd, int ms)
{
	struct pollfd f = { fd, POLLIN, 0 };
	char b;

	while (poll(&f, 1, ms) < 0)
		if (errno != EINTR || cli_signals_received())
			return 0;
	return (f.revents & POLLIN) && read(fd, &b, 1) == 1;
}

/* Start a master (double fork: it is nobody's child) and wait until it listens. */
static int start_master(const cli_paths *p, const char *config, int config_fd,
			unsigned int persist_s)
{
	int ready[2], ok;
	pid_t pid;

	if (config_fd < 0 || pipe2(ready, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		if (fork() == 0)
			exec_master(p, config, config_fd, persist_s, ready[1]);
		_exit(0);
	}
	close(ready[1]);
	if (pid > 0)
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	ok = pid > 0 && wait_ready(ready[0], MASTER_START_MS);
	close(ready[0]);
	return ok ? 0 : -1;
}

/* Under the lock, so that two clients do not both start a master. */
static int connect_or_start(const cli_paths *p, const char *config, int config_fd,
			    unsigned int persist_s)
{
	int fd = try_connect(p->sock), lock;

	if (fd >= 0 || (errno != ENOENT && errno != ECONNREFUSED))
		return fd;
	lock = open(p->lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lock < 0)
		return -1;
	while (flock(lock, LOCK_EX) < 0)
		if (errno != EINTR || cli_signals_received()) {
			close(lock);
			return -1;
		}
	fd = try_connect(p->sock);
	if (fd < 0 && (errno == ENOENT || errno == ECONNREFUSED)) {
		unlink(p->sock); /* a dead master's socket, if any */
		if (start_master(p, config, config_fd, persist_s) == 0)
			fd = try_connect(p->sock);
	}
	close(lock);
	return fd;
}

/*
 * Send the request and wait for its status: 0 with *status, or 1 when the
 * master hung up before accepting it (nothing ran; try again).
 */
static int exchange(int sock, const cli_request *req, int *status)
{
	static const int fds[3] = { 0, 1, 2 };
	int type, value, rc, accepted = 0;

	if (proto_send_request(sock, req, fds))
		return 1;
	cli_signals_target_sock(sock);
	while ((rc = proto_recv_frame(sock, &type, &value)) != 0) {
		if (rc < 0 && errno != EINTR)
			break;
		if (rc > 0 && type == FRAME_ACCEPTED)
			accepted = 1;
		if (rc > 0 && type == FRAME_STATUS) {
			cli_signals_target_sock(-1);
			*status = value;
			return 0;
		}
	}
	cli_signals_target_sock(-1);
	if (!accepted)
		return 1;
	cli_say(2, "the master process went away while running the request; it may have run in part");
	*status = CLI_EXIT_FAILURE;
	return 0;
}

/* The master's paths; a refused runtime directory is said here, once per call. */
static int locate(const char *config, int config_fd, cli_paths *p)
{
	char why[256];

	if (cli_master_paths(p, config, config_fd, why, sizeof(why)) == 0)
		return 0;
	cli_say(2, "not sharing connections: %s", why);
	return -1;
}

int cli_client_run(const char *config, int config_fd, unsigned int persist_s,
		   const cli_request *req, int *status)
{
	cli_paths p;
	int attempt, rc = 1;

	if (locate(config, config_fd, &p))
		return -1;
	for (attempt = 0; attempt < 2 && rc == 1; attempt++) {
		int sock;

		if (cli_signals_received()) {
			*status = 128 + cli_signals_received();
			return 0;
		}
		if ((sock = connect_or_start(&p, config, config_fd, persist_s)) < 0)
			break;
		rc = exchange(sock, req, status);
		close(sock);
	}
	return rc == 0 ? 0 : -1;
}

int cli_client_stop(const char *config, int config_fd)
{
	cli_paths p;
	cli_request *req;
	int sock, status = CLI_EXIT_FILE;

	if (locate(config, config_fd, &p))
		return CLI_EXIT_FAILURE;
	/* A dead master's socket stays: the next call replaces it under the lock. */
	if ((sock = try_connect(p.sock)) < 0) {
		cli_say(2, "no master is running for %s", config);
		return CLI_EXIT_FILE;
	}
	if (!(req = cli_request_new())) {
		status = CLI_EXIT_FAILURE;
	} else {
		req->mode = CLI_STOP;
		if (exchange(sock, req, &status) == 1) {
			cli_say(2, "the master for %s did not answer", config);
			status = CLI_EXIT_FAILURE;
		}
		cli_request_free(req);
	}
	close(sock);
	return status;
}
