/*
 * fs_sftp.c - the file calls over the pipelining SFTP engine (sftp.c): the
 * SFTP backend of fsops.h, and the ranged calls bulk.c spreads over several
 * connections. Each operation sends what it can without waiting: a small
 * read is OPEN and READs on the handle it will get (guessed: see
 * open_for_read), with the CLOSE's reply left for later; an atomic write is
 * LSTAT+OPEN, then WRITEs+FSETSTAT+CLOSE+RENAME.
 */
#include "fs_sftp.h"

#include <string.h>

#include "sftp.h"
#include "temp.h"

#define IO_CHUNK 65536u   /* every SFTP server accepts 64 KiB reads and writes */
#define MAX_INFLIGHT ASP_FS_MAX_INFLIGHT

/* Send CLOSE for a handle; its reply is dropped later. */
static int close_later(asp_conn *c, const unsigned char *h, size_t hl, asp_error *err)
{
	asp__sftp_begin(c, SSH_FXP_CLOSE);
	asp__sftp_str(c, h, hl);
	return asp__sftp_end(c, 1, NULL, err);
}

static int get_handle(asp_conn *c, uint32_t id, unsigned char *h, size_t *hl, const char *what,
		      const char *path, int fallback, asp_error *err)
{
	asp_sftp_reply r;
	const unsigned char *s;
	size_t sl;
	int rc;

	if ((rc = asp__sftp_reply(c, &r, id, err)))
		return rc;
	if (r.type != SSH_FXP_HANDLE) {
		asp__sftp_no_handle(c);
		return asp__sftp_fail(&r, fallback, err, what, path);
	}
	if (asp__sftp_get_str(&r.p, &r.len, &s, &sl) || sl > 256)
		return asp__error(err, ASP_EPROTO, "%s %s: malformed handle", what, SHOW(path));
	memcpy(h, s, sl);
	*hl = sl;
	asp__sftp_got_handle(c, h, sl);
	return 0;
}

static void to_stat(const asp_sftp_attrs *a, asp_stat_info *out)
{
	out->size = a->size;
	out->mtime = a->mtime;
	out->mode = a->perm & 07777;
	out->type = asp__fsops_type_of(a->perm);
}

/* Wait for an ATTRS reply. *found = 0 when the path does not exist (no error then). */
static int get_attrs(asp_conn *c, uint32_t id, asp_sftp_attrs *a, int *found, const char *what,
		     const char *path, asp_error *err)
{
	asp_sftp_reply r;
	int rc;

	if ((rc = asp__sftp_reply(c, &r, id, err)))
		return rc;
	if (r.type == SSH_FXP_ATTRS) {
		*found = 1;
		if (asp__sftp_get_attrs(&r.p, &r.len, a))
			return asp__error(err, ASP_EPROTO, "%s %s: malformed attributes", what, SHOW(path));
		return 0;
	}
	*found = 0;
	if (asp__sftp_status(&r) == SSH_FX_NO_SUCH_FILE)
		return 0;
	return asp__sftp_fail(&r, ASP_EIO, err, what, path);
}

static int send_path(asp_conn *c, uint8_t type, const char *path, int discard, uint32_t *id,
		     asp_error *err)
{
	asp__sftp_begin(c, type);
	asp__sftp_cstr(c, path);
	return asp__sftp_end(c, discard, id, err);
}

/* ------------------------------------------------------------ read */

static int too_big(asp_buf *out, const char *path, uint64_t cap, asp_error *err)
{
	asp__buf_free(out); /* nothing is returned: give the memory back now */
	return asp__error(err, ASP_ELIMIT, "read %s: the file holds more than %llu bytes, the cap on "
			  "one read; read it in ranges (offset and limit), or raise the cap "
			  "(asp_open_options.max_read_bytes)", SHOW(path), (unsigned long long)cap);
}

static void reader_init(asp_fs_reader *rd, uint64_t offset, uint64_t limit, uint64_t cap)
{
	/*
	 * A caller asking for more than the cap gets the cap's worth plus one
	 * byte, which tells whether the file holds more (then ASP_ELIMIT). No
	 * READ goes out past that, so a small cap keeps few bytes in flight.
	 */
	uint64_t span = limit > cap ? cap + 1 : limit;

	memset(rd, 0, sizeof(*rd));
	rd->window = 2;
	rd->limit = limit;
	rd->cap = cap;
	rd->offset = rd->next = offset;
	rd->end = offset > UINT64_MAX - span ? UINT64_MAX : offset + span;
	/* No file reaches past INT64_MAX (off_t); servers reject such offsets as malformed. */
	rd->eof = offset > (uint64_t)INT64_MAX;
	/*
	 * A regular file's size says at once whether it holds more than the cap:
	 * ask along with the first READs (no extra round trip) and fail before
	 * fetching the cap's worth. A device or pipe says 0: its bytes tell.
	 */
	rd->fstat_due = limit > cap && !rd->eof;
}

/* Send the FSTAT when due, and READs until the window is full; never waits. */
static int reader_send(asp_conn *c, asp_fs_reader *rd, const unsigned char *h, size_t hl, asp_error *err)
{
	int rc;

	if (rd->fstat_due) {
		asp__sftp_begin(c, SSH_FXP_FSTAT);
		asp__sftp_str(c, h, hl);
		if ((rc = asp__sftp_end(c, 0, &rd->fstat_id, err)))
			return rc;
		rd->fstat_due = 0;
		rd->fstat_pending = 1;
	}
	while (!rd->eof && !rd->skip && rd->inflight < rd->window && rd->next < rd->end) {
		uint32_t n = rd->end - rd->next < IO_CHUNK ? (uint32_t)(rd->end - rd->next) : IO_CHUNK;
		asp__sftp_begin(c, SSH_FXP_READ);
		asp__sftp_str(c, h, hl);
		asp__sftp_u64(c, rd->next);
		asp__sftp_u32(c, n);
		if ((rc = asp__sftp_end(c, 0, &rd->ids[rd->inflight], err)))
			return rc;
		rd->offs[rd->inflight] = rd->next;
		rd->lens[rd->inflight++] = n;
		rd->next += n;
	}
	return 0;
}

static int read_loop(asp_conn *c, asp_fs_reader *rd, const unsigned char *h, size_t hl, const char *path,
		     asp_buf *out, asp_error *err);

/*
 * OPEN (and STAT path when a is not NULL), then READs. With a guessed
 * handle (asp__sftp_guess) the first READs go out right behind the OPEN: a
 * small file costs one round trip. A wrong guess loses nothing: those READs
 * find no handle, their replies are dropped, and rd starts again for the
 * handle the OPEN returned. On success the handle is open.
 */
static int open_for_read(asp_conn *c, const char *path, asp_fs_reader *rd, unsigned char *h,
			 size_t *hl, asp_sftp_attrs *a, int *found, asp_error *err)
{
	const unsigned char *g = NULL;
	size_t gl = asp__sftp_guess(c, &g);
	uint64_t offset = rd->offset, limit = rd->limit, cap = rd->cap;
	uint32_t id_open, id_stat = 0;
	int rc;

	asp__sftp_begin(c, SSH_FXP_OPEN);
	asp__sftp_cstr(c, path);
	asp__sftp_u32(c, SSH_FXF_READ);
	asp__sftp_attrs(c, 0, 0);
	if ((rc = asp__sftp_end(c, 0, &id_open, err)) ||
	    (a && (rc = send_path(c, SSH_FXP_STAT, path, 0, &id_stat, err))) ||
	    (gl && (rc = reader_send(c, rd, g, gl, err))) ||
	    (rc = get_handle(c, id_open, h, hl, "read", path, ASP_EIO, err))) {
		asp__sftp_forget(c);
		return rc;
	}
	if (gl) {
		int hit = *hl == gl && !memcmp(h, g, gl);
		asp__sftp_guessed(c, hit);
		if (!hit) {
			/* The STAT's reply comes before the READs': take it, then drop them. */
			rc = a ? get_attrs(c, id_stat, a, found, "read", path, err) : 0;
			asp__sftp_forget(c);
			if (rc) {
				asp__fs_sftp_close_handle(c, h, *hl);
				return rc;
			}
			reader_init(rd, offset, limit, cap);
			return 0;
		}
	}
	if (a && (rc = get_attrs(c, id_stat, a, found, "read", path, err))) {
		asp__sftp_forget(c);
		asp__fs_sftp_close_handle(c, h, *hl);
		return rc;
	}
	return 0;
}

/* Read from an open handle (see sftp_read); the handle is closed (CLOSE's reply dropped later). */
static int read_loop(asp_conn *c, asp_fs_reader *rd, const unsigned char *h, size_t hl, const char *path,
		     asp_buf *out, asp_error *err)
{
	uint32_t id;
	int rc, short_end = 0;

	while (!rd->eof || rd->inflight) {
		asp_sftp_reply r;
		uint32_t want;
		uint64_t at;

		/* Keep the pipe full; the window grows so small files cost one round trip. */
		if ((rc = reader_send(c, rd, h, hl, err)))
			goto out;
		if (rd->fstat_pending) {
			asp_sftp_attrs a;
			int found = 0, sized;
			rd->fstat_pending = 0;
			if ((rc = get_attrs(c, rd->fstat_id, &a, &found, "read", path, err)))
				goto out;
			sized = found && asp__fsops_type_of(a.perm) == ASP_TYPE_FILE &&
				(a.flags & SSH_FILEXFER_ATTR_SIZE) && a.size > rd->offset;
			if (sized && a.size - rd->offset > rd->cap) {
				rc = too_big(out, path, rd->cap, err);
				goto out;
			}
			/*
			 * The result's whole size at once (at most the cap: more failed
			 * above): no copies as it grows, and a large one gets huge pages
			 * (asp__mem_fill_hint). Only a hint: when the reserve fails (a
			 * size the server made up) the buffer grows with the data as
			 * before, and so it does for a file that grows meanwhile.
			 */
			if (sized && !out->len && a.size - rd->offset < SIZE_MAX - 1)
				(void)asp__buf_reserve(out, (size_t)(a.size - rd->offset) + 1);
			continue;
		}
		if (!rd->inflight)
			break;
		if ((rc = asp__sftp_reply(c, &r, rd->ids[0], err)))
			goto out;
		want = rd->lens[0];
		at = rd->offs[0];
		rd->inflight--;
		memmove(rd->ids, rd->ids + 1, rd->inflight * sizeof(rd->ids[0]));
		memmove(rd->lens, rd->lens + 1, rd->inflight * sizeof(rd->lens[0]));
		memmove(rd->offs, rd->offs + 1, rd->inflight * sizeof(rd->offs[0]));
		if (rd->skip) {
			/* After a short read: more data further on means the short read was not the end. */
			if (r.type == SSH_FXP_DATA)
				short_end = 0;
			if (!--rd->skip && short_end)
				rd->eof = 1;
			continue;
		}
		if (r.type == SSH_FXP_DATA) {
			const unsigned char *d;
			size_t dl;
			if (asp__sftp_get_str(&r.p, &r.len, &d, &dl) || dl > want) {
				rc = asp__error(err, ASP_EPROTO, "read %s: malformed data reply", SHOW(path));
				goto out;
			}
			if (out->len + dl > rd->cap) {
				rc = too_big(out, path, rd->cap, err);
				goto out;
			}
			if (asp__buf_put_capped(out, d, dl, rd->cap)) {
				rc = asp__error(err, ASP_ENOMEM, "read %s: out of memory", SHOW(path));
				goto out;
			}
			if (dl < want) {
				/*
				 * Short read: the end of the file, unless a later request finds
				 * data (a pipe, a growing file). Those later replies are for the
				 * wrong offsets: drop them, and if it was not the end, go on
				 * from here. Reads in flight behind it answer in the same round
				 * trip, so a small file costs OPEN + one batch of READs.
				 */
				rd->next = rd->offset + out->len;
				rd->skip = (int)rd->inflight;
				short_end = rd->inflight > 0;
				if (dl == 0)
					rd->eof = 1;
			}
			if (rd->window < MAX_INFLIGHT)
				rd->window *= 2;
			continue;
		}
		if (asp__sftp_status(&r) == SSH_FX_EOF) {
			rd->eof = 1;
			rd->skip = (int)rd->inflight;
			continue;
		}
		/*
		 * Reading a directory fails only here: tell that case apart. So does
		 * reading past the largest offset the server's file system can seek
		 * to (OpenSSH answers "bad message"): there is nothing there to read.
		 */
		rc = asp__sftp_fail(&r, ASP_EIO, err, "read", path);
		if (rc == ASP_EIO || rc == ASP_EINVAL) {
			asp_sftp_attrs a;
			int found = 0;
			asp_error e2;
			asp__sftp_drain(c, NULL);
			asp__sftp_begin(c, SSH_FXP_FSTAT);
			asp__sftp_str(c, h, hl);
			if (!asp__sftp_end(c, 0, &id, &e2) && !get_attrs(c, id, &a, &found, "stat", path, &e2) &&
			    found) {
				if (asp__fsops_type_of(a.perm) == ASP_TYPE_DIR)
					rc = asp__error(err, ASP_EISDIR, "read %s: is a directory", SHOW(path));
				else if ((a.flags & SSH_FILEXFER_ATTR_SIZE) && at >= a.size)
					rc = 0; /* at or past the end of the file */
			}
		}
		goto out;
	}
	rc = 0;
out:
	if (rc && asp__conn_dead(c))
		return rc;
	if (rc)
		asp__sftp_drain(c, NULL);
	close_later(c, h, hl, NULL);
	asp__sftp_flush(c, NULL);
	return rc;
}

static int sftp_read(asp_conn *c, const char *path, uint64_t offset, uint64_t limit, uint64_t cap,
		     asp_buf *out, asp_error *err)
{
	unsigned char h[256];
	size_t hl;
	asp_fs_reader rd;
	int rc;

	reader_init(&rd, offset, limit, cap);
	if ((rc = open_for_read(c, path, &rd, h, &hl, NULL, NULL, err)))
		return rc;
	return read_loop(c, &rd, h, hl, path, out, err);
}

/* ------------------------------------------------------------ read-only file systems */

/*
 * OpenSSH's sftp-server has no status for EROFS: it says "failure" (4), as
 * for most errnos. After a call that writes failed, statvfs@openssh.com of
 * the path, or of its nearest ancestor that exists, says whether its file
 * system is mounted read-only (f_flag's ST_RDONLY, the mount's or the super
 * block's): the kernel's own answer, not a guess from the failure. A
 * server without the extension answers "unsupported": then not known, 0.
 */
#define SFTP_ST_RDONLY 0x1u

static int sftp_rofs(asp_conn *c, const char *path)
{
	char *p = asp__strdup(path), *slash;
	int ro = 0;

	while (p && *p) {
		asp_sftp_reply r;
		uint64_t v[11];
		uint32_t id;
		size_t i;

		asp__sftp_begin(c, SSH_FXP_EXTENDED);
		asp__sftp_cstr(c, "statvfs@openssh.com");
		asp__sftp_cstr(c, p);
		if (asp__sftp_end(c, 0, &id, NULL) || asp__sftp_reply(c, &r, id, NULL))
			break;
		if (r.type == SSH_FXP_EXTENDED_REPLY) {
			for (i = 0; i < 11 && !asp__sftp_get_u64(&r.p, &r.len, &v[i]); i++)
				;
			ro = i == 11 && (v[9] & SFTP_ST_RDONLY);
			break;
		}
		if (asp__sftp_status(&r) != SSH_FX_NO_SUCH_FILE || !strcmp(p, "/") || !(slash = strrchr(p, '/')))
			break;
		/* Not there (yet): its directory tells. */
		slash[slash == p] = '\0';
	}
	asp__free(p);
	return ro;
}

/* ------------------------------------------------------------ mkdir */

/* MKDIR every ancestor of path (not path itself unless self), without waiting. */
static int mkdir_chain(asp_conn *c, const char *path, int self, unsigned int mode, asp_error *err)
{
	char *p = asp__strdup(path), *s;
	int rc = 0;

	if (!p)
		return asp__error(err, ASP_ENOMEM, "out of memory");
	for (s = p + 1; (s = strchr(s, '/')) != NULL || self; s++) {
		if (s)
			*s = '\0';
		if (*p) {
			asp__sftp_begin(c, SSH_FXP_MKDIR);
			asp__sftp_cstr(c, p);
			asp__sftp_attrs(c, SSH_FILEXFER_ATTR_PERMISSIONS, mode);
			if ((rc = asp__sftp_end(c, 1, NULL, err)))
				break;
		}
		if (!s)
			break;
		*s = '/';
	}
	asp__free(p);
	return rc;
}

static int sftp_mkdir(asp_conn *c, const char *path, unsigned int mode, int parents, asp_error *err)
{
	asp_sftp_reply r;
	asp_sftp_attrs a;
	uint32_t id;
	int rc, found = 0;

	if (!mode)
		mode = 0755;
	if (!parents) {
		asp__sftp_begin(c, SSH_FXP_MKDIR);
		asp__sftp_cstr(c, path);
		asp__sftp_attrs(c, SSH_FILEXFER_ATTR_PERMISSIONS, mode);
		if ((rc = asp__sftp_end(c, 0, &id, err)) || (rc = asp__sftp_reply(c, &r, id, err)))
			return rc;
		if (asp__sftp_status(&r) == SSH_FX_OK)
			return 0;
		/* The server says only "failure": find out whether it exists. */
		rc = asp__sftp_fail(&r, ASP_EIO, err, "mkdir", path);
		if (rc == ASP_EIO && !send_path(c, SSH_FXP_LSTAT, path, 0, &id, NULL) &&
		    !get_attrs(c, id, &a, &found, "mkdir", path, NULL) && found)
			rc = asp__error(err, ASP_EEXIST, "mkdir %s: already exists", SHOW(path));
		else if (rc == ASP_EIO && !asp__conn_dead(c) && sftp_rofs(c, path))
			rc = asp__fsops_rofs_error(err, "mkdir", path, NULL);
		return rc;
	}
	/* mkdir -p: every MKDIR at once, then one STAT tells whether it worked. */
	if ((rc = mkdir_chain(c, path, 1, mode, err)) ||
	    (rc = send_path(c, SSH_FXP_STAT, path, 0, &id, err)) ||
	    (rc = get_attrs(c, id, &a, &found, "mkdir", path, err)))
		return rc;
	if (!found && sftp_rofs(c, path))
		return asp__fsops_rofs_error(err, "mkdir", path, NULL);
	if (!found)
		return asp__error(err, ASP_EACCES, "mkdir %s: could not create it or a parent "
				  "(a parent is not writable or not a directory)", SHOW(path));
	if (asp__fsops_type_of(a.perm) != ASP_TYPE_DIR)
		return asp__error(err, ASP_EEXIST, "mkdir %s: exists and is not a directory", SHOW(path));
	return 0;
}

/* ------------------------------------------------------------ write */

/* mkdir -p of path's directory for a write; says why when that fails. */
static int make_parents(asp_conn *c, const char *path, asp_error *err)
{
	const char *slash = strrchr(path, '/');
	char *dir, shown[ASP_PATH_SHOW_MAX + 4];
	int rc;

	if (!slash || slash == path)
		return 0;
	if (!(dir = asp__strndup(path, (size_t)(slash - path))))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	if ((rc = sftp_mkdir(c, dir, 0755, 1, err)) == ASP_EROFS)
		asp__fsops_rofs_error(err, "write", path, NULL); /* as the shell's write says it */
	else if (rc)
		asp__error_prefix(err, "write %s", asp__path_show(shown, path));
	asp__free(dir);
	return rc;
}

/*
 * Write all data at file offset `at`, then (with finish) FSETSTAT (when
 * setmode) and CLOSE the handle, without waiting in between: the CLOSE goes
 * out right behind the last WRITE, so a small file costs one round trip
 * here. At most MAX_INFLIGHT writes are in flight. With finish the handle
 * is always closed; the first failure is returned. Without it, every
 * WRITE's reply has been read when it returns.
 */
static int write_range(asp_conn *c, const unsigned char *h, size_t hl, const void *data,
		       uint64_t at, size_t len, int finish, int setmode, uint32_t mode,
		       const char *path, asp_sftp_attrs *written, asp_error *err)
{
	enum { WRITE, CHMOD, CLOSE, FSTAT };
	static const char *const what[] = { "write", "chmod", "close", "stat" };
	static const int fallback[] = { ASP_ENOSPC, ASP_EIO, ASP_ENOSPC, ASP_EIO };
	uint32_t ids[MAX_INFLIGHT + 3];
	unsigned char kind[MAX_INFLIGHT + 3];
	size_t inflight = 0, off = 0;
	int rc, failed = 0, closed = 0;

	while (finish ? (!closed || inflight) : (inflight || (!failed && off < len))) {
		asp_sftp_reply r;
		while (!closed && !failed && off < len && inflight < MAX_INFLIGHT) {
			size_t n = len - off < IO_CHUNK ? len - off : IO_CHUNK;
			asp__sftp_begin(c, SSH_FXP_WRITE);
			asp__sftp_str(c, h, hl);
			asp__sftp_u64(c, at + off);
			asp__sftp_str(c, (const unsigned char *)data + off, n);
			kind[inflight] = WRITE;
			if ((rc = asp__sftp_end(c, 0, &ids[inflight++], err)))
				return rc;
			off += n;
			if (asp__sftp_flush(c, err))
				return ASP_ECONNLOST;
		}
		if (finish && !closed && (failed || off >= len)) {
			if (written && !failed) {
				/* The file's mtime after the last WRITE: the server's clock, for the sweep. */
				asp__sftp_begin(c, SSH_FXP_FSTAT);
				asp__sftp_str(c, h, hl);
				kind[inflight] = FSTAT;
				if ((rc = asp__sftp_end(c, 0, &ids[inflight++], err)))
					return rc;
			}
			if (setmode && !failed) {
				asp__sftp_begin(c, SSH_FXP_FSETSTAT);
				asp__sftp_str(c, h, hl);
				asp__sftp_attrs(c, SSH_FILEXFER_ATTR_PERMISSIONS, mode & 07777);
				kind[inflight] = CHMOD;
				if ((rc = asp__sftp_end(c, 0, &ids[inflight++], err)))
					return rc;
			}
			asp__sftp_begin(c, SSH_FXP_CLOSE);
			asp__sftp_str(c, h, hl);
			kind[inflight] = CLOSE;
			if ((rc = asp__sftp_end(c, 0, &ids[inflight++], err)))
				return rc;
			closed = 1;
		}
		if ((rc = asp__sftp_reply(c, &r, ids[0], err)))
			return rc;
		if (kind[0] == FSTAT) {
			const unsigned char *p = r.p;
			size_t pl = r.len;
			if (r.type != SSH_FXP_ATTRS || asp__sftp_get_attrs(&p, &pl, written))
				memset(written, 0, sizeof(*written));
		} else if (!failed && asp__sftp_status(&r) != SSH_FX_OK)
			failed = asp__sftp_fail(&r, fallback[kind[0]], err, what[kind[0]], path);
		inflight--;
		memmove(ids, ids + 1, inflight * sizeof(ids[0]));
		memmove(kind, kind + 1, inflight);
	}
	return failed;
}

static int open_for_write(asp_conn *c, const char *path, uint32_t flags, unsigned char *h, size_t *hl,
			  const asp_write_options *o, asp_error *err)
{
	uint32_t id;
	int rc;

	asp__sftp_begin(c, SSH_FXP_OPEN);
	asp__sftp_cstr(c, path);
	asp__sftp_u32(c, flags);
	asp__sftp_attrs(c, SSH_FILEXFER_ATTR_PERMISSIONS, o->mode ? (o->mode & 07777) : 0644);
	if ((rc = asp__sftp_end(c, 0, &id, err)))
		return rc;
	rc = get_handle(c, id, h, hl, "write", path, ASP_EIO, err);
	if (rc == ASP_ENOENT && (o->flags & ASP_WRITE_PARENTS)) {
		/* Parents missing: create them and try again. */
		asp_write_options again = *o;

		if ((rc = make_parents(c, path, err)))
			return rc;
		again.flags &= ~ASP_WRITE_PARENTS;
		return open_for_write(c, path, flags, h, hl, &again, err);
	}
	if (rc == ASP_ENOENT)
		asp__error(err, ASP_ENOENT, "write %s: the parent directory does not exist", SHOW(path));
	return rc;
}

static int write_in_place(asp_conn *c, const char *path, const void *data, size_t len,
			  const asp_write_options *o, asp_error *err)
{
	unsigned char h[256];
	size_t hl;
	int rc;

	if ((rc = open_for_write(c, path, SSH_FXF_WRITE | SSH_FXF_CREAT | SSH_FXF_TRUNC, h, &hl, o, err))) {
		if (rc == ASP_EIO && !asp__conn_dead(c) && sftp_rofs(c, path))
			return asp__fsops_rofs_error(err, "write", path, NULL);
		if (rc == ASP_EIO)
			asp__error(err, ASP_EISDIR, "write %s: cannot open it for writing (is it a directory?)",
				   SHOW(path));
		return rc == ASP_EIO ? ASP_EISDIR : rc;
	}
	return write_range(c, h, hl, data, 0, len, 1, o->mode != 0, o->mode, path, NULL, err);
}

static int rename_over(asp_conn *c, const char *from, const char *to, int target_exists,
		       asp_error *err)
{
	asp_sftp_reply r;
	uint32_t id;
	int rc;

	if (asp__sftp_has_posix_rename(c)) {
		asp__sftp_begin(c, SSH_FXP_EXTENDED);
		asp__sftp_cstr(c, "posix-rename@openssh.com");
	} else if (!target_exists) {
		asp__sftp_begin(c, SSH_FXP_RENAME);
	} else {
		return asp__error(err, ASP_EPROTO, "rename %s: the SFTP server cannot replace files "
				  "atomically (no posix-rename@openssh.com); write in place "
				  "(ASP_WRITE_IN_PLACE)", SHOW(to));
	}
	asp__sftp_cstr(c, from);
	asp__sftp_cstr(c, to);
	if ((rc = asp__sftp_end(c, 0, &id, err)) || (rc = asp__sftp_reply(c, &r, id, err)))
		return rc;
	if (asp__sftp_status(&r) == SSH_FX_OK)
		return 0;
	return asp__sftp_fail(&r, ASP_EIO, err, "rename", to);
}

/*
 * The rename that makes an atomic write's data the target's. The call's
 * cancel counts up to the sending, not after: once the rename is sent the
 * target may change whatever comes next, and ASP_ECANCELLED would say
 * "untouched" of a replaced file. The deadline still bounds the answer (a
 * server may trickle bytes and never answer), and its error says the
 * target may hold either content.
 */
static int rename_into_place(asp_conn *c, const char *tmp, const char *path, int target_exists,
			     asp_error *err)
{
	int rc;

	if ((rc = asp__conn_commit(c, err)) != 0)
		return rc;
	if ((rc = rename_over(c, tmp, path, target_exists, err)) == ASP_ETIMEOUT)
		asp__error_prefix(err, "write %s: the rename was sent, the target holds its old or its new "
				  "content", SHOW(path));
	return rc;
}

/* Remove our temp file and wait for it to be gone, so a failed write leaves nothing behind. */
static int remove_temp(asp_conn *c, const char *path)
{
	asp_sftp_reply r;
	uint32_t id;

	if (send_path(c, SSH_FXP_REMOVE, path, 0, &id, NULL))
		return ASP_ENOMEM;
	return asp__sftp_reply(c, &r, id, NULL);
}

/*
 * fill (may be NULL) writes the data into the open temp file instead of this
 * connection alone (bulk.c spreads it over several connections); the
 * FSETSTAT, CLOSE and rename stay here.
 */
static int write_atomic(asp_conn *c, const char *path, const void *data, size_t len,
			const asp_write_options *o, unsigned int lease_s, char **orphan,
			const asp_fs_fill *fill, int depth, asp_fs_written *done, asp_error *err)
{
	unsigned char h[256];
	size_t hl;
	uint32_t id_lstat;
	asp_sftp_attrs a, written;
	char *tmp = asp__temp_name(path, lease_s);
	int rc, found = 0, opened = 0, handle = 0;

	if (!tmp)
		return asp__error(err, ASP_ENOMEM, "out of memory");
	/* LSTAT the target and create the temp file in the same round trip. */
	if ((rc = send_path(c, SSH_FXP_LSTAT, path, 0, &id_lstat, err)))
		goto out;
	asp__sftp_begin(c, SSH_FXP_OPEN);
	asp__sftp_cstr(c, tmp);
	asp__sftp_u32(c, SSH_FXF_WRITE | SSH_FXF_CREAT | SSH_FXF_EXCL);
	asp__sftp_attrs(c, SSH_FILEXFER_ATTR_PERMISSIONS, o->mode ? (o->mode & 07777) : 0644);
	{
		uint32_t id_open;
		if ((rc = asp__sftp_end(c, 0, &id_open, err)))
			goto out;
		rc = get_attrs(c, id_lstat, &a, &found, "write", path, err);
		if (rc) {
			asp__sftp_drain(c, NULL);
			goto out;
		}
		rc = get_handle(c, id_open, h, &hl, "write", path, ASP_EIO, err);
	}
	if (rc == ASP_ENOENT && (o->flags & ASP_WRITE_PARENTS) && !found) {
		if (!(rc = make_parents(c, path, err))) {
			asp_write_options again = *o;

			again.flags &= ~ASP_WRITE_PARENTS;
			asp__free(tmp);
			return write_atomic(c, path, data, len, &again, lease_s, orphan, fill, depth, done, err);
		}
	}
	if (rc == ASP_ENOENT)
		asp__error(err, ASP_ENOENT, "write %s: the parent directory does not exist", SHOW(path));
	if (rc == ASP_EIO && !asp__conn_dead(c) && sftp_rofs(c, path))
		rc = asp__fsops_rofs_error(err, "write", path, NULL);
	if (rc)
		goto out;
	opened = handle = 1;
	if (found && asp__fsops_type_of(a.perm) == ASP_TYPE_DIR) {
		rc = asp__error(err, ASP_EISDIR, "write %s: is a directory", SHOW(path));
		goto out;
	}
	if (found && asp__fsops_type_of(a.perm) == ASP_TYPE_SYMLINK && depth < 8) {
		/* Write through the link: replace the file it points to, not the link. */
		uint32_t id;
		asp_sftp_reply r;
		const unsigned char *s;
		size_t sl;
		uint32_t cnt;
		char *real;
		close_later(c, h, hl, NULL);
		remove_temp(c, tmp);
		opened = handle = 0;
		if ((rc = send_path(c, SSH_FXP_REALPATH, path, 0, &id, err)) ||
		    (rc = asp__sftp_reply(c, &r, id, err)))
			goto out;
		if (r.type != SSH_FXP_NAME || asp__sftp_get_u32(&r.p, &r.len, &cnt) ||
		    asp__sftp_get_str(&r.p, &r.len, &s, &sl)) {
			rc = asp__sftp_fail(&r, ASP_EIO, err, "resolve link", path);
			goto out;
		}
		if (!(real = asp__strndup((const char *)s, sl))) {
			rc = asp__error(err, ASP_ENOMEM, "out of memory");
			goto out;
		}
		rc = write_atomic(c, real, data, len, o, lease_s, orphan, fill, depth + 1, done, err);
		if (!rc && !done->path) /* the deepest link's target is the file written */
			done->path = real;
		else
			asp__free(real);
		goto out;
	}
	/* From here a lost connection may leave the temp file behind. */
	memset(&written, 0, sizeof(written));
	rc = fill ? fill->fn(fill->ctx, c, h, hl, tmp, err) : 0;
	if (rc == 0) {
		rc = write_range(c, h, hl, data, 0, fill ? 0 : len, 1, o->mode || found,
				 o->mode ? o->mode : a.perm, tmp, &written, err);
		handle = 0;
	}
	if (rc == 0) {
		opened = 0;
		if ((rc = rename_into_place(c, tmp, path, found, err)) != 0 && !asp__conn_dead(c))
			remove_temp(c, tmp);
		if (rc == 0)
			done->now_s = written.flags & SSH_FILEXFER_ATTR_ACMODTIME ? written.mtime : 0;
		goto out;
	}
	if (rc && asp__error_is(err, ASP_ENOSPC))
		asp__error_prefix(err, "the sandbox's disk is probably full");
out:
	if (handle && !asp__conn_dead(c))
		close_later(c, h, hl, NULL);
	if (rc && opened && !asp__conn_dead(c))
		remove_temp(c, tmp);
	if (rc && asp__conn_dead(c) && orphan && !*orphan) {
		*orphan = tmp;
		tmp = NULL;
	}
	asp__free(tmp);
	return rc;
}

static int sftp_write(asp_conn *c, const char *path, const void *data, size_t len,
		      const asp_write_options *o, unsigned int lease_s, char **orphan, asp_fs_written *done,
		      asp_error *err)
{
	if (o->flags & ASP_WRITE_IN_PLACE)
		return write_in_place(c, path, data, len, o, err);
	return write_atomic(c, path, data, len, o, lease_s, orphan, NULL, 0, done, err);
}

/* REMOVE every path and wait for the replies; gone[i] = 1 when path i is gone. */
static int sftp_forget(asp_conn *c, char *const *paths, size_t n, unsigned char *gone, asp_error *err)
{
	uint32_t ids[64];
	size_t i, j, k;
	int rc = 0;

	for (i = 0; i < n; i += k) {
		k = n - i < 64 ? n - i : 64;
		for (j = 0; j < k; j++)
			if ((rc = send_path(c, SSH_FXP_REMOVE, paths[i + j], 0, &ids[j], err)))
				return rc;
		for (j = 0; j < k; j++) {
			asp_sftp_reply r;
			int st;
			if ((rc = asp__sftp_reply(c, &r, ids[j], err)))
				return rc;
			st = asp__sftp_status(&r);
			if (gone)
				gone[i + j] = st == SSH_FX_OK || st == SSH_FX_NO_SUCH_FILE;
		}
	}
	return 0;
}

/* ------------------------------------------------------------ metadata */

/* STAT or LSTAT over SFTP; a failure's message begins with `what` (the caller's call). */
static int sftp_stat(asp_conn *c, const char *path, int follow, const char *what, asp_stat_info *out,
		     asp_error *err)
{
	asp_sftp_attrs a;
	uint32_t id;
	int rc, found = 0;

	if ((rc = send_path(c, follow ? SSH_FXP_STAT : SSH_FXP_LSTAT, path, 0, &id, err)) ||
	    (rc = get_attrs(c, id, &a, &found, what, path, err)))
		return rc;
	if (!found)
		return asp__error(err, ASP_ENOENT, "%s %s: no such file or directory", what, SHOW(path));
	to_stat(&a, out);
	return 0;
}

static int sftp_stat_slot(asp_conn *c, const char *path, int follow, asp_stat_info *out, asp_error *err)
{
	return sftp_stat(c, path, follow, "stat", out, err);
}

static int sftp_remove(asp_conn *c, const char *path, asp_error *err)
{
	asp_sftp_reply r;
	asp_stat_info st;
	uint32_t id;
	int rc, isdir;

	if ((rc = sftp_stat(c, path, 0, "remove", &st, err)))
		return rc;
	isdir = st.type == ASP_TYPE_DIR;
	if ((rc = send_path(c, isdir ? SSH_FXP_RMDIR : SSH_FXP_REMOVE, path, 0, &id, err)) ||
	    (rc = asp__sftp_reply(c, &r, id, err)))
		return rc;
	if (asp__sftp_status(&r) == SSH_FX_OK)
		return 0;
	rc = asp__sftp_fail(&r, isdir ? ASP_ENOTEMPTY : ASP_EIO, err, "remove", path);
	if ((rc == ASP_ENOTEMPTY || rc == ASP_EIO) && !asp__conn_dead(c) && sftp_rofs(c, path))
		return asp__fsops_rofs_error(err, "remove", path, NULL);
	if (rc == ASP_ENOTEMPTY)
		asp__error(err, rc, "remove %s: directory not empty (use recursive)", SHOW(path));
	return rc;
}

static int sftp_rename(asp_conn *c, const char *from, const char *to, asp_error *err)
{
	asp_stat_info st;
	int rc;

	rc = rename_over(c, from, to, 1, err);
	if (rc == ASP_ENOENT) {
		/* The server does not say which side is missing: name the right one. */
		if (sftp_stat(c, from, 0, "stat", &st, NULL) == ASP_ENOENT)
			return asp__error(err, ASP_ENOENT, "rename %s: no such file or directory", SHOW(from));
		return asp__error(err, ASP_ENOENT, "rename %s to %s: the target's directory does not "
				  "exist", SHOW(from), SHOW(to));
	}
	if (rc == ASP_EIO || rc == ASP_EPROTO) {
		/* Say why when the server only said "failure". */
		if (sftp_stat(c, from, 0, "stat", &st, NULL) == ASP_ENOENT)
			return asp__error(err, ASP_ENOENT, "rename %s: no such file or directory", SHOW(from));
		/* One file system: across two, rename fails otherwise (EXDEV). */
		if (!asp__conn_dead(c) && sftp_rofs(c, from))
			return asp__fsops_rofs_error(err, "rename", from, to);
		if (sftp_stat(c, to, 0, "stat", &st, NULL) == 0 && st.type == ASP_TYPE_DIR)
			return asp__error(err, ASP_EISDIR, "rename %s to %s: target is a directory",
					  SHOW(from), SHOW(to));
	}
	return rc;
}

int asp__fs_sftp_list_decode(const unsigned char *p, size_t len, const char *path,
			const asp_list_caps *caps, asp_list_entry **v, size_t *n, size_t *cap,
			uint64_t *held, asp_error *err)
{
	size_t max = caps->entries;
	uint32_t i, cnt;

	if (asp__sftp_get_u32(&p, &len, &cnt))
		return asp__error(err, ASP_EPROTO, "list %s: malformed directory entries", SHOW(path));
	for (i = 0; i < cnt; i++) {
		const unsigned char *name, *lname;
		size_t nl, ll;
		asp_sftp_attrs a;
		char said[96];

		if (asp__sftp_get_str(&p, &len, &name, &nl) || asp__sftp_get_str(&p, &len, &lname, &ll) ||
		    asp__sftp_get_attrs(&p, &len, &a))
			return asp__error(err, ASP_EPROTO, "list %s: malformed directory entry", SHOW(path));
		if ((nl == 1 && name[0] == '.') || (nl == 2 && name[0] == '.' && name[1] == '.'))
			continue;
		/*
		 * No file system makes such a name: a server that sends one is broken
		 * or lying, and the caller would join it to the directory's path.
		 */
		if (!nl || memchr(name, '/', nl) || memchr(name, '\0', nl))
			return asp__error(err, ASP_EPROTO, "list %s: the server sent an impossible entry "
					  "name \"%s\" (empty, or holding '/' or a NUL byte); the listing is "
					  "refused", SHOW(path), asp__show_text(said, sizeof(said), name, nl));
		if (nl > ASP_LIST_NAME_MAX)
			return asp__error(err, ASP_ELIMIT, "list %s: the server sent an entry name of %zu "
					  "bytes, longer than any file system makes (the cap is %u bytes); "
					  "the listing is refused", SHOW(path), nl, ASP_LIST_NAME_MAX);
		if (nl > caps->bytes - *held)
			return asp__error(err, ASP_ELIMIT, "list %s: the directory's names add up to more "
					  "than %llu bytes, the cap on one listing; list it with a command "
					  "through asp_exec (e.g. find or ls piped to head), or raise the cap "
					  "(asp_open_options.max_list_bytes)", SHOW(path),
					  (unsigned long long)caps->bytes);
		if (*n >= max)
			return asp__error(err, ASP_ELIMIT, "list %s: the directory holds more than %zu "
					  "entries, the cap on one listing; list it with a command through "
					  "asp_exec (e.g. find or ls piped to head), or raise the cap "
					  "(asp_open_options.max_list_entries)", SHOW(path), max);
		if (*n == *cap) {
			asp_list_entry *nv;
			size_t nc = *cap ? *cap * 2 : 32;
			if (nc > max)
				nc = max > *n ? max : *n + 1;
			if (!(nv = asp__realloc(*v, nc * sizeof(**v))))
				return asp__error(err, ASP_ENOMEM, "out of memory");
			*v = nv;
			*cap = nc;
		}
		if (!((*v)[*n].name = asp__strndup((const char *)name, nl)))
			return asp__error(err, ASP_ENOMEM, "out of memory");
		to_stat(&a, &(*v)[(*n)++].st);
		*held += nl;
	}
	return 0;
}

static int sftp_list(asp_conn *c, const char *path, const asp_list_caps *caps, asp_list_entry **out,
		     size_t *count, asp_error *err)
{
	unsigned char h[256];
	size_t hl, n = 0, cap = 0;
	uint64_t held = 0;
	asp_list_entry *v = NULL;
	uint32_t id;
	int rc;

	if ((rc = send_path(c, SSH_FXP_OPENDIR, path, 0, &id, err)))
		return rc;
	if ((rc = get_handle(c, id, h, &hl, "list", path, ASP_ENOTDIR, err))) {
		asp_stat_info st;
		asp_error e2;
		/*
		 * OpenSSH's sftp-server answers "no such file" for ENOTDIR too:
		 * a STAT (only on this failure) tells a file apart, as shfs.c does.
		 */
		if (rc == ASP_ENOENT && !asp__conn_dead(c) && !sftp_stat(c, path, 1, "list", &st, &e2) &&
		    st.type != ASP_TYPE_DIR)
			rc = asp__error(err, ASP_ENOTDIR, "list %s: not a directory", SHOW(path));
		return rc;
	}
	for (;;) {
		asp_sftp_reply r;

		asp__sftp_begin(c, SSH_FXP_READDIR);
		asp__sftp_str(c, h, hl);
		if ((rc = asp__sftp_end(c, 0, &id, err)) || (rc = asp__sftp_reply(c, &r, id, err)))
			goto fail;
		if (asp__sftp_status(&r) == SSH_FX_EOF)
			break;
		if (r.type != SSH_FXP_NAME) {
			rc = asp__sftp_fail(&r, ASP_EIO, err, "list", path);
			goto fail;
		}
		if ((rc = asp__fs_sftp_list_decode(r.p, r.len, path, caps, &v, &n, &cap, &held, err)))
			goto fail;
	}
	close_later(c, h, hl, NULL);
	asp__sftp_flush(c, NULL);
	asp__fsops_sort(v, n);
	*out = v;
	*count = n;
	return 0;
fail:
	if (!asp__conn_dead(c))
		close_later(c, h, hl, NULL);
	asp__fsops_list_free(v, n);
	return rc;
}

/* ------------------------------------------------------------ the sweep's questions */

#define SWEEP_WINDOW 8 /* READDIRs in flight */

/* Keep the temp files of one READDIR reply (regular files with a mode and an mtime) in *v. */
static int temps_decode(const unsigned char *p, size_t len, asp_list_entry **v, size_t *n, size_t *cap,
			size_t *seen)
{
	uint32_t i, cnt;

	if (asp__sftp_get_u32(&p, &len, &cnt))
		return ASP_EPROTO;
	for (i = 0; i < cnt; i++) {
		const unsigned char *name, *lname;
		size_t nl, ll;
		asp_sftp_attrs a;
		uint32_t lease;

		if (asp__sftp_get_str(&p, &len, &name, &nl) || asp__sftp_get_str(&p, &len, &lname, &ll) ||
		    asp__sftp_get_attrs(&p, &len, &a))
			return ASP_EPROTO;
		(*seen)++;
		if (!asp__temp_parse((const char *)name, nl, &lease) ||
		    asp__fsops_type_of(a.perm) != ASP_TYPE_FILE || !(a.flags & SSH_FILEXFER_ATTR_PERMISSIONS) ||
		    !(a.flags & SSH_FILEXFER_ATTR_ACMODTIME))
			continue;
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 8;
			asp_list_entry *nv = asp__realloc(*v, nc * sizeof(*nv));
			if (!nv)
				return ASP_ENOMEM;
			*v = nv;
			*cap = nc;
		}
		if (!((*v)[*n].name = asp__strndup((const char *)name, nl)))
			return ASP_ENOMEM;
		to_stat(&a, &(*v)[(*n)++].st);
	}
	return 0;
}

/*
 * Read dir once (at most max entries, SWEEP_WINDOW READDIRs in flight) and
 * keep its temp files. SFTP does not say the server's clock: without one
 * from the caller (the write's FSTAT) staleness cannot be judged, so there
 * is nothing to ask. Any failure but a dead connection ends the listing
 * with what it found.
 */
static int sftp_temps(asp_conn *c, const char *dir, size_t max, asp_list_entry **out, size_t *count,
		      uint64_t *now_s)
{
	unsigned char h[256];
	size_t hl, inflight = 0, n = 0, cap = 0, seen = 0;
	uint32_t ids[SWEEP_WINDOW], id;
	asp_list_entry *v = NULL;
	int eof = 0, rc = 0;

	*out = NULL;
	*count = 0;
	if (!*now_s)
		return ASP_EINVAL;
	if (send_path(c, SSH_FXP_OPENDIR, dir, 0, &id, NULL) ||
	    get_handle(c, id, h, &hl, "sweep", dir, ASP_EIO, NULL))
		return ASP_EIO;
	while (!eof || inflight) {
		asp_sftp_reply r;
		while (!eof && !rc && inflight < SWEEP_WINDOW) {
			asp__sftp_begin(c, SSH_FXP_READDIR);
			asp__sftp_str(c, h, hl);
			if ((rc = asp__sftp_end(c, 0, &ids[inflight], NULL)))
				break;
			inflight++;
		}
		if (!inflight || (rc = asp__sftp_reply(c, &r, ids[0], NULL)))
			break;
		memmove(ids, ids + 1, --inflight * sizeof(ids[0]));
		if (eof)
			continue;
		if (r.type != SSH_FXP_NAME || temps_decode(r.p, r.len, &v, &n, &cap, &seen) || seen >= max)
			eof = 1; /* the end, an error, or enough: stop asking */
	}
	if (!asp__conn_dead(c))
		close_later(c, h, hl, NULL);
	*out = v;
	*count = n;
	return 0;
}

/* LSTAT every path at once, then take the replies. */
static int sftp_lstat_many(asp_conn *c, char *const *paths, size_t n, asp_stat_info *st,
			   unsigned char *found, uint64_t *now_s)
{
	uint32_t ids[64];
	size_t i;

	(void)now_s; /* SFTP does not tell the server's clock */
	if (n > 64)
		return ASP_EINVAL;
	for (i = 0; i < n; i++)
		if (send_path(c, SSH_FXP_LSTAT, paths[i], 0, &ids[i], NULL))
			return ASP_ENOMEM;
	for (i = 0; i < n; i++) {
		asp_sftp_attrs a;
		int got = 0;
		if (get_attrs(c, ids[i], &a, &got, "sweep", paths[i], NULL)) {
			if (asp__conn_dead(c))
				return ASP_ECONNLOST;
			got = 0;
		}
		found[i] = got && (a.flags & SSH_FILEXFER_ATTR_ACMODTIME);
		if (found[i])
			to_stat(&a, &st[i]);
	}
	return 0;
}

const asp_fsops asp__fs_sftp_ops = {
	.name = "sftp",
	.read = sftp_read,
	.write = sftp_write,
	.forget = sftp_forget,
	.stat = sftp_stat_slot,
	.mkdir = sftp_mkdir,
	.remove = sftp_remove,
	.rename = sftp_rename,
	.list = sftp_list,
	.temps = sftp_temps,
	.lstat_many = sftp_lstat_many,
	.rofs = sftp_rofs,
};

/* ------------------------------------------------------------ ranges, for bulk.c */

/* bulk.c calls these only on a connection whose file calls go over SFTP. */
static int sftp_only(asp_conn *c, asp_error *err)
{
	int rc = asp__files_transport(c, err);

	if (rc < 0 || rc == ASP_FILES_SFTP)
		return rc < 0 ? rc : 0;
	return asp__error(err, ASP_ERROR, "internal error: a ranged SFTP call on a connection that "
			  "uses shell commands for files");
}

int asp__fs_sftp_open_read(asp_conn *c, const char *path, uint64_t offset, uint64_t limit,
		      uint64_t cap, asp_fs_reader *rd, unsigned char *h, size_t *hl, asp_stat_info *st,
		      int *sized, asp_error *err)
{
	asp_sftp_attrs a;
	int rc, found = 0;

	*sized = 0;
	if ((rc = sftp_only(c, err)))
		return rc;
	/* OPEN and STAT together: the size costs no round trip. */
	reader_init(rd, offset, limit, cap);
	if ((rc = open_for_read(c, path, rd, h, hl, &a, &found, err)))
		return rc;
	if (found) {
		to_stat(&a, st);
		*sized = (a.flags & SSH_FILEXFER_ATTR_SIZE) != 0;
	}
	return 0;
}

int asp__fs_sftp_read_handle(asp_conn *c, asp_fs_reader *rd, const unsigned char *h, size_t hl,
			const char *path, asp_buf *out, asp_error *err)
{
	return read_loop(c, rd, h, hl, path, out, err);
}

void asp__fs_sftp_read_elsewhere(asp_conn *c)
{
	asp__sftp_forget(c);
}

int asp__fs_sftp_open_handle(asp_conn *c, const char *path, int write, unsigned char *h, size_t *hl,
			asp_error *err)
{
	uint32_t id;
	int rc;

	if ((rc = sftp_only(c, err)))
		return rc;
	asp__sftp_begin(c, SSH_FXP_OPEN);
	asp__sftp_cstr(c, path);
	asp__sftp_u32(c, write ? SSH_FXF_WRITE : SSH_FXF_READ);
	asp__sftp_attrs(c, 0, 0);
	if ((rc = asp__sftp_end(c, 0, &id, err)))
		return rc;
	return get_handle(c, id, h, hl, write ? "write" : "read", path, ASP_EIO, err);
}

void asp__fs_sftp_close_handle(asp_conn *c, const unsigned char *h, size_t hl)
{
	if (asp__conn_dead(c))
		return;
	close_later(c, h, hl, NULL);
	asp__sftp_flush(c, NULL);
}

int asp__fs_sftp_read_into(asp_conn *c, const unsigned char *h, size_t hl, const char *path,
		      uint64_t at, size_t len, unsigned char *dst, asp_error *err)
{
	uint32_t ids[MAX_INFLIGHT], lens[MAX_INFLIGHT];
	uint64_t offs[MAX_INFLIGHT], next = at, end = at + len;
	size_t inflight = 0;
	int rc = 0;

	while ((!rc && next < end) || inflight) {
		asp_sftp_reply r;
		const unsigned char *d;
		size_t dl;
		uint64_t o;
		uint32_t want;
		int r2;

		while (!rc && next < end && inflight < MAX_INFLIGHT) {
			uint32_t n = end - next < IO_CHUNK ? (uint32_t)(end - next) : IO_CHUNK;
			asp__sftp_begin(c, SSH_FXP_READ);
			asp__sftp_str(c, h, hl);
			asp__sftp_u64(c, next);
			asp__sftp_u32(c, n);
			if ((rc = asp__sftp_end(c, 0, &ids[inflight], err)))
				break;
			offs[inflight] = next;
			lens[inflight++] = n;
			next += n;
		}
		if (!inflight)
			break;
		if ((r2 = asp__sftp_reply(c, &r, ids[0], err)))
			return r2; /* the connection is gone or out of step */
		o = offs[0];
		want = lens[0];
		inflight--;
		memmove(ids, ids + 1, inflight * sizeof(ids[0]));
		memmove(lens, lens + 1, inflight * sizeof(lens[0]));
		memmove(offs, offs + 1, inflight * sizeof(offs[0]));
		if (rc)
			continue; /* failed: collect what is in flight */
		if (r.type == SSH_FXP_DATA) {
			if (asp__sftp_get_str(&r.p, &r.len, &d, &dl) || dl > want || dl == 0) {
				rc = asp__error(err, ASP_EPROTO, "read %s: malformed data reply", SHOW(path));
				continue;
			}
			memcpy(dst + (o - at), d, dl);
			if (dl < want) {
				/* A short read (allowed anywhere): ask for the rest of that request again. */
				asp__sftp_begin(c, SSH_FXP_READ);
				asp__sftp_str(c, h, hl);
				asp__sftp_u64(c, o + dl);
				asp__sftp_u32(c, want - (uint32_t)dl);
				if ((rc = asp__sftp_end(c, 0, &ids[inflight], err)))
					continue;
				offs[inflight] = o + dl;
				lens[inflight++] = want - (uint32_t)dl;
			}
			continue;
		}
		if (asp__sftp_status(&r) == SSH_FX_EOF)
			rc = asp__error(err, ASP_EIO, "read %s: the file became shorter while it was read "
					"(it ends at or before offset %llu, short of its size when the read "
					"began); read it again", SHOW(path), (unsigned long long)o);
		else
			rc = asp__sftp_fail(&r, ASP_EIO, err, "read", path);
	}
	return rc;
}

int asp__fs_sftp_write_at(asp_conn *c, const unsigned char *h, size_t hl, const char *path,
		     const void *data, uint64_t at, size_t len, asp_error *err)
{
	return write_range(c, h, hl, data, at, len, 0, 0, 0, path, NULL, err);
}

int asp__fs_sftp_write_filled(asp_conn *c, const char *path, const void *data, size_t len,
			      const asp_write_options *o, unsigned int lease_s, char **orphan,
			      const asp_fs_fill *fill, asp_fs_written *done, asp_error *err)
{
	int rc;

	if ((rc = sftp_only(c, err)))
		return rc;
	return write_atomic(c, path, data, len, o, lease_s, orphan, fill, 0, done, err);
}
