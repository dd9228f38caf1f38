/*
 * fs.h - filesystem operations on one connection, over the SFTP engine.
 * Paths are absolute (sandbox.c resolves them against the workspace).
 */
#ifndef ASP_FS_H
#define ASP_FS_H

#include "conn.h"

/* One directory entry of asp_list. */
typedef struct asp_list_entry {
	char *name;
	asp_stat_info st;
} asp_list_entry;

/*
 * Read [offset, offset + limit) into out. At most cap bytes: when limit is
 * larger and the file holds more than cap bytes from offset, ASP_ELIMIT
 * (out freed). out never grows past cap + 1 bytes, and no READ goes out
 * past offset + cap + 1.
 */
int asp__fs_read(asp_conn *c, const char *path, uint64_t offset, uint64_t limit, uint64_t cap,
		 asp_buf *out, asp_error *err);

/*
 * Temp-file bookkeeping of one handle (thread-safe): the lease written into
 * its temp names (io_timeout_ms in whole seconds), the directories it has
 * swept for stale temp files, and the temp files it saw that were not stale
 * yet. See "temp files" in fs.c for the rule.
 */
typedef struct asp_sweep asp_sweep;

int asp__sweep_new(asp_sweep **out, unsigned int io_timeout_ms);
void asp__sweep_free(asp_sweep *sw);
/* The lease written into this handle's temp names, in seconds. */
unsigned int asp__sweep_lease(asp_sweep *sw);
/* 1 when a remembered temp file may have become stale (asp__fs_sweep_due would look). */
int asp__sweep_due(asp_sweep *sw);
/* LSTAT the remembered temp files that may be stale now and remove those that are. Best effort. */
void asp__fs_sweep_due(asp_conn *c, asp_sweep *sw);

/*
 * Is name (len bytes, a directory entry) an atomic write's temp file:
 * ".NAME.asp-" 12 lowercase hex digits, optionally "-" and a lease (1..9
 * digits, no leading zero), ".tmp", NAME 1..100 bytes? *lease_s gets the
 * lease, 0 for a name without one (earlier versions). No I/O.
 */
int asp__fs_temp_parse(const char *name, size_t len, uint32_t *lease_s);
/* The path of a new temp file for an atomic write of path (random name, see fs.c); NULL: no memory. */
char *asp__fs_temp_name(const char *path, unsigned int lease_s);
/* Is a temp file with this mtime and lease stale at server time now_s (no live writer)? */
int asp__fs_temp_stale(uint32_t mtime, uint32_t lease_s, uint64_t now_s);

/*
 * Write a file. On an atomic write that dies with the connection after the
 * temporary file may exist, *orphan receives its path (asp__free) so that
 * a later call can remove it. After an atomic write, the target's
 * directory is swept for stale temp files (the first time sw sees it) and
 * sw's due ones are looked at. sw may be NULL.
 */
int asp__fs_write(asp_conn *c, const char *path, const void *data, size_t len,
		  const asp_write_options *o, char **orphan, asp_sweep *sw, asp_error *err);

/*
 * Remove leftover temporary files and wait for the replies; gone[i] (may
 * be NULL) is set to 1 when paths[i] is gone (removed, or was not there).
 */
int asp__fs_forget(asp_conn *c, char *const *paths, size_t n, unsigned char *gone, asp_error *err);

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

int asp__fs_list(asp_conn *c, const char *path, const asp_list_caps *caps, asp_list_entry **out,
		 size_t *count, asp_error *err);

/*
 * Decode one SSH_FXP_NAME reply body (after the id) of a listing of path,
 * appending to *v (*n entries, room for *cap; grown as needed, never past
 * caps->entries) and adding the names' bytes to *held. Skips "." and "..".
 * ASP_EPROTO for a malformed body or a name that is empty or holds '/' or
 * NUL; ASP_ELIMIT past any of caps. No I/O: the tests and the fuzzer call
 * it on crafted bytes. On failure the caller frees *v
 * (asp__fs_list_free(*v, *n)).
 */
int asp__fs_list_decode(const unsigned char *p, size_t len, const char *path,
			const asp_list_caps *caps, asp_list_entry **v, size_t *n, size_t *cap,
			uint64_t *held, asp_error *err);
void asp__fs_list_free(asp_list_entry *e, size_t count);

/* The asp_file_type of an st_mode (type bits). */
uint32_t asp__fs_type_of(uint32_t mode);

/* ------------------------------------------------------------ ranges, for bulk.c */

/*
 * A read of [offset, offset + limit) through one handle: the READs in
 * flight (a window that grows, so a small file costs one batch) and the
 * FSTAT that tells a file over the cap at once.
 */
#define ASP_FS_MAX_INFLIGHT 64u /* READs of 64 KiB: 4 MiB in flight, inside the 16 MiB channel window */

typedef struct asp_fs_reader {
	size_t inflight, window;
	uint32_t ids[ASP_FS_MAX_INFLIGHT], lens[ASP_FS_MAX_INFLIGHT];
	uint64_t offs[ASP_FS_MAX_INFLIGHT];
	uint64_t offset, limit, next, end, cap;
	int eof, skip, fstat_due, fstat_pending;
	uint32_t fstat_id;
} asp_fs_reader;

/*
 * Open path for reading and STAT it in the same round trip, with the read's
 * first READs behind them when the handle can be guessed (see fs.c).
 * *sized = 1 when st holds the size (the path exists and the server said
 * its size). On success the handle (h: 256 bytes) is open: hand it and rd
 * to asp__fs_read_handle, or call asp__fs_read_elsewhere and read it in
 * ranges, then close it with asp__fs_close_handle.
 */
int asp__fs_open_read(asp_conn *c, const char *path, uint64_t offset, uint64_t limit,
		      uint64_t cap, asp_fs_reader *rd, unsigned char *h, size_t *hl, asp_stat_info *st,
		      int *sized, asp_error *err);
/* The read asp__fs_open_read began, as asp__fs_read; closes the handle. */
int asp__fs_read_handle(asp_conn *c, asp_fs_reader *rd, const unsigned char *h, size_t hl,
			const char *path, asp_buf *out, asp_error *err);
/* The read goes another way: drop the replies of the READs sent ahead. */
void asp__fs_read_elsewhere(asp_conn *c);
/* Open an existing file for reading (write = 0) or for writing without truncating it. */
int asp__fs_open_handle(asp_conn *c, const char *path, int write, unsigned char *h, size_t *hl,
			asp_error *err);
/* CLOSE a handle; its reply is dropped later. Nothing on a dead connection. */
void asp__fs_close_handle(asp_conn *c, const unsigned char *h, size_t hl);
/*
 * Read exactly [at, at + len) into dst (pipelined; short reads are asked
 * again). The end of the file before at + len is ASP_EIO: the file became
 * shorter than the size the caller saw.
 */
int asp__fs_read_into(asp_conn *c, const unsigned char *h, size_t hl, const char *path,
		      uint64_t at, size_t len, unsigned char *dst, asp_error *err);
/* WRITE data at file offset at (pipelined) and wait for every reply; the first failure. */
int asp__fs_write_at(asp_conn *c, const unsigned char *h, size_t hl, const char *path,
		     const void *data, uint64_t at, size_t len, asp_error *err);

/*
 * Who writes an atomic write's data: fn gets the temp file's open handle on
 * c and its path, and returns once every byte is written (on c or on other
 * connections, at their offsets), or with the first failure.
 */
typedef struct asp_fs_fill {
	int (*fn)(void *ctx, asp_conn *c, const unsigned char *h, size_t hl, const char *tmp,
		  asp_error *err);
	void *ctx;
} asp_fs_fill;

/*
 * An atomic write (asp__fs_write without ASP_WRITE_IN_PLACE) whose data fill writes;
 * the temp file, mode, rename, cleanup and orphan rules are asp__fs_write's.
 */
int asp__fs_write_filled(asp_conn *c, const char *path, const void *data, size_t len,
			 const asp_write_options *o, char **orphan, asp_sweep *sw,
			 const asp_fs_fill *fill, asp_error *err);

#endif
