/*
 * quote.c - POSIX shell quoting and the few scripts libasp sends.
 */
#include "quote.h"

#include <stdio.h>
#include <string.h>

int asp__quote(asp_buf *out, const char *s)
{
	const char *q;

	if (asp__buf_put(out, "'", 1))
		return ASP_ENOMEM;
	/* Inside single quotes every byte is literal except the quote itself. */
	while ((q = strchr(s, '\'')) != NULL) {
		if (asp__buf_put(out, s, (size_t)(q - s)) || asp__buf_put(out, "'\\''", 4))
			return ASP_ENOMEM;
		s = q + 1;
	}
	if (asp__buf_puts(out, s) || asp__buf_put(out, "'", 1))
		return ASP_ENOMEM;
	return 0;
}

int asp__quote_argv(char **out, const char *const *argv, asp_error *err)
{
	asp_buf b = { 0 };
	size_t i;

	ASP_ASSERT_ARG(out && argv && argv[0]);
	for (i = 0; argv[i]; i++) {
		if ((i && asp__buf_put(&b, " ", 1)) || asp__quote(&b, argv[i])) {
			asp__buf_free(&b);
			return asp__error(err, ASP_ENOMEM, "out of memory quoting arguments");
		}
	}
	*out = (char *)asp__buf_detach(&b, NULL);
	return 0;
}

static int check_env(const char *entry, size_t index, asp_error *err)
{
	const char *eq = strchr(entry, '=');
	char *name;
	int bad;

	if (!eq)
		return asp__error(err, ASP_EINVAL, "env[%zu]: expected NAME=value, got \"%.64s\"",
				  index, entry);
	if (!(name = asp__strndup(entry, (size_t)(eq - entry))))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	bad = !asp__is_env_name(name);
	asp__free(name);
	if (bad)
		return asp__error(err, ASP_EINVAL,
				  "env[%zu]: name \"%.*s\" is not a valid variable name "
				  "([A-Za-z_][A-Za-z0-9_]*)",
				  index, (int)((eq - entry) > 64 ? 64 : (eq - entry)), entry);
	return 0;
}

int asp__env_check(const char *const *env, asp_error *err)
{
	size_t i;
	int rc;

	for (i = 0; env && env[i]; i++)
		if ((rc = check_env(env[i], i, err)))
			return rc;
	return 0;
}

static int put_env(asp_buf *out, const char *entry, size_t index, asp_error *err)
{
	const char *eq = strchr(entry, '=');
	int rc;

	if ((rc = check_env(entry, index, err)))
		return rc;
	/* NAME is validated, so it needs no quoting; the value is quoted. */
	if (asp__buf_puts(out, "export ") || asp__buf_put(out, entry, (size_t)(eq - entry + 1)) ||
	    asp__quote(out, eq + 1) || asp__buf_puts(out, "; "))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	return 0;
}

int asp__exec_script(asp_buf *out, const char *marker, const char *cwd,
		     const char *const *env, const char *command, asp_error *err)
{
	size_t i;
	int rc;

	/*
	 * sshd puts the harness's address and port in SSH_CLIENT and
	 * SSH_CONNECTION: the command does not need them, and the agent should
	 * see the sandbox, not the harness. exec </dev/null is not used: stdin
	 * belongs to the command.
	 */
	if (asp__buf_puts(out, "unset SSH_CLIENT SSH_CONNECTION SSH_TTY SSH_ORIGINAL_COMMAND; cd -- ") ||
	    asp__quote(out, cwd) ||
	    asp__buf_printf(out, " 2>/dev/null || { printf '%%s:nocwd\\n' %s; exit 126; }; ",
			    marker))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	for (i = 0; env && env[i]; i++)
		if ((rc = put_env(out, env[i], i, err)) != 0)
			return rc;
	/*
	 * The leading ' ' keeps eval from reading a command that starts with '-'
	 * as options. After the command, the end line goes to a copy of stdout
	 * kept on fd 3, which the command never sees: a command that sends its
	 * stdout elsewhere (exec >log) cannot have the line land in its file.
	 */
	if (asp__buf_printf(out, "printf '%%s:%%s\\n' %s \"$$\"; exec 3>&1; eval ' '", marker) ||
	    asp__quote(out, command) ||
	    asp__buf_printf(out, " 3>&-; s=$?; printf '%%s:end\\n' %s >&3; exit $s", marker))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	return 0;
}

int asp__kill_script(asp_buf *out, long pgid, unsigned int grace_ms)
{
	unsigned int steps = (grace_ms + 49) / 50;

	/*
	 * `kill -s SIG -- -PGID` is the spelling dash, bash and busybox agree on.
	 * "Still alive" means a member of the group that is not a zombie: in a
	 * container whose PID 1 reaps nothing, kill -0 alone would wait out the
	 * whole grace period for corpses. /proc/PID/stat after "(comm) " reads
	 * "STATE PPID PGRP ..."; without /proc, fall back to kill -0.
	 */
	return asp__buf_printf(out,
			       "alive() { [ -d /proc/self ] || { kill -s 0 -- -%ld 2>/dev/null; return; }; "
			       "for f in /proc/[0-9]*/stat; do { read -r l < \"$f\"; } 2>/dev/null || continue; "
			       "set -- ${l##*) }; [ \"$1\" != Z ] && [ \"$3\" = %ld ] && return 0; done; "
			       "return 1; }; "
			       "kill -s TERM -- -%ld 2>/dev/null; i=0; "
			       "while [ $i -lt %u ] && alive; do sleep 0.05; i=$((i+1)); done; "
			       "kill -s KILL -- -%ld 2>/dev/null; exit 0",
			       pgid, pgid, pgid, steps, pgid);
}

int asp__rm_rf_script(asp_buf *out, const char *path)
{
	if (asp__buf_puts(out, "rm -rf -- ") || asp__quote(out, path))
		return ASP_ENOMEM;
	return 0;
}

/*
 * x-asp-proxy-command: OpenSSH ProxyCommand semantics. %h, %p and %r are
 * replaced by the host, port and user, each single-quoted so that no value
 * from the config can inject shell syntax; %% is a literal %.
 */
int asp__proxy_script(asp_buf *out, const char *command, const char *host, unsigned int port,
		      const char *user)
{
	const char *p;
	char port_text[16];

	snprintf(port_text, sizeof(port_text), "%u", port);
	for (p = command; *p; p++) {
		int rc = 0;
		if (*p == '%' && p[1]) {
			p++;
			if (*p == 'h')
				rc = asp__quote(out, host);
			else if (*p == 'p')
				rc = asp__buf_puts(out, port_text);
			else if (*p == 'r')
				rc = asp__quote(out, user);
			else if (*p == '%')
				rc = asp__buf_put(out, "%", 1);
			else
				return ASP_EINVAL;
		} else {
			rc = asp__buf_put(out, p, 1);
		}
		if (rc)
			return ASP_ENOMEM;
	}
	return 0;
}

int asp__cut_check_script(asp_buf *out, long pgid, unsigned int grace_ms)
{
	if (asp__buf_printf(out, "if kill -s 0 %ld 2>/dev/null; then echo running >&2; ", pgid) ||
	    asp__kill_script(out, pgid, grace_ms) || asp__buf_puts(out, "; else echo gone >&2; fi"))
		return ASP_ENOMEM;
	return 0;
}
