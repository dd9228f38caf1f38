/*
 * log.h - the trace (asp_open_options.log_fn, $ASP_DEBUG): one line per
 * connect, host key check, authentication, call, retry, reconnect and
 * pool change. asp__log costs one test when the trace is off: its
 * arguments are not even evaluated. A line never holds key text, a
 * passphrase, the user name, environment values or a command's text.
 */
#ifndef ASP_LOG_H
#define ASP_LOG_H

#include "common.h"

typedef struct asp_log {
	asp_log_fn fn;    /* NULL: off */
	void *userdata;
	int min;          /* lowest asp_log_level passed on */
} asp_log;

/* lg may be NULL (off). */
#define asp__log(lg, level, ...)                                                 \
	do {                                                                     \
		const asp_log *asp_lg_ = (lg);                                   \
		if (asp_lg_ && asp_lg_->fn && (int)(level) >= asp_lg_->min)      \
			asp__log_emit(asp_lg_, (level), __VA_ARGS__);            \
	} while (0)

/* Format one line (cut at 1023 bytes, "..." marks a cut) and pass it on. */
void asp__log_emit(const asp_log *lg, asp_log_level level, const char *fmt, ...) ASP_PRINTF(3, 4);

/*
 * Set lg from the options' callback and level, or from $ASP_DEBUG when there
 * is no callback. ASP_EINVAL for a level that is not an asp_log_level.
 */
int asp__log_init(asp_log *lg, asp_log_fn fn, void *userdata, unsigned int level, asp_error *err);

/* Names for a line: "debug", "pinned", "publickey", "sftp", ... ("?" for an unknown value). */
const char *asp__log_level_name(int level);
const char *asp__log_trust_name(int trust);
const char *asp__log_auth_name(int auth);

/* asp_conn.routes (ssh.h): the ways a call's file I/O took, for its trace line. */
#define ASP_ROUTE_SFTP 1u
#define ASP_ROUTE_SHELL 2u

#endif
