/*
 * delayproxy.c - an emulated WAN link for bench/run.py: a TCP proxy on
 * 127.0.0.1 that holds every byte for delay_ms before passing it on, in
 * each direction (25 ms each way = 50 ms RTT). Bandwidth is not limited and
 * nothing is dropped; only latency is added. It connects only to
 * 127.0.0.1:target_port.
 *
 *   delayproxy target_port=N delay_ms=25 [port=0]
 *
 * Prints the port it listens on (one line), then serves until SIGTERM or
 * until its parent dies. Single-threaded: one ppoll loop, a queue of
 * time-stamped chunks per direction.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include "bench_common.h"

#define MAX_CONNS 512
#define CHUNK 65536
#define QUEUE_LIMIT (16u << 20) /* stop reading a side while this much is in flight */

typedef struct chunk {
	struct chunk *next;
	double due;
	size_t len, off;
	unsigned char data[];
} chunk;

typedef struct dir {
	int from, to;
	chunk *head, *tail;
	size_t queued;
	int eof, shut;
} dir;

typedef struct pconn {
	int used;
	dir d[2]; /* 0: client -> server, 1: server -> client */
} pconn;

static pconn conns[MAX_CONNS];
static double delay;

static void nonblock(int fd)
{
	int one = 1;

	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void conn_free(pconn *c)
{
	for (int i = 0; i < 2; i++) {
		chunk *k = c->d[i].head;
		while (k) {
			chunk *n = k->next;
			free(k);
			k = n;
		}
	}
	close(c->d[0].from);
	close(c->d[0].to);
	memset(c, 0, sizeof(*c));
}

static void accept_one(int lfd, int target_port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), b, slot;

	if (a < 0)
		return;
	for (slot = 0; slot < MAX_CONNS && conns[slot].used; slot++)
		;
	sa.sin_port = htons((uint16_t)target_port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (slot == MAX_CONNS || b < 0 || connect(b, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(a);
		if (b >= 0)
			close(b);
		return;
	}
	nonblock(a);
	nonblock(b);
	conns[slot] = (pconn){ 1, { { a, b, NULL, NULL, 0, 0, 0 }, { b, a, NULL, NULL, 0, 0, 0 } } };
}

/* Read what is there into the queue; -1 on a hard error. */
static int pump_in(dir *d)
{
	for (;;) {
		chunk *k = malloc(sizeof(chunk) + CHUNK);
		ssize_t n;

		if (!k)
			return -1;
		n = read(d->from, k->data, CHUNK);
		if (n <= 0) {
			free(k);
			if (n == 0) {
				d->eof = 1;
				return 0;
			}
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		}
		k->next = NULL;
		k->due = now_ms() + delay;
		k->len = (size_t)n;
		k->off = 0;
		if (d->tail)
			d->tail->next = k;
		else
			d->head = k;
		d->tail = k;
		d->queued += (size_t)n;
		if (d->queued >= QUEUE_LIMIT)
			return 0;
	}
}

/* Write the chunks that are due; -1 on a hard error. */
static int pump_out(dir *d)
{
	double now = now_ms();

	while (d->head && d->head->due <= now) {
		chunk *k = d->head;
		ssize_t n = write(d->to, k->data + k->off, k->len - k->off);

		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		k->off += (size_t)n;
		d->queued -= (size_t)n;
		if (k->off < k->len)
			return 0;
		d->head = k->next;
		if (!d->head)
			d->tail = NULL;
		free(k);
	}
	if (d->eof && !d->head && !d->shut) {
		shutdown(d->to, SHUT_WR);
		d->shut = 1;
	}
	return 0;
}

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	int lfd, one = 1, target;
	static struct pollfd pfd[1 + 2 * MAX_CONNS];
	static int who[1 + 2 * MAX_CONNS];

	bench_args(argc, argv);
	target = (int)arg_l("target_port", 0);
	delay = (double)arg_l("delay_ms", 25);
	if (target <= 0)
		die("delayproxy: target_port= is required");
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)arg_l("port", 0));
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 256) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0)
		die("delayproxy: listen: %s", strerror(errno));
	printf("%d\n", ntohs(sa.sin_port));
	fflush(stdout);
	while (!stop) {
		nfds_t n = 1;
		double now = now_ms(), next = -1;
		struct timespec ts, *tsp = NULL;

		pfd[0] = (struct pollfd){ lfd, POLLIN, 0 };
		for (int i = 0; i < MAX_CONNS; i++) {
			if (!conns[i].used)
				continue;
			for (int j = 0; j < 2; j++) {
				dir *d = &conns[i].d[j], *o = &conns[i].d[1 - j];
				short ev = 0;

				/* fd d->from: read for this direction, write for the other one. */
				if (!d->eof && d->queued < QUEUE_LIMIT)
					ev |= POLLIN;
				if (o->head && o->head->due <= now)
					ev |= POLLOUT;
				if (o->head && o->head->due > now && (next < 0 || o->head->due < next))
					next = o->head->due;
				pfd[n] = (struct pollfd){ d->from, ev, 0 };
				who[n++] = i * 2 + j;
			}
		}
		if (next >= 0) {
			double w = next - now;
			ts.tv_sec = (time_t)(w / 1e3);
			ts.tv_nsec = (long)((w - (double)ts.tv_sec * 1e3) * 1e6);
			tsp = &ts;
		}
		if (ppoll(pfd, n, tsp, NULL) < 0 && errno != EINTR)
			die("delayproxy: ppoll: %s", strerror(errno));
		if (pfd[0].revents & POLLIN)
			accept_one(lfd, target);
		for (nfds_t k = 1; k < n; k++) {
			pconn *c = &conns[who[k] / 2];
			dir *d = &c->d[who[k] % 2];
			int bad = 0;

			if (!c->used)
				continue;
			if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR))
				bad |= pump_in(d) < 0;
			if (bad || (pfd[k].revents & POLLERR && d->eof)) {
				conn_free(c);
				continue;
			}
		}
		for (int i = 0; i < MAX_CONNS; i++) {
			if (!conns[i].used)
				continue;
			if (pump_out(&conns[i].d[0]) < 0 || pump_out(&conns[i].d[1]) < 0 ||
			    (conns[i].d[0].shut && conns[i].d[1].shut))
				conn_free(&conns[i]);
		}
	}
	return 0;
}
