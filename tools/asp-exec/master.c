/*
 * master.c - the connection-sharing master (like OpenSSH's ControlPersist):
 * one asp_sandbox for one configuration, a Unix socket in the private
 * directory, a thread per request. A request runs through cli_run() on the
 * client's own stdin/stdout/stderr (received with SCM_RIGHTS); a second
 * thread per request watches the client's socket, so a CANCEL frame or a
 * hang-up cancels the command.
 *
 * The master exits after persist_s seconds without a request, on --stop,
 * or when its socket is no longer the one at its path (replaced or
 * removed), each time after the requests in flight have finished.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "proto.h"

#define MASTER_CONNECTIONS 8
#define REQUEST_READ_TIMEOUT_S 10
#define HOUSEKEEPING_MS 1000
/* More than libasp takes (1 MiB), so that libasp is the one to say it is too large. */
#define MASTER_CONFIG_MAX ((size_t)2 << 20)

typedef struct master {
	asp_sandbox *sb;
	const char *path;
	dev_t dev;
	ino_t ino;
	int listen_fd;
	int wake[2];              /* a request asked us to stop */
	unsigned int persist_s;
	pthread_mutex_t mu;
	pthread_cond_t done;      /* active reached 0 */
	unsigned int active;      /* guarded by mu, as are last_ms and stopping */
	uint64_t last_ms;
	int stopping;
} master;

typedef struct session {
	master *m;
	int fd;
} session;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ the socket */

static int listen_on(master *m)
{
	struct sockaddr_un a;
	struct stat st;

	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	if (strlen(m->path) >= sizeof(a.sun_path))
		return -1;
	memcpy(a.sun_path, m->path, strlen(m->path) + 1);
	if ((m->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (bind(m->listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(m->listen_fd, SOMAXCONN) < 0 || stat(m->path, &st) < 0)
		return -1;
	m->dev = st.st_dev;
	m->ino = st.st_ino;
	return 0;
}

/* Our socket is still the one at the path (no newer master replaced it). */
static int socket_is_ours(const master *m)
{
	struct stat st;

	return stat(m->path, &st) == 0 && st.st_dev == m->dev && st.st_ino == m->ino;
}

static void unlink_if_ours(const master *m)
{
	if (socket_is_ours(m))
		unlink(m->path);
}

/* The directory is private already; this also keeps out other users that got in. */
static int peer_is_us(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == geteuid();
}

/* ------------------------------------------------------------ activity */

static void activity_begin(master *m)
{
	pthread_mutex_lock(&m->mu);
	m->active++;
	pthread_mutex_unlock(&m->mu);
}

static void activity_end(master *m)
{
	pthread_mutex_lock(&m->mu);
	m->last_ms = now_ms();
	if (--m->active == 0)
		pthread_cond_broadcast(&m->done);
	pthread_mutex_unlock(&m->mu);
}

static void begin_stop(master *m)
{
	char b = 1;

	pthread_mutex_lock(&m->mu);
	m->stopping = 1;
	pthread_mutex_unlock(&m->mu);
	unlink_if_ours(m); /* the next client starts a new master at once */
	if (write(m->wake[1], &b, 1) < 0) {
		/* the main loop notices within HOUSEKEEPING_MS anyway */
	}
}

/* How long the main loop may sleep; 0 when it is time to exit. */
static int sleep_ms(master *m)
{
	uint64_t idle, limit = (uint64_t)m->persist_s * 1000;
	int ms = HOUSEKEEPING_MS;

	pthread_mutex_lock(&m->mu);
	idle = now_ms() - m->last_ms;
	if (m->stopping)
		ms = 0;
	else if (!m->active)
		ms = idle >= limit ? 0 : (int)(limit - idle < HOUSEKEEPING_MS ? limit - idle : HOUSEKEEPING_MS);
	pthread_mutex_unlock(&m->mu);
	return ms;
}

/* ------------------------------------------------------------ one request */

typedef struct watcher {
	int sock;
	int stop[2];
	cli_io *io;
	pthread_t thread;
} watcher;

/* CANCEL frames cancel the request, and so does the client hanging up. */
static void *watch_main(void *arg)
{
	watcher *w = arg;
	struct pollfd f[2] = { { w->sock, POLLIN, 0 }, { w->stop[0], POLLIN, 0 } };
	int type, value, rc;

	for (;;) {
		if (poll(f, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (f[1].revents)
			break;
		rc = proto_recv_frame(w->sock, &type, &value);
		if (rc > 0 && type == FRAME_CANCEL)
			cli_io_cancel(w->io, value);
		else if (rc <= 0) {
			cli_io_cancel(w->io, SIGHUP);
			break;
		}
	}
	return NULL;
}

static int watcher_start(watcher *w, int sock, cli_io *io)
{
	w->sock = sock;
	w->io = io;
	if (pipe2(w->stop, O_CLOEXEC) < 0)
		return -1;
	if (pthread_create(&w->thread, NULL, watch_main, w) == 0)
		return 0;
	close(w->stop[0]);
	close(w->stop[1]);
	return -1;
}

static void watcher_stop(watcher *w)
{
	char b = 1;

	if (write(w->stop[1], &b, 1) < 0) {
		/* an empty pipe always takes a byte */
	}
	pthread_join(w->thread, NULL);
	close(w->stop[0]);
	close(w->stop[1]);
}

static void close_fds(int fds[3])
{
	for (int i = 0; i < 3; i++)
		close(fds[i]);
}

static void serve_request(session *s, const cli_request *req, int fds[3])
{
	cli_io io = { fds[0], fds[1], fds[2], NULL, 0 };
	watcher w;
	int status;

	if (asp_cancel_new(&io.cancel, NULL)) {
		close_fds(fds);
		return;
	}
	if (watcher_start(&w, s->fd, &io) == 0) {
		if (proto_send_frame(s->fd, FRAME_ACCEPTED, 0) == 0) {
			status = cli_run(s->m->sb, req, &io);
		} else {
			status = CLI_EXIT_FAILURE; /* the client is gone */
		}
		watcher_stop(&w);
		/* Close the client's descriptors before it exits: a harness
		 * reading its stdout waits for EOF from every copy. */
		close_fds(fds);
		proto_send_frame(s->fd, FRAME_STATUS, status);
	} else {
		close_fds(fds);
	}
	asp_cancel_free(io.cancel);
}

static void *session_main(void *arg)
{
	session *s = arg;
	struct timeval limit = { REQUEST_READ_TIMEOUT_S, 0 }, none = { 0, 0 };
	cli_request *req;
	int fds[3];

	setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
	if (proto_recv_request(s->fd, &req, fds) == 0) {
		setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
		if (req->mode == CLI_STOP) {
			close_fds(fds);
			begin_stop(s->m);
			proto_send_frame(s->fd, FRAME_STATUS, 0);
		} else {
			serve_request(s, req, fds);
		}
		cli_request_free(req);
	}
	close(s->fd);
	activity_end(s->m);
	free(s);
	return NULL;
}

static void accept_one(master *m)
{
	pthread_attr_t attr;
	pthread_t t;
	session *s;
	int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (!peer_is_us(fd) || !(s = malloc(sizeof(*s)))) {
		close(fd);
		return;
	}
	s->m = m;
	s->fd = fd;
	activity_begin(m);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, session_main, s) != 0) {
		close(fd);
		free(s);
		activity_end(m);
	}
	pthread_attr_destroy(&attr);
}

/* ------------------------------------------------------------ main loop */

static void serve(master *m)
{
	char drain[16];
	int ms;

	while ((ms = sleep_ms(m)) > 0 && socket_is_ours(m)) {
		struct pollfd f[2] = { { m->listen_fd, POLLIN, 0 }, { m->wake[0], POLLIN, 0 } };

		if (poll(f, 2, ms) <= 0)
			continue;
		if (f[0].revents & POLLIN)
			accept_one(m);
		if (f[1].revents && read(m->wake[0], drain, sizeof(drain)) < 0)
			break;
	}
	unlink_if_ours(m);
	close(m->listen_fd);
	pthread_mutex_lock(&m->mu);
	while (m->active)
		pthread_cond_wait(&m->done, &m->mu);
	pthread_mutex_unlock(&m->mu);
}

/*
 * The configuration its client judged, from the descriptor it handed over
 * (malloc'd, NUL-terminated), or NULL. Reading the path instead would read
 * whatever is there now, which may no longer be what was judged.
 */
static char *read_config(int fd)
{
	size_t len = 0, cap = 0;
	char *text = NULL, *grown;
	ssize_t n;

	if (fd < 0)
		return NULL;
	for (;;) {
		if (cap - len < 4096) {
			if (cap >= MASTER_CONFIG_MAX || !(grown = realloc(text, cap + 65536))) {
				close(fd);
				break;
			}
			text = grown;
			cap += 65536;
		}
		n = read(fd, text + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			if (n < 0 || memchr(text, '\0', len))
				break;
			text[len] = '\0';
			return text;
		}
		len += (size_t)n;
	}
	free(text);
	return NULL;
}

int cli_master_main(const char *config, int config_fd, const char *socket_path,
		    unsigned int persist_s, int ready_fd)
{
	master m;
	asp_error e;
	char b = 'R', *text = read_config(config_fd);
	int rc = CLI_EXIT_FAILURE;

	memset(&m, 0, sizeof(m));
	m.path = socket_path;
	m.persist_s = persist_s;
	m.listen_fd = -1;
	m.last_ms = now_ms();
	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	umask(077);
	pthread_mutex_init(&m.mu, NULL);
	pthread_cond_init(&m.done, NULL);
	/* A failure here closes ready_fd unwritten: the client then runs
	 * directly and reports the problem itself. */
	if (text && cli_open(&m.sb, config, text, MASTER_CONNECTIONS, &e) == 0 && chdir("/") == 0 &&
	    pipe2(m.wake, O_CLOEXEC) == 0 && listen_on(&m) == 0 && write(ready_fd, &b, 1) == 1) {
		close(ready_fd);
		serve(&m);
		rc = 0;
	} else if (m.listen_fd >= 0) {
		unlink_if_ours(&m);
	}
	asp_close(m.sb);
	free(text);
	return rc;
}
