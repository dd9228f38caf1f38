/*
 * fs_sftp.h - file calls over SFTP (fs_sftp.c): the SFTP backend of
 * fsops.h (asp__fs_sftp_ops), and the ranged calls with which bulk.c
 * spreads one large read or write over several connections. Paths are
 * absolute.
 */
#ifndef ASP_FS_SFTP_H
#define ASP_FS_SFTP_H

#include "fsops.h"

/*
 * Decode one SSH_FXP_NAME reply body (after the id) of a listing of path,
 * appending to *v (*n entries, room for *cap; grown as needed, never past
 * caps->entries) and adding the names' bytes to *held. Skips "." and "..".
 * ASP_EPROTO for a malformed body or a name that is empty or holds '/' or
 * NUL; ASP_ELIMIT past any of caps. No I/O: the tests and the fuzzer call
 * it on crafted bytes. On failure the caller frees *v
 * (asp__fsops_list_free(*v, *n)).
 */
int asp__fs_sftp_list_decode(const unsigned char *p, size_t len, const char *path,
			     const asp_list_caps *caps, asp_list_entry **v, size_t *n, size_t *cap,
			     uint64_t *held, asp_error *err);

/* ------------------------------------------------------------ ranges, for bulk.c */

/*
 * bulk.c calls these only on a connection whose file calls go over SFTP
 * (each that opens something checks: an internal error otherwise).
 *
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
 * first READs behind them when the handle can be guessed (see fs_sftp.c).
 * *sized = 1 when st holds the size (the path exists and the server said
 * its size). On success the handle (h: 256 bytes) is open: hand it and rd
 * to asp__fs_sftp_read_handle, or call asp__fs_sftp_read_elsewhere and read
 * it in ranges, then close it with asp__fs_sftp_close_handle.
 */
int asp__fs_sftp_open_read(asp_conn *c, const char *path, uint64_t offset, uint64_t limit,
			   uint64_t cap, asp_fs_reader *rd, unsigned char *h, size_t *hl, asp_stat_info *st,
			   int *sized, asp_error *err);
/* The read asp__fs_sftp_open_read began, as the read slot does it; closes the handle. */
int asp__fs_sftp_read_handle(asp_conn *c, asp_fs_reader *rd, const unsigned char *h, size_t hl,
			     const char *path, asp_buf *out, asp_error *err);
/* The read goes another way: drop the replies of the READs sent ahead. */
void asp__fs_sftp_read_elsewhere(asp_conn *c);
/* Open an existing file for reading (write = 0) or for writing without truncating it. */
int asp__fs_sftp_open_handle(asp_conn *c, const char *path, int write, unsigned char *h, size_t *hl,
			     asp_error *err);
/* CLOSE a handle; its reply is dropped later. Nothing on a dead connection. */
void asp__fs_sftp_close_handle(asp_conn *c, const unsigned char *h, size_t hl);
/*
 * Read exactly [at, at + len) into dst (pipelined; short reads are asked
 * again). The end of the file before at + len is ASP_EIO: the file became
 * shorter than the size the caller saw.
 */
int asp__fs_sftp_read_into(asp_conn *c, const unsigned char *h, size_t hl, const char *path,
			   uint64_t at, size_t len, unsigned char *dst, asp_error *err);
/* WRITE data at file offset at (pipelined) and wait for every reply; the first failure. */
int asp__fs_sftp_write_at(asp_conn *c, const unsigned char *h, size_t hl, const char *path,
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
 * The write slot's atomic write whose data fill writes; the temp file,
 * mode, rename, cleanup, orphan and done rules are the write slot's.
 */
int asp__fs_sftp_write_filled(asp_conn *c, const char *path, const void *data, size_t len,
			      const asp_write_options *o, unsigned int lease_s, char **orphan,
			      const asp_fs_fill *fill, asp_fs_written *done, asp_error *err);

#endif
