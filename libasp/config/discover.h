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
 * is used only when it belongs to the current user or root and only its
 * owner can write it, and every directory from / down to it belongs to
 * the current user or root and only its owner can write it or it is
 * sticky (for a symlink: the link and the directories above it, then the
 * file it points to and the directories above that), except what
 * $ASP_SAFE_DIRS lists: a listed directory passes, and so does the file in
 * it. An untrusted one stops the search rather than being skipped.
 *
 * The directories are opened one by one without following symlinks and
 * judged on those descriptors, and the file is opened in the directory
 * judged and judged on its descriptor: *fd is that descriptor (read-only,
 * close-on-exec), which the caller reads and closes. Reopening `out`
 * instead would undo all of this: `out` is for messages.
 *
 * 0 with *fd and the absolute path in out; else *fd is -1 and
 * ASP_ENOCONFIG (nothing found, ASP_CONFIG names nothing usable) or
 * ASP_ECONFIG (a .asp.json that cannot be used or is not trusted), with
 * the message in why.
 */
int asp__discover(int *fd, char *out, size_t outlen, const char *start_dir, char *why,
		  size_t whylen);

/* "name (uid N)", or "uid N" when the uid has no name; returns buf. */
const char *asp__user_text(char *buf, size_t n, uid_t uid);

/* "a directory", "a FIFO", ... for messages about a file that is not regular. */
const char *asp__file_type(mode_t mode);

#endif
