/*
 * shfs.c - file calls over exec channels, for servers without SFTP. Every
 * call is one shell script (quote.c) run through exec.c: one round trip
 * for the exec request and its reply (plus the channel open), with the
 * data inline in the request (a small write) or on stdin, and the outcome
 * in the script's exit status (ASP_SHFS_* in quote.h), never in the
 * wording of a tool's message.
 */
#include "shfs.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "exec.h"
#include "quote.h"
#include "route.h"
#include "temp.h"

/* A write's data travels inside the exec request while the script stays this small. */
#define INLINE_SCRIPT_MAX 24576u
#define LIST_ENTRY_BYTES 640u   /* a name twice (at most 255 bytes) and a stat line */
#define LIST_STAT_BYTES (LIST_ENTRY_BYTES - 2 * 255u)
#define LINK_DEPTH 8

/* What a script sent: stdout into out (never past cap bytes), the head of stderr. */
typedef struct sink {
	asp_buf *out;
	uint64_t cap;
	int over;       /* stdout went past cap: the script was stopped */
	int nomem;
	char said[512]; /* stderr's first bytes */
	size_t said_len;
} sink;

static int on_output(asp_stream stream, const unsigned char *d, size_t n, void *ud)
{
	sink *k = ud;

	if (stream == ASP_STDERR) {
		size_t room = sizeof(k->said) - k->said_len;
		memcpy(k->said + k->said_len, d, n < room ? n : room);
		k->said_len += n < room ? n : room;
		return 0;
	}
	if (k->over || k->nomem)
		return 1;
	if ((uint64_t)k->out->len + n > k->cap) {
		k->over = 1;
		return 1;
	}
	if (asp__buf_put_capped(k->out, d, n, k->cap)) {
		k->nomem = 1;
		return 1;
	}
	return 0;
}

static int run(asp_conn *c, asp_buf *script, const void *in, size_t inlen, sink *k, int *status,
	       asp_error *err)
{
	int rc;

	if (!script->data)
		return asp__error(err, ASP_ENOMEM, "out of memory");
	asp__conn_route_mark(c, ASP_ROUTE_SHELL);
	rc = asp__exec_file_script(c, (const char *)script->data, in, inlen, on_output, k, status, err);
	asp__buf_free(script);
	if (!rc && k->nomem)
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
	return rc;
}

/* The sandbox cannot hold such a name: say so as SFTP's "bad message" does, before any I/O. */
static int too_long(const char *what, const char *path, asp_error *err)
{
	size_t longest = asp__longest_component(path), full = strlen(path);

	if (longest <= 255 && full < 4096)
		return 0;
	return asp__error(err, ASP_EINVAL, "%s %s: file name too long (%zu bytes, the longest name %zu; "
			  "the usual limits are 4095 and 255)", what, SHOW(path), full, longest);
}

/* A script's exit status that is not 0 or one the caller handles itself. */
static int fail(int status, const sink *k, const char *what, const char *path, asp_error *err)
{
	char said[256];

	asp__show_text(said, sizeof(said), (const unsigned char *)k->said, k->said_len);
	switch (status) {
	case ASP_SHFS_ENOENT:
		return asp__error(err, ASP_ENOENT, "%s %s: no such file or directory", what, SHOW(path));
	case ASP_SHFS_EACCES:
		return asp__error(err, ASP_EACCES, "%s %s: permission denied", what, SHOW(path));
	case ASP_SHFS_EISDIR:
		return asp__error(err, ASP_EISDIR, "%s %s: is a directory", what, SHOW(path));
	case ASP_SHFS_ENOTDIR:
		return asp__error(err, ASP_ENOTDIR, "%s %s: not a directory", what, SHOW(path));
	case ASP_SHFS_EEXIST:
		return asp__error(err, ASP_EEXIST, "%s %s: already exists", what, SHOW(path));
	case ASP_SHFS_ENOTEMPTY:
		return asp__error(err, ASP_ENOTEMPTY, "%s %s: directory not empty", what, SHOW(path));
	case ASP_SHFS_ENOSPC:
		return asp__error(err, ASP_ENOSPC, "%s %s: writing the data failed (the sandbox's disk "
				  "is probably full)%s%s", what, SHOW(path), k->said_len ? ": " : "", said);
	case ASP_SHFS_NOTOOL:
		return asp__error(err, ASP_EPROTO, "%s %s: %s (file calls without SFTP need it)", what,
				  SHOW(path), k->said_len ? said : "a tool is missing in the sandbox");
	default:
		return asp__error(err, ASP_EIO, "%s %s: the shell command failed (exit %d)%s%s", what,
				  SHOW(path), status, k->said_len ? ": " : "", said);
	}
}

/* ------------------------------------------------------------ read */

static int shfs_read(asp_conn *c, const char *path, uint64_t offset, uint64_t limit, uint64_t cap,
		   asp_buf *out, asp_error *err)
{
	asp_buf script = { 0 };
	int over = limit > cap, status = 0, rc;
	uint64_t span = over ? cap + 1 : limit, size_over = 0;
	sink k = { .out = out };

	if ((rc = too_long("read", path, err)))
		return rc;
	/* No file reaches past INT64_MAX (off_t): nothing to read there, but the path is checked. */
	if (offset > (uint64_t)INT64_MAX)
		offset = span = 0;
	if (over && cap <= (uint64_t)INT64_MAX - offset)
		size_over = offset + cap;
	k.cap = span;
	if (asp__shfs_read_script(&script, path, offset, span, size_over))
		asp__buf_free(&script);
	if ((rc = run(c, &script, NULL, 0, &k, &status, err)))
		return rc;
	if (!status && !k.over && !(over && out->len > cap))
		return 0;
	if (status && status != ASP_SHFS_ELIMIT && !k.over)
		return fail(status, &k, "read", path, err);
	asp__buf_free(out); /* nothing is returned: give the memory back now */
	if (!over)
		return asp__error(err, ASP_EPROTO, "read %s: the sandbox sent more than the %llu bytes "
				  "asked for", SHOW(path), (unsigned long long)span);
	return asp__error(err, ASP_ELIMIT, "read %s: the file holds more than %llu bytes, the cap on "
			  "one read; read it in ranges (offset and limit), or raise the cap "
			  "(asp_open_options.max_read_bytes)", SHOW(path), (unsigned long long)cap);
}

/* ------------------------------------------------------------ write */

static int shfs_forget(asp_conn *c, char *const *paths, size_t n, unsigned char *gone, asp_error *err);
static int shfs_rofs(asp_conn *c, const char *path);

/*
 * A script that writes failed with a status a read-only file system also
 * gives (its `test -w` checks say EACCES; a tool's failure, EIO): ask the
 * mount table, and say ASP_EROFS as the SFTP backend does. 0: it is not.
 */
static int rofs_failure(asp_conn *c, int status, const char *what, const char *path, const char *to,
			asp_error *err)
{
	if (!status || (status != ASP_SHFS_EACCES && status != ASP_SHFS_EIO && status != ASP_SHFS_ENOSPC &&
	     (status >= ASP_SHFS_ENOENT && status <= ASP_SHFS_NODIR)) || asp__conn_dead(c) ||
	    shfs_rofs(c, path) != 1)
		return 0;
	return asp__fsops_rofs_error(err, what, path, to);
}

static int write_path(asp_conn *c, const char *path, const void *data, size_t len,
		      const asp_write_options *o, unsigned int lease_s, char **orphan, int depth,
		      asp_error *err)
{
	asp_buf script = { 0 }, said = { 0 };
	char *tmp = NULL;
	int status = 0, rc, inl = 1;
	sink k = { .out = &said, .cap = 8192 };

	if ((rc = too_long("write", path, err)))
		return rc;
	if (!(o->flags & ASP_WRITE_IN_PLACE) && !(tmp = asp__temp_name(path, lease_s)))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	/*
	 * Small data rides in the exec request itself (as printf text, up to 4
	 * bytes a byte); larger data goes through stdin.
	 */
	if (len > INLINE_SCRIPT_MAX / 4 ||
	    asp__shfs_write_script(&script, path, tmp, data, len, o->mode, (o->flags & ASP_WRITE_PARENTS) != 0) ||
	    script.len > INLINE_SCRIPT_MAX) {
		asp__buf_free(&script);
		inl = 0;
		if (asp__shfs_write_script(&script, path, tmp, NULL, len, o->mode, (o->flags & ASP_WRITE_PARENTS) != 0))
			asp__buf_free(&script);
	}
	rc = run(c, &script, inl ? NULL : data, inl ? 0 : len, &k, &status, err);
	if (asp__route_shell_refused(c, rc)) /* the login shell ran none of it: no temp file */
		goto out;
	if (rc) {
		unsigned char gone = 0;
		/*
		 * Stopped (deadline, cancel; its process group is gone) or cut off:
		 * the temp file may be there, with no writer left. Remove it now
		 * when the connection lives (on a bound of its own: the call's
		 * deadline may be over), else remember it for the next call.
		 */
		if (tmp && !asp__conn_dead(c)) {
			asp__conn_begin_op(c, asp__now_ms() + 2000, NULL);
			shfs_forget(c, &tmp, 1, &gone, NULL);
		}
		if (tmp && !gone && orphan && !*orphan) {
			*orphan = tmp;
			tmp = NULL;
		}
		goto out;
	}
	if (status == ASP_SHFS_SYMLINK && tmp && depth < LINK_DEPTH && said.len &&
	    !memchr(said.data, '\0', said.len) && said.data[0] == '/') {
		/* Write through the link: replace the file it points to, not the link. */
		rc = write_path(c, (const char *)said.data, data, len, o, lease_s, orphan, depth + 1, err);
		goto out;
	}
	if (status && status != ASP_SHFS_SYMLINK && (rc = rofs_failure(c, status, "write", path, NULL, err)))
		goto out;
	if (status == ASP_SHFS_ENOENT)
		rc = asp__error(err, ASP_ENOENT, "write %s: the parent directory does not exist", SHOW(path));
	else if (status)
		rc = fail(status == ASP_SHFS_SYMLINK ? ASP_SHFS_EIO : status, &k, "write", path, err);
out:
	asp__buf_free(&said);
	asp__free(tmp);
	return rc;
}

/* The temp file is named by asp__temp_name with lease_s; *done says nothing (the sweep lists with the clock). */
static int shfs_write(asp_conn *c, const char *path, const void *data, size_t len,
		      const asp_write_options *o, unsigned int lease_s, char **orphan, asp_fs_written *done,
		      asp_error *err)
{
	(void)done;
	return write_path(c, path, data, len, o, lease_s, orphan, 0, err);
}

static int shfs_forget(asp_conn *c, char *const *paths, size_t n, unsigned char *gone, asp_error *err)
{
	asp_buf script = { 0 }, said = { 0 };
	sink k = { .out = &said, .cap = 4096 };
	size_t i;
	int status = 0, rc;

	if (asp__shfs_forget_script(&script, paths, n))
		asp__buf_free(&script);
	if ((rc = run(c, &script, NULL, 0, &k, &status, err)))
		goto out;
	for (i = 0; gone && i < n; i++)
		gone[i] = i < said.len && said.data[i] == 'y';
out:
	asp__buf_free(&said);
	return rc;
}

/* ------------------------------------------------------------ metadata */

/* An unsigned number in base 10 or 16 at p[*i], up to a space, newline or the end. */
static int get_num(const unsigned char *p, size_t len, size_t *i, int base, uint64_t *v)
{
	size_t start = *i;

	*v = 0;
	for (; *i < len && p[*i] != ' ' && p[*i] != '\n'; (*i)++) {
		unsigned int d;
		unsigned char ch = p[*i];
		if (ch >= '0' && ch <= '9')
			d = ch - '0';
		else if (base == 16 && ch >= 'a' && ch <= 'f')
			d = ch - 'a' + 10;
		else
			return ASP_EPROTO;
		if (*v > (UINT64_MAX - d) / (unsigned)base)
			return ASP_EPROTO;
		*v = *v * (unsigned)base + d;
	}
	return *i > start ? 0 : ASP_EPROTO;
}

int asp__shfs_stat_decode(const unsigned char *p, size_t len, asp_stat_info *out, size_t *used)
{
	uint64_t mode, size, mtime;
	size_t i = 0;

	if (get_num(p, len, &i, 16, &mode) || i >= len || p[i++] != ' ' ||
	    get_num(p, len, &i, 10, &size) || i >= len || p[i++] != ' ' ||
	    get_num(p, len, &i, 10, &mtime) || mode > 0xffffffffu)
		return ASP_EPROTO;
	out->size = size;
	out->mtime = mtime > 0xffffffffu ? 0xffffffffu : (uint32_t)mtime;
	out->mode = (uint32_t)mode & 07777;
	out->type = asp__fsops_type_of((uint32_t)mode);
	*used = i;
	return 0;
}

static int shfs_stat(asp_conn *c, const char *path, int follow, asp_stat_info *out, asp_error *err)
{
	asp_buf script = { 0 }, said = { 0 };
	sink k = { .out = &said, .cap = 256 };
	size_t used;
	int status = 0, rc;

	if ((rc = too_long("stat", path, err)))
		return rc;
	if (asp__shfs_stat_script(&script, path, follow))
		asp__buf_free(&script);
	if ((rc = run(c, &script, NULL, 0, &k, &status, err)))
		goto out;
	if (status)
		rc = fail(status, &k, "stat", path, err);
	else if (asp__shfs_stat_decode(said.data, said.len, out, &used) || said.len != used + 1 ||
		 said.data[used] != '\n')
		rc = asp__error(err, ASP_EPROTO, "stat %s: the sandbox's stat printed something else "
				"than \"MODE SIZE MTIME\"", SHOW(path));
out:
	asp__buf_free(&said);
	return rc;
}

static int shfs_mkdir(asp_conn *c, const char *path, unsigned int mode, int parents, asp_error *err)
{
	asp_buf script = { 0 }, said = { 0 };
	sink k = { .out = &said, .cap = 256 };
	int status = 0, rc;

	if ((rc = too_long("mkdir", path, err)))
		return rc;
	if (asp__shfs_mkdir_script(&script, path, mode ? mode : 0755, parents))
		asp__buf_free(&script);
	if ((rc = run(c, &script, NULL, 0, &k, &status, err)) || !status)
		goto out;
	if ((rc = rofs_failure(c, status, "mkdir", path, NULL, err)))
		goto out;
	if (parents && status == ASP_SHFS_EACCES)
		rc = asp__error(err, ASP_EACCES, "mkdir %s: could not create it or a parent (a parent "
				"is not writable or not a directory)", SHOW(path));
	else if (parents && status == ASP_SHFS_EEXIST)
		rc = asp__error(err, ASP_EEXIST, "mkdir %s: exists and is not a directory", SHOW(path));
	else
		rc = fail(status, &k, "mkdir", path, err);
out:
	asp__buf_free(&said);
	return rc;
}

static int shfs_remove(asp_conn *c, const char *path, asp_error *err)
{
	asp_buf script = { 0 }, said = { 0 };
	sink k = { .out = &said, .cap = 256 };
	int status = 0, rc;

	if ((rc = too_long("remove", path, err)))
		return rc;
	if (asp__shfs_remove_script(&script, path))
		asp__buf_free(&script);
	if ((rc = run(c, &script, NULL, 0, &k, &status, err)) || !status)
		goto out;
	if ((rc = rofs_failure(c, status, "remove", path, NULL, err)))
		goto out;
	if (status == ASP_SHFS_ENOTEMPTY)
		rc = asp__error(err, ASP_ENOTEMPTY, "remove %s: directory not empty (use recursive)", SHOW(path));
	else
		rc = fail(status, &k, "remove", path, err);
out:
	asp__buf_free(&said);
	return rc;
}

static int shfs_rename(asp_conn *c, const char *from, const char *to, asp_error *err)
{
	asp_buf script = { 0 }, said = { 0 };
	sink k = { .out = &said, .cap = 256 };
	int status = 0, rc;

	if ((rc = too_long("rename", from, err)) || (rc = too_long("rename", to, err)))
		return rc;
	if (asp__shfs_rename_script(&script, from, to))
		asp__buf_free(&script);
	if ((rc = run(c, &script, NULL, 0, &k, &status, err)) || !status)
		goto out;
	/* One file system: across two, rename fails otherwise (EXDEV). */
	if ((rc = rofs_failure(c, status, "rename", from, to, err)))
		goto out;
	if (status == ASP_SHFS_NODIR)
		rc = asp__error(err, ASP_ENOENT, "rename %s to %s: the target's directory does not "
				"exist", SHOW(from), SHOW(to));
	else if (status == ASP_SHFS_EISDIR)
		rc = asp__error(err, ASP_EISDIR, "rename %s to %s: target is a directory", SHOW(from), SHOW(to));
	else if (status == ASP_SHFS_ENOTEMPTY)
		rc = asp__error(err, ASP_ENOTEMPTY, "rename %s to %s: the target is a directory that is "
				"not empty", SHOW(from), SHOW(to));
	else
		rc = fail(status, &k, "rename", status == ASP_SHFS_ENOENT ? from : to, err);
out:
	asp__buf_free(&said);
	return rc;
}

/* ------------------------------------------------------------ list */

static int list_bytes_limit(const char *path, const asp_list_caps *caps, asp_error *err)
{
	return asp__error(err, ASP_ELIMIT, "list %s: the directory's names add up to more than %llu "
			  "bytes, the cap on one listing; list it with a command through asp_exec (e.g. "
			  "find or ls piped to head), or raise the cap (asp_open_options.max_list_bytes)",
			  SHOW(path), (unsigned long long)caps->bytes);
}

int asp__shfs_list_decode(const unsigned char *p, size_t len, const char *path,
			  const asp_list_caps *caps, asp_list_entry **out, size_t *count,
			  asp_error *err)
{
	const unsigned char *names = p, *end = p + len, *q, *rec;
	asp_list_entry *v = NULL;
	size_t max = caps->entries, n = 0, total = 0, i;
	uint64_t held = 0;
	int rc = 0;

	/* The names, up to the empty one. */
	for (q = p; q < end && *q; q += strlen((const char *)q) + 1) {
		if (!memchr(q, '\0', (size_t)(end - q)))
			goto malformed;
		total++;
	}
	if (q >= end)
		goto malformed;
	rec = q + 1;
	if (total > max + 2)
		goto limit;
	if (total && !(v = asp__calloc(total, sizeof(*v))))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	for (q = names, i = 0; i < total; i++, q += strlen((const char *)q) + 1) {
		size_t nl = strlen((const char *)q), used;
		asp_stat_info st;

		if (memchr(q, '/', nl))
			goto malformed;
		/* Its record, unless it is gone (a name the glob kept as is when nothing matched). */
		if (asp__shfs_stat_decode(rec, (size_t)(end - rec), &st, &used) ||
		    (size_t)(end - rec) < used + 1 + nl + 1 || rec[used] != ' ' ||
		    memcmp(rec + used + 1, q, nl) || rec[used + 1 + nl] != '\n')
			continue;
		rec += used + 1 + nl + 1;
		if ((nl == 1 && q[0] == '.') || (nl == 2 && q[0] == '.' && q[1] == '.'))
			continue;
		if (nl > ASP_LIST_NAME_MAX) {
			rc = asp__error(err, ASP_ELIMIT, "list %s: the sandbox's shell sent an entry name "
					"of %zu bytes, longer than any file system makes (the cap is %u "
					"bytes); the listing is refused", SHOW(path), nl, ASP_LIST_NAME_MAX);
			goto fail;
		}
		if (nl > caps->bytes - held)
			goto bytes;
		if (n >= max)
			goto limit;
		if (!(v[n].name = asp__strndup((const char *)q, nl))) {
			rc = asp__error(err, ASP_ENOMEM, "out of memory");
			goto fail;
		}
		v[n++].st = st;
		held += nl;
	}
	if (rec != end)
		goto malformed;
	asp__fsops_sort(v, n);
	*out = v;
	*count = n;
	return 0;
limit:
	rc = asp__error(err, ASP_ELIMIT, "list %s: the directory holds more than %zu entries, the cap "
			"on one listing; list it with a command through asp_exec (e.g. find or ls "
			"piped to head), or raise the cap (asp_open_options.max_list_entries)",
			SHOW(path), max);
	goto fail;
bytes:
	rc = list_bytes_limit(path, caps, err);
	goto fail;
malformed:
	rc = asp__error(err, ASP_EPROTO, "list %s: the listing the sandbox's shell sent is malformed",
			SHOW(path));
fail:
	asp__fsops_list_free(v, n);
	return rc;
}

static int shfs_list(asp_conn *c, const char *path, const asp_list_caps *caps, asp_list_entry **out,
		   size_t *count, asp_error *err)
{
	asp_buf script = { 0 }, said = { 0 };
	sink k = { .out = &said };
	size_t max = caps->entries;
	uint64_t by_names;
	int status = 0, rc;

	if ((rc = too_long("list", path, err)))
		return rc;
	/*
	 * Each name comes twice, with a stat line: the output holds no more than
	 * the entries' or the names' cap allows, whichever is less.
	 */
	k.cap = ((uint64_t)max + 2) * LIST_ENTRY_BYTES;
	by_names = ((uint64_t)max + 2) * LIST_STAT_BYTES +
		   (caps->bytes < UINT64_MAX / 4 ? 2 * caps->bytes : UINT64_MAX / 2);
	if (by_names < k.cap)
		k.cap = by_names;
	k.cap += 4096;
	if (asp__shfs_list_script(&script, path, max))
		asp__buf_free(&script);
	if ((rc = run(c, &script, NULL, 0, &k, &status, err)))
		goto out;
	if (k.over && status != ASP_SHFS_ELIMIT && k.cap - 4096 == by_names)
		rc = list_bytes_limit(path, caps, err);
	else if (status == ASP_SHFS_ELIMIT || k.over)
		rc = asp__error(err, ASP_ELIMIT, "list %s: the directory holds more than %zu entries, the "
				"cap on one listing; list it with a command through asp_exec (e.g. find or "
				"ls piped to head), or raise the cap (asp_open_options.max_list_entries)",
				SHOW(path), max);
	else if (status == ASP_SHFS_ENOTDIR)
		rc = asp__error(err, ASP_ENOTDIR, "list %s: not a directory", SHOW(path));
	else if (status)
		rc = fail(status, &k, "list", path, err);
	else
		rc = asp__shfs_list_decode(said.data, said.len, path, caps, out, count, err);
out:
	asp__buf_free(&said);
	return rc;
}

/* ------------------------------------------------------------ the sweep's questions */

/* "DIGITS\n" at the front: the server's clock (date +%s). */
static int get_clock(const unsigned char *p, size_t len, uint64_t *now, size_t *used)
{
	size_t i = 0;

	if (get_num(p, len, &i, 10, now) || i >= len || p[i] != '\n')
		return ASP_EPROTO;
	*used = i + 1;
	return 0;
}

static int shfs_temps(asp_conn *c, const char *dir, size_t max, asp_list_entry **out, size_t *count,
		    uint64_t *now_s)
{
	asp_buf script = { 0 }, said = { 0 };
	sink k = { .out = &said };
	asp_list_caps caps = { max, (uint64_t)max * ASP_LIST_NAME_MAX };
	size_t used = 0;
	int status = 0, rc;

	*out = NULL;
	*count = 0;
	*now_s = 0;
	k.cap = ((uint64_t)max + 2) * LIST_ENTRY_BYTES + 64;
	if (asp__shfs_temps_script(&script, dir, max))
		asp__buf_free(&script);
	if ((rc = run(c, &script, NULL, 0, &k, &status, NULL)))
		goto out;
	rc = ASP_EPROTO;
	if (status || k.over || !said.len || get_clock(said.data, said.len, now_s, &used))
		goto out;
	/* Nothing after the clock: no such directory, or more names than max. */
	rc = used == said.len ? 0 : asp__shfs_list_decode(said.data + used, said.len - used, dir, &caps,
							   out, count, NULL);
out:
	asp__buf_free(&said);
	return rc;
}

static int shfs_lstat_many(asp_conn *c, char *const *paths, size_t n, asp_stat_info *st,
			 unsigned char *found, uint64_t *now_s)
{
	asp_buf script = { 0 }, said = { 0 };
	sink k = { .out = &said, .cap = 64 + 64 * (uint64_t)n };
	size_t at = 0, used, i;
	int status = 0, rc;

	*now_s = 0;
	if (asp__shfs_lstat_many_script(&script, paths, n))
		asp__buf_free(&script);
	if ((rc = run(c, &script, NULL, 0, &k, &status, NULL)))
		goto out;
	rc = ASP_EPROTO;
	if (status || k.over || get_clock(said.data, said.len, now_s, &at))
		goto out;
	for (i = 0; i < n; i++) {
		if (said.len - at >= 2 && said.data[at] == '-' && said.data[at + 1] == '\n') {
			found[i] = 0;
			at += 2;
			continue;
		}
		if (asp__shfs_stat_decode(said.data + at, said.len - at, &st[i], &used) ||
		    at + used >= said.len || said.data[at + used] != '\n')
			goto out;
		found[i] = 1;
		at += used + 1;
	}
	rc = at == said.len ? 0 : ASP_EPROTO;
out:
	asp__buf_free(&said);
	return rc;
}

/* ------------------------------------------------------------ read-only file systems */

static int shfs_rofs(asp_conn *c, const char *path)
{
	asp_buf script = { 0 }, said = { 0 };
	sink k = { .out = &said, .cap = 64 };
	int status = 0, ro;

	if (asp__shfs_rofs_script(&script, path))
		asp__buf_free(&script);
	ro = !run(c, &script, NULL, 0, &k, &status, NULL) && !status && said.len == 3 &&
	     !memcmp(said.data, "ro\n", 3);
	asp__buf_free(&said);
	return ro;
}

const asp_fsops asp__shfs_ops = {
	.name = "shell",
	.read = shfs_read,
	.write = shfs_write,
	.forget = shfs_forget,
	.stat = shfs_stat,
	.mkdir = shfs_mkdir,
	.remove = shfs_remove,
	.rename = shfs_rename,
	.list = shfs_list,
	.temps = shfs_temps,
	.lstat_many = shfs_lstat_many,
	.rofs = shfs_rofs,
};
