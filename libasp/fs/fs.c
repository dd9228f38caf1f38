/*
 * fs.c - the file calls of one connection: each picks the connection's
 * file transport, an ops table of fsops.h (SFTP, fs_sftp.c; or shell
 * commands over exec channels, shfs.c, for a server without SFTP or where
 * the warm shell is faster), calls through it, and after an atomic write
 * sweeps stale temp files (sweep.c). A tree is removed by one remote
 * `rm -rf`, run as a command (exec.c), whatever the transport.
 */
#include "fs.h"

#include <string.h>

#include "exec.h"
#include "fs_sftp.h"
#include "route.h"
#include "quote.h"
#include "sftp.h"
#include "ssh.h"

/* The connection's file transport (asp__files_transport); NULL with err set when it cannot be known. */
static const asp_fsops *route(asp_conn *c, int *rc, asp_error *err)
{
	if ((*rc = asp__files_transport(c, err)) < 0)
		return NULL;
	return *rc == ASP_FILES_EXEC ? &asp__shfs_ops : &asp__fs_sftp_ops;
}

/*
 * What a small file call by ops cost, into *rc (route.c picks the next
 * call's route from it). A call that first had to start the SFTP session
 * paid a one-off: it counts as taken, not as a sample.
 */
static void note_cost(asp_conn *c, asp_route_costs *rc, const asp_fsops *ops, int sftp_was_up, uint64_t t0)
{
	int route = ops == &asp__shfs_ops ? ASP_COST_SHELL : ASP_COST_SFTP;

	if (route == ASP_COST_SFTP && !sftp_was_up)
		asp__route_taken(rc, route);
	else
		asp__route_note(rc, route, asp__now_us() - t0);
}

/* A read by ops, its cost noted when it succeeded and was small. */
static int read_via(const asp_fsops *ops, asp_conn *c, const char *path, uint64_t offset, uint64_t limit,
		    uint64_t cap, asp_buf *out, asp_error *err)
{
	int up = c->sftp.chan != NULL, rc;
	uint64_t t0 = asp__now_us();

	rc = ops->read(c, path, offset, limit, cap, out, err);
	if (!rc && out->len <= ASP_ROUTE_SMALL)
		note_cost(c, &c->cost_read, ops, up, t0);
	return rc;
}

int asp__fs_read(asp_conn *c, const char *path, uint64_t offset, uint64_t limit, uint64_t cap,
		 asp_buf *out, asp_error *err)
{
	const asp_fsops *ops;
	int rc;

	if (asp__route_reads_faster(c)) {
		rc = read_via(&asp__shfs_ops, c, path, offset, limit, cap, out, err);
		if (!asp__route_shell_refused(c, rc))
			return rc;
		asp__buf_free(out);
	}
	if (!(ops = route(c, &rc, err)))
		return rc;
	return read_via(ops, c, path, offset, limit, cap, out, err);
}

/*
 * After an atomic write through ops: sweep the directory it renamed into,
 * then look at the remembered temp files that are due, over the
 * connection's transport (a small write may have taken the warm shell).
 */
static void sweep_after_write(asp_conn *c, asp_sweep *sw, const asp_fsops *ops, const char *path,
			      asp_fs_written *done)
{
	asp__sweep_after_write(c, sw, ops, path, done->now_s);
	asp__free(done->path);
	if (!asp__conn_dead(c))
		asp__fs_sweep_due(c, sw);
}

/* An atomic or in-place write through ops; after an atomic one, the temp-file sweep. */
static int write_via(const asp_fsops *ops, asp_conn *c, const char *path, const void *data, size_t len,
		     const asp_write_options *o, char **orphan, asp_sweep *sw, asp_error *err)
{
	asp_fs_written done = { 0 };
	int up = c->sftp.chan != NULL, rc;
	uint64_t t0 = asp__now_us();

	rc = ops->write(c, path, data, len, o, asp__sweep_lease(sw), orphan, &done, err);
	/* The write alone, not the sweep after it: what the route cost. */
	if (!rc && !(o->flags & ASP_WRITE_IN_PLACE) && len <= ASP_ROUTE_SMALL)
		note_cost(c, &c->cost_write, ops, up, t0);

	if (!rc && !(o->flags & ASP_WRITE_IN_PLACE)) {
		sweep_after_write(c, sw, ops, done.path ? done.path : path, &done);
		return rc;
	}
	if (rc && !(o->flags & ASP_WRITE_IN_PLACE))
		asp__sweep_write_failed(sw, done.path ? done.path : path);
	asp__free(done.path);
	return rc;
}

int asp__fs_write(asp_conn *c, const char *path, const void *data, size_t len,
		  const asp_write_options *o, char **orphan, asp_sweep *sw, asp_error *err)
{
	const asp_fsops *ops;
	int rc;

	/* Small atomic writes take the shell where it is faster, unless the login shell refuses. */
	if (!(o->flags & ASP_WRITE_IN_PLACE) && asp__route_files_faster(c, len)) {
		rc = write_via(&asp__shfs_ops, c, path, data, len, o, orphan, sw, err);
		if (!asp__route_shell_refused(c, rc))
			return rc;
	}
	if (!(ops = route(c, &rc, err)))
		return rc;
	return write_via(ops, c, path, data, len, o, orphan, sw, err);
}

int asp__fs_write_filled(asp_conn *c, const char *path, const void *data, size_t len,
			 const asp_write_options *o, char **orphan, asp_sweep *sw,
			 const struct asp_fs_fill *fill, asp_error *err)
{
	asp_fs_written done = { 0 };
	int rc = asp__fs_sftp_write_filled(c, path, data, len, o, asp__sweep_lease(sw), orphan, fill, &done,
					   err);

	if (!rc) {
		sweep_after_write(c, sw, &asp__fs_sftp_ops, done.path ? done.path : path, &done);
		return rc;
	}
	asp__sweep_write_failed(sw, done.path ? done.path : path);
	asp__free(done.path);
	return rc;
}

int asp__fs_forget(asp_conn *c, char *const *paths, size_t n, unsigned char *gone, asp_error *err)
{
	const asp_fsops *ops;
	int rc;

	if (!(ops = route(c, &rc, err)))
		return rc;
	return ops->forget(c, paths, n, gone, err);
}

void asp__fs_sweep_due(asp_conn *c, asp_sweep *sw)
{
	int rc;

	if (asp__sweep_due(sw))
		asp__sweep_run_due(c, sw, route(c, &rc, NULL));
}

int asp__fs_stat(asp_conn *c, const char *path, int follow, asp_stat_info *out, asp_error *err)
{
	const asp_fsops *ops;
	int rc;

	if (!(ops = route(c, &rc, err)))
		return rc;
	return ops->stat(c, path, follow, out, err);
}

int asp__fs_mkdir(asp_conn *c, const char *path, unsigned int mode, int parents, asp_error *err)
{
	const asp_fsops *ops;
	int rc;

	if (!(ops = route(c, &rc, err)))
		return rc;
	return ops->mkdir(c, path, mode, parents, err);
}

int asp__fs_remove(asp_conn *c, const char *path, asp_error *err)
{
	const asp_fsops *ops;
	int rc;

	if (!(ops = route(c, &rc, err)))
		return rc;
	return ops->remove(c, path, err);
}

/*
 * A tree goes in one `rm -rf` (not a round trip per entry), run like any
 * command: in its own process group, so that the call's cancel token and
 * deadline stop the remote rm too, not only the wait for it.
 */
int asp__fs_remove_tree(asp_conn *c, const char *path, asp_cancel *cancel, uint64_t deadline,
			unsigned int timeout_ms, int *started, asp_error *err)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_buf script = { 0 };
	uint64_t now = asp__now_ms();
	char shown[ASP_PATH_SHOW_MAX + 4], said[256];
	const unsigned char *errout;
	const asp_fsops *ops;
	size_t errlen;
	int rc;

	if (asp__rm_rf_script(&script, path))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	o.call.cancel = cancel;
	o.kill_after_ms = deadline > now ? (unsigned int)(deadline - now) : 1;
	o.max_output = 4096;
	rc = asp__exec_run(&r, c, (const char *)script.data, "/", &o, 0, started, err);
	asp__buf_free(&script);
	if (rc)
		return rc;
	asp__path_show(shown, path);
	errout = asp_exec_result_output(r, ASP_STDERR, &errlen);
	if (asp_exec_result_cancelled(r))
		rc = asp__error(err, ASP_ECANCELLED, "remove %s: cancelled; the remote rm was stopped "
				"and may have removed part of the tree", shown);
	else if (asp_exec_result_timed_out(r))
		rc = asp__error(err, ASP_ETIMEOUT, "remove %s: the call did not finish within its "
				"deadline of %u ms; the remote rm was stopped and may have removed part "
				"of the tree", shown, timeout_ms);
	else if (asp_exec_result_exit_code(r) && (ops = route(c, &rc, NULL)) != NULL && ops->rofs(c, path))
		rc = asp__fsops_rofs_error(err, "remove", path, NULL);
	else if (asp_exec_result_exit_code(r))
		rc = asp__error(err, errlen && memmem(errout, errlen, "ermission denied", 16)
					     ? ASP_EACCES : ASP_EIO,
				"remove %s: %s", shown,
				errlen ? asp__show_text(said, sizeof(said), errout, errlen) : "rm -rf failed");
	asp_exec_result_free(r);
	return rc;
}

int asp__fs_rename(asp_conn *c, const char *from, const char *to, asp_error *err)
{
	const asp_fsops *ops;
	int rc;

	if (!(ops = route(c, &rc, err)))
		return rc;
	return ops->rename(c, from, to, err);
}

int asp__fs_list(asp_conn *c, const char *path, const asp_list_caps *caps, asp_list_entry **out,
		 size_t *count, asp_error *err)
{
	const asp_fsops *ops;
	int rc;

	if (!(ops = route(c, &rc, err)))
		return rc;
	return ops->list(c, path, caps, out, count, err);
}
