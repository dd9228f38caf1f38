/*
 * pool.c - connection pool. One operation owns a connection at a time
 * (libssh2 sessions are not thread-safe), so N threads use up to `max`
 * connections in parallel and the rest wait for one to come back. A small
 * maintenance thread sends keepalives on idle connections and closes those
 * idle for longer than idle_close_s.
 */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "cancel.h"

struct asp_pool {
	pthread_mutex_t mu;
	pthread_cond_t returned;  /* a connection came back or a slot freed */
	pthread_cond_t wake;      /* wakes the maintenance thread */
	const asp_conn_params *params;
	asp_conn **idle;          /* a stack: the most recently used on top */
	asp_conn **doomed;        /* the maintenance thread's list of connections to close */
	unsigned int nidle;
	unsigned int total;       /* idle + checked out + being connected */
	unsigned int max;
	unsigned int idle_close_s;
	int stopping;
	int have_thread;
	pthread_t thread;
};

static void abs_deadline(struct timespec *ts, unsigned int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/*
 * Under the lock: take idle connections that are too old or dead out of the
 * pool (into `doomed`, closed by the caller after unlocking: a polite
 * disconnect can take a while), and ping the others when due.
 */
static unsigned int maintain(asp_pool *p, asp_conn **doomed)
{
	uint64_t now = asp__now_ms();
	unsigned int i, j = 0, n = 0;

	for (i = 0; i < p->nidle; i++) {
		asp_conn *c = p->idle[i];
		uint64_t idle = now - asp__conn_last_used(c);
		if (idle >= (uint64_t)p->idle_close_s * 1000u ||
		    (idle >= (uint64_t)p->params->keepalive_s * 1000u && asp__conn_keepalive(c)) ||
		    !asp__conn_check_idle(c)) {
			doomed[n++] = c;
			p->total--;
			continue;
		}
		p->idle[j++] = c;
	}
	if (j != p->nidle) {
		p->nidle = j;
		pthread_cond_broadcast(&p->returned);
	}
	return n;
}

static void close_all(asp_conn **conns, unsigned int n)
{
	while (n > 0)
		asp__conn_close(conns[--n]);
}

static void *maintenance(void *arg)
{
	asp_pool *p = arg;
	struct timespec ts;

	pthread_mutex_lock(&p->mu);
	while (!p->stopping) {
		unsigned int n;
		abs_deadline(&ts, 1000);
		pthread_cond_timedwait(&p->wake, &p->mu, &ts);
		if (p->stopping || !(n = maintain(p, p->doomed)))
			continue;
		pthread_mutex_unlock(&p->mu);
		asp__log(p->params->log, ASP_LOG_INFO, "pool: closing %u idle connection(s) (idle too long, or dead)",
			 n);
		close_all(p->doomed, n);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int asp__pool_new(asp_pool **out, const asp_conn_params *params, unsigned int max,
		  unsigned int idle_close_s, asp_error *err)
{
	asp_pool *p;
	pthread_condattr_t ca;

	if (!(p = asp__calloc(1, sizeof(*p))) || !(p->idle = asp__calloc(max, sizeof(*p->idle))) ||
	    !(p->doomed = asp__calloc(max, sizeof(*p->doomed)))) {
		if (p)
			asp__free(p->idle);
		asp__free(p);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	p->params = params;
	p->max = max;
	p->idle_close_s = idle_close_s;
	pthread_mutex_init(&p->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->returned, &ca);
	pthread_cond_init(&p->wake, &ca);
	pthread_condattr_destroy(&ca);
	*out = p;
	return 0;
}

static void start_maintenance(asp_pool *p)
{
	/* Started with the first connection, so a handle that never connects costs no thread. */
	if (!p->have_thread && pthread_create(&p->thread, NULL, maintenance, p) == 0)
		p->have_thread = 1;
}

/* Close a connection taken out of the pool, without holding the lock. */
static void close_unlocked(asp_pool *p, asp_conn *c)
{
	pthread_mutex_unlock(&p->mu);
	asp__log(p->params->log, ASP_LOG_WARN, "pool: closing an idle connection (dead, or room for a fresh one)");
	asp__conn_close(c);
	pthread_mutex_lock(&p->mu);
}

/*
 * Under the lock, with room under the cap: take a slot, then connect without
 * holding the lock (other threads keep working meanwhile). A failed connect
 * gives the slot back.
 */
static int connect_slot(asp_pool *p, asp_conn **out, const asp_cancel *cancel, uint64_t deadline,
			asp_error *err)
{
	asp_conn *c;
	unsigned int n = ++p->total;
	int rc;

	start_maintenance(p);
	pthread_mutex_unlock(&p->mu);
	/* Never under the lock: a log callback may take a lock of its own (Python's GIL). */
	asp__log(p->params->log, ASP_LOG_INFO, "pool: opening connection %u of at most %u", n, p->max);
	if ((rc = asp__conn_open(&c, p->params, asp__cancel_fd(cancel), deadline, err))) {
		pthread_mutex_lock(&p->mu);
		p->total--;
		pthread_cond_signal(&p->returned);
		pthread_mutex_unlock(&p->mu);
		return rc;
	}
	*out = c;
	return 0;
}

/* asp__pool_get; without `wait`, 1 instead of waiting when all connections are in use. */
static int get(asp_pool *p, asp_conn **out, int fresh, int wait, const asp_cancel *cancel,
	       uint64_t deadline, asp_error *err)
{
	asp_conn *c;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		if (asp_cancel_is_triggered(cancel)) {
			pthread_mutex_unlock(&p->mu);
			return asp__error(err, ASP_ECANCELLED, "cancelled while waiting for a connection");
		}
		if (!fresh && p->nidle > 0) {
			c = p->idle[--p->nidle];
			if (asp__conn_check_idle(c)) {
				pthread_mutex_unlock(&p->mu);
				*out = c;
				return 0;
			}
			p->total--;
			close_unlocked(p, c);
			continue;
		}
		if (p->total < p->max)
			break;
		if (fresh && p->nidle > 0) {
			/* Make room for a fresh connection by closing an idle one. */
			c = p->idle[--p->nidle];
			p->total--;
			close_unlocked(p, c);
			continue;
		}
		if (!wait) {
			pthread_mutex_unlock(&p->mu);
			return 1;
		}
		if (deadline && asp__now_ms() >= deadline) {
			pthread_mutex_unlock(&p->mu);
			return asp__error(err, ASP_ETIMEOUT, "the call's deadline passed while it waited "
					  "for a free connection (all %u in use)", p->max);
		}
		{
			struct timespec ts;
			abs_deadline(&ts, 100); /* re-check the cancel token and the deadline regularly */
			pthread_cond_timedwait(&p->returned, &p->mu, &ts);
		}
	}
	return connect_slot(p, out, cancel, deadline, err);
}

int asp__pool_get(asp_pool *p, asp_conn **out, int fresh, const asp_cancel *cancel,
		  uint64_t deadline, asp_error *err)
{
	return get(p, out, fresh, 1, cancel, deadline, err);
}

int asp__pool_try_get(asp_pool *p, asp_conn **out, const asp_cancel *cancel, uint64_t deadline,
		      asp_error *err)
{
	return get(p, out, 0, 0, cancel, deadline, err);
}

/*
 * Under the lock: close one idle connection the server has dropped (returns
 * with the lock released and 1), else 0 with the lock held. Such a one must
 * not count as a connection the pool holds.
 */
static int drop_dead_idle(asp_pool *p)
{
	for (unsigned int i = 0; i < p->nidle; i++) {
		asp_conn *c = p->idle[i];

		if (asp__conn_check_idle(c))
			continue;
		memmove(&p->idle[i], &p->idle[i + 1], (p->nidle - i - 1) * sizeof(p->idle[0]));
		p->nidle--;
		p->total--;
		pthread_cond_signal(&p->returned);
		pthread_mutex_unlock(&p->mu);
		asp__conn_close(c);
		return 1;
	}
	return 0;
}

int asp__pool_fill(asp_pool *p, unsigned int n, const asp_cancel *cancel, uint64_t deadline,
		   asp_error *err)
{
	for (;;) {
		asp_conn *c;
		int rc;

		pthread_mutex_lock(&p->mu);
		if (drop_dead_idle(p))
			continue;
		if (p->total >= n || p->total >= p->max || p->stopping) {
			pthread_mutex_unlock(&p->mu);
			return 0;
		}
		if (asp_cancel_is_triggered(cancel)) {
			pthread_mutex_unlock(&p->mu);
			return asp__error(err, ASP_ECANCELLED, "asp_sandbox_warm: cancelled with %u of %u "
					  "connections open", p->total, n);
		}
		if ((rc = connect_slot(p, &c, cancel, deadline, err)))
			return rc;
		asp__pool_put(p, c);
	}
}

void asp__pool_put(asp_pool *p, asp_conn *c)
{
	int discard;

	pthread_mutex_lock(&p->mu);
	discard = asp__conn_dead(c) || p->stopping;
	if (discard) {
		p->total--;
	} else {
		asp__conn_touch(c);
		p->idle[p->nidle++] = c;
	}
	pthread_cond_signal(&p->returned);
	pthread_mutex_unlock(&p->mu);
	if (discard)
		asp__conn_close(c);
}

void asp__pool_free(asp_pool *p)
{
	unsigned int i;

	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stopping = 1;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);
	if (p->have_thread)
		pthread_join(p->thread, NULL);
	for (i = 0; i < p->nidle; i++)
		asp__conn_close(p->idle[i]);
	pthread_cond_destroy(&p->returned);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->mu);
	asp__free(p->idle);
	asp__free(p->doomed);
	asp__free(p);
}
