/*
 * fs.h - the file calls of one connection (fs.c). Each picks the
 * connection's file transport (an ops table of fsops.h: SFTP or shell
 * commands), calls through it, and runs the temp-file sweep (sweep.h)
 * after atomic writes. Paths are absolute (sandbox.c resolves them against
 * the workspace).
 */
#ifndef ASP_FS_H
#define ASP_FS_H

#include "fsops.h"
#include "sweep.h"

/*
 * Read [offset, offset + limit) into out. At most cap bytes: when limit is
 * larger and the file holds more than cap bytes from offset, ASP_ELIMIT
 * (out freed). out never grows past cap + 1 bytes, and no READ goes out
 * past offset + cap + 1.
 */
int asp__fs_read(asp_conn *c, const char *path, uint64_t offset, uint64_t limit, uint64_t cap,
		 asp_buf *out, asp_error *err);

/*
 * Write a file. On an atomic write that dies with the connection after the
 * temporary file may exist, *orphan receives its path (asp__free) so that
 * a later call can remove it. After an atomic write, the target's
 * directory is swept for stale temp files (the first time sw sees it) and
 * sw's due ones are looked at. sw may be NULL.
 */
int asp__fs_write(asp_conn *c, const char *path, const void *data, size_t len,
		  const asp_write_options *o, char **orphan, asp_sweep *sw, asp_error *err);

/* An atomic write over SFTP whose data fill writes (fs_sftp.h, for bulk.c); the sweep as asp__fs_write. */
struct asp_fs_fill;
int asp__fs_write_filled(asp_conn *c, const char *path, const void *data, size_t len,
			 const asp_write_options *o, char **orphan, asp_sweep *sw,
			 const struct asp_fs_fill *fill, asp_error *err);

/*
 * Remove leftover temporary files and wait for the replies; gone[i] (may
 * be NULL) is set to 1 when paths[i] is gone (removed, or was not there).
 */
int asp__fs_forget(asp_conn *c, char *const *paths, size_t n, unsigned char *gone, asp_error *err);
/* LSTAT sw's remembered temp files that may be stale now and remove those that are. Best effort. */
void asp__fs_sweep_due(asp_conn *c, asp_sweep *sw);

int asp__fs_stat(asp_conn *c, const char *path, int follow, asp_stat_info *out, asp_error *err);
int asp__fs_mkdir(asp_conn *c, const char *path, unsigned int mode, int parents, asp_error *err);
/* Remove a file or an empty directory. */
int asp__fs_remove(asp_conn *c, const char *path, asp_error *err);
/*
 * Remove a directory tree with one remote `rm -rf`, run as a command, so
 * that cancel (may be NULL) and the call's deadline (asp__now_ms clock;
 * timeout_ms is the call's timeout, for the message) stop the remote rm
 * too. *started as for asp__exec_run.
 */
int asp__fs_remove_tree(asp_conn *c, const char *path, asp_cancel *cancel, uint64_t deadline,
			unsigned int timeout_ms, int *started, asp_error *err);
int asp__fs_rename(asp_conn *c, const char *from, const char *to, asp_error *err);
/* A listing within caps (fsops.h), sorted by name; free it with asp__fsops_list_free. */
int asp__fs_list(asp_conn *c, const char *path, const asp_list_caps *caps, asp_list_entry **out,
		 size_t *count, asp_error *err);

#endif
