/*
 * sandbox.c - asp_open / asp_close and the public entry points: argument
 * checks, path resolution against the workspace, connection checkout and
 * the retry rule (an operation that cannot have had an effect, or that is
 * idempotent, is retried once on a fresh connection; an exec that may have
 * started never is).
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "bulk.h"
#include "chan.h"
#include "common.h"
#include "config.h"
#include "conn.h"
#include "exec.h"
#include "fs.h"
#include "helper.h"
#include "hostkey.h"
#include "identity.h"
#include "log.h"
#include "pool.h"
#include "proc.h"
#include "quote.h"
#include "sandbox.h"
#include "sftp.h"
#include "ssh.h"

#define MAX_ORPHANS 64
#define ASP_PATH_BYTES_MAX 32768u

struct asp_sandbox {
	asp_config *cfg;
	asp_identity *identity;
	asp_pin pin;
	int pinned;
	char *known_hosts;
	asp_conn_params params;
	_Atomic int no_sftp;         /* params.no_sftp points here */
	_Atomic uint64_t calls_ended; /* calls that have ended, and calls running (with_conn): */
	_Atomic unsigned int calls_running; /* whether a primed shell is still fresh (chan.c) */
	_Atomic uint64_t changes;    /* calls ended that were not bg calls: whether a bg helper is fresh */
	asp_pool *pool;
	unsigned int max_connections;
	unsigned int op_timeout_ms;  /* default overall deadline of a call */
	uint64_t max_read_bytes;     /* caps on what crosses from the sandbox (asp_open_options) */
	size_t max_output;
	asp_list_caps list_caps;     /* max_list_entries, max_list_bytes */
	pthread_mutex_t mu;         /* guards orphans */
	char *orphans[MAX_ORPHANS]; /* temp files of atomic writes cut off by a lost connection */
	size_t norphans;
	asp_sweep *sweep;           /* stale temp files of other writers (fs.c) */
	asp_log log;                /* the trace; params.log points here */
};

struct asp_list {
	asp_list_entry *e;
	size_t n;
};

/* ------------------------------------------------------------ options */

/*
 * Every versioned struct a caller passes follows one rule (libgit2's
 * git_error__check_version): versions 1 to the current one are accepted,
 * and only the bytes that version had are read or written; the fields it
 * lacks keep their defaults. A version newer than this library is refused.
 * X_SIZES[v - 1] is version v's size; a field appended bumps the version
 * and adds a size.
 */
static const size_t open_sizes[] = { offsetof(asp_open_options, config_text), offsetof(asp_open_options, log_fn),
				     sizeof(asp_open_options) };
static const size_t write_sizes[] = { sizeof(asp_write_options) };
static const size_t call_sizes[] = { sizeof(asp_call_options) };
static const size_t exec_sizes[] = { sizeof(asp_exec_options) };
static const size_t info_sizes[] = { sizeof(asp_sandbox_info) };
static const size_t proc_sizes[] = { sizeof(asp_proc_options) };
#define VERSIONS(sizes) ((unsigned int)(sizeof(sizes) / sizeof((sizes)[0])))
_Static_assert(VERSIONS(open_sizes) == ASP_OPEN_OPTIONS_VERSION, "a size per version");
_Static_assert(VERSIONS(write_sizes) == ASP_WRITE_OPTIONS_VERSION, "a size per version");
_Static_assert(VERSIONS(call_sizes) == ASP_CALL_OPTIONS_VERSION, "a size per version");
_Static_assert(VERSIONS(exec_sizes) == ASP_EXEC_OPTIONS_VERSION, "a size per version");
_Static_assert(VERSIONS(info_sizes) == ASP_SANDBOX_INFO_VERSION, "a size per version");
_Static_assert(VERSIONS(proc_sizes) == ASP_PROC_OPTIONS_VERSION, "a size per version");

static int version_ok(unsigned int version, unsigned int current, const char *what, asp_error *err)
{
	if (version >= 1 && version <= current)
		return 0;
	return asp__error(err, ASP_EINVAL, "%s.version %u is not supported (1 to %u)", what, version,
			  current);
}

/* out holds the defaults; the caller's in (a struct of its version) overrides what that version has. */
static int take(void *out, const void *in, const size_t *sizes, unsigned int current, const char *what,
		asp_error *err)
{
	unsigned int version;
	int rc;

	memcpy(&version, in, sizeof(version)); /* every such struct begins with it */
	if ((rc = version_ok(version, current, what, err)))
		return rc;
	memcpy(out, in, sizes[version - 1]);
	return 0;
}
#define TAKE(out, in, sizes, what, err) take(out, in, sizes, VERSIONS(sizes), what, err)

/*
 * The asp_call_options embedded in asp_write_options and asp_exec_options
 * has version 1's layout, fixed by the outer struct's version; its own
 * version may be left 0 (the INIT macros do) or say 1.
 */
_Static_assert(ASP_CALL_OPTIONS_VERSION == 1, "embedded asp_call_options keeps version 1's layout");
static int embedded_call_ok(const asp_call_options *c, const char *what, asp_error *err)
{
	if (c->version <= 1)
		return 0;
	return asp__error(err, ASP_EINVAL, "%s.call.version %u is not supported (0 or 1: the embedded "
			  "asp_call_options has version 1's layout)", what, c->version);
}

/*
 * The defaults live in the INIT macros, which set only the version (a
 * zeroed struct means the same; tests/unit/test_api.c holds them to it).
 * Copied from a static object, padding included, so a caller may memcmp;
 * an older version gets that version's bytes.
 */
static int init(void *opts, unsigned int version, const void *defaults, const size_t *sizes,
		unsigned int current)
{
	if (!opts || version_ok(version, current, "", NULL))
		return ASP_EINVAL;
	memcpy(opts, defaults, sizes[version - 1]);
	memcpy(opts, &version, sizeof(version));
	return 0;
}

int asp_open_options_init(asp_open_options *opts, unsigned int version)
{
	static const asp_open_options d = ASP_OPEN_OPTIONS_INIT;

	return init(opts, version, &d, open_sizes, VERSIONS(open_sizes));
}

int asp_write_options_init(asp_write_options *opts, unsigned int version)
{
	static const asp_write_options d = ASP_WRITE_OPTIONS_INIT;

	return init(opts, version, &d, write_sizes, VERSIONS(write_sizes));
}

int asp_proc_options_init(asp_proc_options *opts, unsigned int version)
{
	static const asp_proc_options d = ASP_PROC_OPTIONS_INIT;

	return init(opts, version, &d, proc_sizes, VERSIONS(proc_sizes));
}

int asp_call_options_init(asp_call_options *opts, unsigned int version)
{
	static const asp_call_options d = ASP_CALL_OPTIONS_INIT;

	return init(opts, version, &d, call_sizes, VERSIONS(call_sizes));
}

int asp_exec_options_init(asp_exec_options *opts, unsigned int version)
{
	static const asp_exec_options d = ASP_EXEC_OPTIONS_INIT;

	return init(opts, version, &d, exec_sizes, VERSIONS(exec_sizes));
}

int asp_sandbox_info_init(asp_sandbox_info *out, unsigned int version)
{
	static const asp_sandbox_info d = ASP_SANDBOX_INFO_INIT;

	return init(out, version, &d, info_sizes, VERSIONS(info_sizes));
}

/* ------------------------------------------------------------ open/close */

static int load_config(asp_sandbox *sb, const asp_open_options *o, asp_error *err)
{
	if (o->config_text)
		return asp__config_load_text(&sb->cfg, o->config_text, o->config_path, err);
	if (o->config_path)
		return asp__config_load(&sb->cfg, o->config_path, err);
	/* The file discovery judged is the file read: no second lookup of its name. */
	return asp__config_discover(&sb->cfg, o->start_dir, err);
}

static int prepare_trust(asp_sandbox *sb, const asp_open_options *o, asp_error *err)
{
	int rc;

	if (sb->cfg->host_key) {
		if ((rc = asp__config_pin(&sb->pin, sb->cfg, err)))
			return rc;
		sb->pinned = 1;
		return 0;
	}
	return asp__known_hosts_path(&sb->known_hosts, o->known_hosts, err);
}

/* The default timeouts' multiplier (common.h, asp__test_slowdown): 1 outside the tests. */
#ifdef ASP_TEST_HOOKS
static _Atomic unsigned int slowdown = 1;

void asp__test_slowdown(unsigned int n)
{
	slowdown = n ? n : 1;
}
#else
#define slowdown 1u
#endif

int asp_open(asp_sandbox **out, const asp_open_options *opts, asp_error *err)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb;
	char *server;
	asp_conn *c;
	int rc;

	ASP_ASSERT_ARG(out);
	if (opts && (rc = TAKE(&o, opts, open_sizes, "asp_open_options", err)))
		return rc;
	if (o.flags & ~ASP_OPEN_LAZY)
		return asp__error(err, ASP_EINVAL, "asp_open_options.flags 0x%x has unknown bits 0x%x",
				  o.flags, o.flags & ~ASP_OPEN_LAZY);
	if (o.file_transport > ASP_FILES_EXEC)
		return asp__error(err, ASP_EINVAL, "asp_open_options.file_transport %u is not an "
				  "asp_file_transport value (0 auto, 1 sftp, 2 exec)", o.file_transport);
	if ((rc = asp__conn_global_init(err)))
		return rc;
	if (!(sb = asp__calloc(1, sizeof(*sb))))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	pthread_mutex_init(&sb->mu, NULL);
	if ((rc = asp__log_init(&sb->log, o.log_fn, o.log_userdata, o.log_level, err)) ||
	    (rc = load_config(sb, &o, err)) || (rc = prepare_trust(sb, &o, err)))
		goto fail;
	if (sb->cfg->identity && (rc = asp__identity_resolve(&sb->identity, sb->cfg, err)))
		goto fail;
	sb->params.cfg = sb->cfg;
	sb->params.identity = sb->identity;
	sb->params.pin = sb->pinned ? &sb->pin : NULL;
	sb->params.known_hosts = sb->known_hosts;
	sb->params.connect_timeout_ms = o.connect_timeout_ms ? o.connect_timeout_ms : 10000 * slowdown;
	sb->params.io_timeout_ms = o.io_timeout_ms ? o.io_timeout_ms : 30000 * slowdown;
	sb->params.keepalive_s = o.keepalive_s ? o.keepalive_s : 15;
	sb->params.file_transport = o.file_transport;
	atomic_init(&sb->no_sftp, 0);
	atomic_init(&sb->calls_ended, 0);
	atomic_init(&sb->changes, 0);
	atomic_init(&sb->calls_running, 0);
	sb->params.no_sftp = &sb->no_sftp;
	sb->params.log = &sb->log;
	sb->op_timeout_ms = o.op_timeout_ms ? o.op_timeout_ms : 300000;
	sb->max_read_bytes = o.max_read_bytes ? o.max_read_bytes : 256ull << 20;
	sb->max_output = o.max_output ? o.max_output : (size_t)64 << 20;
	sb->list_caps.entries = o.max_list_entries ? o.max_list_entries : 100000;
	sb->list_caps.bytes = o.max_list_bytes ? o.max_list_bytes : 32ull << 20;
	/* Which sandbox: the handles of this process on it share their sweeps (sweep.c). */
	if (!(server = asp__sprintf("%s@%s:%u %s", sb->cfg->user ? sb->cfg->user : "", sb->cfg->host,
				    sb->cfg->port, sb->cfg->proxy_command ? sb->cfg->proxy_command : "")) ||
	    asp__sweep_new(&sb->sweep, sb->params.io_timeout_ms, server)) {
		asp__free(server);
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
		goto fail;
	}
	asp__free(server);
	sb->max_connections = o.max_connections ? o.max_connections : 4;
	if ((rc = asp__pool_new(&sb->pool, &sb->params, sb->max_connections,
				o.idle_close_s ? o.idle_close_s : 300, err)))
		goto fail;
	if (!(o.flags & ASP_OPEN_LAZY)) {
		if ((rc = asp__pool_get(sb->pool, &c, 0, NULL, 0, err)))
			goto fail;
		asp__pool_put(sb->pool, c);
	}
	*out = sb;
	return 0;
fail:
	asp_close(sb);
	return rc;
}

static void clean_at_close(asp_sandbox *sb);

void asp_close(asp_sandbox *sb)
{
	size_t i;

	if (!sb)
		return;
	clean_at_close(sb);
	asp__pool_free(sb->pool);
	for (i = 0; i < sb->norphans; i++)
		asp__free(sb->orphans[i]);
	asp__sweep_free(sb->sweep);
	asp__pin_clear(&sb->pin);
	asp__identity_free(sb->identity);
	asp__free(sb->known_hosts);
	asp__config_free(sb->cfg);
	pthread_mutex_destroy(&sb->mu);
	asp__free(sb);
}

const char *asp_sandbox_config_path(const asp_sandbox *sb)
{
	return sb ? sb->cfg->path : NULL;
}

const char *asp_sandbox_workspace(const asp_sandbox *sb)
{
	return sb ? sb->cfg->workspace : NULL;
}

/* ------------------------------------------------------------ plumbing */

/* Relative paths resolve against the workspace; absolute ones are used as given. */
static int resolve(const asp_sandbox *sb, const char *path, char **out, const char *what,
		   asp_error *err)
{
	const char *ws = sb->cfg->workspace;
	size_t wl = strlen(ws);

	if (!path)
		return asp__error(err, ASP_EINVAL, "%s: path is NULL", what);
	if (!*path)
		return asp__error(err, ASP_EINVAL, "%s: path is empty", what);
	/*
	 * Eight times Linux's PATH_MAX: no file system takes more, and a longer
	 * one would not fit an SFTP request (OpenSSH's server hangs up at 256 KiB).
	 */
	if (strlen(path) > ASP_PATH_BYTES_MAX)
		return asp__error(err, ASP_EINVAL, "%s: path too long (%zu bytes; the limit is %u)", what,
				  strlen(path), ASP_PATH_BYTES_MAX);
	if (path[0] == '/')
		*out = asp__strdup(path);
	else if (!strcmp(path, "."))
		*out = asp__strdup(ws);
	else
		*out = asp__sprintf("%.*s/%s", (int)(wl > 1 && ws[wl - 1] == '/' ? wl - 1 : wl), ws, path);
	return *out ? 0 : asp__error(err, ASP_ENOMEM, "out of memory");
}

/* ------------------------------------------------------------ leftover temp files */

static void add_orphan(asp_sandbox *sb, char *path)
{
	pthread_mutex_lock(&sb->mu);
	if (sb->norphans < MAX_ORPHANS) {
		sb->orphans[sb->norphans++] = path;
		path = NULL;
	}
	pthread_mutex_unlock(&sb->mu);
	asp__free(path);
}

/*
 * Remove temp files left by earlier atomic writes of this handle that lost
 * their connection (they are known to have no writer), and wait for the
 * server's word: those it could not be asked about are kept for next time.
 */
static void forget_orphans(asp_sandbox *sb, asp_conn *c)
{
	char *list[MAX_ORPHANS];
	unsigned char gone[MAX_ORPHANS];
	size_t n, i;

	pthread_mutex_lock(&sb->mu);
	n = sb->norphans;
	memcpy(list, sb->orphans, n * sizeof(list[0]));
	sb->norphans = 0;
	pthread_mutex_unlock(&sb->mu);
	if (!n)
		return;
	memset(gone, 0, sizeof(gone));
	if (asp__fs_forget(c, list, n, gone, NULL) && !asp__conn_dead(c))
		memset(gone, 1, sizeof(gone)); /* the server refused (not a lost link): give up on them */
	for (i = 0; i < n; i++) {
		if (gone[i])
			asp__free(list[i]);
		else
			add_orphan(sb, list[i]);
	}
}

/* Anything to clean up before the next operation? */
static int has_leftovers(asp_sandbox *sb)
{
	size_t n;

	pthread_mutex_lock(&sb->mu);
	n = sb->norphans;
	pthread_mutex_unlock(&sb->mu);
	return n > 0 || asp__sweep_due(sb->sweep);
}

static void clean_leftovers(asp_sandbox *sb, asp_conn *c)
{
	forget_orphans(sb, c);
	if (!asp__conn_dead(c))
		asp__fs_sweep_due(c, sb->sweep);
}

#define CLOSE_CLEAN_MS 2000u

/*
 * At close: clean up on an idle connection, or a new one if it can be had
 * within CLOSE_CLEAN_MS (or connect_timeout_ms if shorter); the whole
 * cleanup shares that bound. When it cannot, another handle's write into
 * the same directory removes the files once they are stale (fs.c).
 */
static void clean_at_close(asp_sandbox *sb)
{
	unsigned int ms = sb->params.connect_timeout_ms;
	uint64_t deadline;
	asp_conn *c;

	if (!sb->pool || !sb->sweep || !has_leftovers(sb))
		return;
	if (!ms || ms > CLOSE_CLEAN_MS)
		ms = CLOSE_CLEAN_MS;
	deadline = asp__now_ms() + ms;
	if (asp__pool_get(sb->pool, &c, 0, NULL, deadline, NULL))
		return;
	asp__conn_begin_op(c, deadline, NULL);
	clean_leftovers(sb, c);
	asp__conn_end_op(c);
	asp__pool_put(sb->pool, c);
}

typedef int (*op_fn)(asp_conn *c, void *ctx, int *started, asp_error *err);

/* One call's cancel token and overall deadline (asp__now_ms clock). */
typedef struct call {
	asp_cancel *cancel;
	uint64_t deadline;
	unsigned int timeout_ms;
	const char *what, *path; /* for the trace: the call's name and its (resolved) path, or NULL */
	int inert;               /* a bg call: changes nothing a session's start reads (helper.c) */
} call;

static call call_start(const asp_sandbox *sb, asp_cancel *cancel, unsigned int timeout_ms)
{
	call cl;

	cl.cancel = cancel;
	cl.what = cl.path = NULL;
	cl.inert = 0;
	cl.timeout_ms = timeout_ms ? timeout_ms : sb->op_timeout_ms;
	cl.deadline = asp__now_ms() + cl.timeout_ms;
	return cl;
}

static int call_options(call *cl, const asp_sandbox *sb, const asp_call_options *opts, asp_error *err)
{
	asp_call_options o = ASP_CALL_OPTIONS_INIT;
	int rc;

	if (opts && (rc = TAKE(&o, opts, call_sizes, "asp_call_options", err)))
		return rc;
	*cl = call_start(sb, o.cancel, o.timeout_ms);
	return 0;
}

/* Say which deadline passed and how to raise it. */
static int explain_timeout(const call *cl, int rc, asp_error *err)
{
	if (rc == ASP_ETIMEOUT && cl->deadline && asp__now_ms() >= cl->deadline)
		asp__error_prefix(err, "the call did not finish within its deadline of %u ms "
				  "(asp_call_options.timeout_ms, or asp_open_options.op_timeout_ms)", cl->timeout_ms);
	return rc;
}

int asp_sandbox_warm(asp_sandbox *sb, unsigned int connections, const asp_call_options *opts,
		     asp_error *err)
{
	call cl = { NULL, 0, 0, NULL, NULL, 0 };
	int rc;

	ASP_ASSERT_ARG(sb);
	if ((rc = call_options(&cl, sb, opts, err)))
		return rc;
	if (connections > sb->max_connections)
		return asp__error(err, ASP_EINVAL, "asp_sandbox_warm: %u connections asked for, but the "
				  "pool holds at most %u (asp_open_options.max_connections)", connections,
				  sb->max_connections);
	rc = asp__pool_fill(sb->pool, connections, cl.cancel, cl.deadline, err);
	return explain_timeout(&cl, rc, err);
}

/* A call on c ended: counted before a shell is primed for the next one (chan.c). */
static void call_end(asp_sandbox *sb, asp_conn *c, const call *cl)
{
	uint64_t gen = atomic_fetch_add(&sb->calls_ended, 1) + 1;
	unsigned int others = atomic_fetch_sub(&sb->calls_running, 1) - 1;

	if (!cl->inert)
		atomic_fetch_add(&sb->changes, 1);
	asp__chan_call_end(c, gen, others == 0, cl->what && !strcmp(cl->what, "exec"));
}

/*
 * The trace's line for one attempt of a call (ASP_LOG_DEBUG), and for what
 * happens next when it lost its connection (ASP_LOG_WARN). A command's text
 * is never shown: it may hold a secret.
 */
static void trace_call(const asp_sandbox *sb, const call *cl, uint64_t t0, unsigned int routes, int rc,
		       int retry, const asp_error *err)
{
	char shown[ASP_PATH_SHOW_MAX + 4];
	const char *what = cl->what ? cl->what : "call";
	int exec = !strcmp(what, "exec");
	const char *via = exec ? "exec channel" : routes == (ASP_ROUTE_SFTP | ASP_ROUTE_SHELL) ? "sftp and shell"
			  : routes == ASP_ROUTE_SFTP ? "sftp" : routes == ASP_ROUTE_SHELL ? "shell" : "no file I/O";

	if (!sb->log.fn)
		return;
	if (cl->path)
		asp__path_show(shown, cl->path);
	/* "read /w/a: ok in 3 ms via sftp", "exec in /w: ASP_ETIMEOUT in 9 ms via exec channel (why)" */
	asp__log(&sb->log, ASP_LOG_DEBUG, "%s%s%s: %s in %llu ms via %s%s%s%s", what,
		 cl->path ? exec ? " in " : " " : "", cl->path ? shown : "", rc ? asp_error_name(rc) : "ok",
		 (unsigned long long)(asp__now_ms() - t0), via, rc && err ? " (" : "", rc && err ? err->message : "",
		 rc && err ? ")" : "");
	if (retry > 0)
		asp__log(&sb->log, ASP_LOG_WARN, "%s: the connection was lost; retrying once on a fresh "
			 "connection", cl->what ? cl->what : "call");
	else if (retry < 0)
		asp__log(&sb->log, ASP_LOG_WARN, "%s: the connection was lost after it may have started; "
			 "not retried", cl->what ? cl->what : "call");
}

/*
 * Run op on a pooled connection, bounded by the call's deadline and cancel
 * token. When the connection dies under it and the op says it cannot have
 * had an effect (or is idempotent), run it once more on a fresh connection.
 * When the server refused it a session on a connection full of running
 * commands, run it again on one with room (ASP_EBUSY when none has).
 */
static int with_conn(asp_sandbox *sb, const call *cl, op_fn op, void *ctx, int idempotent,
		     asp_error *err)
{
	asp_error before;
	unsigned int refused = 0;
	int attempt, rc = ASP_ERROR, cleaned = 0;

	/*
	 * A success leaves err as the caller gave it, also when a step on the way
	 * failed and was recovered from (a retry, mkdirs after ENOENT).
	 */
	if (err)
		before = *err;
	for (attempt = 0; attempt < 2; attempt++) {
		asp_conn *c;
		int started = 0, dead, full;
		uint64_t t0 = asp__now_ms();

		if ((rc = asp__pool_get(sb->pool, &c, (attempt > 0 ? ASP_POOL_FRESH : 0) |
					(refused ? ASP_POOL_ROOM : 0), cl->cancel, cl->deadline, err)))
			return explain_timeout(cl, rc, err);
		asp__conn_begin_op(c, cl->deadline, cl->cancel);
		atomic_fetch_add(&sb->calls_running, 1);
		asp__chan_call_begin(c, atomic_load(&sb->calls_ended));
		if (!cleaned && has_leftovers(sb)) {
			/* Once per call; a connection that dies doing it does not count as an attempt. */
			cleaned = 1;
			clean_leftovers(sb, c);
			if (asp__conn_dead(c)) {
				asp__conn_end_op(c);
				call_end(sb, c, cl);
				asp__pool_put(sb->pool, c);
				attempt--;
				continue;
			}
		}
		asp__conn_routes_take(c);
		rc = asp__ssh_op_result(c, op(c, ctx, &started, err), err);
		trace_call(sb, cl, t0, asp__conn_routes_take(c), rc, !rc || !asp__conn_dead(c) ? 0
			   : started && !idempotent ? -1 : attempt == 0 && rc != ASP_ECANCELLED ? 1 : 0, err);
		asp__conn_end_op(c);
		call_end(sb, c, cl);
		dead = asp__conn_dead(c);
		/*
		 * The server refused a session on a connection carrying running
		 * commands: it has no room for more (its session limit). Nothing
		 * started; the call goes again on one that has room, at most once
		 * per connection.
		 */
		full = rc && !started && !dead && asp__chan_refused(c) && refused < sb->max_connections &&
		       asp__pool_full(sb->pool, c);
		if (!dead)
			asp__sftp_idle(c); /* an idle connection holds no transfer buffers */
		asp__pool_put(sb->pool, c);
		if (full) {
			refused++;
			attempt--;
			continue;
		}
		if (!rc || !dead || (started && !idempotent))
			break;
		/* The call's own end (its cancel token, its deadline) is not a lost connection. */
		if (rc == ASP_ECANCELLED || (rc == ASP_ETIMEOUT && asp__now_ms() >= cl->deadline))
			break;
	}
	if (!rc && err)
		*err = before;
	return explain_timeout(cl, rc, err);
}

/* ------------------------------------------------------------ read */

/* What a large read or write may spread over more connections with (bulk.c). */
static asp_bulk_call bulk_call(asp_sandbox *sb, const call *cl)
{
	asp_bulk_call bc;

	bc.pool = sb->pool;
	bc.max_conns = sb->max_connections;
	bc.cancel = cl->cancel;
	bc.deadline = cl->deadline;
	return bc;
}

typedef struct read_ctx {
	asp_bulk_call bc;
	const char *path;
	uint64_t offset, limit, cap;
	asp_buf out;
} read_ctx;

static int do_read(asp_conn *c, void *ctx, int *started, asp_error *err)
{
	read_ctx *x = ctx;

	x->out.len = 0;
	*started = 1;
	return asp__bulk_read(c, &x->bc, x->path, x->offset, x->limit, x->cap, &x->out, err);
}

int asp_read(unsigned char **out, size_t *out_len, asp_sandbox *sb, const char *path,
	     uint64_t offset, uint64_t limit, const asp_call_options *opts, asp_error *err)
{
	read_ctx x;
	call cl;
	char *abs;
	int rc;

	ASP_ASSERT_ARG(out && out_len && sb);
	if ((rc = call_options(&cl, sb, opts, err)) || (rc = resolve(sb, path, &abs, "read", err)))
		return rc;
	memset(&x, 0, sizeof(x));
	x.path = abs;
	x.offset = offset;
	x.limit = limit;
	x.cap = sb->max_read_bytes;
	x.bc = bulk_call(sb, &cl);
	cl.what = "read", cl.path = abs;
	rc = with_conn(sb, &cl, do_read, &x, 1, err);
	if (!rc && !(*out = asp__buf_detach(&x.out, out_len)))
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
	asp__buf_free(&x.out);
	asp__free(abs);
	return rc;
}

/* ------------------------------------------------------------ write */

typedef struct write_ctx {
	asp_bulk_call bc;
	asp_sandbox *sb;
	const char *path;
	const void *data;
	size_t len;
	const asp_write_options *o;
} write_ctx;

static int do_write(asp_conn *c, void *ctx, int *started, asp_error *err)
{
	write_ctx *x = ctx;
	char *orphan = NULL;
	int rc;

	*started = 1;
	rc = asp__bulk_write(c, &x->bc, x->path, x->data, x->len, x->o, &orphan, x->sb->sweep, err);
	if (orphan)
		add_orphan(x->sb, orphan);
	return rc;
}

int asp_write(asp_sandbox *sb, const char *path, const void *data, size_t len,
	      const asp_write_options *opts, asp_error *err)
{
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	write_ctx x;
	call cl;
	char *abs;
	int rc;

	ASP_ASSERT_ARG(sb && (data || !len));
	if (opts && ((rc = TAKE(&o, opts, write_sizes, "asp_write_options", err)) ||
		     (rc = embedded_call_ok(&o.call, "asp_write_options", err))))
		return rc;
	if (o.flags & ~(ASP_WRITE_PARENTS | ASP_WRITE_IN_PLACE))
		return asp__error(err, ASP_EINVAL, "asp_write_options.flags 0x%x has unknown bits 0x%x",
				  o.flags, o.flags & ~(ASP_WRITE_PARENTS | ASP_WRITE_IN_PLACE));
	if (o.mode > 07777)
		return asp__error(err, ASP_EINVAL, "write: mode %o is not a permission mode", o.mode);
	if ((rc = resolve(sb, path, &abs, "write", err)))
		return rc;
	x.sb = sb;
	x.path = abs;
	x.data = data ? data : "";
	x.len = len;
	x.o = &o;
	cl = call_start(sb, o.call.cancel, o.call.timeout_ms);
	x.bc = bulk_call(sb, &cl);
	cl.what = "write", cl.path = abs;
	/* An atomic write is safe to repeat: the target only changes at the final rename. */
	rc = with_conn(sb, &cl, do_write, &x, !(o.flags & ASP_WRITE_IN_PLACE), err);
	asp__free(abs);
	return rc;
}

/* ------------------------------------------------------------ exec */

typedef struct exec_ctx {
	const char *command, *cwd;
	const asp_exec_options *o;
	int own;
	asp_exec_result *r;
} exec_ctx;

static int do_exec(asp_conn *c, void *ctx, int *started, asp_error *err)
{
	exec_ctx *x = ctx;

	return asp__exec_run(&x->r, c, x->command, x->cwd, x->o, x->own, started, err);
}

/* asp_exec; own: command is one of libasp's scripts; inert: a bg call's (asp__bg_run). */
static int exec_call(asp_exec_result **out, asp_sandbox *sb, const char *command,
		     const asp_exec_options *opts, int own, int inert, asp_error *err)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	exec_ctx x;
	call cl;
	char *cwd;
	int rc;

	ASP_ASSERT_ARG(out && sb && command);
	if (opts && ((rc = TAKE(&o, opts, exec_sizes, "asp_exec_options", err)) ||
		     (rc = embedded_call_ok(&o.call, "asp_exec_options", err))))
		return rc;
	if (o.flags & ~ASP_EXEC_STDIN_FD)
		return asp__error(err, ASP_EINVAL, "asp_exec_options.flags 0x%x has unknown bits 0x%x",
				  o.flags, o.flags & ~ASP_EXEC_STDIN_FD);
	if ((o.flags & ASP_EXEC_STDIN_FD) && o.stdin_fd < 0)
		return asp__error(err, ASP_EINVAL, "asp_exec_options.stdin_fd %d is not a file "
				  "descriptor (ASP_EXEC_STDIN_FD is set)", o.stdin_fd);
	if (!o.max_output)
		o.max_output = sb->max_output;
	/* Reject bad input before taking a connection for it. */
	if ((rc = asp__env_check(o.env, err)) ||
	    (rc = resolve(sb, o.cwd ? o.cwd : sb->cfg->workspace, &cwd, "exec cwd", err)))
		return rc;
	x.command = command;
	x.cwd = cwd;
	x.o = &o;
	x.own = own;
	x.r = NULL;
	/*
	 * call.timeout_ms 0: the handle's op_timeout_ms bounds the start only.
	 * Non-zero: it bounds the whole call, and exec.c kills the command when
	 * it passes (it reads the deadline from the connection's op).
	 */
	cl = call_start(sb, o.call.cancel, o.call.timeout_ms);
	cl.what = "exec", cl.path = cwd;
	cl.inert = inert;
	rc = with_conn(sb, &cl, do_exec, &x, 0, err);
	if (!rc)
		asp__log(&sb->log, ASP_LOG_DEBUG, "exec: exit status %d, signal %d%s%s, %llu bytes of stdout, %llu of "
			 "stderr, ran %llu ms", asp_exec_result_exit_code(x.r), asp_exec_result_signal(x.r),
			 asp_exec_result_timed_out(x.r) ? ", timed out" : "",
			 asp_exec_result_cancelled(x.r) ? ", cancelled" : "",
			 (unsigned long long)asp_exec_result_output_total(x.r, ASP_STDOUT),
			 (unsigned long long)asp_exec_result_output_total(x.r, ASP_STDERR),
			 (unsigned long long)asp_exec_result_duration_ms(x.r));
	asp__free(cwd);
	if (!rc)
		*out = x.r;
	return rc;
}

int asp_exec(asp_exec_result **out, asp_sandbox *sb, const char *command,
	     const asp_exec_options *opts, asp_error *err)
{
	return exec_call(out, sb, command, opts, 0, 0, err);
}

/* ------------------------------------------------------------ background-process calls */

int asp__sandbox_cwd(asp_sandbox *sb, const char *cwd, char **abs, asp_error *err)
{
	return resolve(sb, cwd ? cwd : sb->cfg->workspace, abs, "background process cwd", err);
}

typedef struct helper_ctx {
	asp_sandbox *sb;
	const asp_bg_run *r;
	int *status;
	asp_buf *out;
	char *errout;
	size_t errcap;
	int result; /* 0, or ASP__HELPER_NONE / ASP__HELPER_LOST: the exec route's turn */
} helper_ctx;

static int do_helper(asp_conn *c, void *ctx, int *started, asp_error *err)
{
	helper_ctx *x = ctx;
	int rc;

	x->out->len = 0;
	x->result = 0;
	rc = asp__helper_call(c, x->r->request, atomic_load(&x->sb->changes), x->r->start, x->r->max_out,
			      x->status, x->out, x->errout, x->errcap, started, err);
	if (rc == ASP__HELPER_NONE || rc == ASP__HELPER_LOST) {
		x->result = rc;
		return 0;
	}
	return rc;
}

int asp__bg_run(asp_sandbox *sb, const asp_bg_run *r, int *status, asp_buf *out, char *errout, size_t errcap,
		asp_error *err)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *res = NULL;
	const unsigned char *data;
	size_t len;
	int rc;

	*status = 0;
	if (errout && errcap)
		errout[0] = 0;
	if (r->call) {
		o.call.cancel = r->call->cancel;
		o.call.timeout_ms = r->call->timeout_ms;
	}
	if (r->request) {
		helper_ctx x = { sb, r, status, out, errout, errcap, 0 };
		uint64_t now;
		call cl;

		/* r->call is checked by bg.c (an embedded one may say version 0). */
		cl = call_start(sb, o.call.cancel, o.call.timeout_ms);
		cl.what = "background-process call";
		cl.inert = 1;
		/* A start that may have run is not repeated; the others may be. */
		if ((rc = with_conn(sb, &cl, do_helper, &x, !r->start, err)))
			return rc;
		if (!x.result)
			return 0;
		out->len = 0;
		if (x.result == ASP__HELPER_LOST && r->start)
			return asp__error(err, ASP_ECONNLOST, "the sandbox's background-process helper ended before "
					  "it answered: the process may have started");
		/* The exec route gets what is left of the caller's deadline, not a new one. */
		now = asp__now_ms();
		if (o.call.timeout_ms)
			o.call.timeout_ms = now < cl.deadline ? (unsigned int)(cl.deadline - now) : 1;
	}
	/* The exec route: no helper here, or it ended under a call that may run again. */
	o.cwd = r->cwd;
	o.env = r->env;
	o.max_output = r->max_out;
	if ((rc = exec_call(&res, sb, r->script, &o, r->own, 1, err)))
		return rc;
	if (asp_exec_result_cancelled(res)) {
		asp_exec_result_free(res);
		return asp__error(err, ASP_ECANCELLED, "background process call cancelled");
	}
	*status = asp_exec_result_exit_code(res);
	data = asp_exec_result_output(res, ASP_STDERR, &len);
	if (errout && errcap)
		asp__show_text(errout, errcap, data, len);
	data = asp_exec_result_output(res, ASP_STDOUT, &len);
	if (asp_exec_result_truncated(res, ASP_STDOUT)) {
		asp_exec_result_free(res);
		return asp__error(err, ASP_EPROTO, "background process call: the sandbox's answer is over %zu bytes",
				  r->max_out);
	}
	rc = asp__buf_put(out, data, len) ? asp__error(err, ASP_ENOMEM, "out of memory") : 0;
	asp_exec_result_free(res);
	return rc;
}

/* ------------------------------------------------------------ proc */

typedef struct proc_ctx {
	asp_sandbox *sb;
	const char *command, *cwd;
	const asp_proc_options *o;
	asp_proc *p;
} proc_ctx;

static int do_proc_start(asp_conn *c, void *ctx, int *started, asp_error *err)
{
	proc_ctx *x = ctx;

	return asp__proc_start(&x->p, x->sb->pool, c, x->command, x->cwd, x->o, started, err);
}

/* A terminal type goes to the server as is: a plain word (terminfo names are). */
static int term_ok(const char *t)
{
	size_t n = 0;

	for (; t[n]; n++)
		if (n >= 64 || !((t[n] >= 'a' && t[n] <= 'z') || (t[n] >= 'A' && t[n] <= 'Z') ||
				 (t[n] >= '0' && t[n] <= '9') || strchr("-._+", t[n])))
			return 0;
	return n > 0;
}

int asp_proc_start(asp_proc **out, asp_sandbox *sb, const char *command, const asp_proc_options *opts,
		   asp_error *err)
{
	asp_proc_options o = ASP_PROC_OPTIONS_INIT;
	proc_ctx x;
	call cl;
	char *cwd;
	int rc;

	ASP_ASSERT_ARG(out && sb && command);
	if (opts && ((rc = TAKE(&o, opts, proc_sizes, "asp_proc_options", err)) ||
		     (rc = embedded_call_ok(&o.call, "asp_proc_options", err))))
		return rc;
	if (o.flags & ~ASP_PROC_PTY)
		return asp__error(err, ASP_EINVAL, "asp_proc_options.flags 0x%x has unknown bits 0x%x",
				  o.flags, o.flags & ~ASP_PROC_PTY);
	if ((o.flags & ASP_PROC_PTY) && o.term && !term_ok(o.term)) {
		char shown[96];
		return asp__error(err, ASP_EINVAL, "asp_proc_options.term %s is not a terminal type (letters, "
				  "digits, '-', '.', '_', '+'; 1 to 64 bytes)",
				  asp__show_text(shown, sizeof(shown), o.term, strlen(o.term)));
	}
	if ((o.flags & ASP_PROC_PTY) && (o.cols > 10000 || o.rows > 10000))
		return asp__error(err, ASP_EINVAL, "asp_proc_options: a terminal of %u columns, %u rows "
				  "(at most 10000 each; 0 means 80 by 24)", o.cols, o.rows);
	if (!o.max_output)
		o.max_output = sb->max_output;
	if ((rc = asp__env_check(o.env, err)) ||
	    (rc = resolve(sb, o.cwd ? o.cwd : sb->cfg->workspace, &cwd, "proc cwd", err)))
		return rc;
	x.sb = sb;
	x.command = command;
	x.cwd = cwd;
	x.o = &o;
	x.p = NULL;
	/* call.timeout_ms bounds the start: the exec request's answer. */
	cl = call_start(sb, o.call.cancel, o.call.timeout_ms);
	cl.what = "exec", cl.path = cwd;
	rc = with_conn(sb, &cl, do_proc_start, &x, 0, err);
	asp__free(cwd);
	if (!rc)
		*out = x.p;
	return rc;
}

/* ------------------------------------------------------------ filesystem */

typedef struct path_ctx {
	asp_sandbox *sb;
	const call *cl;
	const char *path, *path2;
	unsigned int mode;
	int flag;
	asp_stat_info st;
	asp_list_entry *e;
	size_t n;
} path_ctx;

static int run_path_op(asp_sandbox *sb, const char *path, const char *path2, const char *what,
		       op_fn op, path_ctx *x, int idempotent, const asp_call_options *opts,
		       asp_error *err)
{
	char *a = NULL, *b = NULL;
	call cl;
	int rc;

	if ((rc = call_options(&cl, sb, opts, err)))
		return rc;
	if ((rc = resolve(sb, path, &a, what, err)) ||
	    (path2 && (rc = resolve(sb, path2, &b, what, err)))) {
		asp__free(a);
		return rc;
	}
	x->sb = sb;
	x->cl = &cl;
	x->path = a;
	x->path2 = b;
	cl.what = what, cl.path = a;
	rc = with_conn(sb, &cl, op, x, idempotent, err);
	asp__free(a);
	asp__free(b);
	return rc;
}

static int do_stat(asp_conn *c, void *ctx, int *started, asp_error *err)
{
	path_ctx *x = ctx;

	*started = 1;
	return asp__fs_stat(c, x->path, 1, &x->st, err);
}

int asp_stat(asp_stat_info *out, asp_sandbox *sb, const char *path, const asp_call_options *opts,
	     asp_error *err)
{
	path_ctx x;
	int rc;

	ASP_ASSERT_ARG(out && sb);
	memset(&x, 0, sizeof(x));
	if (!(rc = run_path_op(sb, path, NULL, "stat", do_stat, &x, 1, opts, err))) {
		*out = x.st;
		memset(out->spare, 0, sizeof(out->spare));
	}
	return rc;
}

static int do_mkdir(asp_conn *c, void *ctx, int *started, asp_error *err)
{
	path_ctx *x = ctx;

	*started = 1;
	return asp__fs_mkdir(c, x->path, x->mode, x->flag, err);
}

int asp_mkdir(asp_sandbox *sb, const char *path, unsigned int mode, unsigned int flags,
	      const asp_call_options *opts, asp_error *err)
{
	path_ctx x;
	int parents = (flags & ASP_MKDIR_PARENTS) != 0;

	ASP_ASSERT_ARG(sb && mode <= 07777);
	if (flags & ~ASP_MKDIR_PARENTS)
		return asp__error(err, ASP_EINVAL, "mkdir: flags 0x%x has unknown bits 0x%x "
				  "(only ASP_MKDIR_PARENTS is defined)", flags, flags & ~ASP_MKDIR_PARENTS);
	memset(&x, 0, sizeof(x));
	x.mode = mode;
	x.flag = parents;
	return run_path_op(sb, path, NULL, "mkdir", do_mkdir, &x, parents, opts, err);
}

static int do_remove(asp_conn *c, void *ctx, int *started, asp_error *err)
{
	path_ctx *x = ctx;
	asp_stat_info st;
	int rc;

	*started = 1;
	if (!x->flag)
		return asp__fs_remove(c, x->path, err);
	if ((rc = asp__fs_stat(c, x->path, 0, &st, err)))
		return rc;
	if (st.type != ASP_TYPE_DIR)
		return asp__fs_remove(c, x->path, err);
	return asp__fs_remove_tree(c, x->path, x->cl->cancel, x->cl->deadline, x->cl->timeout_ms,
				   started, err);
}

int asp_remove(asp_sandbox *sb, const char *path, unsigned int flags,
	       const asp_call_options *opts, asp_error *err)
{
	path_ctx x;

	ASP_ASSERT_ARG(sb);
	if (flags & ~ASP_REMOVE_RECURSIVE)
		return asp__error(err, ASP_EINVAL, "remove: flags 0x%x has unknown bits 0x%x "
				  "(only ASP_REMOVE_RECURSIVE is defined)", flags,
				  flags & ~ASP_REMOVE_RECURSIVE);
	memset(&x, 0, sizeof(x));
	x.flag = (flags & ASP_REMOVE_RECURSIVE) != 0;
	return run_path_op(sb, path, NULL, "remove", do_remove, &x, 0, opts, err);
}

static int do_rename(asp_conn *c, void *ctx, int *started, asp_error *err)
{
	path_ctx *x = ctx;

	*started = 1;
	return asp__fs_rename(c, x->path, x->path2, err);
}

int asp_rename(asp_sandbox *sb, const char *from, const char *to, const asp_call_options *opts,
	       asp_error *err)
{
	path_ctx x;

	ASP_ASSERT_ARG(sb && to);
	memset(&x, 0, sizeof(x));
	return run_path_op(sb, from, to, "rename", do_rename, &x, 0, opts, err);
}

static int do_list(asp_conn *c, void *ctx, int *started, asp_error *err)
{
	path_ctx *x = ctx;

	*started = 1;
	return asp__fs_list(c, x->path, &x->sb->list_caps, &x->e, &x->n, err);
}

int asp_list_dir(asp_list **out, asp_sandbox *sb, const char *path, const asp_call_options *opts,
		 asp_error *err)
{
	path_ctx x;
	asp_list *l;
	int rc;

	ASP_ASSERT_ARG(out && sb);
	memset(&x, 0, sizeof(x));
	if ((rc = run_path_op(sb, path, NULL, "list", do_list, &x, 1, opts, err)))
		return rc;
	if (!(l = asp__calloc(1, sizeof(*l)))) {
		asp__fsops_list_free(x.e, x.n);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	l->e = x.e;
	l->n = x.n;
	*out = l;
	return 0;
}

size_t asp_list_count(const asp_list *l)
{
	return l ? l->n : 0;
}

const char *asp_list_name(const asp_list *l, size_t i)
{
	return l && i < l->n ? l->e[i].name : NULL;
}

int asp_list_stat(asp_stat_info *out, const asp_list *l, size_t i)
{
	if (!out || !l || i >= l->n)
		return ASP_EINVAL;
	*out = l->e[i].st;
	memset(out->spare, 0, sizeof(out->spare));
	return 0;
}

void asp_list_free(asp_list *l)
{
	if (!l)
		return;
	asp__fsops_list_free(l->e, l->n);
	asp__free(l);
}

/* ------------------------------------------------------------ info */

int asp_sandbox_info_get(asp_sandbox_info *out, asp_sandbox *sb, asp_error *err)
{
	asp_sandbox_info all = ASP_SANDBOX_INFO_INIT;
	unsigned int version;
	asp_conn *c;
	int rc;

	ASP_ASSERT_ARG(out && sb);
	version = out->version;
	if ((rc = version_ok(version, VERSIONS(info_sizes), "asp_sandbox_info", err)))
		return rc;
	if ((rc = asp__pool_get(sb->pool, &c, 0, NULL, 0, err)))
		return rc;
	asp__conn_info(c, &all);
	asp__pool_put(sb->pool, c);
	/* Only what the caller's version has room for. */
	memcpy(out, &all, info_sizes[version - 1]);
	out->version = version;
	return 0;
}
