/*
 * bulk.c - large transfers over several connections at once.
 *
 * One connection moves at most what one libssh2 session can encrypt on
 * one thread (libssh2 1.10: AES-CTR + HMAC, no AES-GCM), and its sshd
 * process is one process. A large read or atomic write is cut into parts
 * of BULK_PART bytes or more; the calling thread works through them on
 * its own connection while helper threads, each with a connection taken
 * from the pool without waiting (an idle one, or a new one under the cap),
 * take parts from the same queue. A helper that gets no connection, or
 * cannot open the file, takes no part: the caller's connection does the
 * rest. The first failing part fails the call; the others stop at their
 * next part. One exception: a read part whose helper connection was lost
 * goes back to the queue (reading again is harmless) and the helper
 * stops; the caller's connection, or another helper, reads it.
 *
 * A read learns the file's size with an SFTP STAT sent with its OPEN (no
 * extra round trip) and returns exactly that many bytes (or fewer when
 * limit says so); a file that grows meanwhile is read up to that size, one
 * that shrinks meanwhile fails with ASP_EIO. An atomic write's parts go
 * into the one temp file at their offsets; the FSETSTAT, CLOSE and rename
 * stay on the caller's connection (fs.c), after every part's writes were
 * acknowledged, so the target changes only when all of the data is there.
 */
#include "bulk.h"
#include "exec.h"
#include "route.h"

#include <pthread.h>
#include <string.h>

#include "fs_sftp.h"
#include "sftp.h"

/*
 * Below this many bytes one connection was as fast or faster on loopback
 * (2 cores; bench/run.py --bulk-sizes 8,16,32,64 with the "libasp (1
 * connection)" row): the helpers' OPENs and the parts' pipeline drains
 * outweigh the parallel crypto.
 */
#define BULK_MIN (32u << 20)
/* Parts are at least this large: each ends in a pipeline drain, one round trip. */
#define BULK_PART (4u << 20)
#define BULK_HELPERS_MAX 15u

typedef struct job {
	pthread_mutex_t mu;
	const asp_bulk_call *bc;
	const char *path;         /* what helpers open: the file, or the write's temp file */
	int write;
	unsigned char *dst;       /* read: the result; part i lands at dst + i * part */
	const unsigned char *src; /* write: the data */
	uint64_t base;            /* file offset of dst[0] / src[0] */
	size_t len, part, nparts, next;
	size_t redo[BULK_HELPERS_MAX]; /* read parts given back by helpers whose connection died */
	size_t nredo;
	int rc;                   /* the first failure */
	asp_error err;
	asp_cancel *stop;         /* triggered when the job is over: ends helpers' connects */
} job;

/* 1: c moves files over SFTP, parts may be spread; 0: leave the call to fs.c; < 0: SFTP failed. */
static int sftp_ready(asp_conn *c, const asp_bulk_call *bc, asp_error *err)
{
	int rc;

	if (bc->max_conns < 2)
		return 0;
	if ((rc = asp__files_transport(c, err)) < 0)
		return rc;
	return rc == ASP_FILES_SFTP;
}

static void job_fail(job *j, int rc, const asp_error *e)
{
	pthread_mutex_lock(&j->mu);
	if (!j->rc) {
		j->rc = rc;
		if (e && e->code)
			j->err = *e;
		else
			asp__error(&j->err, rc, "%s", asp_strerror(rc));
	}
	pthread_mutex_unlock(&j->mu);
	if (j->stop)
		asp_cancel_trigger(j->stop);
}

#ifdef ASP_TEST_HOOKS
static _Atomic unsigned long stat_redone;

void asp__bulk_stats(asp_bulk_stats *out)
{
	out->parts_redone = stat_redone;
}
#endif

static int job_take(job *j, size_t *i)
{
	int ok;

	pthread_mutex_lock(&j->mu);
	ok = !j->rc && (j->nredo || j->next < j->nparts);
	if (ok)
		*i = j->nredo ? j->redo[--j->nredo] : j->next++;
	pthread_mutex_unlock(&j->mu);
	return ok;
}

/* A helper whose connection died gives its read part back (it takes no more). */
static void job_give_back(job *j, size_t i)
{
	pthread_mutex_lock(&j->mu);
	j->redo[j->nredo++] = i; /* one per helper at most: it stops after this */
	pthread_mutex_unlock(&j->mu);
	ASP_TEST_COUNT(stat_redone);
}

/* Work through parts on c until none is left or one fails; helper: c is a helper's. */
static void job_parts(job *j, asp_conn *c, const unsigned char *h, size_t hl, int helper)
{
	size_t i;

	while (job_take(j, &i)) {
		size_t off = i * j->part, n = j->len - off < j->part ? j->len - off : j->part;
		asp_error e;
		int rc;

		e.code = 0;
		rc = j->write ? asp__fs_sftp_write_at(c, h, hl, j->path, j->src + off, j->base + off, n, &e)
			      : asp__fs_sftp_read_into(c, h, hl, j->path, j->base + off, n, j->dst + off, &e);
		if (rc && helper && !j->write && rc == ASP_ECONNLOST && asp__conn_dead(c)) {
			job_give_back(j, i);
			return;
		}
		if (rc) {
			job_fail(j, rc, &e);
			return;
		}
	}
}

/* Anything left to do? */
static int job_left(job *j)
{
	int left;

	pthread_mutex_lock(&j->mu);
	left = !j->rc && (j->nredo || j->next < j->nparts);
	pthread_mutex_unlock(&j->mu);
	return left;
}

static void *helper(void *arg)
{
	job *j = arg;
	const asp_bulk_call *bc = j->bc;
	unsigned char h[256];
	size_t hl;
	asp_conn *c;

	if (asp__pool_try_get(bc->pool, &c, j->stop, bc->deadline, NULL) != 0)
		return NULL;
	asp__conn_begin_op(c, bc->deadline, bc->cancel);
	if (job_left(j) && sftp_ready(c, bc, NULL) == 1 &&
	    !asp__fs_sftp_open_handle(c, j->path, j->write, h, &hl, NULL)) {
		job_parts(j, c, h, hl, 1);
		asp__fs_sftp_close_handle(c, h, hl);
	}
	asp__conn_end_op(c);
	if (!asp__conn_dead(c))
		asp__sftp_idle(c);
	asp__pool_put(bc->pool, c);
	return NULL;
}

/*
 * Cut len bytes into parts, start helpers for all but the first
 * connection's share, work on c, and wait for the helpers. The first
 * failure, with its message, is the job's.
 */
static int job_run(job *j, asp_conn *c, const unsigned char *h, size_t hl, asp_error *err)
{
	pthread_t t[BULK_HELPERS_MAX];
	size_t conns = j->bc->max_conns, nt = 0, i;

	/* About two parts per connection: a slow connection's share is taken up by the others. */
	if (conns > BULK_HELPERS_MAX + 1)
		conns = BULK_HELPERS_MAX + 1;
	j->part = j->len / (2 * conns) + 1;
	if (j->part < BULK_PART)
		j->part = BULK_PART;
	j->part = (j->part + 65535) & ~(size_t)65535;
	j->nparts = (j->len + j->part - 1) / j->part;
	if (asp_cancel_new(&j->stop, NULL))
		j->stop = NULL; /* no helpers then: c does it all */
	for (i = 0; j->stop && i + 1 < conns && i + 1 < j->nparts; i++)
		if (pthread_create(&t[nt], NULL, helper, j) == 0)
			nt++;
	job_parts(j, c, h, hl, 0);
	if (j->stop)
		asp_cancel_trigger(j->stop); /* a helper still connecting has nothing left to do */
	for (i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	job_parts(j, c, h, hl, 0); /* parts given back after c ran out of work */
	asp_cancel_free(j->stop);
	if (j->rc && err)
		*err = j->err;
	return j->rc;
}

static void job_init(job *j, const asp_bulk_call *bc, const char *path, uint64_t base, size_t len)
{
	memset(j, 0, sizeof(*j));
	pthread_mutex_init(&j->mu, NULL);
	j->bc = bc;
	j->path = path;
	j->base = base;
	j->len = len;
}

int asp__bulk_read(asp_conn *c, const asp_bulk_call *bc, const char *path, uint64_t offset,
		   uint64_t limit, uint64_t cap, asp_buf *out, asp_error *err)
{
	unsigned char h[256];
	size_t hl;
	asp_stat_info st;
	asp_fs_reader rd;
	uint64_t want;
	job j;
	int rc, sized;

	/*
	 * When a read goes to the warm exec channel (asp__route_reads_faster:
	 * the same 4 MiB in flight as one SFTP connection), it goes whole.
	 * Parts over several connections are for SFTP.
	 */
	if (limit < BULK_MIN || asp__route_reads_faster(c) || (rc = sftp_ready(c, bc, err)) == 0)
		return asp__fs_read(c, path, offset, limit, cap, out, err);
	if (rc < 0)
		return rc;
	if ((rc = asp__fs_sftp_open_read(c, path, offset, limit, cap, &rd, h, &hl, &st, &sized, err)))
		return rc;
	/*
	 * Only a regular file's size is its content's (a /proc file says 0).
	 * Over the cap: the plain read says so (its FSTAT), without reading.
	 */
	if (!sized || st.type != ASP_TYPE_FILE || st.size <= offset ||
	    (want = st.size - offset < limit ? st.size - offset : limit) < BULK_MIN ||
	    (limit > cap && st.size - offset > cap) || want >= SIZE_MAX)
		return asp__fs_sftp_read_handle(c, &rd, h, hl, path, out, err);
	asp__fs_sftp_read_elsewhere(c);
	asp__buf_free(out);
	if (!(out->data = asp__malloc((size_t)want + 1))) {
		asp__fs_sftp_close_handle(c, h, hl);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	asp__mem_fill_hint(out->data, (size_t)want + 1);
	job_init(&j, bc, path, offset, (size_t)want);
	j.dst = out->data;
	rc = job_run(&j, c, h, hl, err);
	pthread_mutex_destroy(&j.mu);
	asp__fs_sftp_close_handle(c, h, hl);
	if (rc) {
		asp__buf_free(out);
		return rc;
	}
	out->len = (size_t)want;
	out->cap = (size_t)want + 1;
	out->data[out->len] = '\0';
	return 0;
}

static int fill(void *ctx, asp_conn *c, const unsigned char *h, size_t hl, const char *tmp,
		asp_error *err)
{
	job *j = ctx;

	j->path = tmp;
	return job_run(j, c, h, hl, err);
}

int asp__bulk_write(asp_conn *c, const asp_bulk_call *bc, const char *path, const void *data,
		    size_t len, const asp_write_options *o, char **orphan, asp_sweep *sw,
		    asp_error *err)
{
	asp_fs_fill f;
	job j;
	int rc;

	if ((o->flags & ASP_WRITE_IN_PLACE) || len < BULK_MIN || (rc = sftp_ready(c, bc, err)) == 0)
		return asp__fs_write(c, path, data, len, o, orphan, sw, err);
	if (rc < 0)
		return rc;
	job_init(&j, bc, path, 0, len);
	j.write = 1;
	j.src = data;
	f.fn = fill;
	f.ctx = &j;
	rc = asp__fs_write_filled(c, path, data, len, o, orphan, sw, &f, err);
	pthread_mutex_destroy(&j.mu);
	return rc;
}
