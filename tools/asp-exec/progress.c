/*
 * progress.c - how far a --read or --write is, on a terminal.
 *
 * One line on stderr, redrawn in place ("\r" ... erase to the end of the
 * line) by a thread of its own at most PROGRESS_TICK_MS apart, so it moves
 * while libasp blocks in a call; the request's thread only stores numbers.
 * Only for a terminal, only without --quiet, and only for transfers of
 * PROGRESS_MIN_BYTES or more: a small file draws nothing. The end draws the
 * totals and a newline (or, after a failure, erases the line, so that the
 * error message starts a clean line).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define PROGRESS_TICK_MS 100
#define PROGRESS_MIN_BYTES (1024u * 1024)

struct cli_progress {
	int fd;
	char what[256]; /* "read PATH" */
	_Atomic uint64_t done, total;  /* total 0: not known (yet) */
	_Atomic(const char *) phase;   /* a static string, or NULL */
	struct timespec t0;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	int stop;
	int drawn;
};

static double elapsed_s(const cli_progress *p)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - p->t0.tv_sec) + (double)(now.tv_nsec - p->t0.tv_nsec) / 1e9;
}

static void human(char *out, size_t len, double bytes)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	while (bytes >= 1024 && u < 4) {
		bytes /= 1024;
		u++;
	}
	snprintf(out, len, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
}

/* The line for the numbers now; `last`: the totals, ending the line. */
static void draw(cli_progress *p, int last)
{
	uint64_t done = atomic_load(&p->done), total = atomic_load(&p->total);
	const char *phase = atomic_load(&p->phase);
	double secs = elapsed_s(p), rate = secs > 0 ? (double)done / secs : 0;
	char line[512], d[32], t[32], r[32];
	int n;

	if (!last && done < PROGRESS_MIN_BYTES && total < PROGRESS_MIN_BYTES)
		return;
	human(d, sizeof(d), (double)done);
	human(t, sizeof(t), (double)total);
	human(r, sizeof(r), rate);
	if (last)
		n = snprintf(line, sizeof(line), "\rasp-exec: %s: %s in %.1f s, %s/s\033[K\n", p->what, d, secs, r);
	else if (phase)
		n = snprintf(line, sizeof(line), "\rasp-exec: %s: %s %s, %.1f s\033[K", p->what, phase,
			     total ? t : d, secs);
	else if (total && rate > 0) {
		double eta = (double)(total > done ? total - done : 0) / rate;

		n = snprintf(line, sizeof(line), "\rasp-exec: %s: %s / %s (%d%%), %s/s, ETA %d:%02d\033[K",
			     p->what, d, t, (int)(100.0 * (double)done / (double)total), r,
			     (int)eta / 60, (int)eta % 60);
	} else
		n = snprintf(line, sizeof(line), "\rasp-exec: %s: %s, %s/s\033[K", p->what, d, r);
	if (n <= 0)
		return;
	if (write(p->fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1) > 0)
		p->drawn = 1;
}

static void *ticker(void *arg)
{
	cli_progress *p = arg;
	struct timespec due;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		clock_gettime(CLOCK_REALTIME, &due);
		due.tv_nsec += PROGRESS_TICK_MS * 1000000L;
		due.tv_sec += due.tv_nsec / 1000000000L;
		due.tv_nsec %= 1000000000L;
		if (pthread_cond_timedwait(&p->wake, &p->lock, &due) && !p->stop)
			draw(p, 0);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

cli_progress *cli_progress_start(int fd, int quiet, const char *verb, const char *path)
{
	cli_progress *p;

	if (quiet || !isatty(fd) || !(p = calloc(1, sizeof(*p))))
		return NULL;
	p->fd = fd;
	snprintf(p->what, sizeof(p->what), "%s %s", verb, path);
	clock_gettime(CLOCK_MONOTONIC, &p->t0);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	if (pthread_create(&p->thread, NULL, ticker, p)) {
		pthread_cond_destroy(&p->wake);
		pthread_mutex_destroy(&p->lock);
		free(p);
		return NULL; /* no progress, the transfer goes on */
	}
	return p;
}

void cli_progress_set(cli_progress *p, uint64_t done, uint64_t total, const char *phase)
{
	if (!p)
		return;
	atomic_store(&p->done, done);
	atomic_store(&p->total, total);
	atomic_store(&p->phase, phase);
}

void cli_progress_end(cli_progress *p, int ok)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	if (ok && (atomic_load(&p->done) >= PROGRESS_MIN_BYTES || p->drawn))
		draw(p, 1);
	else if (p->drawn && write(p->fd, "\r\033[K", 4) < 0)
		p->drawn = 0; /* nowhere left to report to */
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
