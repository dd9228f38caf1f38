/*
 * sweep.c - stale temp files of atomic writes. A writer that dies with its
 * connection leaves its temp file; the first atomic write into a directory
 * (once per handle, and once per SWEEP_SHARED_S per sandbox for the whole
 * process: N fresh handles writing into one directory make one sweep, not
 * N) lists the temp files there through the connection's file transport
 * (fsops.h: temps), removes the stale ones (forget), and remembers the
 * others until they could be stale (lstat_many, later). The staleness rule
 * and the names are temp.c's. Best effort and quiet: a failure ends a
 * sweep, never a call.
 */
#include "sweep.h"

#include <pthread.h>
#include <string.h>

#include "temp.h"

#define SWEEP_DIRS 256         /* directories a handle remembers having swept */
#define SWEEP_PENDING 64       /* temp files a handle waits on to become stale */
#define SWEEP_MAX_ENTRIES 100000u
#define SWEEP_SHARED 1024      /* directories the process remembers as swept (a ring) */
#define SWEEP_SHARED_S 60      /* how long one handle's sweep of a directory stands for the others */

typedef struct sweep_wait {
	char *path;
	uint32_t lease_s;
	uint64_t due_ms;          /* asp__now_ms clock: when to look again */
} sweep_wait;

/*
 * The two lists grow as they fill, up to their caps: most handles write into
 * one directory or two, and a process may hold a thousand handles (3.6 KiB
 * each when both lists were arrays of their caps).
 */
struct asp_sweep {
	pthread_mutex_t mu;
	unsigned int lease_s;     /* this handle's lease, written into its temp names */
	char **dirs;              /* directories already swept (a ring once SWEEP_DIRS) */
	size_t ndirs, next_dir, dirs_cap;
	sweep_wait *wait;         /* not stale yet when seen */
	size_t nwait, wait_cap;
	int64_t clock_offset_s;   /* server time minus asp__now_ms() / 1000, as last measured */
	int have_offset;
	char *server;             /* the shared table's key: which sandbox (NULL: not shared) */
};

/*
 * Directories of a sandbox swept by some handle of this process, and when:
 * a handle that finds its directory here, swept less than SWEEP_SHARED_S
 * ago, skips its own sweep (the temp files seen then that were not stale
 * yet wait in the sweeping handle's list). A failed atomic write of this
 * process may leave a temp file: it drops the entry of its directory
 * (asp__sweep_write_failed), so the next handle to write there sweeps. A
 * writer of another process that dies is found by the first sweep once
 * the entry is old, or by any other process's first write there.
 */
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;
static struct {
	char *key;                /* server "\n" dir */
	uint64_t at_ms;
} shared[SWEEP_SHARED];
static size_t shared_next;

/*
 * fork(): the lock is taken around it, so that a child never starts with
 * it held by a thread it does not have. The child keeps the table (what
 * its parent swept lately is true for it too).
 */
static void shared_fork_prepare(void)
{
	pthread_mutex_lock(&shared_mu);
}

static void shared_fork_done(void)
{
	pthread_mutex_unlock(&shared_mu);
}

static void shared_init(void)
{
	pthread_atfork(shared_fork_prepare, shared_fork_done, shared_fork_done);
}

/* Every taker of the lock comes here: the fork handlers are in place before anyone holds it. */
static void shared_lock(void)
{
	pthread_once(&shared_once, shared_init);
	pthread_mutex_lock(&shared_mu);
}

/* 1 when a handle of this process swept key lately; else records it as swept now (0). */
static int shared_claim(const char *key)
{
	uint64_t now = asp__now_ms();
	size_t i, slot = SWEEP_SHARED;

	shared_lock();
	for (i = 0; i < SWEEP_SHARED; i++) {
		if (shared[i].key && !strcmp(shared[i].key, key)) {
			if (now - shared[i].at_ms < SWEEP_SHARED_S * 1000u) {
				pthread_mutex_unlock(&shared_mu);
				return 1;
			}
			slot = i;
			break;
		}
	}
	if (slot == SWEEP_SHARED) {
		slot = shared_next;
		shared_next = (shared_next + 1) % SWEEP_SHARED;
		asp__free(shared[slot].key);
		shared[slot].key = asp__strdup(key); /* NULL: not remembered, no harm */
	}
	shared[slot].at_ms = now;
	pthread_mutex_unlock(&shared_mu);
	return 0;
}

/* A sweep that did not happen (see sweep_unclaim_dir): the next handle sweeps. */
static void shared_unclaim(const char *key)
{
	shared_lock();
	for (size_t i = 0; i < SWEEP_SHARED; i++) {
		if (shared[i].key && !strcmp(shared[i].key, key)) {
			asp__free(shared[i].key);
			shared[i].key = NULL;
		}
	}
	pthread_mutex_unlock(&shared_mu);
}

#ifdef ASP_TEST_HOOKS
static _Atomic unsigned long stat_dirs_listed;

void asp__sweep_stats(unsigned long *dirs_listed)
{
	*dirs_listed = stat_dirs_listed;
}

void asp__sweep_shared_reset(void)
{
	shared_lock();
	for (size_t i = 0; i < SWEEP_SHARED; i++) {
		asp__free(shared[i].key);
		shared[i].key = NULL;
	}
	pthread_mutex_unlock(&shared_mu);
}

void asp__sweep_shared_hold(int hold)
{
	if (hold)
		shared_lock();
	else
		pthread_mutex_unlock(&shared_mu);
}
#endif

int asp__sweep_new(asp_sweep **out, unsigned int io_timeout_ms, const char *server)
{
	asp_sweep *sw = asp__calloc(1, sizeof(*sw));

	if (!sw || (server && !(sw->server = asp__strdup(server)))) {
		asp__free(sw);
		return ASP_ENOMEM;
	}
	pthread_mutex_init(&sw->mu, NULL);
	sw->lease_s = io_timeout_ms / 1000 + (io_timeout_ms % 1000 != 0);
	if (!sw->lease_s)
		sw->lease_s = 1;
	if (sw->lease_s > ASP_TEMP_LEASE_MAX)
		sw->lease_s = ASP_TEMP_LEASE_MAX;
	*out = sw;
	return 0;
}

void asp__sweep_free(asp_sweep *sw)
{
	size_t i;

	if (!sw)
		return;
	for (i = 0; i < sw->ndirs; i++)
		asp__free(sw->dirs[i]);
	for (i = 0; i < sw->nwait; i++)
		asp__free(sw->wait[i].path);
	asp__free(sw->dirs);
	asp__free(sw->wait);
	asp__free(sw->server);
	pthread_mutex_destroy(&sw->mu);
	asp__free(sw);
}

unsigned int asp__sweep_lease(asp_sweep *sw)
{
	return sw ? sw->lease_s : 30;
}

int asp__sweep_due(asp_sweep *sw)
{
	uint64_t now = asp__now_ms();
	size_t i;
	int due = 0;

	if (!sw)
		return 0;
	pthread_mutex_lock(&sw->mu);
	for (i = 0; i < sw->nwait && !due; i++)
		due = sw->wait[i].due_ms <= now;
	pthread_mutex_unlock(&sw->mu);
	return due;
}

/*
 * v (*cap items of size, n of them used) with room for one more, grown to at
 * most max items; NULL when it is full or out of memory (v stands).
 */
static void *room(void *v, size_t *cap, size_t n, size_t max, size_t size)
{
	size_t want = *cap ? 2 * *cap : 4;

	if (n < *cap)
		return v;
	if (*cap >= max)
		return NULL;
	if (want > max)
		want = max;
	if ((v = asp__realloc(v, want * size)) != NULL)
		*cap = want;
	return v;
}

/* Remember a temp file that is not stale yet (takes path); dropped when the list is full. */
static void sweep_wait_add(asp_sweep *sw, char *path, uint32_t lease_s, uint64_t in_s)
{
	sweep_wait *w;

	pthread_mutex_lock(&sw->mu);
	if ((w = room(sw->wait, &sw->wait_cap, sw->nwait, SWEEP_PENDING, sizeof(*w))) != NULL) {
		sw->wait = w;
		sw->wait[sw->nwait].path = path;
		sw->wait[sw->nwait].lease_s = lease_s;
		sw->wait[sw->nwait++].due_ms = asp__now_ms() + in_s * 1000u;
		path = NULL;
	}
	pthread_mutex_unlock(&sw->mu);
	asp__free(path);
}

/* The server's clock now, in seconds, from the last measurement; 0 when unknown. */
static uint64_t sweep_server_now(asp_sweep *sw)
{
	int64_t now = 0;

	pthread_mutex_lock(&sw->mu);
	if (sw->have_offset)
		now = (int64_t)(asp__now_ms() / 1000) + sw->clock_offset_s;
	pthread_mutex_unlock(&sw->mu);
	return now > 0 ? (uint64_t)now : 0;
}

/*
 * The server's clock, measured now: a later recheck of the files remembered
 * may go over the other transport (a connection whose small writes take the
 * warm exec route still has SFTP).
 */
static void sweep_set_clock(asp_sweep *sw, uint64_t server_now)
{
	pthread_mutex_lock(&sw->mu);
	sw->clock_offset_s = (int64_t)server_now - (int64_t)(asp__now_ms() / 1000);
	sw->have_offset = 1;
	pthread_mutex_unlock(&sw->mu);
}

/*
 * After the stale paths' removal (takes them): when the connection died,
 * whether they went is unknown, so each waits again (its lease from its
 * name) for the next call's look.
 */
static void sweep_removed(asp_conn *c, asp_sweep *sw, char **stale, size_t ns)
{
	for (size_t i = 0; i < ns; i++) {
		const char *base = strrchr(stale[i], '/');
		uint32_t lease = 0;
		base = base ? base + 1 : stale[i];
		if (asp__conn_dead(c) && asp__temp_parse(base, strlen(base), &lease))
			sweep_wait_add(sw, stale[i], lease, 1);
		else
			asp__free(stale[i]);
	}
}

/* LSTAT the remembered temp files whose time has come; remove the stale ones, keep waiting on the rest. */
void asp__sweep_run_due(asp_conn *c, asp_sweep *sw, const asp_fsops *ops)
{
	sweep_wait due[SWEEP_PENDING];
	asp_stat_info st[SWEEP_PENDING];
	unsigned char found[SWEEP_PENDING];
	char *paths[SWEEP_PENDING], *stale[SWEEP_PENDING];
	uint64_t now = asp__now_ms(), server_now;
	size_t n = 0, ns = 0, i, j;

	if (!sw)
		return;
	pthread_mutex_lock(&sw->mu);
	for (i = j = 0; i < sw->nwait; i++) {
		if (sw->wait[i].due_ms <= now)
			due[n++] = sw->wait[i];
		else
			sw->wait[j++] = sw->wait[i];
	}
	sw->nwait = j;
	pthread_mutex_unlock(&sw->mu);
	if (!n)
		return;
	server_now = sweep_server_now(sw);
	for (i = 0; i < n; i++)
		paths[i] = due[i].path;
	if (!ops || ops->lstat_many(c, paths, n, st, found, &server_now) || !server_now) {
		/* Nothing learned: wait on them again. */
		for (i = 0; i < n; i++)
			sweep_wait_add(sw, due[i].path, due[i].lease_s, 1);
		return;
	}
	for (i = 0; i < n; i++) {
		if (!found[i] || st[i].type != ASP_TYPE_FILE)
			asp__free(due[i].path);
		else if (asp__temp_stale(st[i].mtime, due[i].lease_s, server_now))
			stale[ns++] = due[i].path;
		else /* touched since: its writer lives. Look again when it could be stale. */
			sweep_wait_add(sw, due[i].path, due[i].lease_s,
				       asp__temp_stale_in(st[i].mtime, due[i].lease_s, server_now));
	}
	if (ns && !asp__conn_dead(c))
		ops->forget(c, stale, ns, NULL, NULL);
	sweep_removed(c, sw, stale, ns);
}

/* Mark dir as swept by this handle; 0 when it already was. */
static int sweep_claim_dir(asp_sweep *sw, const char *dir)
{
	size_t i;
	char *d, **dirs;

	pthread_mutex_lock(&sw->mu);
	for (i = 0; i < sw->ndirs; i++) {
		if (!strcmp(sw->dirs[i], dir)) {
			pthread_mutex_unlock(&sw->mu);
			return 0;
		}
	}
	if ((d = asp__strdup(dir)) != NULL) {
		if (sw->ndirs < SWEEP_DIRS) {
			if ((dirs = room(sw->dirs, &sw->dirs_cap, sw->ndirs, SWEEP_DIRS, sizeof(*dirs))) != NULL) {
				sw->dirs = dirs;
				sw->dirs[sw->ndirs++] = d;
			} else { /* out of memory: not claimed, so not swept; a later write tries */
				asp__free(d);
				d = NULL;
			}
		} else {
			asp__free(sw->dirs[sw->next_dir]);
			sw->dirs[sw->next_dir] = d;
			sw->next_dir = (sw->next_dir + 1) % SWEEP_DIRS;
		}
	}
	pthread_mutex_unlock(&sw->mu);
	return d != NULL;
}

/*
 * A sweep that a dead connection cut short did not happen: the next write
 * into dir (on another connection) sweeps it again.
 */
static void sweep_unclaim_dir(asp_sweep *sw, const char *dir)
{
	size_t i;

	pthread_mutex_lock(&sw->mu);
	for (i = 0; i < sw->ndirs; i++) {
		if (!strcmp(sw->dirs[i], dir)) {
			asp__free(sw->dirs[i]);
			sw->dirs[i] = sw->dirs[--sw->ndirs];
			if (sw->next_dir >= sw->ndirs)
				sw->next_dir = 0;
			break;
		}
	}
	pthread_mutex_unlock(&sw->mu);
}

/* List dir's temp files and remove the stale ones; the others wait. ASP_EINVAL: nothing asked. */
static int sweep_dir(asp_conn *c, asp_sweep *sw, const asp_fsops *ops, const char *dir, uint64_t now_s)
{
	asp_list_entry *v = NULL;
	char **stale = NULL;
	size_t n = 0, ns = 0, i;
	uint64_t now = now_s;
	int rc;

	ASP_TEST_COUNT(stat_dirs_listed);
	if ((rc = ops->temps(c, dir, SWEEP_MAX_ENTRIES, &v, &n, &now)) || !now)
		goto out;
	if (now != now_s)
		sweep_set_clock(sw, now);
	if (!n || !(stale = asp__calloc(n, sizeof(*stale))))
		goto out;
	for (i = 0; i < n; i++) {
		uint32_t lease;
		char *p;
		if (!asp__temp_parse(v[i].name, strlen(v[i].name), &lease) || v[i].st.type != ASP_TYPE_FILE ||
		    !(p = asp__sprintf("%s/%s", strcmp(dir, "/") ? dir : "", v[i].name)))
			continue;
		if (asp__temp_stale(v[i].st.mtime, lease, now))
			stale[ns++] = p;
		else
			sweep_wait_add(sw, p, lease, asp__temp_stale_in(v[i].st.mtime, lease, now));
	}
	if (ns && !asp__conn_dead(c))
		ops->forget(c, stale, ns, NULL, NULL);
	for (i = 0; i < ns; i++)
		asp__free(stale[i]);
	asp__free(stale);
out:
	asp__fsops_list_free(v, n);
	return rc;
}

/* The directory of path, as the sweep keys it; NULL when path has no slash or out of memory. */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return NULL;
	return slash == path ? asp__strdup("/") : asp__strndup(path, (size_t)(slash - path));
}

void asp__sweep_write_failed(asp_sweep *sw, const char *path)
{
	char *dir, *key;

	if (!sw || !sw->server || !(dir = dir_of(path)))
		return;
	if ((key = asp__sprintf("%s\n%s", sw->server, dir)) != NULL)
		shared_unclaim(key);
	asp__free(key);
	asp__free(dir);
}

void asp__sweep_after_write(asp_conn *c, asp_sweep *sw, const asp_fsops *ops, const char *path,
			    uint64_t now_s)
{
	char *dir, *key = NULL;

	if (!sw)
		return;
	if (now_s)
		sweep_set_clock(sw, now_s);
	if ((dir = dir_of(path)) != NULL) {
		if (sweep_claim_dir(sw, dir)) {
			/* Another handle of this process swept it lately: this one need not. */
			if (sw->server && (key = asp__sprintf("%s\n%s", sw->server, dir)) && shared_claim(key)) {
				asp__free(key);
				asp__free(dir);
				return;
			}
			/* Not swept (no clock over SFTP, or a dead connection): a later write sweeps it. */
			if (sweep_dir(c, sw, ops, dir, now_s) == ASP_EINVAL || asp__conn_dead(c)) {
				sweep_unclaim_dir(sw, dir);
				if (key)
					shared_unclaim(key);
			}
			asp__free(key);
		}
		asp__free(dir);
	}
}
