/*
 * log.c - the trace: formatting a line, and the $ASP_DEBUG sink (stderr).
 */
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LINE_MAX_BYTES 1024

const char *asp__log_level_name(int level)
{
	switch (level) {
	case ASP_LOG_DEBUG: return "debug";
	case ASP_LOG_INFO: return "info";
	case ASP_LOG_WARN: return "warn";
	default: return "?";
	}
}

const char *asp__log_trust_name(int trust)
{
	switch (trust) {
	case ASP_TRUST_PINNED: return "pinned";
	case ASP_TRUST_KNOWN: return "known";
	case ASP_TRUST_FIRST_USE: return "first use, recorded";
	default: return "?";
	}
}

const char *asp__log_auth_name(int auth)
{
	switch (auth) {
	case ASP_AUTH_NONE: return "none (the user name alone)";
	case ASP_AUTH_PUBLICKEY: return "publickey (connection.identity)";
	case ASP_AUTH_AGENT: return "publickey (ssh-agent)";
	default: return "?";
	}
}

/* $ASP_DEBUG: one write per line, so that lines of several threads do not mix. */
static void to_stderr(asp_log_level level, const char *msg, void *userdata)
{
	char line[LINE_MAX_BYTES + 32];
	int n;

	(void)userdata;
	n = snprintf(line, sizeof(line), "asp: %s: %s\n", asp__log_level_name(level), msg);
	if (n > 0 && (size_t)n < sizeof(line)) {
		ssize_t w = write(STDERR_FILENO, line, (size_t)n);
		(void)w; /* nowhere to report a failed trace write */
	}
}

int asp__log_init(asp_log *lg, asp_log_fn fn, void *userdata, unsigned int level, asp_error *err)
{
	const char *env;

	memset(lg, 0, sizeof(*lg));
	if (level > ASP_LOG_WARN)
		return asp__error(err, ASP_EINVAL, "asp_open_options.log_level %u is not an asp_log_level "
				  "(0 or 1 debug, 2 info, 3 warn)", level);
	lg->min = level ? (int)level : ASP_LOG_DEBUG;
	if (fn) {
		lg->fn = fn;
		lg->userdata = userdata;
	} else if ((env = getenv("ASP_DEBUG")) && *env && strcmp(env, "0")) {
		lg->fn = to_stderr;
	}
	return 0;
}

void asp__log_emit(const asp_log *lg, asp_log_level level, const char *fmt, ...)
{
	char msg[LINE_MAX_BYTES];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(msg))
		memcpy(msg + sizeof(msg) - 4, "...", 4);
	lg->fn(level, msg, lg->userdata);
}
