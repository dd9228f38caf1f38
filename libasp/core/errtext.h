/*
 * errtext.h - errno as text, safe from many threads at once.
 *
 * strerror() may return a static buffer that another thread overwrites;
 * libasp is called from many threads, so its messages use this instead:
 * asp__errno_text(errno, buf, n), or ASP_ERRNO_TEXT(errno) inside a call's
 * arguments, whose buffer (a compound literal) lives as long as the
 * enclosing block. libc only: asp-exec's front compiles discover.c alone.
 */
#ifndef ASP_ERRTEXT_H
#define ASP_ERRTEXT_H

#include <stddef.h>
#include <string.h>

static inline const char *asp__errno_text(int e, char *buf, size_t n)
{
	return strerror_r(e, buf, n); /* the GNU variant (_GNU_SOURCE): it returns the text */
}

#define ASP_ERRNO_TEXT(e) asp__errno_text((e), (char[128]){ 0 }, 128)

#endif
