/*
 * bg.c - background processes. Each call is one asp_exec of a script that
 * quote.c builds (the sandbox side is described in quote.h): the handle
 * keeps nothing, so a new handle in a new process finds what an old one
 * started. The scripts' exit statuses say what went wrong (ASP_BG_X_*);
 * their stdout is the answer.
 */
#include "bg.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quote.h"
#include "sandbox.h"

#define BG_NAME_MAX 4096u
#define BG_KEEP_DEFAULT ((uint64_t)1 << 20)
#define BG_KEEP_MAX ((uint64_t)1 << 30)
#define BG_READ_DEFAULT ((uint64_t)1 << 20)
#define BG_READ_MAX ((uint64_t)64 << 20)
/* A list's answer: per process a record line, its name and its command. */
#define BG_LIST_MAX ((size_t)64 << 20)

struct asp_bg_list {
	asp_bg_entry *e;
	size_t n;
	char *text; /* the answer, which the entries' strings point into */
};

static const size_t bg_sizes[] = { sizeof(asp_bg_options) };
_Static_assert(sizeof(bg_sizes) / sizeof(bg_sizes[0]) == ASP_BG_OPTIONS_VERSION, "a size per version");

int asp_bg_options_init(asp_bg_options *opts, unsigned int version)
{
	const asp_bg_options d = ASP_BG_OPTIONS_INIT;

	if (!opts || version < 1 || version > ASP_BG_OPTIONS_VERSION)
		return ASP_EINVAL;
	memcpy(opts, &d, bg_sizes[version - 1]);
	opts->version = version;
	return ASP_OK;
}

int asp__bg_id_ok(const char *id)
{
	size_t i;

	if (!id || !id[0] || !((id[0] >= 'a' && id[0] <= 'z') || (id[0] >= 'A' && id[0] <= 'Z') ||
			       (id[0] >= '0' && id[0] <= '9')))
		return 0;
	for (i = 0; id[i]; i++) {
		char c = id[i];
		if (i >= 64 || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
				 c == '-' || c == '_'))
			return 0;
	}
	return 1;
}

static int check_id(const char *id, asp_error *err)
{
	char shown[96];

	if (!id)
		return asp__error(err, ASP_EINVAL, "invalid argument: id is NULL");
	if (!asp__bg_id_ok(id))
		return asp__error(err, ASP_EINVAL, "background process id \"%s\" is not an id (1 to 64 letters, "
				  "digits, '-' or '_')", asp__show_text(shown, sizeof(shown), id, strlen(id)));
	return 0;
}

static int call_ok(const asp_call_options *o, asp_error *err)
{
	if (o && o->version > ASP_CALL_OPTIONS_VERSION)
		return asp__error(err, ASP_EINVAL, "asp_call_options.version %u is not supported (1 to %u)",
				  o->version, ASP_CALL_OPTIONS_VERSION);
	return 0;
}

/*
 * Run one call: `request` on the connection's bg helper, else `script` by
 * exec (sandbox.c: asp__bg_run). *status: its exit status (-1: a signal).
 * out: its stdout (all of it, up to max_out; more is ASP_EPROTO). The
 * message of a failure the caller names from *status comes from errout.
 * Every script but wait's ends on its own within a bounded time and runs
 * as the library's own (own: no watchdog); a wait may last as long as its
 * caller asks, and keeps the watchdog, so that it ends with its
 * connection (and never goes to the helper, which it would hold).
 */
static int run(asp_sandbox *sb, asp_buf *script, asp_buf *request, const asp_call_options *call,
	       size_t max_out, int own, int *status, asp_buf *out, char *errout, size_t errcap, asp_error *err)
{
	asp_bg_run r = { 0 };
	asp_buf sink = { 0 };
	int rc;

	r.script = (const char *)script->data;
	r.own = own;
	r.request = request;
	r.call = call;
	r.max_out = max_out;
	rc = asp__bg_run(sb, &r, status, out ? out : &sink, errout, errcap, err);
	asp__buf_free(&sink);
	return rc;
}

/* The failure a script's exit status names. */
static int script_failed(int status, const char *id, const char *what, const char *errtext, asp_error *err)
{
	switch (status) {
	case ASP_BG_X_ENOENT:
		return asp__error(err, ASP_ENOENT, "%s: no background process %s", what, id);
	case ASP_BG_X_BUSY:
		return asp__error(err, ASP_EINVAL, "%s: background process %s is still running (signal it first)",
				  what, id);
	case ASP_BG_X_EEXIST:
		return asp__error(err, ASP_ERROR, "%s: could not make ~/.asp/bg/%s in the sandbox: %s", what, id,
				  errtext[0] ? errtext : "it exists");
	case ASP_BG_X_NOPID:
		return asp__error(err, ASP_ERROR, "%s: background process %s never wrote its pid", what, id);
	case ASP_BG_X_NOBASH:
		return asp__error(err, ASP_ERROR, "%s: %s", what, errtext);
	default:
		return asp__error(err, ASP_ERROR, "%s: the sandbox's script for %s failed (status %d)%s%s", what, id,
				  status, errtext[0] ? ": " : "", errtext);
	}
}

/* A decimal field of a record; 0 on a malformed one. */
static int take_u64(char **p, uint64_t *v)
{
	char *end;
	unsigned long long x;

	while (**p == ' ')
		(*p)++;
	if (**p < '0' || **p > '9')
		return -1;
	x = strtoull(*p, &end, 10);
	*p = end;
	*v = x;
	return 0;
}

static int take_i64(char **p, int64_t *v)
{
	uint64_t u;
	int neg = 0;

	while (**p == ' ')
		(*p)++;
	if (**p == '-') {
		neg = 1;
		(*p)++;
	}
	if (take_u64(p, &u) || u > INT64_MAX)
		return -1;
	*v = neg ? -(int64_t)u : (int64_t)u;
	return 0;
}

/* "STATE CODE OPEN START SIZE" (quote.h) into st. */
static int take_record(char **p, asp_bg_status *st)
{
	uint64_t code = 0, open = 0;
	int has_code = 0;

	memset(st, 0, sizeof(*st));
	while (**p == ' ')
		(*p)++;
	switch (**p) {
	case 'r': st->state = ASP_BG_RUNNING; break;
	case 'x': st->state = ASP_BG_EXITED; break;
	case 'l': st->state = ASP_BG_LOST; break;
	default: return -1;
	}
	(*p)++;
	while (**p == ' ')
		(*p)++;
	if (**p == '-')
		(*p)++;
	else if (take_u64(p, &code) || code > 255)
		return -1;
	else
		has_code = 1;
	if (take_u64(p, &open) || take_u64(p, &st->output_start) || take_u64(p, &st->output_size))
		return -1;
	st->output_open = open != 0;
	st->exit_code = -1;
	if (st->state == ASP_BG_EXITED) {
		if (!has_code)
			return -1;
		/* The shell's wait status: 128+N is signal N (bash reports a signal so). */
		if (code > 128 && code < 128 + 65)
			st->signal = (int)(code - 128);
		else
			st->exit_code = (int)code;
	}
	return 0;
}

/* ------------------------------------------------------------------ start */

static long long wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int asp_bg_start(char **id, asp_sandbox *sb, const char *command, const asp_bg_options *opts,
		 asp_error *err)
{
	asp_bg_options o = ASP_BG_OPTIONS_INIT;
	unsigned char rnd[8];
	char idbuf[24], errtext[256];
	asp_buf script = { 0 }, request = { 0 }, sink = { 0 };
	asp_bg_run r = { 0 };
	char *cwd = NULL;
	uint64_t keep;
	long long ms;
	int rc, status = 0;
	size_t i;

	ASP_ASSERT_ARG(id && sb && command);
	*id = NULL;
	if (opts) {
		if (opts->version < 1 || opts->version > ASP_BG_OPTIONS_VERSION)
			return asp__error(err, ASP_EINVAL, "asp_bg_options.version %u is not supported (1 to %u)",
					  opts->version, ASP_BG_OPTIONS_VERSION);
		memcpy(&o, opts, bg_sizes[opts->version - 1]);
		if (o.call.version > 1)
			return asp__error(err, ASP_EINVAL, "asp_bg_options.call.version %u is not supported (0 or 1: "
					  "the embedded asp_call_options has version 1's layout)", o.call.version);
	}
	keep = o.max_output ? o.max_output : BG_KEEP_DEFAULT;
	if (keep < 2 || keep > BG_KEEP_MAX)
		return asp__error(err, ASP_EINVAL, "asp_bg_options.max_output %llu: expected 2 to %llu bytes",
				  (unsigned long long)keep, (unsigned long long)BG_KEEP_MAX);
	if (o.name && strlen(o.name) > BG_NAME_MAX)
		return asp__error(err, ASP_EINVAL, "asp_bg_options.name: %zu bytes, over the %u allowed",
				  strlen(o.name), BG_NAME_MAX);
	if ((rc = asp__env_check(o.env, err)))
		return rc;
	if (asp__random(rnd, sizeof(rnd)))
		return asp__error(err, ASP_ERROR, "no randomness for a background process id");
	memcpy(idbuf, "bg-", 3);
	for (i = 0; i < sizeof(rnd); i++)
		snprintf(idbuf + 3 + 2 * i, 3, "%02x", rnd[i]);
	if ((rc = asp__sandbox_cwd(sb, o.cwd, &cwd, err)))
		return rc;
	ms = wall_ms();
	if (asp__bg_start_script(&script, idbuf, o.name ? o.name : "", command, ms, keep / 2)) {
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = asp__bg_start_request(&request, cwd, o.env, idbuf, o.name ? o.name : "", command, ms, keep / 2,
					err)))
		goto out;
	r.script = (const char *)script.data;
	r.own = 1;
	r.request = &request;
	r.start = 1;
	r.call = &o.call;
	r.cwd = cwd;
	r.env = o.env;
	r.max_out = 4096;
	errtext[0] = 0;
	if ((rc = asp__bg_run(sb, &r, &status, &sink, errtext, sizeof(errtext), err)))
		goto out;
	if (status == 126) { /* the helper's start: cd failed (the exec route says so itself) */
		char shown[ASP_PATH_SHOW_MAX + 4];
		rc = asp__error(err, ASP_ENOENT, "asp_bg_start: working directory %s does not exist or is not a "
				"directory", asp__path_show(shown, cwd));
	} else if (status)
		rc = script_failed(status, idbuf, "asp_bg_start", errtext, err);
out:
	asp__buf_free(&script);
	asp__buf_free(&request);
	asp__buf_free(&sink);
	asp__free(cwd);
	if (rc)
		return rc;
	if (!(*id = asp__strdup(idbuf)))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	return 0;
}

/* ------------------------------------------------------------------- read */

int asp_bg_read(unsigned char **out, size_t *out_len, asp_bg_status *st, asp_sandbox *sb, const char *id,
		uint64_t offset, uint64_t limit, const asp_call_options *opts, asp_error *err)
{
	asp_buf script = { 0 }, request = { 0 }, answer = { 0 };
	char errtext[256];
	unsigned char *nl;
	char *p;
	uint64_t at;
	size_t head;
	int rc, status = 0;

	ASP_ASSERT_ARG(out && out_len && st && sb);
	*out = NULL;
	*out_len = 0;
	if ((rc = check_id(id, err)) || (rc = call_ok(opts, err)))
		return rc;
	if (!limit)
		limit = BG_READ_DEFAULT;
	if (limit > BG_READ_MAX)
		return asp__error(err, ASP_EINVAL, "asp_bg_read: limit %llu is over %llu bytes",
				  (unsigned long long)limit, (unsigned long long)BG_READ_MAX);
	if (asp__bg_read_script(&script, id, offset, limit) || asp__bg_read_request(&request, id, offset, limit)) {
		asp__buf_free(&script);
		asp__buf_free(&request);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	errtext[0] = 0;
	rc = run(sb, &script, &request, opts, (size_t)limit + 256, 1, &status, &answer, errtext, sizeof(errtext),
		 err);
	asp__buf_free(&script);
	asp__buf_free(&request);
	if (rc)
		goto fail;
	if (status) {
		rc = script_failed(status, id, "asp_bg_read", errtext, err);
		goto fail;
	}
	nl = answer.len ? memchr(answer.data, '\n', answer.len) : NULL;
	if (!nl) {
		rc = asp__error(err, ASP_EPROTO, "asp_bg_read %s: the sandbox's answer has no header", id);
		goto fail;
	}
	*nl = 0;
	p = (char *)answer.data;
	if (take_u64(&p, &at) || take_record(&p, st) || *p) {
		rc = asp__error(err, ASP_EPROTO, "asp_bg_read %s: the sandbox's answer has a bad header", id);
		goto fail;
	}
	st->offset = at;
	head = (size_t)(nl - answer.data) + 1;
	if (answer.len - head > limit) {
		rc = asp__error(err, ASP_EPROTO, "asp_bg_read %s: the sandbox sent more than asked", id);
		goto fail;
	}
	memmove(answer.data, answer.data + head, answer.len - head);
	answer.len -= head;
	/* The record's size may lag the kept bytes while the command runs (quote.c, bgrd). */
	if (answer.len && at + answer.len > st->output_size)
		st->output_size = at + answer.len;
	answer.data[answer.len] = 0;
	*out = asp__buf_detach(&answer, out_len);
	return 0;
fail:
	asp__buf_free(&answer);
	return rc;
}

/* ----------------------------------------------------------- wait, signal */

int asp_bg_wait(asp_bg_status *st, asp_sandbox *sb, const char *id, unsigned int timeout_ms,
		const asp_call_options *opts, asp_error *err)
{
	asp_buf script = { 0 }, answer = { 0 };
	char errtext[256];
	char *p;
	int rc, status = 0;

	ASP_ASSERT_ARG(st && sb);
	if ((rc = check_id(id, err)) || (rc = call_ok(opts, err)))
		return rc;
	if (asp__bg_wait_script(&script, id, timeout_ms == ASP_BG_FOREVER ? UINT_MAX : timeout_ms)) {
		asp__buf_free(&script);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	errtext[0] = 0;
	rc = run(sb, &script, NULL, opts, 4096, 0, &status, &answer, errtext, sizeof(errtext), err);
	asp__buf_free(&script);
	if (!rc && status)
		rc = script_failed(status, id, "asp_bg_wait", errtext, err);
	if (!rc) {
		p = answer.len ? (char *)answer.data : (char *)"";
		if (take_record(&p, st) || (*p != '\n' && *p))
			rc = asp__error(err, ASP_EPROTO, "asp_bg_wait %s: the sandbox's answer does not parse", id);
		else if (st->state == ASP_BG_RUNNING)
			rc = asp__error(err, ASP_ETIMEOUT, "asp_bg_wait %s: still running after %u ms", id,
					timeout_ms);
	}
	asp__buf_free(&answer);
	return rc;
}

/* Signals by name: the sandbox's numbers need not be this machine's. */
static const struct {
	int num;
	const char *name;
} bg_signals[] = {
	{ SIGHUP, "HUP" }, { SIGINT, "INT" }, { SIGQUIT, "QUIT" }, { SIGILL, "ILL" }, { SIGTRAP, "TRAP" },
	{ SIGABRT, "ABRT" }, { SIGBUS, "BUS" }, { SIGFPE, "FPE" }, { SIGKILL, "KILL" }, { SIGUSR1, "USR1" },
	{ SIGSEGV, "SEGV" }, { SIGUSR2, "USR2" }, { SIGPIPE, "PIPE" }, { SIGALRM, "ALRM" }, { SIGTERM, "TERM" },
	{ SIGCHLD, "CHLD" }, { SIGCONT, "CONT" }, { SIGSTOP, "STOP" }, { SIGTSTP, "TSTP" }, { SIGTTIN, "TTIN" },
	{ SIGTTOU, "TTOU" }, { SIGURG, "URG" }, { SIGXCPU, "XCPU" }, { SIGXFSZ, "XFSZ" },
	{ SIGVTALRM, "VTALRM" }, { SIGPROF, "PROF" }, { SIGWINCH, "WINCH" }, { SIGSYS, "SYS" },
};

int asp_bg_signal(asp_sandbox *sb, const char *id, int sig, const asp_call_options *opts, asp_error *err)
{
	asp_buf script = { 0 }, request = { 0 };
	const char *name = NULL;
	char errtext[256];
	int rc, status = 0;
	size_t i;

	ASP_ASSERT_ARG(sb);
	if ((rc = check_id(id, err)) || (rc = call_ok(opts, err)))
		return rc;
	for (i = 0; i < sizeof(bg_signals) / sizeof(bg_signals[0]); i++)
		if (bg_signals[i].num == sig)
			name = bg_signals[i].name;
	if (!name)
		return asp__error(err, ASP_EINVAL, "asp_bg_signal: signal %d has no name to send it by", sig);
	if (asp__bg_signal_script(&script, id, name) || asp__bg_signal_request(&request, id, name)) {
		asp__buf_free(&script);
		asp__buf_free(&request);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	errtext[0] = 0;
	rc = run(sb, &script, &request, opts, 4096, 1, &status, NULL, errtext, sizeof(errtext), err);
	asp__buf_free(&script);
	asp__buf_free(&request);
	if (!rc && status)
		rc = script_failed(status, id, "asp_bg_signal", errtext, err);
	return rc;
}

int asp_bg_remove(asp_sandbox *sb, const char *id, const asp_call_options *opts, asp_error *err)
{
	asp_buf script = { 0 }, request = { 0 };
	char errtext[256];
	int rc, status = 0;

	ASP_ASSERT_ARG(sb);
	if ((rc = check_id(id, err)) || (rc = call_ok(opts, err)))
		return rc;
	if (asp__bg_remove_script(&script, id) || asp__bg_remove_request(&request, id)) {
		asp__buf_free(&script);
		asp__buf_free(&request);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	errtext[0] = 0;
	rc = run(sb, &script, &request, opts, 4096, 1, &status, NULL, errtext, sizeof(errtext), err);
	asp__buf_free(&script);
	asp__buf_free(&request);
	if (!rc && status)
		rc = script_failed(status, id, "asp_bg_remove", errtext, err);
	return rc;
}

/* ------------------------------------------------------------------- list */

static int by_start(const void *a, const void *b)
{
	const asp_bg_entry *x = a, *y = b;

	if (x->start_ms != y->start_ms)
		return x->start_ms < y->start_ms ? -1 : 1;
	return strcmp(x->id, y->id);
}

/* One entry: "ID MS PID " + record, a line, then name and command, each NUL-ended. */
static int take_entry(char **p, char *end, asp_bg_entry *e)
{
	char *nl = memchr(*p, '\n', (size_t)(end - *p)), *sp, *nul;
	int64_t pid;

	if (!nl)
		return -1;
	*nl = 0;
	if (!(sp = strchr(*p, ' ')))
		return -1;
	*sp = 0;
	e->id = *p;
	*p = sp + 1;
	if (!asp__bg_id_ok(e->id) || take_i64(p, &e->start_ms) || take_i64(p, &pid) ||
	    take_record(p, &e->status) || **p)
		return -1;
	e->pid = pid;
	*p = nl + 1;
	if (!(nul = memchr(*p, 0, (size_t)(end - *p))))
		return -1;
	e->name = *p;
	*p = nul + 1;
	if (*p >= end || !(nul = memchr(*p, 0, (size_t)(end - *p))))
		return -1;
	e->command = *p;
	*p = nul + 1;
	return 0;
}

int asp_bg_list_all(asp_bg_list **out, asp_sandbox *sb, const asp_call_options *opts, asp_error *err)
{
	asp_buf script = { 0 }, request = { 0 }, answer = { 0 };
	asp_bg_list *l = NULL;
	char errtext[256];
	char *p, *end;
	size_t cap = 0;
	int rc, status = 0;

	ASP_ASSERT_ARG(out && sb);
	*out = NULL;
	if ((rc = call_ok(opts, err)))
		return rc;
	if (asp__bg_list_script(&script) || asp__bg_list_request(&request)) {
		asp__buf_free(&script);
		asp__buf_free(&request);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	errtext[0] = 0;
	rc = run(sb, &script, &request, opts, BG_LIST_MAX, 1, &status, &answer, errtext, sizeof(errtext), err);
	asp__buf_free(&script);
	asp__buf_free(&request);
	if (!rc && status)
		rc = script_failed(status, "(all)", "asp_bg_list_all", errtext, err);
	if (rc)
		goto fail;
	if (!(l = asp__calloc(1, sizeof(*l)))) {
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
		goto fail;
	}
	l->text = (char *)asp__buf_detach(&answer, &cap);
	p = l->text;
	end = l->text + cap;
	while (p < end) {
		if (l->n % 16 == 0) {
			asp_bg_entry *ne = asp__realloc(l->e, (l->n + 16) * sizeof(*ne));
			if (!ne) {
				rc = asp__error(err, ASP_ENOMEM, "out of memory");
				goto fail;
			}
			l->e = ne;
		}
		memset(&l->e[l->n], 0, sizeof(l->e[0]));
		if (take_entry(&p, end, &l->e[l->n])) {
			rc = asp__error(err, ASP_EPROTO, "asp_bg_list_all: the sandbox's listing does not parse "
					"(entry %zu)", l->n + 1);
			goto fail;
		}
		l->n++;
	}
	if (l->n)
		qsort(l->e, l->n, sizeof(l->e[0]), by_start);
	*out = l;
	return 0;
fail:
	asp__buf_free(&answer);
	asp_bg_list_free(l);
	return rc;
}

size_t asp_bg_list_count(const asp_bg_list *l)
{
	return l ? l->n : 0;
}

const asp_bg_entry *asp_bg_list_get(const asp_bg_list *l, size_t i)
{
	return l && i < l->n ? &l->e[i] : NULL;
}

void asp_bg_list_free(asp_bg_list *l)
{
	if (!l)
		return;
	asp__free(l->e);
	asp__free(l->text);
	asp__free(l);
}
