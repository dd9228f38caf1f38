/*
 * shfs.h - file calls over exec channels, for servers without an SFTP
 * subsystem (shfs.c): the shell backend of fsops.h (asp__shfs_ops). Each
 * call is one POSIX shell script (quote.c builds them), run through exec.c
 * under the call's deadline and cancel token. Same results, error codes
 * and caps as the SFTP backend. Here: the decoders, which do no I/O.
 */
#ifndef ASP_SHFS_H
#define ASP_SHFS_H

#include "fsops.h"

/*
 * Decode a listing script's output (quote.h): the names, an empty name,
 * then "HEX SIZE MTIME NAME\n" records in the same order, a name without
 * its record (gone meanwhile) left out. Skips "." and "..". ASP_EPROTO
 * when malformed, ASP_ELIMIT past any of caps (fsops.h). Sorted by name. No I/O.
 */
int asp__shfs_list_decode(const unsigned char *p, size_t len, const char *path,
			  const asp_list_caps *caps, asp_list_entry **out, size_t *count,
			  asp_error *err);

/* Decode "HEX SIZE MTIME" (a stat line, up to the first space after MTIME or the end). */
int asp__shfs_stat_decode(const unsigned char *p, size_t len, asp_stat_info *out, size_t *used);

#endif
