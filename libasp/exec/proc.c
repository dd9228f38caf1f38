/*
 * proc.c - a running command with a handle: exec.c's run (asp__run_*)
 * driven a pass at a time by whichever of the proc's calls comes, on a
 * connection that goes back to the pool between them.
 *
 * Each call locks the proc, checks its connection out (asp__pool_take:
 * that connection, waiting while another call has it), does what needs no
 * waiting (stdin out, output in, the kill channel, the timers), and hands
 * the connection back before it waits; it waits on the socket with nothing
 * held, in slices, since another call on the connection may take in the
 * proc's bytes meanwhile. So a proc never keeps other calls off its
 * connection for longer than a pass, and one connection carries several
 * procs besides the pool's other calls.
 */
#include "proc.h"

#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

#include "ssh.h"

#include "cancel.h"
#include "exec.h"

#define PROC_QUEUE_MAX (1u << 20) /* unread output before the command is made to wait */
#define PROC_SLICE_MS 50u         /* longest wait before a look at what other calls took in */
#define PROC_BUSY_MS 5u           /* asp_proc_wait_any: a look again after the connection was busy */
#define PROC_QUIET_MS 1000u       /* asp_proc_wait_any: a look when nobody used the connection since */
#define PROC_TERM_DEFAULT "xterm-256color"

struct asp_proc {
	pthread_mutex_t mu;
	asp_pool *pool;
	asp_conn *c;
	asp_run *run;           /* NULL once ended */
	asp_exec_options o;     /* the run's: on_output is queue_output */
	char *cwd;
	int pty;
	int started;            /* asp__run_start's */
	asp_buf q[2];           /* unread stdout, stderr: [qoff, len) */
	size_t qoff[2];
	size_t queued;          /* both */
	int last;               /* the stream the last read returned (0, 1) */
	int waiting;            /* asp_proc_wait or asp_proc_free drives the run */
	int frozen;             /* output goes to the result only (see queue_output) */
	int oom;                /* queued output was dropped for want of memory */
	int stdin_closed;       /* asp_proc_close_stdin was called */
	int ended;              /* the run ended: result or end_rc */
	uint64_t ended_seq;     /* when a call saw it end, in the process's order of ends */
	int end_rc;
	asp_error end_err;
	asp_exec_result *result;
	int result_taken;
	/* What asp_proc_wait_any's last look at it saw (see there). */
	uint64_t any_looked;    /* when (0: never) */
	uint64_t any_timer;     /* its next timer then (0: none) */
	short any_events;       /* what its socket was to be polled for */
	int any_busy;           /* another call had its connection */
	unsigned long any_uses; /* its connection's uses counter right after its own take */
};

static int queue_output(asp_stream stream, const unsigned char *d, size_t n, void *ud)
{
	asp_proc *p = ud;
	asp_buf *b = &p->q[stream - 1];
	size_t *off = &p->qoff[stream - 1];

	/* Nobody reads while the wait goes on past the cap: stop queueing, or the wait would stall. */
	if (p->waiting && p->queued + n > PROC_QUEUE_MAX)
		p->frozen = 1;
	if (p->frozen)
		return 0;
	if (*off == b->len) {
		b->len = *off = 0;
	} else if (*off > 65536 && *off > b->len / 2) {
		memmove(b->data, b->data + *off, b->len - *off);
		b->len -= *off;
		*off = 0;
	}
	if (asp__buf_put(b, d, n)) {
		p->oom = 1;
		return 0;
	}
	p->queued += n;
	return 0;
}

/* Ends in the order calls saw them: asp_proc_wait_any names the first. */
static _Atomic uint64_t ends_seen;

/* The run ended (rc: its loop's failure, or 0): keep the result or the error. */
static void finish(asp_proc *p, int rc, const asp_error *why)
{
	asp_error e;

	if (rc && why)
		e = *why;
	else
		memset(&e, 0, sizeof(e));
	p->end_rc = asp__run_end(&p->result, p->run, rc, &e);
	p->end_err = e;
	p->run = NULL;
	p->ended = 1;
	p->ended_seq = atomic_fetch_add(&ends_seen, 1);
}

/* Under p->mu: check the connection out, or end the run when it died (then 1). */
static int take(asp_proc *p, uint64_t deadline)
{
	asp_error e;
	int rc = asp__pool_take(p->pool, p->c, deadline);

	if (rc != ASP_ECONNLOST)
		return rc;
	/* Out of the pool: nobody else uses it now. */
	p->c->dead = 1;
	asp__error(&e, ASP_ECONNLOST, "%s: the connection carrying the command was lost", p->c->where);
	finish(p, ASP_ECONNLOST, &e);
	return 1;
}

typedef int (*want_fn)(const asp_proc *p);

/*
 * Under p->mu: drive p as far as it goes without waiting (take the
 * connection by deadline, passes until nothing moves or want(p), hand it
 * back); then *fd is what to poll for its next bytes and *next its next
 * timer (0: none). 0 also when the run ended or want(p) (the caller looks);
 * else take's error (ASP_ETIMEOUT: the connection stayed busy).
 */
static int look(asp_proc *p, uint64_t deadline, want_fn want, struct pollfd *fd, uint64_t *next)
{
	int rc, progress = 1, done = 0, hold = 0;

	*next = 0;
	if (p->ended || want(p))
		return 0;
	if ((rc = take(p, deadline)) == 1)
		return 0;
	if (rc)
		return rc;
	p->any_uses = atomic_load(&p->c->uses); /* ours: nobody else has it until we hand it back */
	while (progress && !done) {
		asp_error e;
		progress = 0;
		hold = !p->waiting && !p->frozen && p->queued >= PROC_QUEUE_MAX;
		asp__run_hold_output(p->run, hold);
		memset(&e, 0, sizeof(e));
		if ((rc = asp__run_pass(p->run, &progress, &done, next, &e)) || done) {
			finish(p, rc, &e);
			break;
		}
		if (want(p))
			break;
	}
	fd->fd = p->c->sock;
	fd->events = hold ? 0 : POLLIN; /* held output would wake the poll at once, again and again */
	if (!p->ended && (libssh2_session_block_directions(p->c->session) & LIBSSH2_SESSION_BLOCK_OUTBOUND))
		fd->events |= POLLOUT;
	fd->revents = 0;
	asp__pool_put(p->pool, p->c);
	return 0;
}

/* Under p->mu: the proc's cancel token as a pollfd; 0 when there is none to watch. */
static int cancel_fd(const asp_proc *p, struct pollfd *fd)
{
	fd->fd = asp__cancel_fd(p->o.call.cancel);
	fd->events = POLLIN;
	fd->revents = 0;
	return fd->fd >= 0 && !asp_cancel_is_triggered(p->o.call.cancel);
}

/* When to look again: a slice from now, or sooner for the deadline or a timer. */
static uint64_t slice_end(uint64_t now, uint64_t slice, uint64_t deadline, uint64_t next)
{
	uint64_t until = now + slice;

	if (deadline && deadline < until)
		until = deadline;
	if (next && next < until)
		until = next > now ? next : now;
	return until;
}

/*
 * Drive p until want(p), the run ends, or deadline (0: none; ASP_ETIMEOUT).
 * Under p->mu, which it lets go while it waits.
 */
static int pump(asp_proc *p, uint64_t deadline, want_fn want)
{
	for (;;) {
		struct pollfd fds[2];
		uint64_t next, now, until;
		int rc;

		if ((rc = look(p, deadline, want, &fds[0], &next)))
			return rc;
		if (p->ended || want(p))
			return 0;
		now = asp__now_ms();
		if (deadline && now >= deadline)
			return ASP_ETIMEOUT;
		until = slice_end(now, PROC_SLICE_MS, deadline, next);
		rc = cancel_fd(p, &fds[1]);
		pthread_mutex_unlock(&p->mu);
		poll(fds, (nfds_t)(1 + rc), (int)(until - now));
		pthread_mutex_lock(&p->mu);
	}
}

static uint64_t deadline_in(int timeout_ms)
{
	/* 0: a look, which still takes the connection when it is free (a deadline already due). */
	return timeout_ms < 0 ? 0 : asp__now_ms() + (uint64_t)timeout_ms + (timeout_ms == 0);
}

int asp__proc_start(asp_proc **out, asp_pool *pool, asp_conn *c, const char *command, const char *cwd,
		    const asp_proc_options *opts, int *started, asp_error *err)
{
	asp_run_pty pty;
	asp_proc *p;
	int rc;

	if (!(p = asp__calloc(1, sizeof(*p))) || !(p->cwd = asp__strdup(cwd))) {
		asp__free(p);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	pthread_mutex_init(&p->mu, NULL);
	p->pool = pool;
	p->c = c;
	p->pty = (opts->flags & ASP_PROC_PTY) != 0;
	p->o.version = ASP_EXEC_OPTIONS_VERSION;
	p->o.call = opts->call;
	p->o.call.timeout_ms = 0; /* it bounded the start, which sandbox.c set up */
	p->o.env = opts->env;     /* read by the start only */
	p->o.kill_after_ms = opts->kill_after_ms;
	p->o.kill_grace_ms = opts->kill_grace_ms;
	p->o.max_output = opts->max_output;
	p->o.on_output = queue_output;
	p->o.userdata = p;
	pty.term = opts->term ? opts->term : PROC_TERM_DEFAULT;
	pty.cols = opts->cols ? opts->cols : 80;
	pty.rows = opts->rows ? opts->rows : 24;
	if ((rc = asp__pool_hold(pool, c))) {
		rc = asp__error(err, rc, "out of memory");
		goto fail;
	}
	if ((rc = asp__run_start(&p->run, c, command, p->cwd, &p->o, p->pty ? &pty : NULL, &p->started, err))) {
		asp__pool_unhold(pool, c);
		goto fail;
	}
	p->o.env = NULL;
	*started = p->started;
	*out = p;
	return 0;
fail:
	*started = p->started;
	pthread_mutex_destroy(&p->mu);
	asp__free(p->cwd);
	asp__free(p);
	return rc;
}

/* ------------------------------------------------------------ stdin */

static int started(const asp_proc *p)
{
	return asp__run_started(p->run);
}


static int stdin_sent(const asp_proc *p)
{
	return !asp__run_stdin_pending(p->run);
}

static int eof_sent(const asp_proc *p)
{
	return !asp__run_stdin_open(p->run);
}

int asp_proc_write(asp_proc *p, const void *data, size_t len, asp_error *err)
{
	int rc;

	ASP_ASSERT_ARG(p && (data || !len));
	pthread_mutex_lock(&p->mu);
	if (p->stdin_closed) {
		rc = asp__error(err, ASP_EINVAL, "asp_proc_write: the command's stdin was closed "
				"(asp_proc_close_stdin)");
	} else if (p->ended) {
		rc = asp__error(err, ASP_EIO, "asp_proc_write: the command has ended; nothing was written");
	} else if (!len) {
		rc = 0;
	} else if (p->pty && (rc = pump(p, 0, started))) {
		/*
		 * A terminal's Ctrl-C flushes output the server has not read yet:
		 * nothing goes in before the wrapper's start line came out.
		 */
		rc = asp__error(err, rc, "asp_proc_write: %s", asp_strerror(rc));
	} else if (!(rc = asp__run_write(p->run, data, len, err)) && (rc = pump(p, 0, stdin_sent))) {
		rc = asp__error(err, rc, "asp_proc_write: %s", asp_strerror(rc));
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

int asp_proc_close_stdin(asp_proc *p, asp_error *err)
{
	int rc = 0;

	ASP_ASSERT_ARG(p);
	pthread_mutex_lock(&p->mu);
	if (!p->stdin_closed && !p->ended) {
		p->stdin_closed = 1;
		asp__run_close_stdin(p->run);
		if ((rc = pump(p, 0, eof_sent)))
			rc = asp__error(err, rc, "asp_proc_close_stdin: %s", asp_strerror(rc));
	}
	p->stdin_closed = 1;
	pthread_mutex_unlock(&p->mu);
	return rc;
}

/* ------------------------------------------------------------ output */

static int has_output(const asp_proc *p)
{
	return p->queued > 0;
}

int asp_proc_read(size_t *out_len, asp_stream *stream, asp_proc *p, void *buf, size_t cap,
		  int timeout_ms, asp_error *err)
{
	int rc, s;
	size_t n;

	ASP_ASSERT_ARG(out_len && p && buf);
	*out_len = 0;
	if (!cap)
		return asp__error(err, ASP_EINVAL, "asp_proc_read: a buffer of 0 bytes");
	if (timeout_ms < -1)
		return asp__error(err, ASP_EINVAL, "asp_proc_read: timeout_ms %d (-1 means no limit)", timeout_ms);
	pthread_mutex_lock(&p->mu);
	rc = pump(p, deadline_in(timeout_ms), has_output);
	if (p->queued) {
		/* Take turns: the other stream first when it has some. */
		s = p->qoff[!p->last] < p->q[!p->last].len ? !p->last : p->last;
		n = p->q[s].len - p->qoff[s];
		n = n < cap ? n : cap;
		memcpy(buf, p->q[s].data + p->qoff[s], n);
		p->qoff[s] += n;
		p->queued -= n;
		p->last = s;
		*out_len = n;
		if (stream)
			*stream = s ? ASP_STDERR : ASP_STDOUT;
		rc = 0;
	} else if (p->ended && p->end_rc) {
		rc = p->end_rc;
		if (err)
			*err = p->end_err;
	} else if (p->ended) {
		rc = 0; /* the end */
	} else if (rc == ASP_ETIMEOUT) {
		rc = asp__error(err, ASP_ETIMEOUT, "asp_proc_read: no output within %d ms; the command "
				"is still running", timeout_ms);
	} else if (rc) {
		rc = asp__error(err, rc, "asp_proc_read: %s", asp_strerror(rc));
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

/* ------------------------------------------------------------ signal, resize */

int asp_proc_signal(asp_proc *p, const char *signal, asp_error *err)
{
	const char *name;
	asp_error e;
	int rc;

	ASP_ASSERT_ARG(p && signal);
	name = !strncmp(signal, "SIG", 3) ? signal + 3 : signal;
	if (!asp__signal_number(name)) {
		char shown[80];
		return asp__error(err, ASP_EINVAL, "asp_proc_signal: %s is not a signal name (HUP, INT, QUIT, "
				  "KILL, USR1, USR2, TERM, ...; SIG before it may be left out)",
				  asp__show_text(shown, sizeof(shown), signal, strlen(signal)));
	}
	pthread_mutex_lock(&p->mu);
	/* Its process group is known once the wrapper reported it. */
	rc = pump(p, asp__now_ms() + p->c->io_timeout_ms, started);
	if (!rc && !p->ended) {
		if (!(rc = take(p, 0))) {
			memset(&e, 0, sizeof(e));
			rc = asp__run_signal(p->run, name, &e);
			asp__pool_put(p->pool, p->c);
			if (rc && err)
				*err = e;
		} else if (rc == 1) {
			rc = p->end_rc; /* the connection was lost: say so */
			if (rc && err)
				*err = p->end_err;
		}
	} else if (rc) {
		rc = asp__error(err, rc, "asp_proc_signal: the command did not report its start: %s",
				asp_strerror(rc));
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

int asp_proc_resize(asp_proc *p, unsigned int cols, unsigned int rows, asp_error *err)
{
	int rc = 0;

	ASP_ASSERT_ARG(p);
	if (!p->pty)
		return asp__error(err, ASP_EINVAL, "asp_proc_resize: the command has no terminal "
				  "(asp_proc_options.flags without ASP_PROC_PTY)");
	if (!cols || !rows || cols > 10000 || rows > 10000)
		return asp__error(err, ASP_EINVAL, "asp_proc_resize: %u columns, %u rows (1 to 10000 each)",
				  cols, rows);
	pthread_mutex_lock(&p->mu);
	if (!p->ended && !(rc = take(p, 0))) {
		rc = asp__run_resize(p->run, cols, rows, err);
		asp__pool_put(p->pool, p->c);
	} else if (rc == 1) {
		rc = p->end_rc; /* the connection was lost: say so */
		if (rc && err)
			*err = p->end_err;
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

/* ------------------------------------------------------------ wait, free */

static int ended(const asp_proc *p)
{
	return p->ended;
}

int asp_proc_wait(asp_exec_result **out, asp_proc *p, int timeout_ms, asp_error *err)
{
	int rc;

	ASP_ASSERT_ARG(out && p);
	if (timeout_ms < -1)
		return asp__error(err, ASP_EINVAL, "asp_proc_wait: timeout_ms %d (-1 means no limit)", timeout_ms);
	pthread_mutex_lock(&p->mu);
	if (p->result_taken) {
		pthread_mutex_unlock(&p->mu);
		return asp__error(err, ASP_EINVAL, "asp_proc_wait: the result was taken by an earlier "
				  "asp_proc_wait");
	}
	p->waiting = 1;
	rc = pump(p, deadline_in(timeout_ms), ended);
	p->waiting = 0;
	if (p->ended) {
		rc = p->end_rc;
		if (rc && err)
			*err = p->end_err;
		if (!rc) {
			*out = p->result;
			p->result = NULL;
		}
		p->result_taken = 1;
	} else if (rc == ASP_ETIMEOUT) {
		rc = asp__error(err, ASP_ETIMEOUT, "asp_proc_wait: the command is still running after %d ms",
				timeout_ms);
	} else if (rc) {
		rc = asp__error(err, rc, "asp_proc_wait: %s", asp_strerror(rc));
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

/* ------------------------------------------------------------ wait for any */

static int by_fd(const void *a, const void *b)
{
	const struct pollfd *x = a, *y = b;

	return (x->fd > y->fd) - (x->fd < y->fd);
}

/* One entry per descriptor (procs on one connection share its socket), events merged. */
static nfds_t merge_fds(struct pollfd *fds, nfds_t n)
{
	nfds_t i, out = 0;

	qsort(fds, n, sizeof(*fds), by_fd);
	for (i = 0; i < n; i++) {
		if (out && fds[out - 1].fd == fds[i].fd)
			fds[out - 1].events |= fds[i].events;
		else
			fds[out++] = fds[i];
	}
	return out;
}

/* 1 when fd is in the merged, polled set with something to say. */
static int spoke(const struct pollfd *set, nfds_t n, int fd)
{
	struct pollfd key = { .fd = fd };
	const struct pollfd *hit;

	if (fd < 0)
		return 0;
	hit = bsearch(&key, set, n, sizeof(*set), by_fd);
	return hit && hit->revents;
}

#ifdef ASP_TEST_HOOKS
static _Atomic unsigned long stat_any_looks;

unsigned long asp__proc_any_looks(void)
{
	return stat_any_looks;
}
#endif

/*
 * Under p->mu: whether asp_proc_wait_any must look at p now, from what its
 * last look saw. Else *until is lowered to when it must: a proc is looked
 * at a slice after its connection was used by anyone else (who may have
 * taken in its bytes, which no poll shows), when a timer of its run is due,
 * a little after a look found its connection busy, and at least every
 * PROC_QUIET_MS (a use that starts while the caller sleeps in poll is seen
 * only at the next round). Its socket's poll covers the rest: a thousand
 * quiet commands cost a thousand looks a second, not twenty thousand.
 */
static int any_due(const asp_proc *p, uint64_t now, uint64_t *until)
{
	int used = atomic_load(&p->c->uses) != p->any_uses;
	uint64_t at = p->any_looked + (p->any_busy ? PROC_BUSY_MS : used ? PROC_SLICE_MS : PROC_QUIET_MS);

	if (p->any_timer && p->any_timer < at)
		at = p->any_timer;
	if (!p->any_looked || now >= at)
		return 1;
	if (at < *until)
		*until = at;
	return 0;
}

/*
 * Each round polls every proc's socket and cancel token (and wake's) at
 * once, merged per descriptor, then looks only at the procs that are due
 * (any_due) or whose socket or token spoke: one proc ending does not cost
 * a look at each of a thousand others. A first call looks at every proc
 * (none was looked at within a slice), as does each later call at a proc
 * whose slice has run out.
 */
int asp_proc_wait_any(size_t *index, asp_proc *const *procs, size_t n, int timeout_ms, asp_cancel *wake,
		      asp_error *err)
{
	uint64_t deadline;
	struct pollfd *fds;
	int rc = 0;

	ASP_ASSERT_ARG(index && (procs || !n));
	if (timeout_ms < -1)
		return asp__error(err, ASP_EINVAL, "asp_proc_wait_any: timeout_ms %d (-1 means no limit)",
				  timeout_ms);
	if (n > (SIZE_MAX / sizeof(*fds) - 1) / 2)
		return asp__error(err, ASP_EINVAL, "asp_proc_wait_any: %zu commands", n);
	if (!(fds = asp__malloc((2 * n + 1) * sizeof(*fds))))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	deadline = deadline_in(timeout_ms);
	for (;;) {
		uint64_t now = asp__now_ms(), until = deadline ? deadline : UINT64_MAX, first_seq = UINT64_MAX;
		nfds_t nfds = 0;
		size_t first = n;
		int due = 0;

		/*
		 * The proc that ended first, if any has (by when a call saw it: a
		 * caller that takes one per call serves them in the order they
		 * ended, never the lowest place first); else what to poll for, and
		 * whether any proc is due a look at once.
		 */
		for (size_t i = 0; i < n; i++) {
			asp_proc *p = procs[i];

			if (!p)
				continue;
			pthread_mutex_lock(&p->mu);
			if (p->ended || first < n) {
				if (p->ended && p->ended_seq < first_seq) {
					first = i;
					first_seq = p->ended_seq;
				}
				pthread_mutex_unlock(&p->mu);
				continue;
			}
			due |= any_due(p, now, &until);
			if (p->any_looked && !p->any_busy && p->any_events) {
				fds[nfds].fd = p->c->sock;
				fds[nfds].events = p->any_events;
				nfds++;
			}
			nfds += (nfds_t)cancel_fd(p, &fds[nfds]);
			pthread_mutex_unlock(&p->mu);
		}
		if (first < n) {
			*index = first;
			goto out;
		}
		if (wake && asp_cancel_is_triggered(wake)) {
			rc = asp__error(err, ASP_ECANCELLED, "asp_proc_wait_any: woken (its asp_cancel)");
			goto out;
		}
		if (!due && deadline && now >= deadline) {
			rc = asp__error(err, ASP_ETIMEOUT, "asp_proc_wait_any: no command ended within %d ms",
					timeout_ms);
			goto out;
		}
		if (wake) {
			fds[nfds].fd = asp__cancel_fd(wake);
			fds[nfds].events = POLLIN;
			nfds++;
		}
		for (nfds_t k = 0; k < nfds; k++)
			fds[k].revents = 0;
		nfds = merge_fds(fds, nfds);
		/* until: the deadline, a proc's slice or timer (any_due); none of them: only wake. */
		poll(fds, nfds, due ? 0 : until == UINT64_MAX ? -1 : (int)(until - now));

		/* Look at the procs that are due or whose socket or token spoke. */
		now = asp__now_ms();
		for (size_t i = 0; i < n; i++) {
			asp_proc *p = procs[i];
			struct pollfd pf, cf;
			uint64_t pnext, ignored = UINT64_MAX;
			int was;

			if (!p)
				continue;
			pthread_mutex_lock(&p->mu);
			cancel_fd(p, &cf);
			if (!p->ended && !any_due(p, now, &ignored) && !spoke(fds, nfds, cf.fd) &&
			    !(p->any_events && spoke(fds, nfds, p->c->sock))) {
				pthread_mutex_unlock(&p->mu);
				continue;
			}
			ASP_TEST_COUNT(stat_any_looks);
			was = p->waiting;
			p->waiting = 1; /* as asp_proc_wait: output nobody reads goes to the result */
			rc = look(p, now + 1, ended, &pf, &pnext);
			p->waiting = was;
			p->any_looked = asp__now_ms();
			p->any_busy = rc == ASP_ETIMEOUT;
			if (!rc) {
				p->any_timer = pnext;
				p->any_events = pf.events;
			}
			if (p->ended) {
				pthread_mutex_unlock(&p->mu);
				*index = i;
				rc = 0;
				goto out;
			}
			if (rc && rc != ASP_ETIMEOUT) {
				pthread_mutex_unlock(&p->mu);
				*index = i;
				rc = asp__error(err, rc, "asp_proc_wait_any: command %zu: %s", i, asp_strerror(rc));
				goto out;
			}
			rc = 0;
			pthread_mutex_unlock(&p->mu);
		}
	}
out:
	asp__free(fds);
	return rc;
}

void asp_proc_free(asp_proc *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->frozen = p->waiting = 1;
	if (!p->ended) {
		if (!take(p, 0)) {
			asp__run_kill(p->run); /* a no-op once it is being killed */
			asp__pool_put(p->pool, p->c);
		}
		pump(p, 0, ended); /* the kill is bounded by its own deadline (exec.c) */
	}
	pthread_mutex_unlock(&p->mu);
	asp__pool_unhold(p->pool, p->c);
	asp_exec_result_free(p->result);
	asp__buf_free(&p->q[0]);
	asp__buf_free(&p->q[1]);
	asp__free(p->cwd);
	pthread_mutex_destroy(&p->mu);
	asp__free(p);
}
