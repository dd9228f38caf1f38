/*
 * fsops.h - the one interface of the two file transports: a table of the
 * file calls (curl's protocol handler tables), implemented over SFTP
 * (fs_sftp.c, asp__fs_sftp_ops) and over shell commands on exec channels
 * (shfs.c, asp__shfs_ops). fs.c picks a table per connection and calls
 * through it; the backends call nothing above this header. Paths are
 * absolute. Also the types and helpers both backends share (fsops.c).
 */
#ifndef ASP_FSOPS_H
#define ASP_FSOPS_H

#include "conn.h"

/* A path for a message, escaped and shortened (asp__path_show); valid to the end of the statement's block. */
#define SHOW(p) asp__path_show((char[ASP_PATH_SHOW_MAX + 4]){ 0 }, (p))

/* One directory entry of a listing. */
typedef struct asp_list_entry {
	char *name;
	asp_stat_info st;
} asp_list_entry;

/*
 * What one listing may hold (asp_open_options.max_list_entries and
 * max_list_bytes): at most `entries` entries whose names add up to at most
 * `bytes` bytes, no name longer than ASP_LIST_NAME_MAX bytes (no file system
 * makes one). Past any of them a listing is ASP_ELIMIT.
 */
#define ASP_LIST_NAME_MAX 4096u
typedef struct asp_list_caps {
	size_t entries;
	uint64_t bytes;
} asp_list_caps;

/* What an atomic write tells the temp-file sweep (sweep.c) that runs after it. */
typedef struct asp_fs_written {
	char *path;     /* the file renamed into when a link was followed (asp__free), else NULL */
	uint64_t now_s; /* the server's clock after the write, 0 when the backend did not learn it */
} asp_fs_written;

/*
 * The slots, X(name, parameters): every file call a transport implements.
 * The table's fields come from this list, and tests/unit/test_fsops.c walks
 * it, so a slot cannot be added without both backends filling it.
 *
 * read      [offset, offset + limit) into out, at most cap bytes (past it ASP_ELIMIT, out freed).
 * write     a whole file, atomic (temp file named by asp__temp_name with lease_s, renamed over
 *           path) or in place (ASP_WRITE_IN_PLACE). *orphan as in fs.h; *done is filled for the sweep.
 * forget    remove leftover temp files and wait; gone[i] (may be NULL) = 1 when paths[i] is gone.
 * stat      STAT (follow) or LSTAT.
 * mkdir     mode 0 is 0755; parents: mkdir -p.
 * remove    a file or an empty directory.
 * rename    replacing the target (a file, or an empty directory with the shell's mv).
 * list      the entries but "." and "..", sorted by name, within caps.
 * temps     for the sweep, best effort and quietly: the entries of dir whose names are temp
 *           names (asp__temp_parse), regular files with an mtime; at most max entries looked at.
 *           *now_s: in, the server's clock the caller knows (0: none); out, the server's clock
 *           (a backend that cannot tell leaves it). Nonzero when the listing failed; ASP_EINVAL
 *           when nothing was asked (no clock to judge by): the directory is not swept.
 * lstat_many for the sweep, best effort and quietly: LSTAT each path (found[i] = 0 when it is not
 *           there or says no mtime); *now_s as for temps. Nonzero when nothing was learned.
 * rofs      after a call that writes failed: 1 when the file system holding path (or its nearest
 *           existing ancestor) is read-only, 0 when it is not or that cannot be told. Quiet.
 */
#define ASP_FSOPS_SLOTS(X)                                                                               \
	X(read, (asp_conn *c, const char *path, uint64_t offset, uint64_t limit, uint64_t cap,        \
		 asp_buf *out, asp_error *err))                                                      \
	X(write, (asp_conn *c, const char *path, const void *data, size_t len,                        \
		  const asp_write_options *o, unsigned int lease_s, char **orphan, asp_fs_written *done, \
		  asp_error *err))                                                                   \
	X(forget, (asp_conn *c, char *const *paths, size_t n, unsigned char *gone, asp_error *err))   \
	X(stat, (asp_conn *c, const char *path, int follow, asp_stat_info *out, asp_error *err))      \
	X(mkdir, (asp_conn *c, const char *path, unsigned int mode, int parents, asp_error *err))     \
	X(remove, (asp_conn *c, const char *path, asp_error *err))                                    \
	X(rename, (asp_conn *c, const char *from, const char *to, asp_error *err))                    \
	X(list, (asp_conn *c, const char *path, const asp_list_caps *caps, asp_list_entry **out,      \
		 size_t *count, asp_error *err))                                                     \
	X(temps, (asp_conn *c, const char *dir, size_t max, asp_list_entry **out, size_t *count,      \
		  uint64_t *now_s))                                                                  \
	X(lstat_many, (asp_conn *c, char *const *paths, size_t n, asp_stat_info *st,                  \
		       unsigned char *found, uint64_t *now_s))                                              \
	X(rofs, (asp_conn *c, const char *path))

#define ASP_FSOPS_FIELD(name, params) int(*name) params;
typedef struct asp_fsops {
	const char *name; /* "sftp" or "shell", for messages */
	ASP_FSOPS_SLOTS(ASP_FSOPS_FIELD)
} asp_fsops;
#undef ASP_FSOPS_FIELD

extern const asp_fsops asp__fs_sftp_ops; /* fs_sftp.c */
extern const asp_fsops asp__shfs_ops;    /* shfs.c */

/* The asp_file_type of an st_mode (type bits). */
uint32_t asp__fsops_type_of(uint32_t mode);
/* Sort a listing by name. */
void asp__fsops_sort(asp_list_entry *v, size_t n);
void asp__fsops_list_free(asp_list_entry *e, size_t count);
/*
 * ASP_EROFS with the one message both transports give: "WHAT PATH: ..." or,
 * with to (rename), "WHAT PATH to TO: ...".
 */
int asp__fsops_rofs_error(asp_error *err, const char *what, const char *path, const char *to);

#endif
