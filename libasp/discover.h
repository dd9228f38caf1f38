/*
 * discover.h - which configuration file a call uses, and whether a
 * discovered one can be trusted.
 *
 * libc only (no libasp allocator, no asp_error): asp-exec's front compiles
 * discover.c too, so that it finds the same file libasp would without
 * linking libcrypto or libssh2.
 */
#ifndef ASP_DISCOVER_H
#define ASP_DISCOVER_H

#include <stddef.h>
#include <sys/types.h>

#define ASP_CONFIG_NAME ".asp.json"

/*
 * $ASP_CONFIG (when set and not empty: it must name a regular file and is
 * the caller's choice, so it is not judged), else the first .asp.json in
 * start_dir (NULL: the current directory) or a parent. A discovered file
 * is used only when it and its directory belong to the current user or
 * root and only their owner can write them (for a symlink: the link, its
 * directory, the file it points to and that file's directory), unless its
 * directory is listed in $ASP_SAFE_DIRS; an untrusted one stops the search
 * rather than being skipped.
 *
 * 0 with the absolute path in out; else ASP_ENOCONFIG (nothing found,
 * ASP_CONFIG names nothing usable) or ASP_ECONFIG (a .asp.json that cannot
 * be used or is not trusted), with the message in why.
 */
int asp__discover(char *out, size_t outlen, const char *start_dir, char *why, size_t whylen);

/* "name (uid N)", or "uid N" when the uid has no name; returns buf. */
const char *asp__user_text(char *buf, size_t n, uid_t uid);

/* "a directory", "a FIFO", ... for messages about a file that is not regular. */
const char *asp__file_type(mode_t mode);

#endif
