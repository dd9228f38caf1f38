/*
 * pump.c - feeds a blocking stdin to libasp through a private pipe.
 *
 * libasp reads asp_exec_options.stdin_fd whenever it has room for more,
 * without polling first, so a blocking descriptor with nothing to read
 * (a terminal, a quiet pipe) would stall the command's output. Setting
 * O_NONBLOCK on it is not ours to do: the open file description is shared
 * with the shell or harness that gave it to us. So a thread copies it into
 * a pipe whose read end is non-blocking and ours alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cli.h"

struct cli_pump {
	int src;          /* the caller's stdin (not ours) */
	int rd, wr;       /* the pipe */
	int stop[2];      /* written to when the command is over */
	pthread_t thread;
};

/* Descriptors libasp can read as they are: never block, or already non-blocking. */
static int usable_as_is(int fd)
{
	struct stat st;
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || (fl & O_NONBLOCK))
		return 1; /* a closed stdin is reported by libasp's read */
	if (fstat(fd, &st) < 0)
		return 1;
	return S_ISREG(st.st_mode) || (S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3));
}

/* Wait until fd is ready for `events` or the pump is stopped; 1 when ready. */
static int ready(cli_pump *p, int fd, short events)
{
	struct pollfd f[2] = { { fd, events, 0 }, { p->stop[0], POLLIN, 0 } };

	for (;;) {
		if (poll(f, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 0;
		}
		if (f[1].revents)
			return 0;
		if (f[0].revents)
			return 1;
	}
}

static int copy_out(cli_pump *p, const char *buf, size_t len)
{
	while (len) {
		ssize_t n;

		if (!ready(p, p->wr, POLLOUT))
			return -1;
		n = write(p->wr, buf, len);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0)
			return -1; /* the command is over and the pipe closed */
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static void *pump_main(void *arg)
{
	cli_pump *p = arg;
	char buf[65536];

	while (ready(p, p->src, POLLIN)) {
		ssize_t n = read(p->src, buf, sizeof(buf));

		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0 || copy_out(p, buf, (size_t)n))
			break;
	}
	close(p->wr); /* EOF for the command */
	p->wr = -1;
	return NULL;
}

int cli_pump_start(cli_pump **out, int src, int *fd_out)
{
	cli_pump *p;
	int fds[2];

	*out = NULL;
	*fd_out = src;
	if (usable_as_is(src))
		return 0;
	if (!(p = calloc(1, sizeof(*p))))
		return -1;
	p->src = src;
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
		free(p);
		return -1;
	}
	p->rd = fds[0];
	p->wr = fds[1];
	if (pipe2(p->stop, O_CLOEXEC) < 0)
		goto fail_pipe;
	if ((errno = pthread_create(&p->thread, NULL, pump_main, p)) != 0)
		goto fail_stop;
	*out = p;
	*fd_out = p->rd;
	return 0;
fail_stop:
	close(p->stop[0]);
	close(p->stop[1]);
fail_pipe:
	close(fds[0]);
	close(fds[1]);
	free(p);
	return -1;
}

void cli_pump_stop(cli_pump *p)
{
	char b = 1;

	if (!p)
		return;
	if (write(p->stop[1], &b, 1) < 0) {
		/* cannot happen with an empty pipe; the join below would then wait for stdin */
	}
	pthread_join(p->thread, NULL);
	close(p->stop[0]);
	close(p->stop[1]);
	close(p->rd);
	free(p);
}
