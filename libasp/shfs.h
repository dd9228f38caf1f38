/*
 * shfs.h - file calls over exec channels, for servers without an SFTP
 * subsystem: each call is one POSIX shell script (quote.c builds them),
 * run through exec.c under the call's deadline and cancel token. Same
 * results, error codes and caps as fs.c; paths are absolute.
 */
#ifndef ASP_SHFS_H
#define ASP_SHFS_H

#include "fs.h"

int asp__shfs_read(asp_conn *c, const char *path, uint64_t offset, uint64_t limit, uint64_t cap,
		   asp_buf *out, asp_error *err);
/*
 * An atomic write's temp file is named by asp__fs_temp_name with lease_s
 * (how long the sweep leaves it alone); in place there is none. *orphan as
 * in fs.h.
 */
int asp__shfs_write(asp_conn *c, const char *path, const void *data, size_t len,
		    const asp_write_options *o, unsigned int lease_s, char **orphan, asp_error *err);
int asp__shfs_forget(asp_conn *c, char *const *paths, size_t n, unsigned char *gone, asp_error *err);
int asp__shfs_stat(asp_conn *c, const char *path, int follow, asp_stat_info *out, asp_error *err);
int asp__shfs_mkdir(asp_conn *c, const char *path, unsigned int mode, int parents, asp_error *err);
int asp__shfs_remove(asp_conn *c, const char *path, asp_error *err);
int asp__shfs_rename(asp_conn *c, const char *from, const char *to, asp_error *err);
int asp__shfs_list(asp_conn *c, const char *path, const asp_list_caps *caps, asp_list_entry **out,
		   size_t *count, asp_error *err);

/*
 * For the sweep (fs.c), best effort, quietly: the entries of dir whose
 * names look like temp files (at most max; none when more) and the
 * server's clock (*now_s, 0 when unknown); the lstat of each path (found[i]
 * 0 when it is not there) and the server's clock.
 */
int asp__shfs_temps(asp_conn *c, const char *dir, size_t max, asp_list_entry **out, size_t *count,
		    uint64_t *now_s);
int asp__shfs_lstat_many(asp_conn *c, char *const *paths, size_t n, asp_stat_info *st,
			 unsigned char *found, uint64_t *now_s);

/*
 * Decode a listing script's output (quote.h): the names, an empty name,
 * then "HEX SIZE MTIME NAME\n" records in the same order, a name without
 * its record (gone meanwhile) left out. Skips "." and "..". ASP_EPROTO
 * when malformed, ASP_ELIMIT past any of caps (fs.h). Sorted by name. No I/O.
 */
int asp__shfs_list_decode(const unsigned char *p, size_t len, const char *path,
			  const asp_list_caps *caps, asp_list_entry **out, size_t *count,
			  asp_error *err);

/* Decode "HEX SIZE MTIME" (a stat line, up to the first space after MTIME or the end). */
int asp__shfs_stat_decode(const unsigned char *p, size_t len, asp_stat_info *out, size_t *used);

#endif
