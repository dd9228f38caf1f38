/*
 * temp.h - atomic writes' temp file names and their staleness (temp.c).
 * No I/O.
 */
#ifndef ASP_TEMP_H
#define ASP_TEMP_H

#include "common.h"

/*
 * Is name (len bytes, a directory entry) an atomic write's temp file:
 * ".NAME.asp-" 12 lowercase hex digits, optionally "-" and a lease (1..9
 * digits, no leading zero), ".tmp", NAME 1..100 bytes? *lease_s gets the
 * lease, 0 for a name without one (earlier versions).
 */
int asp__temp_parse(const char *name, size_t len, uint32_t *lease_s);
/* The path of a new temp file for an atomic write of path (random name, see temp.c); NULL: no memory. */
char *asp__temp_name(const char *path, unsigned int lease_s);
/* Is a temp file with this mtime and lease stale at server time now_s (no live writer)? */
int asp__temp_stale(uint32_t mtime, uint32_t lease_s, uint64_t now_s);
/* Seconds until a temp file with this mtime and lease becomes stale (at least 1). */
uint64_t asp__temp_stale_in(uint32_t mtime, uint32_t lease_s, uint64_t now_s);
/* The longest lease a temp name carries. */
#define ASP_TEMP_LEASE_MAX 999999999u

#endif
