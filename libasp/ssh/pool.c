/*
 * pool.c - connection pool. One operation owns a connection at a time
 * (libssh2 sessions are not thread-safe), so N threads use up to `max`
 * connections in parallel and the rest wait for one to come back. One
 * maintenance thread for the whole process sends keepalives on every pool's
 * idle connections and closes those idle for longer than idle_close_s.
 */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "cancel.h"

struct asp_pool {
	pthread_mutex_t mu;
	pthread_cond_t returned;  /* a connection came back or a slot freed */
	const asp_conn_params *params;
	asp_conn **idle;          /* a stack: the most recently used on top */
	asp_conn **doomed;        /* the maintenance thread's list of connections to close */
	unsigned int nidle;
	unsigned int total;       /* idle + checked out + being connected */
	unsigned int max;
	unsigned int idle_close_s;
	int stopping;
	/* Under reg_mu: in the maintenance thread's list (of reg_epoch), and being maintained right now. */
	int registered, busy;
	unsigned long epoch;
	asp_pool *next, *prev;
	/*
	 * Connections that carry running commands with a handle (proc.c), and
	 * how many each: such a one is never closed for idleness or reused
	 * before others; when it dies it leaves the pool (an orphan) and is
	 * closed once its last command lets go of it (asp__pool_unhold).
	 */
	struct held {
		asp_conn *c;
		unsigned int procs;
		int orphan;
	} *held;
	unsigned int nheld, capheld;
	_Atomic unsigned long takes; /* checkouts, for asp__pool_takes */
};

static struct held *held_find(asp_pool *p, const asp_conn *c)
{
	for (unsigned int i = 0; i < p->nheld; i++)
		if (p->held[i].c == c)
			return &p->held[i];
	return NULL;
}

/* Under the lock: how many running commands ride on c. */
static unsigned int held_procs(asp_pool *p, const asp_conn *c)
{
	struct held *h = held_find(p, c);

	return h ? h->procs : 0;
}

static int held_by_procs(asp_pool *p, const asp_conn *c)
{
	return held_procs(p, c) > 0;
}

/*
 * A server allows so many sessions per connection (OpenSSH's MaxSessions
 * 10), and each running command is one: c is full when it carries as many
 * as it had when the server refused one more (asp__pool_full).
 */
static int is_full(asp_pool *p, const asp_conn *c)
{
	unsigned int room = asp__conn_procs_room(c);

	return room && held_procs(p, c) >= room;
}

/* Under the lock: how many of the pool's connections are full, and the commands they all carry. */
static unsigned int count_full(asp_pool *p, unsigned int *procs)
{
	unsigned int n = 0;

	*procs = 0;
	for (unsigned int i = 0; i < p->nheld; i++) {
		if (p->held[i].orphan)
			continue;
		*procs += p->held[i].procs;
		n += is_full(p, p->held[i].c);
	}
	return n;
}

/*
 * Under the lock, the idle connection carrying fewest commands (the most
 * recently used of those), with `not_full` not a full one; p->nidle when none.
 */
static unsigned int fewest(asp_pool *p, int not_full)
{
	unsigned int best = p->nidle;

	for (unsigned int i = p->nidle; i-- > 0;)
		if ((!not_full || !is_full(p, p->idle[i])) &&
		    (best == p->nidle || held_procs(p, p->idle[i]) < held_procs(p, p->idle[best])))
			best = i;
	return best;
}

/*
 * Under the lock, the idle connection a call gets: the most recently used
 * one that carries no running command with a handle. One that does only
 * when the cap leaves no room for another connection (its commands then
 * wait for this call to hand it back): the one carrying fewest that is not
 * full; a full one only when every connection is, and the call does not
 * need room (`room`). p->nidle when none fits: the caller connects a new
 * one, or waits.
 */
static unsigned int pick(asp_pool *p, int room)
{
	unsigned int i = p->nidle, procs;

	while (i > 0 && held_by_procs(p, p->idle[i - 1]))
		i--;
	if (i > 0)
		return i - 1;
	if (p->total < p->max)
		return p->nidle;
	if ((i = fewest(p, 1)) == p->nidle && !room && count_full(p, &procs) == p->total)
		i = fewest(p, 0);
	return i;
}

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
		struct held *h = held_find(p, c);
		if ((!h && idle >= (uint64_t)p->idle_close_s * 1000u) ||
		    (idle >= (uint64_t)p->params->keepalive_s * 1000u && asp__conn_keepalive(c)) ||
		    !asp__conn_check_idle(c)) {
			p->total--;
			if (h)
				h->orphan = 1; /* its commands find it dead, and the last one closes it */
			else
				doomed[n++] = c;
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

/*
 * The maintenance thread: one for the process, however many pools (a
 * harness may drive a thousand sandboxes, each its own handle). A pool
 * joins its list when it first connects (a handle that never connects
 * costs nothing) and leaves it in asp__pool_free. Once a second the thread
 * runs each pool's maintain() under that pool's lock, and closes what it
 * took out after unlocking. It never holds reg_mu and a pool's lock at
 * once: it marks the pool busy under reg_mu, and asp__pool_free waits for
 * that mark to clear before it unlinks the pool, so no pool is touched
 * after its free returns. The thread ends when the last pool leaves, and
 * that pool's free joins it: a process that closed its handles has no
 * library thread. reg_gen tells a thread whether it is still the current
 * one (a pool may join while the previous thread is on its way out).
 *
 * fork(): the child has none of the parent's threads. pthread_atfork takes
 * reg_mu around the fork, and the child starts an empty list of a new
 * epoch, so a pool it opens gets a thread of its own, and a pool it
 * inherited (the parent's, which the child must not use) is in no list of
 * the child's: freeing it there joins and waits for nothing.
 */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cv; /* monotonic: wakes the thread early (its end), and waits on busy pools */
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static asp_pool *reg_head;
static int reg_running;
static unsigned long reg_gen, reg_epoch;
static pthread_t reg_thread;

static void reg_cv_init(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&reg_cv, &ca);
	pthread_condattr_destroy(&ca);
}

static void reg_fork_prepare(void)
{
	pthread_mutex_lock(&reg_mu);
}

static void reg_fork_parent(void)
{
	pthread_mutex_unlock(&reg_mu);
}

/*
 * The child's one thread took reg_mu in reg_fork_prepare, so it unlocks it
 * (initializing a locked mutex again is undefined). The condition variable
 * is made again instead: it may count the parent's maintenance thread as a
 * waiter, a thread the child does not have.
 */
static void reg_fork_child(void)
{
	reg_cv_init();
	reg_head = NULL;
	reg_running = 0;
	reg_epoch++;
	pthread_mutex_unlock(&reg_mu);
}

static void reg_init(void)
{
	reg_cv_init();
	pthread_atfork(reg_fork_prepare, reg_fork_parent, reg_fork_child);
}

static void maintain_one(asp_pool *p)
{
	unsigned int n;

	pthread_mutex_lock(&p->mu);
	n = p->stopping ? 0 : maintain(p, p->doomed);
	pthread_mutex_unlock(&p->mu);
	if (!n)
		return;
	asp__log(p->params->log, ASP_LOG_INFO, "pool: closing %u idle connection(s) (idle too long, or dead)", n);
	close_all(p->doomed, n);
}

static void *maintenance(void *arg)
{
	unsigned long gen = (unsigned long)(uintptr_t)arg;
	struct timespec ts;

	pthread_mutex_lock(&reg_mu);
	while (reg_gen == gen) {
		asp_pool *p;
		abs_deadline(&ts, 1000);
		pthread_cond_timedwait(&reg_cv, &reg_mu, &ts);
		for (p = reg_head; p && reg_gen == gen; p = p->next) {
			p->busy = 1;
			pthread_mutex_unlock(&reg_mu);
			maintain_one(p);
			pthread_mutex_lock(&reg_mu);
			p->busy = 0;
			pthread_cond_broadcast(&reg_cv); /* a free may wait for this pool */
		}
	}
	pthread_mutex_unlock(&reg_mu);
	return NULL;
}

/* Under p->mu (order: a pool's lock, then reg_mu): the pool joins the thread's list. */
static void reg_join(asp_pool *p)
{
	pthread_once(&reg_once, reg_init);
	pthread_mutex_lock(&reg_mu);
	if (!p->registered || p->epoch != reg_epoch) {
		if (!reg_running && pthread_create(&reg_thread, NULL, maintenance,
						   (void *)(uintptr_t)(reg_gen + 1)) == 0) {
			reg_gen++;
			reg_running = 1;
		}
		p->registered = 1;
		p->epoch = reg_epoch;
		p->busy = 0;
		p->prev = NULL;
		p->next = reg_head;
		if (reg_head)
			reg_head->prev = p;
		reg_head = p;
	}
	pthread_mutex_unlock(&reg_mu);
}

/* Not under p->mu: the pool leaves the list; the last one out ends the thread and joins it. */
static void reg_leave(asp_pool *p)
{
	pthread_t t;
	int join = 0;

	pthread_once(&reg_once, reg_init);
	pthread_mutex_lock(&reg_mu);
	if (p->registered && p->epoch == reg_epoch) {
		while (p->busy)
			pthread_cond_wait(&reg_cv, &reg_mu);
		if (p->prev)
			p->prev->next = p->next;
		else
			reg_head = p->next;
		if (p->next)
			p->next->prev = p->prev;
		p->registered = 0;
		if (!reg_head && reg_running) {
			reg_gen++; /* the thread sees it is no longer the current one */
			reg_running = 0;
			t = reg_thread;
			join = 1;
			pthread_cond_broadcast(&reg_cv);
		}
	}
	pthread_mutex_unlock(&reg_mu);
	if (join)
		pthread_join(t, NULL);
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
	pthread_condattr_destroy(&ca);
	*out = p;
	return 0;
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

	reg_join(p);
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
static int get(asp_pool *p, asp_conn **out, unsigned int how, int wait, const asp_cancel *cancel,
	       uint64_t deadline, asp_error *err)
{
	unsigned int i, procs;
	asp_conn *c;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		if (asp_cancel_is_triggered(cancel)) {
			pthread_mutex_unlock(&p->mu);
			return asp__error(err, ASP_ECANCELLED, "cancelled while waiting for a connection");
		}
		if (!(how & ASP_POOL_FRESH) && p->nidle > 0 && (i = pick(p, how & ASP_POOL_ROOM)) < p->nidle) {
			c = p->idle[i];
			memmove(&p->idle[i], &p->idle[i + 1], (p->nidle - i - 1) * sizeof(p->idle[0]));
			p->nidle--;
			if (asp__conn_check_idle(c)) {
				pthread_mutex_unlock(&p->mu);
				atomic_fetch_add(&p->takes, 1);
				asp__conn_taken(c);
				*out = c;
				return 0;
			}
			p->total--;
			if (held_by_procs(p, c)) {
				held_find(p, c)->orphan = 1;
				continue;
			}
			close_unlocked(p, c);
			continue;
		}
		if (p->total < p->max)
			break;
		if ((how & ASP_POOL_ROOM) && count_full(p, &procs) == p->total) {
			pthread_mutex_unlock(&p->mu);
			return asp__error(err, ASP_EBUSY, "no room for another command: the server refused one "
					  "more session on every connection (max_connections %u), which carry %u "
					  "running commands with a handle in all; end one, or open the sandbox with "
					  "more connections", p->max, procs);
		}
		if ((how & ASP_POOL_FRESH) && p->nidle > 0) {
			/* Make room for a fresh connection by closing an idle one (not one commands ride on). */
			i = p->nidle;
			while (i > 0 && held_by_procs(p, p->idle[i - 1]))
				i--;
			if (i > 0) {
				c = p->idle[i - 1];
				memmove(&p->idle[i - 1], &p->idle[i], (p->nidle - i) * sizeof(p->idle[0]));
				p->nidle--;
				p->total--;
				close_unlocked(p, c);
				continue;
			}
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

int asp__pool_get(asp_pool *p, asp_conn **out, unsigned int how, const asp_cancel *cancel,
		  uint64_t deadline, asp_error *err)
{
	return get(p, out, how, 1, cancel, deadline, err);
}

int asp__pool_try_get(asp_pool *p, asp_conn **out, const asp_cancel *cancel, uint64_t deadline,
		      asp_error *err)
{
	return get(p, out, 0, 0, cancel, deadline, err);
}

int asp__pool_hold(asp_pool *p, asp_conn *c)
{
	struct held *h;
	int rc = 0;

	pthread_mutex_lock(&p->mu);
	if ((h = held_find(p, c))) {
		h->procs++;
	} else if (p->nheld == p->capheld &&
		   !(h = asp__realloc(p->held, (p->capheld ? p->capheld * 2 : 4) * sizeof(*p->held)))) {
		rc = ASP_ENOMEM;
	} else {
		if (p->nheld == p->capheld) {
			p->held = h;
			p->capheld = p->capheld ? p->capheld * 2 : 4;
		}
		p->held[p->nheld].c = c;
		p->held[p->nheld].procs = 1;
		p->held[p->nheld].orphan = 0;
		p->nheld++;
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

void asp__pool_unhold(asp_pool *p, asp_conn *c)
{
	struct held *h;
	int close = 0;

	pthread_mutex_lock(&p->mu);
	if ((h = held_find(p, c)) && --h->procs == 0) {
		close = h->orphan;
		*h = p->held[--p->nheld];
	}
	pthread_cond_signal(&p->returned); /* room on c for a call that waits for it (pick) */
	pthread_mutex_unlock(&p->mu);
	if (close)
		asp__conn_close(c);
}

int asp__pool_full(asp_pool *p, asp_conn *c)
{
	unsigned int n;

	pthread_mutex_lock(&p->mu);
	if ((n = held_procs(p, c)))
		asp__conn_set_procs_room(c, n);
	pthread_mutex_unlock(&p->mu);
	if (n)
		asp__log(p->params->log, ASP_LOG_INFO, "pool: the server refused a session beside %u running "
			 "commands on one connection: calls go to the others while it carries that many", n);
	return n > 0;
}

int asp__pool_take(asp_pool *p, asp_conn *c, uint64_t deadline)
{
	pthread_mutex_lock(&p->mu);
	for (;;) {
		struct held *h = held_find(p, c);
		unsigned int i;

		if (!h || h->orphan || p->stopping) {
			pthread_mutex_unlock(&p->mu);
			return ASP_ECONNLOST;
		}
		for (i = 0; i < p->nidle && p->idle[i] != c; i++)
			;
		if (i < p->nidle) {
			memmove(&p->idle[i], &p->idle[i + 1], (p->nidle - i - 1) * sizeof(p->idle[0]));
			p->nidle--;
			pthread_mutex_unlock(&p->mu);
			atomic_fetch_add(&p->takes, 1);
			asp__conn_taken(c);
			return 0;
		}
		if (deadline && asp__now_ms() >= deadline) {
			pthread_mutex_unlock(&p->mu);
			return ASP_ETIMEOUT;
		}
		{
			struct timespec ts;
			uint64_t left = deadline ? deadline - asp__now_ms() : 100;
			abs_deadline(&ts, left < 100 ? (unsigned int)left : 100);
			pthread_cond_timedwait(&p->returned, &p->mu, &ts);
		}
	}
}

unsigned long asp__pool_takes(asp_pool *p)
{
	return atomic_load(&p->takes);
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
		struct held *h = held_find(p, c);
		p->total--;
		if (h) {
			h->orphan = 1;
			discard = 0; /* closed by the last of its commands */
		}
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
	pthread_mutex_unlock(&p->mu);
	reg_leave(p);
	for (i = 0; i < p->nidle; i++)
		asp__conn_close(p->idle[i]);
	/* Orphans whose commands were never freed (a caller's error; asp_close says so). */
	for (i = 0; i < p->nheld; i++)
		if (p->held[i].orphan)
			asp__conn_close(p->held[i].c);
	asp__free(p->held);
	pthread_cond_destroy(&p->returned);
	pthread_mutex_destroy(&p->mu);
	asp__free(p->idle);
	asp__free(p->doomed);
	asp__free(p);
}
