/*
 * exec.c - one command: the wrapper (quote.c) reports the process group,
 * stdin/stdout/stderr are driven in one non-blocking loop, and a timeout
 * or cancel kills the remote process group from a second channel.
 *
 * Why a second channel: closing a channel or dropping TCP does not kill a
 * remote command, and libssh2 1.10 has no signal request. The wrapper
 * shell is a session and process-group leader under sshd, so every process
 * the command starts (unless it makes its own session) is in group $$.
 */
#include "errtext.h"
#include "exec.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssh.h"

#include "chan.h"
#include "quote.h"
#include "route.h"

/* ------------------------------------------------------------ capture */

/*
 * One output stream: everything, or a head and a ring-buffered tail. Both
 * grow as output comes, never past their share of max_output, so a command
 * that prints little costs little whatever the cap.
 */
typedef struct capture {
	asp_buf head;
	size_t head_max;        /* 0: unlimited */
	unsigned char *tail;    /* linear until it holds tail_max bytes, then a ring of tail_max */
	size_t tail_max, tail_cap, tail_pos, tail_len;
	uint64_t total;
} capture;

struct asp_exec_result {
	int exit_code;
	int signal;
	int timed_out;
	int cancelled;
	uint64_t duration_ms;
	capture out[2];
	unsigned char *flat[2]; /* head + tail, built once at the end */
	size_t flat_len[2];
};

static int capture_init(capture *cp, size_t max)
{
	if (!max)
		return 0;
	cp->head_max = (max + 1) / 2;
	cp->tail_max = max - cp->head_max;
	return 0;
}

/* Make room for n more bytes in b, growing it no further than max + 1 (with the NUL). */
static int grow_upto(asp_buf *b, size_t n, size_t max)
{
	size_t need = b->len + n + 1, nc;
	unsigned char *p;

	if (need <= b->cap)
		return 0;
	nc = b->cap ? b->cap : 4096;
	while (nc < need)
		nc = nc > SIZE_MAX / 2 ? need : nc * 2;
	if (max < SIZE_MAX && nc > max + 1)
		nc = max + 1 > need ? max + 1 : need;
	if (!(p = asp__realloc(b->data, nc)))
		return ASP_ENOMEM;
	b->data = p;
	b->cap = nc;
	return 0;
}

static int capture_put(capture *cp, const unsigned char *d, size_t n)
{
	size_t take;

	cp->total += n;
	if (!cp->head_max)
		return asp__buf_put(&cp->head, d, n);
	take = cp->head_max - cp->head.len < n ? cp->head_max - cp->head.len : n;
	if (take) {
		if (grow_upto(&cp->head, take, cp->head_max))
			return ASP_ENOMEM;
		memcpy(cp->head.data + cp->head.len, d, take);
		cp->head.len += take;
		cp->head.data[cp->head.len] = '\0';
	}
	d += take;
	n -= take;
	if (!cp->tail_max || !n)
		return 0;
	if (n >= cp->tail_max) {
		d += n - cp->tail_max;
		n = cp->tail_max;
	}
	if (cp->tail_cap < cp->tail_max) {
		/* Not yet a ring: the bytes are at [0, tail_len). Grow, doubling, up to tail_max. */
		size_t need = cp->tail_len + n < cp->tail_max ? cp->tail_len + n : cp->tail_max;
		if (need > cp->tail_cap) {
			size_t nc = cp->tail_cap ? cp->tail_cap : 4096;
			unsigned char *p;
			while (nc < need)
				nc = nc > cp->tail_max / 2 ? cp->tail_max : nc * 2;
			if (nc > cp->tail_max)
				nc = cp->tail_max;
			if (!(p = asp__realloc(cp->tail, nc)))
				return ASP_ENOMEM;
			cp->tail = p;
			cp->tail_cap = nc;
		}
	}
	while (n) {
		size_t at = (cp->tail_pos + cp->tail_len) % cp->tail_max;
		size_t room = cp->tail_max - at;
		size_t k = n < room ? n : room;
		memcpy(cp->tail + at, d, k);
		d += k;
		n -= k;
		if (cp->tail_len + k > cp->tail_max) {
			cp->tail_pos = (cp->tail_pos + cp->tail_len + k - cp->tail_max) % cp->tail_max;
			cp->tail_len = cp->tail_max;
		} else {
			cp->tail_len += k;
		}
	}
	return 0;
}

static int capture_flatten(capture *cp, unsigned char **out, size_t *len)
{
	size_t first = 0;

	if (cp->tail_len) {
		first = cp->tail_max - cp->tail_pos < cp->tail_len ? cp->tail_max - cp->tail_pos
								 : cp->tail_len;
		if (asp__buf_put(&cp->head, cp->tail + cp->tail_pos, first) ||
		    asp__buf_put(&cp->head, cp->tail, cp->tail_len - first))
			return ASP_ENOMEM;
	}
	asp__free(cp->tail);
	cp->tail = NULL;
	cp->tail_len = cp->tail_cap = cp->tail_pos = 0;
	*out = asp__buf_detach(&cp->head, len);
	return *out ? 0 : ASP_ENOMEM;
}

/* ------------------------------------------------------------ the run */

#define IO_BUF 65536
/*
 * Output is read into a buffer of READ_SMALL on the stack until a read fills
 * it; only then does the run get its IO_BUF on the heap. A running command
 * that says little (most: a thousand of them wait at once for asp.aio and
 * Node) so costs no 64 KiB each. A small stack buffer is fine on FFI
 * threads, whose stacks can be small (koffi's default is 128 KiB).
 */
#define READ_SMALL 4096
#define ASP_EXEC_SCRIPT_MAX 32768u /* the wrapper script, all quoted: see asp__exec_run */
#define ASP_INLINE_STDIN_MAX 4096u   /* well below a pipe's buffer: printf never waits */
#define ASP_PRIME_SCRIPT_MAX 4096u /* a primed shell reads its script a byte at a time (the watchdog is in its boot) */

/* What asp__exec_stats reports (tests: a hook, common.h). */
#ifdef ASP_TEST_HOOKS
static _Atomic unsigned long stat_inline, stat_side_kills, stat_cut_checks;
#endif

struct asp_run {
	asp_conn *c;
	const asp_exec_options *o;
	asp_exec_result *r;
	LIBSSH2_CHANNEL *ch;
	char marker[40];
	char token[ASP_TOKEN_SIZE]; /* "asp-call-<hex>", the wrapper's ASP_CALL: see asp__kill_script */
	asp_buf pre;            /* stdout before the marker line */
	int header_done;
	char end[48];           /* "<marker>:end\n", the wrapper's last line */
	size_t end_len;
	int end_seen;
	unsigned char hold[48]; /* stdout tail that may begin an end line */
	size_t hold_len;
	long pgid;              /* 0 until the wrapper reports it */
	uint64_t t_answer;      /* when the exec request was answered (not a primed shell): 0, or ms */
	int nocwd;
	/* stdin */
	size_t stdin_off;
	unsigned char *rbuf;    /* IO_BUF bytes for reading output, once a read filled READ_SMALL (below) */
	unsigned char *fdbuf;   /* IO_BUF bytes of stdin_fd data not yet sent, when stdin_fd is used */
	size_t fdbuf_len, fdbuf_off;
	int fd_eof, eof_sent;
	int stdin_inline;       /* stdin_data went inside the exec request (inline_stdin) */
	asp_buf frame;          /* on a primed shell: the script, framed, sent before stdin */
	size_t frame_off;
	int *started;           /* exec_run's: set once bytes of the frame went out */
	/* killing */
	int kill_wanted;
	LIBSSH2_CHANNEL *kch;
	int kill_state;         /* 0 idle, 1 opening, 2 starting, 3 running, 4 done */
	int kill_begun;         /* a channel open for it is out */
	asp_buf kscript;
	uint64_t kill_deadline;
	uint64_t call_deadline; /* asp_exec_options.call.timeout_ms's end, or 0 */
	int deadline_passed;    /* call_deadline passed and started the kill */
	int cb_failed;
	/* the run's own (asp__run_start), for the end */
	const char *cwd;
	uint64_t t0, tdeadline; /* start; kill_after_ms's end, or 0 */
	asp_buf script, inl;    /* the exec request, without and with stdin inside; freed once sent */
	/* a running command with a handle (proc.c): stdin stays open until closed */
	int proc, pty;
	asp_buf pin;            /* stdin written and not yet sent: [pin_off, len) */
	size_t pin_off;
	int pin_closed;
	int hold_output;        /* leave output in libssh2 (the reader's queue is full) */
};
typedef struct asp_run run;

static void start_kill(run *x, int timed_out);

/* stdin_fd is used only when asked for, so a zeroed struct never reads fd 0. */
static int streams_fd(const asp_exec_options *o)
{
	return (o->flags & ASP_EXEC_STDIN_FD) != 0;
}

static int deliver(run *x, asp_stream stream, const unsigned char *d, size_t n, asp_error *err)
{
	if (!n)
		return 0;
	if (capture_put(&x->r->out[stream - 1], d, n))
		return asp__error(err, ASP_ENOMEM, "out of memory capturing output");
	/* Non-zero cancels, exactly as asp_cancel would (start_kill sets the deadline). */
	if (x->o->on_output && !x->kill_wanted && x->o->on_output(stream, d, n, x->o->userdata))
		start_kill(x, 0);
	return 0;
}

/* The longest k < sl such that d ends with the first k bytes of s. */
static size_t partial_tail(const unsigned char *d, size_t n, const char *s, size_t sl)
{
	size_t k = n < sl - 1 ? n : sl - 1;

	for (; k; k--)
		if (!memcmp(d + n - k, s, k))
			return k;
	return 0;
}

/*
 * stdout after the header, without the wrapper's end line. It may come
 * anywhere (a background job can write after it) and be split across
 * reads: a tail that could begin it is held back until more arrives.
 */
static int pass_stdout(run *x, const unsigned char *d, size_t n, asp_error *err)
{
	const unsigned char *m;
	size_t keep;
	int rc;

	while ((m = memmem(d, n, x->end, x->end_len)) != NULL) {
		if ((rc = deliver(x, ASP_STDOUT, d, (size_t)(m - d), err)))
			return rc;
		x->end_seen = 1;
		n -= (size_t)(m - d) + x->end_len;
		d = m + x->end_len;
	}
	keep = partial_tail(d, n, x->end, x->end_len);
	memcpy(x->hold, d + n - keep, keep);
	x->hold_len = keep;
	return deliver(x, ASP_STDOUT, d, n - keep, err);
}

static int scan_stdout(run *x, const unsigned char *d, size_t n, asp_error *err)
{
	asp_buf joined = { 0 };
	int rc;

	if (!x->hold_len)
		return pass_stdout(x, d, n, err);
	if (asp__buf_put(&joined, x->hold, x->hold_len) || asp__buf_put(&joined, d, n)) {
		asp__buf_free(&joined);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	x->hold_len = 0;
	rc = pass_stdout(x, joined.data, joined.len, err);
	asp__buf_free(&joined);
	return rc;
}

/* At the end of output: held bytes were the command's after all. */
static int flush_hold(run *x, asp_error *err)
{
	size_t n = x->hold_len;

	x->hold_len = 0;
	return deliver(x, ASP_STDOUT, x->hold, n, err);
}

/* Strip the wrapper's "<marker>:<pid>\n" line; anything before it is login-script noise. */
static int take_stdout(run *x, const unsigned char *d, size_t n, asp_error *err)
{
	unsigned char *m, *nl;
	size_t ml = strlen(x->marker), used;

	if (x->header_done)
		return scan_stdout(x, d, n, err);
	if (asp__buf_put(&x->pre, d, n))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	m = memmem(x->pre.data, x->pre.len, x->marker, ml);
	if (!m || !(nl = memchr(m + ml, '\n', x->pre.len - (size_t)(m - x->pre.data) - ml))) {
		if (x->pre.len > (1u << 20))
			return asp__error(err, ASP_EPROTO, "%s: the command wrapper did not start "
					  "(is the login shell POSIX-compatible?)", x->c->where);
		return 0;
	}
	if (m[ml] == ':' && !strncmp((char *)m + ml + 1, "nocwd", 5))
		x->nocwd = 1;
	else
		x->pgid = strtol((char *)m + ml + 1, NULL, 10);
	x->header_done = 1;
	if (x->t_answer)
		asp__route_start_note(&x->c->shell_start, asp__now_ms() - x->t_answer);
	used = (size_t)(nl + 1 - x->pre.data);
	return pass_stdout(x, x->pre.data + used, x->pre.len - used, err);
}

/* Between the reads of a channel's two streams: the tests' hook, if any. */
#ifdef ASP_TEST_HOOKS
static void (*_Atomic stream_gap)(int helper);

void asp__exec_stream_gap(void (*fn)(int helper))
{
	stream_gap = fn;
}

static void between_streams(int helper)
{
	void (*fn)(int) = stream_gap;

	if (fn)
		fn(helper);
}
#else
#define between_streams(helper) ((void)0)
#endif

static int read_streams(run *x, int *progress, asp_error *err)
{
	unsigned char small[READ_SMALL];
	int stream, rc;

	for (stream = 0; stream < 2; stream++) {
		for (;;) {
			unsigned char *buf = x->rbuf ? x->rbuf : small;
			size_t cap = x->rbuf ? IO_BUF : sizeof(small);
			ssize_t n = libssh2_channel_read_ex(x->ch, stream, (char *)buf, cap);
			if (n == LIBSSH2_ERROR_EAGAIN || n == 0)
				break;
			if (n < 0)
				return asp__ssh_error(x->c, (int)n, err, "reading command output");
			*progress = 1;
			/* A full small read: there is more to come; without the memory, go on small. */
			if ((size_t)n == cap && !x->rbuf)
				x->rbuf = asp__malloc(IO_BUF);
			rc = stream == 0 ? take_stdout(x, buf, (size_t)n, err)
					 : deliver(x, ASP_STDERR, buf, (size_t)n, err);
			if (rc)
				return rc;
		}
		if (stream == 0)
			between_streams(0);
	}
	return 0;
}

/*
 * Send what the channel takes of d[*off, len). Bytes that left may reach
 * the server (a primed shell's script among them): the command may run.
 */
static int send_some(run *x, const unsigned char *d, size_t len, size_t *off, int *progress,
		     const char *what, asp_error *err)
{
	uint64_t tx = x->c->tx_bytes;
	ssize_t n = libssh2_channel_write(x->ch, (const char *)d + *off, len - *off);

	if (n > 0 || x->c->tx_bytes != tx)
		*x->started = 1;
	if (n == LIBSSH2_ERROR_EAGAIN)
		return 0;
	if (n < 0)
		return asp__ssh_error(x->c, (int)n, err, what);
	*off += (size_t)n;
	*progress = 1;
	return 0;
}

static int feed_stdin(run *x, int *progress, asp_error *err)
{
	const asp_exec_options *o = x->o;
	ssize_t n;
	int rc;

	if (x->eof_sent)
		return 0;
	if (x->frame_off < x->frame.len)
		return send_some(x, x->frame.data, x->frame.len, &x->frame_off, progress,
				 "sending the command to its shell", err);
	if (x->proc) {
		/* Written by the caller while the command runs; EOF only when it says so. */
		if (x->pin_off < x->pin.len) {
			rc = send_some(x, x->pin.data, x->pin.len, &x->pin_off, progress,
				       "writing the command's stdin", err);
			if (x->pin_off == x->pin.len)
				x->pin.len = x->pin_off = 0;
			return rc;
		}
		if (!x->pin_closed)
			return 0;
	}
	if (o->stdin_data && x->stdin_off < o->stdin_len && !x->stdin_inline)
		return send_some(x, o->stdin_data, o->stdin_len, &x->stdin_off, progress,
				 "writing the command's stdin", err);
	if (streams_fd(o) && !x->fd_eof) {
		if (x->fdbuf_off == x->fdbuf_len) {
			struct pollfd q = { o->stdin_fd, POLLIN, 0 };
			/* Only read what is there: a blocking fd must not stall the loop. */
			if (poll(&q, 1, 0) <= 0)
				return 0;
			n = read(o->stdin_fd, x->fdbuf, IO_BUF);
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
				return 0;
			if (n < 0)
				return asp__error(err, ASP_EIO, "reading local stdin: %s", ASP_ERRNO_TEXT(errno));
			if (n == 0) {
				x->fd_eof = 1;
				*progress = 1; /* go round again: the EOF goes out now, not at the next wake-up */
				return 0;
			}
			x->fdbuf_len = (size_t)n;
			x->fdbuf_off = 0;
		}
		return send_some(x, x->fdbuf, x->fdbuf_len, &x->fdbuf_off, progress,
				 "writing the command's stdin", err);
	}
	rc = libssh2_channel_send_eof(x->ch);
	if (rc == LIBSSH2_ERROR_EAGAIN)
		return 0;
	if (rc < 0)
		return asp__ssh_error(x->c, rc, err, "closing the command's stdin");
	x->eof_sent = 1;
	*progress = 1;
	return 0;
}

/*
 * The server refused the kill channel: its session limit (MaxSessions) is
 * full, as it always is at MaxSessions 1 while the command runs. The
 * command must not outlive its timeout or cancel for that: kill its group
 * from a connection of its own, opened for this and closed after. It
 * blocks, bounded by the kill's deadline; the command's channel then ends.
 */
static void kill_elsewhere(run *x)
{
	asp_conn *side = NULL;
	int status;

	if (asp__conn_open(&side, x->c->params, -1, x->kill_deadline, NULL))
		return;
	asp__exec_simple(side, (const char *)x->kscript.data, &status, NULL, NULL, NULL);
	asp__conn_close(side);
	ASP_TEST_COUNT(stat_side_kills);
}

/* Drive the kill channel one step; it never blocks (but see kill_elsewhere). */
static void kill_step(run *x)
{
	char sink[1024];
	int rc;

	if (!x->kill_wanted || !x->pgid || x->kill_state == 4)
		return;
	if (x->kill_state == 0) {
		unsigned int grace = x->o->kill_grace_ms ? x->o->kill_grace_ms : ASP_KILL_GRACE_DEFAULT_MS;
		if (asp__kill_script(&x->kscript, x->pgid, x->token, grace)) {
			x->kill_state = 4;
			return;
		}
		x->kill_state = 1;
	}
	if (x->kill_state == 1) {
		int failed;
		if (!(x->kch = asp__chan_kill_open_step(x->c, &x->kill_begun, &failed))) {
			if (failed) {
				x->kill_state = 4;
				if (!x->c->dead)
					kill_elsewhere(x);
			}
			return;
		}
		x->kill_state = 2;
	}
	if (x->kill_state == 2) {
		rc = libssh2_channel_process_startup(x->kch, "exec", 4, (const char *)x->kscript.data,
						     (unsigned int)x->kscript.len);
		if (rc == LIBSSH2_ERROR_EAGAIN)
			return;
		x->kill_state = rc ? 4 : 3;
		if (rc)
			return;
	}
	while (libssh2_channel_read_ex(x->kch, 0, sink, sizeof(sink)) > 0 ||
	       libssh2_channel_read_ex(x->kch, 1, sink, sizeof(sink)) > 0)
		;
	if (libssh2_channel_eof(x->kch))
		x->kill_state = 4;
}

static void start_kill(run *x, int timed_out)
{
	if (x->kill_wanted)
		return;
	x->kill_wanted = 1;
	if (timed_out)
		x->r->timed_out = 1;
	else
		x->r->cancelled = 1;
	x->kill_deadline = asp__now_ms() +
			   (x->o->kill_grace_ms ? x->o->kill_grace_ms : ASP_KILL_GRACE_DEFAULT_MS) +
			   x->c->io_timeout_ms + 1000;
}

static const struct {
	const char *name;
	int num;
} signals[] = {
	{ "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "ILL", SIGILL },
	{ "ABRT", SIGABRT }, { "FPE", SIGFPE }, { "KILL", SIGKILL }, { "SEGV", SIGSEGV },
	{ "PIPE", SIGPIPE }, { "ALRM", SIGALRM }, { "TERM", SIGTERM }, { "USR1", SIGUSR1 },
	{ "USR2", SIGUSR2 }, { "BUS", SIGBUS }, { "TRAP", SIGTRAP }, { "XCPU", SIGXCPU },
	{ "XFSZ", SIGXFSZ }, { "SYS", SIGSYS },
};

static int signal_number(const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
		if (strlen(signals[i].name) == len && !memcmp(signals[i].name, name, len))
			return signals[i].num;
	return 0;
}

static int exit_status(run *x, asp_error *err)
{
	char *sig = NULL;
	size_t sl = 0;
	int rc = libssh2_channel_get_exit_signal(x->ch, &sig, &sl, NULL, NULL, NULL, NULL);

	/* It fails only when copying the signal name fails: never report that death as exit 0. */
	if (rc)
		return asp__ssh_error(x->c, rc, err, "reading the command's exit signal");
	if (sig) {
		x->r->signal = signal_number(sig, sl);
		if (!x->r->signal)
			x->r->signal = SIGTERM; /* an unknown name still means a signal death */
		x->r->exit_code = -1;
		libssh2_free(x->c->session, sig);
		return 0;
	}
	x->r->exit_code = libssh2_channel_get_exit_status(x->ch);
	return 0;
}

static int wait_step(run *x, uint64_t deadline, asp_error *err)
{
	struct pollfd in = { x->o->stdin_fd, POLLIN, 0 };
	int want_fd = streams_fd(x->o) && !x->fd_eof && !x->eof_sent &&
		      x->fdbuf_off == x->fdbuf_len &&
		      !(x->o->stdin_data && x->stdin_off < x->o->stdin_len);
	int cancel_fd = x->kill_wanted ? -1 : asp__cancel_fd(x->o->call.cancel);
	int rc = asp__ssh_wait(x->c, deadline, cancel_fd, want_fd ? &in : NULL, want_fd, ASP_WAIT_PATIENT, err);

	if (rc == ASP_ECANCELLED) {
		start_kill(x, 0);
		return 0;
	}
	return rc == ASP_ETIMEOUT && deadline && asp__now_ms() >= deadline ? 0 : rc;
}

/*
 * One round of the loop, without waiting: stdin, output, the kill channel,
 * the timers. *done: the command's channel ended (and its kill ran).
 * *next: when to come back at the latest (0: when the socket says).
 */
static int pass(run *x, int *progress, int *done, uint64_t *next, asp_error *err)
{
	const asp_exec_options *o = x->o;
	uint64_t now;
	int rc;

	*done = 0;
	*next = 0;
	if ((rc = feed_stdin(x, progress, err)) || (!x->hold_output && (rc = read_streams(x, progress, err))))
		return rc;
	if (x->nocwd) {
		*done = 1;
		return 0;
	}
	kill_step(x);
	if (libssh2_channel_eof(x->ch) && (!x->kill_wanted || x->kill_state == 4 || !x->pgid)) {
		*done = 1;
		return flush_hold(x, err);
	}
	now = asp__now_ms();
	if (!x->kill_wanted && x->tdeadline && now >= x->tdeadline)
		start_kill(x, 1);
	if (!x->kill_wanted && x->call_deadline && now >= x->call_deadline) {
		x->deadline_passed = 1; /* an error, not the result's timed_out */
		start_kill(x, 1);
	}
	if (!x->kill_wanted && asp_cancel_is_triggered(o->call.cancel))
		start_kill(x, 0);
	if (x->kill_wanted && now >= x->kill_deadline) {
		/* The process group would not die or the server went quiet: give the connection up. */
		x->c->dead = 1;
		return ASP_ETIMEOUT;
	}
	*next = x->kill_wanted ? x->kill_deadline : x->tdeadline;
	if (!x->kill_wanted && x->call_deadline && (!*next || x->call_deadline < *next))
		*next = x->call_deadline;
	if (x->kill_wanted && x->kill_state != 4)
		*next = now + 50 < *next ? now + 50 : *next; /* step the kill channel */
	return 0;
}

static int drive(run *x, asp_error *err)
{
	for (;;) {
		int progress = 0, done, rc;
		uint64_t next;

		if ((rc = pass(x, &progress, &done, &next, err)) || done)
			return rc;
		if (progress)
			continue;
		if ((rc = wait_step(x, next, err)))
			return rc;
	}
}

/* ------------------------------------------------------------ stats */

#ifdef ASP_TEST_HOOKS
void asp__exec_stats(asp_exec_stats *out)
{
	asp_chan_stats ch;

	asp__chan_stats(&ch);
	out->opens = ch.opens;
	out->warm_used = ch.warm_used;
	out->warm_closed = ch.warm_closed;
	out->resent = ch.resent;
	out->stdin_inline = stat_inline;
	out->rtt_samples = ch.rtt_samples;
	out->primed = ch.primed;
	out->primed_used = ch.primed_used;
	out->primed_closed = ch.primed_closed;
	out->primed_unused = ch.primed_unused;
	out->side_kills = stat_side_kills;
	out->cut_checks = stat_cut_checks;
}
#endif

/*
 * The wrapper is POSIX shell text; a login shell that is not (fish, csh,
 * nushell) cannot run it. Name that shell: `echo $SHELL` works in all of them.
 */
static int login_shell_error(asp_conn *c, asp_error *err)
{
	asp_buf out = { 0 };
	int status = -1;
	size_t n;

	c->shell_bad = 1;
	if (asp__exec_simple(c, "echo $SHELL", &status, &out, NULL, NULL) || status || !out.len)
		out.len = 0;
	for (n = 0; n < out.len && out.data[n] > 0x20 && out.data[n] < 0x7f; n++)
		;
	if (n)
		asp__error(err, ASP_EPROTO, "%s: the login shell %.*s did not run the command "
			   "wrapper, which is POSIX sh: make a POSIX shell (sh, bash, dash, zsh) the "
			   "login shell of the user named by connection.user", c->where, (int)n,
			   (const char *)out.data);
	else
		asp__error(err, ASP_EPROTO, "%s: the command wrapper did not run (is the login "
			   "shell POSIX-compatible?)", c->where);
	asp__buf_free(&out);
	return ASP_EPROTO;
}

/*
 * Output ended before the wrapper's marker line. Either the login shell
 * never ran the wrapper (it printed something or exited non-zero), or the
 * server closed the channel with nothing at all, as sshd's ChannelTimeout
 * does to a quiet channel: that is a lost channel, and the command may
 * have run. (libssh2 reports "no exit status" as 0.)
 */
static int no_marker(run *x, asp_error *err)
{
	int rc, silent = !x->pre.len && !x->r->out[1].total;

	if ((rc = asp__chan_close(x->c, x->ch, err)) || (rc = exit_status(x, err)))
		return rc;
	if (silent && !x->r->signal && !x->r->exit_code)
		return asp__error(err, ASP_ECONNLOST, "%s: the server closed the command's channel "
				  "before the command reported that it started (no output, no exit "
				  "status); it may have run; sshd's ChannelTimeout closes quiet "
				  "channels", x->c->where);
	return login_shell_error(x->c, err);
}

/*
 * Output ended without the wrapper's end line, and libssh2 says "exit 0",
 * which it also says when no exit status came at all. A command that ran
 * `exit` or `exec` ends like this; so does one whose channel the server
 * closed while it ran (sshd's ChannelTimeout closes quiet channels). Ask
 * the sandbox whether the wrapper's shell still runs: if it does, stop its
 * process group and report the lost channel.
 */
static int check_cut(run *x, asp_error *err)
{
	unsigned int grace = x->o->kill_grace_ms ? x->o->kill_grace_ms : ASP_KILL_GRACE_DEFAULT_MS;
	asp_buf script = { 0 }, said = { 0 };
	int status = 0, rc;

	if (x->pgid <= 0) /* the marker always carries the shell's $$; never signal group 0 */
		return asp__error(err, ASP_EPROTO, "%s: the command wrapper reported no process id",
				  x->c->where);
	if (asp__cut_check_script(&script, x->pgid, x->token, grace)) {
		asp__buf_free(&script);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	ASP_TEST_COUNT(stat_cut_checks);
	rc = asp__exec_simple(x->c, (const char *)script.data, &status, NULL, &said, err);
	if (!rc && !(said.len >= 4 && !memcmp(said.data, "gone", 4)))
		rc = asp__error(err, ASP_ECONNLOST, "%s: the server closed the command's channel "
				"while the command ran (no exit status; sshd's ChannelTimeout "
				"closes quiet channels); %s", x->c->where,
				said.len >= 7 && !memcmp(said.data, "running", 7)
					? "its process group was stopped"
					: "whether it still runs is unknown");
	asp__buf_free(&script);
	asp__buf_free(&said);
	return rc;
}

/*
 * OpenSSH opens a session channel's window only when its command starts,
 * so stdin sent on the channel waits for the exec request's answer: a
 * round trip more. Small stdin can ride in the request instead, as the
 * command's stdin through a pipe from printf (the command then runs in a
 * subshell, which costs a fork in the sandbox): done when the connection's
 * round trip is longer than that (asp__route_stdin_inline), for stdin_data
 * of at most ASP_INLINE_STDIN_MAX bytes without a NUL byte and with no
 * stdin_fd to follow it. *out is the command to run, or empty.
 */
static int inline_stdin(asp_conn *c, const asp_exec_options *o, const char *command, asp_buf *out,
			asp_error *err)
{
	char *text;
	int rc;

	if (!o->stdin_data || !o->stdin_len || o->stdin_len > ASP_INLINE_STDIN_MAX || streams_fd(o) ||
	    !asp__route_stdin_inline(c) ||
	    memchr(o->stdin_data, 0, o->stdin_len))
		return 0;
	if (!(text = asp__malloc(o->stdin_len + 1)))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	memcpy(text, o->stdin_data, o->stdin_len);
	text[o->stdin_len] = '\0';
	rc = asp__buf_puts(out, "printf %s ") || asp__quote(out, text) ||
	     asp__buf_puts(out, " | eval ' '") || asp__quote(out, command);
	asp__free(text);
	return rc ? asp__error(err, ASP_ENOMEM, "out of memory") : 0;
}

static void run_free(run *x)
{
	asp_conn *c = x->c;

	asp__chan_free(c, x->kch);
	asp__chan_free(c, x->ch);
	if (x->kill_begun && !x->kch)
		c->dead = 1; /* its open is still out: libssh2 cannot open another channel on this session */
	if (!c->dead)
		asp__chan_settle(c, NULL); /* the next warm channel; its confirmation came with the answer */
	asp__buf_free(&x->kscript);
	asp__buf_free(&x->pre);
	asp__buf_free(&x->frame);
	asp__buf_free(&x->pin);
	asp__free(x->rbuf);
	asp__free(x->fdbuf);
	asp__buf_free(&x->script);
	asp__buf_free(&x->inl);
	asp__free(x);
}

/*
 * After the loop (rc: what it returned): the exit status, the checks of an
 * end without the wrapper's lines, the result. Frees x.
 */
static int run_end(asp_exec_result **out, run *x, int rc, asp_error *err)
{
	asp_conn *c = x->c;
	const asp_exec_options *o = x->o;
	const char *cwd = x->cwd;
	int i;

	if (rc)
		goto out;
	if (x->nocwd) {
		char shown[ASP_PATH_SHOW_MAX + 4];
		rc = asp__error(err, ASP_ENOENT, "exec: working directory %s does not exist or is not "
				"a directory%s", asp__path_show(shown, cwd),
				asp__longest_component(cwd) > 255 || strlen(cwd) >= 4096
					? " (its name is too long: the usual limits are 255 bytes per name, "
					  "4095 per path)" : "");
		goto out;
	}
	if (!x->header_done && !c->dead) {
		rc = no_marker(x, err);
		goto out;
	}
	if ((rc = asp__chan_close(c, x->ch, err)) || (rc = exit_status(x, err)))
		goto out;
	if (!x->end_seen && !x->kill_wanted && !x->r->signal && !x->r->exit_code &&
	    (rc = check_cut(x, err)))
		goto out;
	x->r->duration_ms = asp__now_ms() - x->t0;
	for (i = 0; i < 2; i++)
		if (capture_flatten(&x->r->out[i], &x->r->flat[i], &x->r->flat_len[i])) {
			rc = asp__error(err, ASP_ENOMEM, "out of memory");
			goto out;
		}
out:
	rc = asp__ssh_op_result(c, rc, err); /* the output may lack a packet libssh2 could not store */
	if (rc == ASP_ETIMEOUT && x->r && x->kill_wanted) {
		/* The kill did not finish in time; report what we have. */
		x->r->exit_code = -1;
		x->r->signal = SIGKILL;
		x->r->duration_ms = asp__now_ms() - x->t0;
		rc = flush_hold(x, err);
		for (i = 0; i < 2 && !rc; i++)
			if (capture_flatten(&x->r->out[i], &x->r->flat[i], &x->r->flat_len[i]))
				rc = asp__error(err, ASP_ENOMEM, "out of memory");
	}
	if (rc && *x->started && c->dead && rc != ASP_ENOMEM) {
		/* Keep the cause, but say what it means for the command. */
		asp__error_prefix(err, "%s: connection lost while the command was running; it was not "
				  "replayed and may have run in part", c->where);
		rc = ASP_ECONNLOST;
		if (err)
			err->code = rc;
	}
	if (!rc && x->deadline_passed)
		rc = asp__error(err, ASP_ETIMEOUT, "%s: the command was still running when the call's "
				"deadline of %u ms passed (asp_exec_options.call.timeout_ms); its process "
				"group was killed", c->where, o->call.timeout_ms);
	if (rc)
		asp_exec_result_free(x->r);
	else
		*out = x->r;
	x->r = NULL;
	run_free(x);
	return rc;
}

/* A terminal on ch before its exec request (asp__chan_start's hook). */
static int pty_request(asp_conn *c, LIBSSH2_CHANNEL *ch, void *ctx, asp_error *err)
{
	const asp_run_pty *t = ctx;
	int rc;

	while ((rc = libssh2_channel_request_pty_ex(ch, t->term, (unsigned int)strlen(t->term), NULL, 0,
						    (int)t->cols, (int)t->rows, 0, 0)) == LIBSSH2_ERROR_EAGAIN) {
		if (libssh2_channel_eof(ch))
			return ASP__CHAN_NOT_ANSWERED;
		if ((rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
			return rc;
	}
	if (rc == LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED || rc == LIBSSH2_ERROR_CHANNEL_FAILURE)
		return asp__error(err, ASP_EACCES, "%s: the server refused a terminal (PTY) for the "
				  "command (sshd's PermitTTY, or no free pseudo-terminal)", c->where);
	return rc ? asp__ssh_error(c, rc, err, "asking for a terminal") : 0;
}

/*
 * Start: the wrapper (quote.c), a channel, the exec request. own: command
 * is one of libasp's file scripts (asp__exec_script). pty: a terminal
 * first (NULL: none). proc: stdin stays open for asp__run_write. *out
 * holds the running command; on failure it is freed.
 */
static int run_begin(run **out, asp_conn *c, const char *command, const char *cwd,
		     const asp_exec_options *o, int own, const asp_run_pty *pty, int proc, int *started,
		     asp_error *err)
{
	run *x;
	asp_buf piped = { 0 }, primed = { 0 }; /* primed: the wrapper for a primed shell (asp__prime_boot) */
	char shell_token[ASP_TOKEN_SIZE] = "";
	const char *st;
	int rc;

	*started = 0;
	*out = NULL;
	if (!(x = asp__calloc(1, sizeof(*x))))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	x->c = c;
	x->o = o;
	x->cwd = cwd;
	x->t0 = asp__now_ms();
	x->proc = proc;
	x->pty = pty != NULL;
	x->started = started;
	if (asp__random_name(x->marker, sizeof(x->marker), "asp-") || asp__call_token(x->token)) {
		asp__free(x);
		return asp__error(err, ASP_ERROR, "no randomness for the command marker");
	}
	/* A primed shell's watchdog runs for the token chosen when it was primed: a call there has that one. */
	if (!proc && (st = asp__chan_shell_token(c)))
		memcpy(shell_token, st, sizeof(shell_token));
	x->end_len = strlen(x->marker);
	memcpy(x->end, x->marker, x->end_len);
	/* A terminal turns the end line's "\n" into "\r\n" (onlcr). */
	memcpy(x->end + x->end_len, pty ? ":end\r\n" : ":end\n", pty ? 6 : 5);
	x->end_len += pty ? 6 : 5;
	/*
	 * The wrapper; for the exec request, with small stdin inside when that
	 * saves a round trip (inline_stdin) and the whole still fits.
	 */
	if ((rc = asp__exec_script(&x->script, x->marker, x->token, cwd, o->env, command, own, 0, err)) ||
	    (!proc && (rc = inline_stdin(c, o, command, &piped, err))) ||
	    (piped.len && (rc = asp__exec_script(&x->inl, x->marker, x->token, cwd, o->env,
						 (char *)piped.data, own, 0, err))) ||
	    (shell_token[0] &&
	     (rc = asp__exec_script(&primed, x->marker, shell_token, cwd, o->env, command, own, 1, err)))) {
		asp__buf_free(&piped);
		asp__buf_free(&primed);
		run_free(x);
		return rc;
	}
	asp__buf_free(&piped);
	if (x->inl.len > ASP_EXEC_SCRIPT_MAX)
		asp__buf_free(&x->inl); /* too long with its stdin inside: the stdin goes on the channel */
	if (x->script.len > ASP_EXEC_SCRIPT_MAX) {
		/* libssh2 cannot send a larger exec request (about 34.7 KB in 1.10): say so before trying. */
		rc = asp__error(err, ASP_EINVAL, "exec: the command, cwd and env come to %zu bytes as shell "
				"text; an exec request holds at most %u: pass long text through stdin_data",
				x->script.len, ASP_EXEC_SCRIPT_MAX);
		asp__buf_free(&primed);
		run_free(x);
		return rc;
	}
	if (!(x->r = asp__calloc(1, sizeof(*x->r))) || capture_init(&x->r->out[0], o->max_output) ||
	    capture_init(&x->r->out[1], o->max_output) ||
	    (streams_fd(o) && !(x->fdbuf = asp__malloc(IO_BUF))) ||
	    (primed.len && primed.len < ASP_PRIME_SCRIPT_MAX - 16 &&
	     asp__prime_frame(&x->frame, (char *)primed.data, primed.len))) {
		asp__buf_free(&primed);
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
		return run_end(NULL, x, rc, err);
	}
	asp__buf_free(&primed);
	if (x->frame.len && (x->ch = asp__chan_shell_take(c))) {
		memcpy(x->token, shell_token, sizeof(x->token));
	} else {
		asp__buf_free(&x->frame);
		x->stdin_inline = x->inl.len > 0;
		ASP_TEST_ADD(stat_inline, x->stdin_inline);
		if ((rc = asp__chan_start_with(c, x->inl.len ? &x->inl : &x->script, pty ? pty_request : NULL,
					       (void *)pty, &x->ch, started, err)))
			return run_end(NULL, x, rc, err);
		x->t_answer = asp__now_ms(); /* the shell starts now: its start is timed (take_stdout) */
	}
	/* Sent (or the primed shell's frame is): 4 KiB less for each command while it runs. */
	asp__buf_free(&x->script);
	asp__buf_free(&x->inl);
	/*
	 * Started: from here the command's kill timer and cancel rule, and the
	 * call's deadline only when the caller set call.timeout_ms (an exec;
	 * a proc's call options bound its start only).
	 */
	x->call_deadline = o->call.timeout_ms && !proc ? c->op_deadline : 0;
	x->tdeadline = o->kill_after_ms ? asp__now_ms() + o->kill_after_ms : 0;
	asp__conn_end_op(c);
	*out = x;
	return 0;
}

static int exec_run(asp_exec_result **out, asp_conn *c, const char *command, const char *cwd,
		    const asp_exec_options *o, int own, int *started, asp_error *err)
{
	run *x;
	int rc;

	if ((rc = run_begin(&x, c, command, cwd, o, own, NULL, 0, started, err)))
		return rc;
	return run_end(out, x, drive(x, err), err);
}

int asp__exec_run(asp_exec_result **out, asp_conn *c, const char *command, const char *cwd,
		  const asp_exec_options *o, int own, int *started, asp_error *err)
{
	return exec_run(out, c, command, cwd, o, own, started, err);
}

/* ------------------------------------------------------------ a running command (proc.c) */

int asp__run_start(asp_run **out, asp_conn *c, const char *command, const char *cwd,
		   const asp_exec_options *o, const asp_run_pty *pty, int *started, asp_error *err)
{
	return run_begin(out, c, command, cwd, o, 0, pty, 1, started, err);
}

int asp__run_pass(asp_run *x, int *progress, int *done, uint64_t *next, asp_error *err)
{
	return pass(x, progress, done, next, err);
}

int asp__run_wait(asp_run *x, uint64_t deadline, asp_error *err)
{
	return wait_step(x, deadline, err);
}

int asp__run_end(asp_exec_result **out, asp_run *x, int rc, asp_error *err)
{
	return run_end(out, x, rc, err);
}

int asp__run_write(asp_run *x, const void *data, size_t len, asp_error *err)
{
	if (x->pin_off == x->pin.len)
		x->pin.len = x->pin_off = 0;
	return asp__buf_put(&x->pin, data, len) ? asp__error(err, ASP_ENOMEM, "out of memory") : 0;
}

size_t asp__run_stdin_pending(const asp_run *x)
{
	return x->pin.len - x->pin_off;
}

void asp__run_close_stdin(asp_run *x)
{
	x->pin_closed = 1;
}

int asp__run_stdin_open(const asp_run *x)
{
	return !x->eof_sent;
}

void asp__run_hold_output(asp_run *x, int hold)
{
	x->hold_output = hold;
}

void asp__run_kill(asp_run *x)
{
	start_kill(x, 0);
}

int asp__run_started(const asp_run *x)
{
	return x->header_done || x->nocwd;
}

int asp__run_signal(asp_run *x, const char *name, asp_error *err)
{
	asp_buf script = { 0 }, said = { 0 };
	int status = 0, rc;

	if (x->pgid <= 0) /* never signal group 0 */
		return asp__error(err, ASP_EPROTO, "%s: the command wrapper reported no process id",
				  x->c->where);
	if (asp__signal_script(&script, x->pgid, name)) {
		asp__buf_free(&script);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	rc = asp__exec_simple(x->c, (const char *)script.data, &status, NULL, &said, err);
	asp__buf_free(&script);
	asp__buf_free(&said);
	return rc;
}

int asp__run_resize(asp_run *x, unsigned int cols, unsigned int rows, asp_error *err)
{
	int rc;

	/* A window-change request wants no reply: this never waits a round trip. */
	while ((rc = libssh2_channel_request_pty_size_ex(x->ch, (int)cols, (int)rows, 0, 0)) ==
	       LIBSSH2_ERROR_EAGAIN)
		if ((rc = asp__ssh_wait(x->c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
			return rc;
	return rc ? asp__ssh_error(x->c, rc, err, "resizing the terminal") : 0;
}

int asp__signal_number(const char *name)
{
	if (!strncmp(name, "SIG", 3))
		name += 3;
	return signal_number(name, strlen(name));
}

int asp__exec_simple(asp_conn *c, const char *script, int *status, asp_buf *out, asp_buf *errout,
		     asp_error *err)
{
	LIBSSH2_CHANNEL *ch = NULL;
	asp_buf s = { 0 };
	char buf[4096];
	int rc, started = 0;

	if (asp__buf_puts(&s, script))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	if ((rc = asp__chan_start(c, &s, &ch, &started, err)))
		goto out;
	while (!libssh2_channel_eof(ch)) {
		ssize_t n = libssh2_channel_read_ex(ch, 1, buf, sizeof(buf)), m;

		if (n > 0 && errout && errout->len < 4096)
			asp__buf_put(errout, buf, (size_t)n);
		between_streams(1);
		m = libssh2_channel_read_ex(ch, 0, buf, sizeof(buf));
		if (m > 0 && out && out->len < 4096)
			asp__buf_put(out, buf, (size_t)m);
		if ((n < 0 && n != LIBSSH2_ERROR_EAGAIN) || (m < 0 && m != LIBSSH2_ERROR_EAGAIN)) {
			rc = asp__ssh_error(c, (int)(n < 0 && n != LIBSSH2_ERROR_EAGAIN ? n : m), err,
					    "running a helper command");
			goto out;
		}
		/* The reads may have taken in the EOF: then there is nothing to wait for. */
		if (n <= 0 && m <= 0 && !libssh2_channel_eof(ch) &&
		    (rc = asp__ssh_wait(c, 0, -1, NULL, 0, ASP_WAIT_REPLY, err)))
			goto out;
	}
	if ((rc = asp__chan_close(c, ch, err)))
		goto out;
	*status = libssh2_channel_get_exit_status(ch);
out:
	asp__chan_free(c, ch);
	if (!c->dead)
		asp__chan_settle(c, NULL);
	asp__buf_free(&s);
	return rc;
}

/* ------------------------------------------------------------ results */

int asp_exec_result_exit_code(const asp_exec_result *r)
{
	return r ? r->exit_code : -1;
}

int asp_exec_result_signal(const asp_exec_result *r)
{
	return r ? r->signal : 0;
}

int asp_exec_result_timed_out(const asp_exec_result *r)
{
	return r ? r->timed_out : 0;
}

int asp_exec_result_cancelled(const asp_exec_result *r)
{
	return r ? r->cancelled : 0;
}

const unsigned char *asp_exec_result_output(const asp_exec_result *r, asp_stream stream, size_t *len)
{
	if (!r || (stream != ASP_STDOUT && stream != ASP_STDERR)) {
		if (len)
			*len = 0;
		return NULL;
	}
	if (len)
		*len = r->flat_len[stream - 1];
	return r->flat[stream - 1];
}

uint64_t asp_exec_result_output_total(const asp_exec_result *r, asp_stream stream)
{
	if (!r || (stream != ASP_STDOUT && stream != ASP_STDERR))
		return 0;
	return r->out[stream - 1].total;
}

int asp_exec_result_truncated(const asp_exec_result *r, asp_stream stream)
{
	if (!r || (stream != ASP_STDOUT && stream != ASP_STDERR))
		return 0;
	return r->out[stream - 1].total > r->flat_len[stream - 1];
}

uint64_t asp_exec_result_duration_ms(const asp_exec_result *r)
{
	return r ? r->duration_ms : 0;
}

void asp_exec_result_free(asp_exec_result *r)
{
	int i;

	if (!r)
		return;
	for (i = 0; i < 2; i++) {
		asp__buf_free(&r->out[i].head);
		asp__free(r->out[i].tail);
		asp__free(r->flat[i]);
	}
	asp__free(r);
}

/* ------------------------------------------------------------ file-transport scripts */

int asp__exec_file_script(asp_conn *c, const char *script, const void *in, size_t inlen,
			  asp_output_cb cb, void *ud, int *status, asp_error *err)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	uint64_t deadline = c->op_deadline, now = asp__now_ms();
	asp_cancel *cancel = c->op_cancel;
	int rc, started;

	/* The call's deadline and token become the command's: stopping it kills the remote group. */
	o.call.cancel = cancel;
	o.kill_after_ms = !deadline ? 0 : deadline > now + 1 ? (unsigned int)(deadline - now) : 1;
	o.stdin_data = in;
	o.stdin_len = inlen;
	o.on_output = cb;
	o.userdata = ud;
	o.max_output = 1; /* the output goes to cb, nothing is kept */
	rc = exec_run(&r, c, script, "/", &o, 1, &started, err);
	asp__conn_begin_op(c, deadline, cancel); /* exec_run ended the op at the request */
	if (rc)
		return rc;
	/*
	 * A script that exited 0 before the kill reached it did all it does (an
	 * atomic write's mv is done): that is the call's outcome, not the stop.
	 */
	if (!asp_exec_result_signal(r) && asp_exec_result_exit_code(r) == 0)
		rc = 0;
	else if (asp_exec_result_timed_out(r))
		rc = asp__error(err, ASP_ETIMEOUT, "%s: the call's deadline passed; its shell "
				"command was stopped", c->where);
	else if (asp_exec_result_cancelled(r) && asp_cancel_is_triggered(cancel))
		rc = asp__error(err, ASP_ECANCELLED, "%s: cancelled; the call's shell command was "
				"stopped", c->where);
	*status = asp_exec_result_signal(r) ? -1 : asp_exec_result_exit_code(r);
	asp_exec_result_free(r);
	return rc;
}
