/*
 * quote.h - POSIX shell quoting: the only place in libasp that builds shell
 * text. Everything a caller supplies (command, cwd, env values, paths)
 * reaches the remote shell single-quoted, so it passes through byte for
 * byte and is never interpreted.
 */
#ifndef ASP_QUOTE_H
#define ASP_QUOTE_H

#include "common.h"

/* Append s single-quoted: abc -> 'abc', it's -> 'it'\''s'. 0 or ASP_ENOMEM. */
int asp__quote(asp_buf *out, const char *s);

/* Quote each argument and join with spaces (for argv-style commands). */
int asp__quote_argv(char **out, const char *const *argv, asp_error *err);

/*
 * The wrapper that runs a user command (see exec.c for the protocol):
 *   cd -- CWD || report "nocwd"; export NAME=VALUE...; report "$$"; eval COMMAND
 * The wrapper shell is a session and process-group leader under sshd, so
 * $$ is the process group that a timeout or cancel kills. The report is the
 * line "<marker>:<pid>\n" (or "<marker>:nocwd\n") on stdout; anything a
 * login script printed before it is discarded by the reader.
 * env entries must be NAME=value with a valid NAME (ASP_EINVAL otherwise).
 */
int asp__exec_script(asp_buf *out, const char *marker, const char *cwd,
		     const char *const *env, const char *command, asp_error *err);

/* Check that every env entry is NAME=value with a valid NAME (ASP_EINVAL otherwise). */
int asp__env_check(const char *const *env, asp_error *err);

/*
 * The script that kills process group `pgid`: SIGTERM, then SIGKILL if any
 * member is still alive after grace_ms.
 */
int asp__kill_script(asp_buf *out, long pgid, unsigned int grace_ms);

/* Remove a path recursively (rm -rf -- PATH). */
int asp__rm_rf_script(asp_buf *out, const char *path);

/*
 * The connection.x-asp-proxy-command line for /bin/sh -c: command with %h
 * and %r replaced by host and user, single-quoted, %p by the port and %% by
 * '%' (OpenSSH ProxyCommand tokens; a '%' at the very end stays as is).
 * ASP_EINVAL for any other %-escape; ASP_ENOMEM.
 */
int asp__proxy_script(asp_buf *out, const char *command, const char *host, unsigned int port,
		      const char *user);

/*
 * After a command's channel was cut: "is the wrapper's shell (pid pgid)
 * still running?" It writes "running" to stderr and kills the group as
 * asp__kill_script does, or writes "gone". 0 or ASP_ENOMEM.
 */
int asp__cut_check_script(asp_buf *out, long pgid, unsigned int grace_ms);

#endif
