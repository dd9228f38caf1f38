/*
 * quote.c - POSIX shell quoting and the few scripts libasp sends.
 */
#include "quote.h"

#include <limits.h>
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

/*
 * The watchdog: a command must not outlive the connection that carries it
 * (the harness died, the network went), and only the sandbox can see to
 * that, the client may be gone. Closing the connection ends the process
 * sshd (or Dropbear) runs the wrapper under, so the wrapper's parent
 * changes. A subshell reads the wrapper's /proc/PID/stat every half second
 * ("(comm) STATE PPID PGRP"): parent changed, it runs the kill script on the
 * wrapper's group; wrapper gone or a zombie (the command ended), it leaves
 * within a poll. A command's `wait` must not wait for it: under bash it is
 * the wrapper's background job, disowned (one fork; bash's `wait` waits
 * for its jobs only); elsewhere it is not the wrapper's child (a double
 * fork, both in the background: the wrapper waits for neither; dash and
 * BusyBox sh have no `disown`). It holds none of the channel's descriptors
 * (sshd waits for those to close), and it becomes `sh -c KILL` so that the
 * kill script's $$ is its own pid (a subshell's $$ is the wrapper's). A
 * kill of the group (timeout, cancel) TERMs it, and it takes its sleep
 * along. The parent is read in the wrapper: zsh gives a subshell its own
 * PPID (and splits words only when told: `setopt`, called only where
 * $ZSH_VERSION is set, here and in every script, since in bash a command
 * not found is a fork). Without /proc there is no watchdog. Costs a fork
 * per command under bash, two elsewhere, in the sandbox, beside the
 * command (two were 5 to 7 ms of an exec on a 2-core machine): libasp's
 * own scripts, which end on their own, run without it (asp__exec_script's
 * own).
 *
 * Between polls it waits on its tick: under bash, `read -t` on a FIFO,
 * ~/.asp/tick, which starts no process. Nothing writes to it. The first
 * watchdog that finds no FIFO there makes one under its own name and
 * renames it into place, over whatever else is there but a directory: the
 * path is never missing while a FIFO is swapped in, so the `<>` open
 * (which creates what it does not find) cannot leave a regular file, and
 * one that is there (the FIFO removed from outside between a watchdog's
 * check and its open) is replaced by the next watchdog that starts, which
 * running watchdogs then find at their next poll. Other shells lack a
 * fractional `read -t` and fork a `sleep`, as does bash when the read did
 * not time out (no FIFO there, or something wrote to it): a half-second
 * wait either way, never a busy loop. `sleep` per poll was about 40 ms of
 * a 2-core sandbox's CPU per `sleep 1` command under load (bench "many",
 * N=100). A TERM ends a bash watchdog at once (no trap: bash would run it
 * only after the read); the sleeping one traps TERM to take its sleep
 * along. The watchdog's text goes with every command's exec request, which
 * has a size limit: keep it short.
 *
 * It is the shell function _asp_wd, whose argument is the call's token
 * (the kill script finds the call's processes by it, as $_asp_t), and
 * _asp_wl, its loop: the wrapper defines them, calls _asp_wd and unsets
 * both. A primed shell's exec request (asp__prime_boot) defines them and
 * calls _asp_wd at the shell's boot, with the token of the one call the
 * shell will run; the call's wrapper only unsets them. So that call pays
 * neither the fork (on a 2-core VM it was 5 to 7 ms of a 9 to 11 ms exec
 * `true` after a pause: bench section 5b) nor the reading of the
 * watchdog's text (a primed shell reads its script a byte at a time). The
 * watchdog then also guards the idle shell: it is killed with the
 * connection, as it would have ended at its stdin's EOF.
 */
static int kill_quoted(asp_buf *out, const char *token);

#define WATCHDOG_POLL "0.5"
#define WATCHDOG_GRACE_MS 500u

static int put_watchdog_fn(asp_buf *out)
{
	if (asp__buf_puts(out, "_asp_wl() { "
			  "[ -z \"${ZSH_VERSION-}\" ] || setopt shwordsplit; "
			  "s=; w=$$; q=$_asp_q; t=; [ \"${BASH_VERSION-}\" ] && [ \"${HOME-}\" ] && "
			  "{ t=$HOME/.asp/tick; [ -p \"$t\" ] || [ -d \"$t\" ] || "
			  "{ mkdir -p -m 700 \"${t%/*}\" && mkfifo -m 600 \"$t$w\" && "
			  "mv -f \"$t$w\" \"$t\"; } 2>/dev/null; }; "
			  "[ -p \"$t\" ] || trap 'kill $s 2>/dev/null; exit 0' TERM; "
			  "while { read -r l < /proc/$w/stat; } 2>/dev/null; do "
			  "set -- ${l##*) }; [ \"$1\" = Z ] && exit 0; [ \"$2\" = \"$q\" ] || "
			  "{ g=$3; export g _asp_t; exec sh -c ") ||
	    kill_quoted(out, "\"$_asp_t\"") ||
	    asp__buf_puts(out, "; }; { [ -p \"$t\" ] && read -r -t " WATCHDOG_POLL " l <> \"$t\"; } 2>/dev/null; "
			  "[ $? -gt 128 ] || { sleep " WATCHDOG_POLL " & s=$!; wait $s; }; "
			  "done; }; "
			  "_asp_wd() { _asp_q=$PPID; _asp_t=$1; [ -r /proc/$$/stat ] && "
			  "if [ \"${BASH_VERSION-}\" ]; then _asp_wl </dev/null >/dev/null 2>&1 & disown $!; "
			  "else ( _asp_wl & ) </dev/null >/dev/null 2>&1 & fi; unset _asp_q _asp_t; }; "))
		return ASP_ENOMEM;
	return 0;
}

/*
 * The watchdog's definition and its start, or, in a primed shell, which
 * started it at its boot, nothing: the functions are unset either way.
 */
static int put_watchdog(asp_buf *out, const char *token, int primed)
{
	if ((!primed && (put_watchdog_fn(out) || asp__buf_printf(out, "_asp_wd %s; ", token))) ||
	    asp__buf_puts(out, "unset -f _asp_wd _asp_wl; "))
		return ASP_ENOMEM;
	return 0;
}

int asp__random_name(char *out, size_t size, const char *prefix)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char rnd[12];
	size_t i, n = strlen(prefix);

	if (n + 2 * sizeof(rnd) >= size || asp__random(rnd, sizeof(rnd)))
		return ASP_ERROR;
	memcpy(out, prefix, n);
	for (i = 0; i < sizeof(rnd); i++) {
		out[n + 2 * i] = hex[rnd[i] >> 4];
		out[n + 2 * i + 1] = hex[rnd[i] & 15];
	}
	out[n + 2 * sizeof(rnd)] = '\0';
	return 0;
}

int asp__call_token(char token[ASP_TOKEN_SIZE])
{
	return asp__random_name(token, ASP_TOKEN_SIZE, "asp-call-");
}

int asp__prime_boot(asp_buf *out, const char *token)
{
	return put_watchdog_fn(out) || asp__buf_printf(out, "_asp_wd %s; ", token) ||
	       asp__buf_puts(out, ASP_PRIME_BOOT) ? ASP_ENOMEM : 0;
}

int asp__exec_script(asp_buf *out, const char *marker, const char *token, const char *cwd,
		     const char *const *env, const char *command, int own, int primed, asp_error *err)
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
	 * The call's token, after the caller's env so that none replaces it:
	 * every process of the call inherits it, also one that left the process
	 * group or lost its parent, and the kill script finds them by it. It is
	 * not the marker, which the command never learns.
	 */
	if (asp__buf_printf(out, "export ASP_CALL=%s; ", token))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	/*
	 * The leading ' ' keeps eval from reading a command that starts with '-'
	 * as options. After the command, the end line goes to a copy of stdout
	 * kept on fd 3, which the command never sees: a command that sends its
	 * stdout elsewhere (exec >log) cannot have the line land in its file.
	 */
	/*
	 * The marker carries the shell's process group, which timeouts and
	 * cancel kill: $$ where the shell leads its own group (sshd makes it a
	 * session leader), else the group read from /proc/$$/stat ("PID (comm)
	 * STATE PPID PGRP ..."): Dropbear runs the shell inside a session that
	 * another of its processes leads. Builtins only: no process is started.
	 */
	if (asp__buf_printf(out, "_asp_g=$$; { read -r _asp_g < /proc/$$/stat; } 2>/dev/null && "
			    "{ _asp_g=${_asp_g##*) }; _asp_g=${_asp_g#* }; _asp_g=${_asp_g#* }; "
			    "_asp_g=${_asp_g%%%% *}; }; printf '%%s:%%s\\n' %s \"$_asp_g\"; "
			    "unset _asp_g; ", marker) ||
	    (!own && put_watchdog(out, token, primed)) || asp__buf_puts(out, "exec 3>&1; "))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	/*
	 * A file script's `exit` ends the wrapper's shell, and the EXIT trap
	 * writes the end line: no subshell is forked for it (1.5 to 3 ms in a
	 * slow sandbox). fd 3 stays open there: a builtin's redirection would
	 * still be in force when the trap runs (bash, zsh).
	 */
	if (own)
		return asp__buf_printf(out, "trap 'echo %s:end >&3' EXIT; eval ' '", marker) ||
		       asp__quote(out, command) ? asp__error(err, ASP_ENOMEM, "out of memory") : 0;
	if (asp__buf_puts(out, "eval ' '") || asp__quote(out, command) ||
	    asp__buf_printf(out, " 3>&-; s=$?; printf '%%s:end\\n' %s >&3; exit $s", marker))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	return 0;
}

int asp__prime_frame(asp_buf *out, const char *script, size_t len)
{
	const char *nl;

	if (asp__buf_puts(out, "xunset s; "))
		return ASP_ENOMEM;
	while ((nl = memchr(script, '\n', len)) != NULL) {
		if (asp__buf_put(out, script, (size_t)(nl - script) + 1) || asp__buf_put(out, "x", 1))
			return ASP_ENOMEM;
		len -= (size_t)(nl - script) + 1;
		script = nl + 1;
	}
	return asp__buf_put(out, script, len) || asp__buf_puts(out, "\n.\n") ? ASP_ENOMEM : 0;
}

/* The kill script for the group whose id is the shell text g: a number, or "$g". */
static int kill_text(asp_buf *out, const char *g, const char *token, unsigned int grace_ms)
{
	unsigned int steps = (grace_ms + 49) / 50;

	/*
	 * The call's processes are more than its group: a command that calls
	 * setsid or setpgid leaves the group, and one whose parent died is
	 * re-parented out of the tree. Where /proc exists, the members are
	 * found by walking it, to a fixed point: the group (stat's "PGRP"), the
	 * session the group leads ("SESSION"), children of a member ("PPID"),
	 * and any process whose environment carries the call's token (the
	 * wrapper exports ASP_CALL, which survives setsid, double forks and
	 * re-parenting). Members are stopped as they are found, so that none
	 * forks past the walk; the walk repeats until a pass finds no one new.
	 * The environments are searched by one grep per pass where there is
	 * one: a shell's read takes a byte per system call, 0.7 s a pass
	 * where 470 processes are readable (a root sandbox, a test machine);
	 * without grep, by the shell.
	 * Then TERM (and CONT) to the group and every member, the grace period
	 * while a member is alive (not a zombie: a container's PID 1 may reap
	 * nothing), then KILL. Pid 1 and the script itself are never members,
	 * but the script may be in the group: Dropbear runs the command and the
	 * kill channel in the group of its connection process. So it ignores
	 * TERM, or its own TERM to the group would end it before the CONT and
	 * leave what it stopped stopped; and its KILL names the group last.
	 * Without /proc, the group alone, as `kill -s SIG -- -PGID` (the
	 * spelling dash, bash and busybox agree on). /proc/PID/stat after
	 * "(comm) " reads "STATE PPID PGRP SESSION ..."; the token is hex, and a
	 * shell's read keeps or drops the environment's NULs, both of which the
	 * match survives.
	 */
	return asp__buf_printf(out,
			       "trap '' TERM; m=' '; "
			       "G=; command -v grep >/dev/null 2>&1 && G=1; "
			       "env_has() { if [ \"$G\" ]; then case $h in *\" $1 \"*) return 0;; esac; "
			       "return 1; fi; { while IFS= read -r e || [ -n \"$e\" ]; do "
			       "case $e in *%s*) return 0;; esac; e=; done < /proc/$1/environ; } 2>/dev/null; "
			       "return 1; }; "
			       "scan() { n=1; while [ $n = 1 ]; do n=0; h=' '; "
			       "[ \"$G\" ] && for e in $(grep -lsF -e %s /proc/[0-9]*/environ 2>/dev/null); "
			       "do e=${e#/proc/}; h=\"$h${e%%/environ} \"; done; "
			       "for f in /proc/[0-9]*/stat; do p=${f#/proc/}; p=${p%%/stat}; "
			       "case \"$m\" in *\" $p \"*) continue;; esac; "
			       "[ \"$p\" = 1 ] || [ \"$p\" = $$ ] && continue; "
			       "{ read -r l < \"$f\"; } 2>/dev/null || continue; set -- ${l##*) }; "
			       "[ \"$1\" = Z ] && continue; "
			       "case \"$m\" in *\" $2 \"*) ;; *) [ \"$3\" = %s ] || [ \"$4\" = %s ] || "
			       "env_has \"$p\" || continue;; esac; "
			       "m=\"$m$p \"; n=1; kill -s STOP \"$p\" 2>/dev/null; done; done; }; "
			       "alive() { [ -d /proc/self ] || { kill -s 0 -- -%s 2>/dev/null; return; }; "
			       "for p in $m; do { read -r l < /proc/$p/stat; } 2>/dev/null || continue; "
			       "set -- ${l##*) }; [ \"$1\" != Z ] && return 0; done; return 1; }; "
			       "[ -d /proc/self ] && scan; "
			       "kill -s TERM -- -%s $m 2>/dev/null; kill -s CONT -- -%s $m 2>/dev/null; i=0; "
			       "while [ $i -lt %u ] && alive; do sleep 0.05; i=$((i+1)); done; "
			       "kill -s KILL -- $m -%s 2>/dev/null; exit 0",
			       token, token, g, g, g, g, g, steps, g);
}

/* The kill script for group $g, single-quoted, with the watchdog's grace. */
static int kill_quoted(asp_buf *out, const char *token)
{
	asp_buf k = { 0 };
	int rc;

	rc = kill_text(&k, "$g", token, WATCHDOG_GRACE_MS) || asp__quote(out, (char *)k.data) ? ASP_ENOMEM : 0;
	asp__buf_free(&k);
	return rc;
}

int asp__kill_script(asp_buf *out, long pgid, const char *token, unsigned int grace_ms)
{
	char g[24];

	snprintf(g, sizeof(g), "%ld", pgid);
	return kill_text(out, g, token, grace_ms);
}

int asp__signal_script(asp_buf *out, long pgid, const char *name)
{
	const char *p;

	/* The name is a word of capitals (checked against a list): quoted all the same. */
	for (p = name; *p; p++)
		if (*p < 'A' || *p > 'Z')
			return ASP_EINVAL;
	return asp__buf_puts(out, "kill -s ") || asp__quote(out, name) ||
	       asp__buf_printf(out, " -- -%ld 2>/dev/null; exit 0", pgid) ? ASP_ENOMEM : 0;
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

int asp__cut_check_script(asp_buf *out, long pgid, const char *token, unsigned int grace_ms)
{
	if (asp__buf_printf(out, "if kill -s 0 %ld 2>/dev/null; then echo running >&2; ", pgid) ||
	    asp__kill_script(out, pgid, token, grace_ms) || asp__buf_puts(out, "; else echo gone >&2; fi"))
		return ASP_ENOMEM;
	return 0;
}

/* ------------------------------------------------------------ shell-command file transport */

/*
 * "Why is path missing?" A parent that exists but cannot be searched is
 * EACCES, anything else ENOENT (a parent that is a file, as SFTP says too).
 */
#define SHFS_NF "nf() { d=${1%/*}; [ -n \"$d\" ] || d=/; " \
		"if [ -d \"$d\" ] && ! [ -x \"$d\" ]; then exit 101; fi; exit 100; }; "

/* 'stat' with GNU's and BusyBox's -c: the one format both agree on. */
#define SHFS_NEED(tool) "command -v " tool " >/dev/null 2>&1 || { echo 'no " tool " command " \
			"in the sandbox' >&2; exit 109; }; "

/* The mode less the shell's umask, in octal, into $m (mode given in decimal: no octal parsing). */
#define SHFS_UMASKED "m=$(printf %%o $((%u & ~$(printf %%d 0$(umask))))); "

/* NAME='value'; */
static int put_var(asp_buf *out, const char *name, const char *value)
{
	return asp__buf_printf(out, "%s=", name) || asp__quote(out, value) || asp__buf_puts(out, "; ")
		       ? ASP_ENOMEM : 0;
}

/* The directory holding path (absolute): "/" for a top-level name. */
static int put_dir(asp_buf *out, const char *name, const char *path)
{
	const char *slash = strrchr(path, '/');
	char *d;
	int rc;

	if (!slash || slash == path)
		return put_var(out, name, "/");
	if (!(d = asp__strndup(path, (size_t)(slash - path))))
		return ASP_ENOMEM;
	rc = put_var(out, name, d);
	asp__free(d);
	return rc;
}

int asp__printf_escape(asp_buf *out, const void *data, size_t len)
{
	const unsigned char *p = data;
	size_t i;

	for (i = 0; i < len; i++) {
		unsigned char b = p[i];
		/* '-' too: a format starting with it would read as an option to some printfs. */
		int plain = b >= 0x20 && b < 0x7f && b != '\\' && b != '%' && b != '\'' && b != '-';
		char oct[4] = { '\\', (char)('0' + (b >> 6)), (char)('0' + ((b >> 3) & 7)),
				(char)('0' + (b & 7)) };
		if (plain ? asp__buf_put(out, &b, 1) : asp__buf_put(out, oct, 4))
			return ASP_ENOMEM;
	}
	return 0;
}

/* dd in 64 KiB blocks plus one block of the rest: no huge buffer, exact on regular files. */
static int put_dd(asp_buf *out, uint64_t n, int skip)
{
	uint64_t q = n / 65536, r = n % 65536;
	int rc = 0;

	if (q)
		rc |= skip ? asp__buf_printf(out, "dd bs=65536 skip=%llu count=0 2>/dev/null; ",
					     (unsigned long long)q)
			   : asp__buf_printf(out, "dd bs=65536 count=%llu 2>/dev/null; ",
					     (unsigned long long)q);
	if (r)
		rc |= asp__buf_printf(out, skip ? "dd bs=%llu skip=1 count=0 2>/dev/null; "
						: "dd bs=%llu count=1 2>/dev/null; ", (unsigned long long)r);
	return rc ? ASP_ENOMEM : 0;
}

/*
 * The file-transport scripts. They may end in `exit`: exec.c runs them in
 * the wrapper's own shell, whose EXIT trap writes the end line
 * (asp__exec_script, own).
 */
int asp__shfs_read_script(asp_buf *out, const char *path, uint64_t offset, uint64_t span,
			  uint64_t size_over)
{
	if (asp__buf_puts(out, SHFS_NF) || put_var(out, "f", path) ||
	    asp__buf_puts(out, "[ -e \"$f\" ] || nf \"$f\"; "))
		return ASP_ENOMEM;
	/* Nothing to read: only the open for reading, which a directory passes (as SFTP's OPEN). */
	if (!span)
		return asp__buf_puts(out, "[ -r \"$f\" ] && : <\"$f\" || exit 101") ? ASP_ENOMEM : 0;
	if (asp__buf_puts(out, "[ -d \"$f\" ] && exit 102; [ -r \"$f\" ] || exit 101; " SHFS_NEED("dd")))
		return ASP_ENOMEM;
	/* A regular file's size decides at once; without stat the bytes tell. */
	if (size_over && asp__buf_printf(out, "if [ -f \"$f\" ] && s=$(stat -L -c %%s -- \"$f\" "
					 "2>/dev/null) && [ \"$s\" -gt %llu ]; then exit 106; fi; ",
					 (unsigned long long)size_over))
		return ASP_ENOMEM;
	/* Under a cap, whole blocks: each dd is a process started in the sandbox. */
	if (size_over && span % 65536 && span <= UINT64_MAX - 65536)
		span += 65536 - span % 65536;
	/* The redirection alone can fail the group (`:` ends it): that is permission. */
	if (asp__buf_puts(out, "{ ") || put_dd(out, offset, 1) || put_dd(out, span, 0) ||
	    asp__buf_puts(out, ":; } <\"$f\" || exit 101"))
		return ASP_ENOMEM;
	return 0;
}

int asp__shfs_write_script(asp_buf *out, const char *path, const char *tmp,
			   const void *inline_data, size_t len, unsigned int mode, int mkdirs)
{
	const char *target = tmp ? "$t" : "$f";

	if (asp__buf_puts(out, SHFS_NF) || put_var(out, "f", path) || put_dir(out, "d", path))
		return ASP_ENOMEM;
	/* Atomic: write through a link by replacing the file it points to (resolved, then again). */
	if (tmp && asp__buf_puts(out, "if [ -L \"$f\" ]; then " SHFS_NEED("readlink")
				 "r=$(readlink -f -- \"$f\" && echo x) || exit 100; "
				 "printf '%s' \"${r%?x}\"; exit 110; fi; "))
		return ASP_ENOMEM;
	if (asp__buf_puts(out, "[ -d \"$f\" ] && exit 102; ") ||
	    (mkdirs && asp__buf_puts(out, "[ -d \"$d\" ] || mkdir -p -- \"$d\" 2>/dev/null || exit 101; ")) ||
	    asp__buf_puts(out, "[ -d \"$d\" ] || nf \"$d\"; [ -w \"$d\" ] && [ -x \"$d\" ] || exit 101; "))
		return ASP_ENOMEM;
	if (tmp) {
		/*
		 * The mode: asked for, else the existing file's, else 0644 less
		 * the umask (as SFTP). The temp file is created with it where a
		 * umask can say it (no process started): `umask go-w` makes the
		 * shell's 0666 into 0644 less the umask; a mode asked for with
		 * owner read and write and no x or special bits is its own
		 * umask's complement (the owner must still read the temp file
		 * back to count stdin's bytes). The rest is a chmod before the
		 * rename: the existing file's mode (k=1), or any other mode (m).
		 */
		if (put_var(out, "t", tmp))
			return ASP_ENOMEM;
		if (!mode) {
			if (asp__buf_puts(out, "k=; [ -e \"$f\" ] && k=1; m=; umask go-w; "))
				return ASP_ENOMEM;
		} else if (!(mode & ~0666u) && (mode & 0600u) == 0600u) {
			if (asp__buf_printf(out, "k=; m=; umask %03o; ", ~mode & 0777))
				return ASP_ENOMEM;
		} else if (asp__buf_printf(out, "k=; m=%o; ", mode & 07777)) {
			return ASP_ENOMEM;
		}
		if (asp__buf_puts(out, "set -C; "))
			return ASP_ENOMEM;
	}
	/* c is set only once the redirection worked: a failed O_EXCL create removes nothing. */
	if (asp__buf_puts(out, "c=; { c=1; "))
		return ASP_ENOMEM;
	if (inline_data && len) {
		if (asp__buf_puts(out, "printf '") || asp__printf_escape(out, inline_data, len) ||
		    asp__buf_puts(out, "'; "))
			return ASP_ENOMEM;
	} else if (asp__buf_puts(out, inline_data || !len ? ":; " : "cat; ")) {
		return ASP_ENOMEM;
	}
	if (asp__buf_printf(out, "} >\"%s\" || { [ -n \"$c\" ] || exit 101; %sexit 107; }; ", target,
			    tmp ? "rm -f -- \"$t\"; " : ""))
		return ASP_ENOMEM;
	/*
	 * stdin that ends early (the connection died, sshd was killed and the
	 * script lives on) must not be renamed into place: count the bytes.
	 * Inline data came whole with the script, and printf reports a failed
	 * write (dash, bash, BusyBox sh and zsh: tested on a full tmpfs).
	 */
	if (tmp && !inline_data && len &&
	    asp__buf_printf(out, "s=$(wc -c <\"$t\") && [ $s -eq %zu ] || { rm -f -- \"$t\"; "
			    "echo 'the data arrived short' >&2; exit 108; }; ", len))
		return ASP_ENOMEM;
	/*
	 * GNU chmod copies the mode in one process; elsewhere (BusyBox) stat
	 * reads it. A file gone meanwhile leaves the new one the default mode.
	 */
	if (tmp)
		return asp__buf_puts(out, "{ [ -z \"$k\" ] || chmod --reference=\"$f\" -- \"$t\" 2>/dev/null || "
				     "{ e=$(stat -L -c %a -- \"$f\" 2>/dev/null) && chmod \"$e\" \"$t\"; } || "
				     "[ ! -e \"$f\" ]; } && { [ -z \"$m\" ] || chmod \"$m\" \"$t\"; } && "
				     "mv -f -- \"$t\" \"$f\" && exit 0; rm -f -- \"$t\"; exit 108") ?
			ASP_ENOMEM : 0;
	if (mode && asp__buf_printf(out, "chmod %o \"$f\" || exit 108; ", mode & 07777))
		return ASP_ENOMEM;
	return asp__buf_puts(out, "exit 0") ? ASP_ENOMEM : 0;
}

int asp__shfs_stat_script(asp_buf *out, const char *path, int follow)
{
	if (asp__buf_puts(out, SHFS_NF SHFS_NEED("stat")) || put_var(out, "f", path) ||
	    asp__buf_printf(out, "stat %s-c '%%f %%s %%Y' -- \"$f\" 2>/dev/null && exit 0; "
			    "[ -e \"$f\" ] %s|| nf \"$f\"; stat %s-c '%%f' -- \"$f\" >/dev/null; exit 108",
			    follow ? "-L " : "", follow ? "" : "|| [ -L \"$f\" ] ", follow ? "-L " : ""))
		return ASP_ENOMEM;
	return 0;
}

int asp__shfs_list_script(asp_buf *out, const char *path, size_t max)
{
	/*
	 * Names come from the shell's own glob, NUL-terminated (any byte but NUL
	 * and '/'); the attributes from stat over the same names, each line ending
	 * in its name, which the reader matches against the list it already has.
	 * ". .." and a glob that matched nothing are dropped there.
	 */
	if (asp__buf_puts(out, SHFS_NF SHFS_NEED("stat") SHFS_NEED("xargs")) || put_var(out, "p", path) ||
	    asp__buf_puts(out, "cd -- \"$p\" 2>/dev/null || { [ -e \"$p\" ] || nf \"$p\"; "
			  "[ -d \"$p\" ] || exit 103; exit 101; }; [ -r . ] || exit 101; "
			  "[ -z \"${ZSH_VERSION-}\" ] || setopt nullglob 2>/dev/null; set -- .* *; ") ||
	    asp__buf_printf(out, "[ $# -gt %llu ] && exit 106; ", (unsigned long long)max + 2) ||
	    asp__buf_puts(out, "[ $# -eq 0 ] && { printf '\\0'; exit 0; }; printf '%s\\0' \"$@\"; "
			  "printf '\\0'; printf '%s\\0' \"$@\" | xargs -0 stat -c '%f %s %Y %n' -- "
			  "2>/dev/null; exit 0"))
		return ASP_ENOMEM;
	return 0;
}

int asp__shfs_mkdir_script(asp_buf *out, const char *path, unsigned int mode, int parents)
{
	if (asp__buf_puts(out, SHFS_NF) || put_var(out, "p", path) || put_dir(out, "d", path) ||
	    asp__buf_printf(out, SHFS_UMASKED, mode & 07777))
		return ASP_ENOMEM;
	if (parents)
		return asp__buf_puts(out, "mkdir -p -m \"$m\" -- \"$p\" 2>/dev/null; [ -d \"$p\" ] && exit 0; "
				     "[ -e \"$p\" ] && exit 104; exit 101") ? ASP_ENOMEM : 0;
	return asp__buf_puts(out, "{ [ -e \"$p\" ] || [ -L \"$p\" ]; } && exit 104; [ -d \"$d\" ] || nf \"$d\"; "
			     "[ -w \"$d\" ] && [ -x \"$d\" ] || exit 101; mkdir -m \"$m\" -- \"$p\" && exit 0; "
			     "[ -e \"$p\" ] && exit 104; exit 108") ? ASP_ENOMEM : 0;
}

int asp__shfs_remove_script(asp_buf *out, const char *path)
{
	if (asp__buf_puts(out, SHFS_NF) || put_var(out, "p", path) || put_dir(out, "d", path) ||
	    asp__buf_puts(out, "[ -e \"$p\" ] || [ -L \"$p\" ] || nf \"$p\"; "
			  "if [ -d \"$p\" ] && ! [ -L \"$p\" ]; then rmdir -- \"$p\" 2>/dev/null && exit 0; "
			  "[ -w \"$d\" ] && [ -x \"$d\" ] || exit 101; [ -d \"$p\" ] || exit 0; exit 105; fi; "
			  "rm -f -- \"$p\" 2>/dev/null; [ -e \"$p\" ] || [ -L \"$p\" ] || exit 0; "
			  "[ -w \"$d\" ] && [ -x \"$d\" ] || exit 101; rm -f -- \"$p\"; exit 108"))
		return ASP_ENOMEM;
	return 0;
}

/*
 * Not the wording of a tool's message (it follows the sandbox's locale) and
 * not `test -w` (false on a read-only file system and on a directory we may
 * not write alike): the mount table the kernel shows the sandbox.
 */
int asp__shfs_rofs_script(asp_buf *out, const char *path)
{
	if (put_var(out, "p", path) ||
	    asp__buf_puts(out, "while ! [ -e \"$p\" ] && ! [ -L \"$p\" ]; do p=${p%/*}; [ -n \"$p\" ] || p=/; done; "
			  "[ -d \"$p\" ] || { p=${p%/*}; [ -n \"$p\" ] || p=/; }; "
			  "cd -- \"$p\" 2>/dev/null && [ -r /proc/self/mountinfo ] || exit 0; "
			  "P=$(pwd -P) awk '{ m = $5; gsub(/\\\\011/, \"\\t\", m); gsub(/\\\\012/, \"\\n\", m); "
			  "gsub(/\\\\040/, \" \", m); gsub(/\\\\134/, \"\\\\\", m); p = ENVIRON[\"P\"]; n = length(m); "
			  "if ((m == \"/\" || p == m || substr(p, 1, n + 1) == m \"/\") && n >= best) { best = n; "
			  "ro = (\",\" $6 \",\") ~ /,ro,/ || (\",\" $NF \",\") ~ /,ro,/ } } "
			  "END { print ro ? \"ro\" : \"rw\" }' /proc/self/mountinfo"))
		return ASP_ENOMEM;
	return 0;
}

int asp__shfs_rename_script(asp_buf *out, const char *from, const char *to)
{
	/*
	 * mv moves into an existing directory, where rename(2) replaces an
	 * empty one: `mv -T` (GNU, BusyBox) is that rename(2); a mv without
	 * -T gets rmdir then mv, which leaves a moment without the target.
	 */
	if (asp__buf_puts(out, SHFS_NF) || put_var(out, "a", from) || put_var(out, "b", to) ||
	    put_dir(out, "da", from) || put_dir(out, "db", to) ||
	    asp__buf_puts(out, "[ -e \"$a\" ] || [ -L \"$a\" ] || nf \"$a\"; [ \"$a\" = \"$b\" ] && exit 0; "
			  "[ -d \"$db\" ] || exit 111; "
			  "{ [ -w \"$da\" ] && [ -x \"$da\" ] && [ -w \"$db\" ] && [ -x \"$db\" ]; } || exit 101; "
			  "if [ -d \"$b\" ] && ! [ -L \"$b\" ]; then if [ -d \"$a\" ] && ! [ -L \"$a\" ]; then "
			  "mv -f -T -- \"$a\" \"$b\" 2>/dev/null && exit 0; "
			  "rmdir -- \"$b\" 2>/dev/null || exit 105; else exit 102; fi; fi; "
			  "mv -f -- \"$a\" \"$b\" && exit 0; exit 108"))
		return ASP_ENOMEM;
	return 0;
}

int asp__shfs_forget_script(asp_buf *out, char *const *paths, size_t n)
{
	size_t i;

	if (asp__buf_puts(out, "for t in"))
		return ASP_ENOMEM;
	for (i = 0; i < n; i++)
		if (asp__buf_puts(out, " ") || asp__quote(out, paths[i]))
			return ASP_ENOMEM;
	return asp__buf_puts(out, "; do rm -f -- \"$t\" 2>/dev/null; if [ -e \"$t\" ] || [ -L \"$t\" ]; "
			     "then printf n; else printf y; fi; done") ? ASP_ENOMEM : 0;
}

int asp__shfs_temps_script(asp_buf *out, const char *dir, size_t max)
{
	/* Names as the listing gives them, only those shaped like a temp file; fs.c checks them exactly. */
	if (put_var(out, "p", dir) ||
	    asp__buf_puts(out, "cd -- \"$p\" 2>/dev/null || exit 0; date +%s || exit 0; "
			  "[ -z \"${ZSH_VERSION-}\" ] || setopt nullglob 2>/dev/null; set -- .*.asp-*.tmp; ") ||
	    asp__buf_printf(out, "[ $# -le %zu ] || exit 0; ", max) ||
	    asp__buf_puts(out, "[ $# -eq 0 ] && { printf '\\0'; exit 0; }; printf '%s\\0' \"$@\"; "
			  "printf '\\0'; printf '%s\\0' \"$@\" | xargs -0 stat -c '%f %s %Y %n' -- "
			  "2>/dev/null; exit 0"))
		return ASP_ENOMEM;
	return 0;
}

/* (zsh's echo takes a lone "-" for the end of its options: printf says it.) */
int asp__shfs_lstat_many_script(asp_buf *out, char *const *paths, size_t n)
{
	size_t i;

	if (asp__buf_puts(out, "date +%s || exit 0; for t in"))
		return ASP_ENOMEM;
	for (i = 0; i < n; i++)
		if (asp__buf_puts(out, " ") || asp__quote(out, paths[i]))
			return ASP_ENOMEM;
	return asp__buf_puts(out, "; do stat -c '%f %s %Y' -- \"$t\" 2>/dev/null || printf '%s\\n' -; done") ?
		ASP_ENOMEM : 0;
}

/* ------------------------------------------------------------ background processes */

/*
 * bgst DIR: st (r running, x exited, l lost), e (the status or empty), w
 * (1 while the output may grow). A status file written is the end; without
 * one, the supervisor's pid tells running from lost (it died without
 * writing one: killed, or the sandbox restarted). The status is read again
 * after the pid: the command may have ended between the two reads.
 */
#define BG_STATE "bgst() { e=; w=1; [ -e \"$1/end\" ] && w=0; st=r; { read -r e < \"$1/status\"; } 2>/dev/null; " \
		 "if [ -z \"$e\" ]; then p=; { read -r p < \"$1/sup\"; } 2>/dev/null; " \
		 "if [ -n \"$p\" ] && ! kill -s 0 \"$p\" 2>/dev/null; then " \
		 "{ read -r e < \"$1/status\"; } 2>/dev/null; [ -n \"$e\" ] || { st=l; w=0; }; fi; fi; " \
		 "[ -n \"$e\" ] && st=x; }; "
/*
 * bgends DIR: lo and hi, the first and last kept chunk's offset (empty: none
 * yet); no process started. bgtot DIR: tot from the size file, which the
 * writer rewrites after each dd (never more than the chunks hold; it lags
 * them while a dd still waits for more reads of a trickle); 1 while it has
 * none or is rewriting it. bgsz DIR, after bgst: lo, hi and tot, the bytes
 * written: once the output is complete the size file's, else the newest
 * chunk's size counted (`wc`, a process: 2 to 5 ms in a small sandbox).
 */
#define BG_ENDS "[ -z \"${ZSH_VERSION-}\" ] || setopt nullglob 2>/dev/null; " \
		"bgends() { lo=; hi=; for f in \"$1\"/o.*; do k=${f##*/o.}; case $k in ''|*[!0-9]*) continue;; esac; " \
		"{ [ -z \"$lo\" ] || [ \"$k\" -lt \"$lo\" ]; } && lo=$k; " \
		"{ [ -z \"$hi\" ] || [ \"$k\" -gt \"$hi\" ]; } && hi=$k; done; }; "
#define BG_SIZE BG_ENDS "bgtot() { tot=; { read -r tot < \"$1/size\"; } 2>/dev/null; " \
		"case $tot in ''|*[!0-9]*) return 1;; esac; }; " \
		"bgsz() { bgends \"$1\"; [ \"$w\" = 0 ] && bgtot \"$1\" && return 0; z=; " \
		"[ -n \"$hi\" ] && z=$(wc -c 2>/dev/null < \"$1/o.$hi\"); tot=$((${hi:-0} + ${z:-0})); }; "
#define BG_RECORD "\"$st\" \"${e:--}\" \"$w\" \"${lo:-0}\" \"$tot\""

/*
 * The bg functions, POSIX sh: the exec route's scripts define the one they
 * call, the helper (asp__helper_boot) defines them all once. Each takes the
 * id as $1 (checked by bg.c: letters, digits, '-', '_'; safe unquoted in
 * the path) and returns 0 or an ASP_BG_X_* status, never `exit`s: the
 * helper runs it in its own shell (a subshell is a fork, 2 to 3 ms in a
 * small sandbox). On the exec route the call is the script's last command,
 * so its status is the script's.
 */
#define BG_DIR "bgd() { d=$HOME/.asp/bg/$1; [ -d \"$d\" ] || return 100; }; "

/*
 * The launch text, run by bash with "$@" = DIR NAME CMD START CHUNK. The
 * login shell (or the helper) makes the directory (0700, mkdir without
 * -p: an id that exists fails; ~/.asp and ~/.asp/bg 0700 when it makes
 * them; the command keeps the login's umask) and runs the launch text in
 * itself when it is bash (a bash started costs 4 to 6 ms in a small
 * sandbox), else in a bash it starts; bash's `set -m` puts
 * the supervisor in a process group of its own, and the supervisor's inner
 * `set -m` the command in another: a signal to the command's group reaches
 * neither the supervisor, which writes the status, nor the writer, which
 * keeps the output. Nothing holds the exec channel (stdin /dev/null, the
 * rest to files or the pipe): the launch call ends when bash has forked.
 * HUP is ignored, as nohup does; the command runs as `bash -c`, so none of
 * the launcher's variables reach it, and ASP_CALL (the launch call's
 * token, which its kill script matches) is not passed on. A sixth
 * argument is shell text the command's subshell runs first (the helper's
 * cd and exports, which the exec route's wrapper did already).
 */
static const char bg_launch[] =
	"bgl() { d=$1; c=$3; s=$5; printf %s \"$2\" > \"$d/name\" && printf %s \"$3\" > \"$d/cmd\" && "
	"printf %s \"$4\" > \"$d/start\" || return 108; unset ASP_CALL; set -m; "
	"( trap '' HUP; { set -m; ( eval \"${6-}\"; exec bash -c \" $c\" ) </dev/null 2>&1 & "
	"echo $! > \"$d/pid\"; "
	"wait $!; echo $? > \"$d/status\"; } 2>/dev/null | "
	"{ b=$((s / 64)); [ $b -ge 1 ] || b=1; [ $b -le 65536 ] || b=65536; q=; p=; n=0; e=; "
	"while [ -z \"$e\" ]; do [ -z \"$q\" ] || rm -f -- \"$d/o.$q\"; f=$d/o.$n; : > \"$f\"; z=0; "
	"while [ $((s - z)) -ge $b ]; do r=$(LC_ALL=C dd bs=$b count=$(((s - z) / b)) 2>&1 >> \"$f\"); "
	"r=${r##*$'\\n'}; r=${r%% *}; case $r in ''|*[!0-9]*) r=$(($(wc -c < \"$f\") - z));; esac; "
	"[ $r -gt 0 ] || { e=1; break; }; z=$((z + r)); echo $((n + z)) > \"$d/size\"; done; "
	"q=$p; p=$n; n=$((n + z)); done; }; "
	": > \"$d/end\" ) </dev/null >/dev/null 2>&1 3>&- & echo $! > \"$d/sup\"; set +m; }; bgl \"$@\"";

#define BG_MKDIRS "[ -d \"$HOME/.asp/bg\" ] || mkdir -p -m 700 -- \"$HOME/.asp\" \"$HOME/.asp/bg\"; "

int asp__bg_start_script(asp_buf *out, const char *id, const char *name, const char *command,
			 long long start_ms, uint64_t chunk)
{
	char num[32];

	if (asp__buf_puts(out, "command -v bash >/dev/null 2>&1 || { echo 'no bash in the sandbox: "
			  "background processes need it' >&2; exit 109; }; " BG_MKDIRS "d=$HOME/.asp/bg/") ||
	    asp__quote(out, id) || asp__buf_puts(out, "; mkdir -m 700 -- \"$d\" || exit 104; set -- \"$d\" ") ||
	    asp__quote(out, name) || asp__buf_puts(out, " ") || asp__quote(out, command))
		return ASP_ENOMEM;
	snprintf(num, sizeof(num), "%lld", start_ms);
	if (asp__buf_printf(out, " %s %llu; l=", num, (unsigned long long)chunk) || asp__quote(out, bg_launch) ||
	    asp__buf_puts(out, "; if [ -n \"${BASH_VERSION-}\" ]; then eval \"$l\"; "
			  "else bash -c \"$l\" asp-bg \"$@\" 3>&-; fi"))
		return ASP_ENOMEM;
	return 0;
}

/*
 * The state first, then the files: a state that says the output is
 * complete comes with all of it. Both kept chunks are opened before
 * anything is read (a chunk removed meanwhile: look again), so the bytes
 * sent are contiguous even when the writer moves on. Each process started
 * costs the call time (2 to 5 ms each in a small sandbox): the bytes are
 * not counted first, `head -c` stops at the newest chunk's end, and `bgsl
 * FROM COUNT` skips `tail` when the bytes begin at the chunk's start (a
 * read from where the last one ended, at a chunk's first byte, or from 0).
 * The record's SIZE is the size file's (bgtot), which may lag the chunks
 * while the command runs: the reader takes the larger of it and the end of
 * the bytes it got (bg.c). An offset past the end is moved to the end once
 * the output is complete (the size is exact then). bgrd ID OFFSET LIMIT.
 */
#define BG_READ_FN \
	"bgsl() { if [ $1 -le 1 ]; then head -c $2; else tail -c +$1 | head -c $2; fi; }; " \
	"bgrd() { bgd \"$1\" || return; bgst \"$d\"; x=$2; n=$3; t=0; " \
	"while :; do bgends \"$d\"; [ -n \"$lo\" ] || { tot=0; printf '0 %s %s %s %s %s\\n' " BG_RECORD \
	"; break; }; " \
	"{ bgtot \"$d\" || tot=$hi; [ $tot -lt $hi ] && tot=$hi; [ $x -lt $lo ] && x=$lo; " \
	"[ $w = 0 ] && [ $x -gt $tot ] && x=$tot; " \
	"printf '%s %s %s %s %s %s\\n' \"$x\" " BG_RECORD "; m=$n; " \
	"if [ $x -lt $hi ]; then a=$((hi - x)); [ $a -gt $m ] && a=$m; " \
	"bgsl $((x - lo + 1)) $a <&4; m=$((m - a)); x=$hi; fi; " \
	"[ $m -gt 0 ] && bgsl $((x - hi + 1)) $m <&5; break; } " \
	"2>/dev/null 4<\"$d/o.$lo\" 5<\"$d/o.$hi\"; " \
	"t=$((t + 1)); [ $t -lt 20 ] || return 108; done; }; "

int asp__bg_read_script(asp_buf *out, const char *id, uint64_t offset, uint64_t limit)
{
	return asp__buf_puts(out, BG_DIR BG_STATE BG_SIZE BG_READ_FN) ||
	       asp__bg_read_request(out, id, offset, limit) ? ASP_ENOMEM : 0;
}

int asp__bg_read_request(asp_buf *out, const char *id, uint64_t offset, uint64_t limit)
{
	return asp__buf_printf(out, "bgrd %s %llu %llu", id, (unsigned long long)offset,
			       (unsigned long long)limit) ? ASP_ENOMEM : 0;
}

/* Polls: every 50 ms for two seconds, then every 250 ms (a sleep is a process started). */
int asp__bg_wait_script(asp_buf *out, const char *id, unsigned int timeout_ms)
{
	if (asp__buf_printf(out, BG_DIR BG_STATE BG_SIZE "bgd %s || exit 100; ", id) ||
	    asp__buf_puts(out, "i=0; t=0; while bgst \"$d\"; [ $st = r ]; do ") ||
	    (timeout_ms != UINT_MAX && asp__buf_printf(out, "[ $t -ge %u ] && break; ", timeout_ms)) ||
	    asp__buf_puts(out, "if [ $i -lt 40 ]; then sleep 0.05; t=$((t + 50)); else sleep 0.25; t=$((t + 250)); fi; "
			  "i=$((i + 1)); done; bgsz \"$d\"; printf '%s %s %s %s %s\\n' " BG_RECORD))
		return ASP_ENOMEM;
	return 0;
}

/* Only directories shaped like an id (bg.c's rule); name and command verbatim, NUL-ended. */
#define BG_LIST_FN \
	"bgls() { for lf in \"$HOME\"/.asp/bg/*; do i=${lf##*/}; " \
	"case $i in ''|[!A-Za-z0-9]*|*[!A-Za-z0-9_-]*) continue;; esac; " \
	"[ -d \"$lf\" ] || continue; bgst \"$lf\"; bgsz \"$lf\"; s=; g=; " \
	"{ read -r s < \"$lf/start\"; read -r g < \"$lf/pid\"; } 2>/dev/null; " \
	"printf '%s %s %s %s %s %s %s %s\\n' \"$i\" \"${s:-0}\" \"${g:-0}\" " BG_RECORD "; " \
	"cat -- \"$lf/name\" 2>/dev/null; printf '\\0'; " \
	"cat -- \"$lf/cmd\" 2>/dev/null; printf '\\0'; done; }; "

int asp__bg_list_script(asp_buf *out)
{
	return asp__buf_puts(out, BG_STATE BG_SIZE BG_LIST_FN "bgls") ? ASP_ENOMEM : 0;
}

int asp__bg_list_request(asp_buf *out)
{
	return asp__buf_puts(out, "bgls") ? ASP_ENOMEM : 0;
}

/*
 * The command's whole process group. Right after a start the pid file may
 * not be written yet: wait for it (up to 2 s). dash wants `--` before a
 * negative pid, BusyBox refuses it: both spellings. bgsig ID SIGNAME.
 */
#define BG_SIGNAL_FN \
	"bgsig() { bgd \"$1\" || return; i=0; while ! [ -s \"$d/pid\" ]; do [ -s \"$d/status\" ] && break; " \
	"[ $i -ge 200 ] && return 105; sleep 0.01; i=$((i + 1)); done; " \
	"[ -s \"$d/pid\" ] && read -r g < \"$d/pid\" && " \
	"{ kill -s \"$2\" -- \"-$g\" 2>/dev/null || kill -s \"$2\" \"-$g\" 2>/dev/null; }; :; }; "

int asp__bg_signal_script(asp_buf *out, const char *id, const char *signame)
{
	return asp__buf_puts(out, BG_DIR BG_SIGNAL_FN) || asp__bg_signal_request(out, id, signame) ? ASP_ENOMEM
												      : 0;
}

int asp__bg_signal_request(asp_buf *out, const char *id, const char *signame)
{
	return asp__buf_printf(out, "bgsig %s %s", id, signame) ? ASP_ENOMEM : 0;
}

#define BG_REMOVE_FN "bgrm() { bgd \"$1\" || return; bgst \"$d\"; [ $st = r ] && return 101; rm -rf -- \"$d\"; }; "

int asp__bg_remove_script(asp_buf *out, const char *id)
{
	return asp__buf_puts(out, BG_DIR BG_STATE BG_REMOVE_FN) || asp__bg_remove_request(out, id) ? ASP_ENOMEM
												   : 0;
}

int asp__bg_remove_request(asp_buf *out, const char *id)
{
	return asp__buf_printf(out, "bgrm %s", id) ? ASP_ENOMEM : 0;
}

/* ------------------------------------------------------------ the helper */

/*
 * bgs ID NAME CMD START CHUNK PRE CWD: the start, in the helper's bash
 * (the launch text is $_asp_l there). CWD is checked here, so that a
 * missing one fails the call (126), and entered by PRE in the command's
 * subshell, with the caller's exports: the helper's own shell keeps its
 * directory and environment for the next request.
 */
#define BG_START_FN \
	"bgs() { [ -d \"$7\" ] && [ -x \"$7\" ] || return 126; " BG_MKDIRS \
	"d=$HOME/.asp/bg/$1; mkdir -m 700 -- \"$d\" || return 104; shift; " \
	"set -- \"$d\" \"$@\"; eval \"$_asp_l\"; }; "

int asp__bg_start_request(asp_buf *out, const char *cwd, const char *const *env, const char *id,
			  const char *name, const char *command, long long start_ms, uint64_t chunk,
			  asp_error *err)
{
	asp_buf pre = { 0 };
	size_t i;
	int rc = 0;

	if (asp__buf_puts(&pre, "cd -- ") || asp__quote(&pre, cwd) || asp__buf_puts(&pre, " || exit 126; "))
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
	for (i = 0; !rc && env && env[i]; i++)
		rc = put_env(&pre, env[i], i, err);
	if (!rc && (asp__buf_printf(out, "bgs %s ", id) || asp__quote(out, name) || asp__buf_puts(out, " ") ||
		    asp__quote(out, command) ||
		    asp__buf_printf(out, " %lld %llu ", start_ms, (unsigned long long)chunk) ||
		    asp__quote(out, (const char *)pre.data) || asp__buf_puts(out, " ") || asp__quote(out, cwd)))
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
	asp__buf_free(&pre);
	return rc;
}

/*
 * The helper's program (bash), after the login shell checked for bash and
 * dropped what the wrapper drops. Its stderr goes nowhere; a request's goes
 * to a file under ~/.asp, read back only when the request failed, and
 * removed when the helper exits. A helper killed outright (SIGKILL) leaves
 * it: a starting helper removes those of helpers no longer running (no
 * /proc/PID; nothing when /proc does not show the helper itself). Should
 * one remove a live helper's (its pid in another namespace), that helper's
 * next request makes the file again. Each
 * request runs in the helper's own shell (the bg functions return, never
 * exit: a subshell would be a fork), with stdin /dev/null so that it never
 * reads the next request. Where the sandbox has bash's loadable builtins
 * (Debian: bash-builtins), mkdir, rm and sleep are builtins in the helper:
 * no process started for them (a start's mkdir: 5 to 8 ms in a small
 * sandbox). Only the helper's shell has them; the commands it starts do not.
 */
/*
 * The helper's bgsl, in bash: the first 16 KiB of the bytes, and a skip of
 * up to 64 KiB before them, by the shell's read (which reads a regular
 * file in blocks and seeks back to what it took), with no process
 * started; `head` and `tail` beyond. read -d '' -n K stops at a NUL (taken,
 * not stored), after K bytes (LC_ALL=C: a character is a byte) or at the
 * end; a stop short of K that is not the end was a NUL, which is written
 * back. bgcp COUNT copies, bgsk COUNT skips (1: the file ended first).
 */
#define HELPER_BGSL \
	"bgcp() { local LC_ALL=C IFS= p k=$1 c=16384; [ $k -lt $c ] && c=$k; k=$((k - c)); " \
	"while [ $c -gt 0 ]; do if ! read -r -d '' -n $c p; then printf %s \"$p\"; return 0; fi; " \
	"printf %s \"$p\"; c=$((c - ${#p})); if [ $c -gt 0 ]; then printf '\\0'; c=$((c - 1)); fi; done; " \
	"[ $k -le 0 ] || head -c $k; }; " \
	"bgsk() { local LC_ALL=C IFS= p c=$1; while [ $c -gt 0 ]; do read -r -d '' -n $c p || return 1; " \
	"c=$((c - ${#p})); [ $c -gt 0 ] && c=$((c - 1)); done; return 0; }; " \
	"bgsl() { if [ $1 -le 1 ]; then bgcp $2; elif [ $1 -le 65537 ]; then bgsk $(($1 - 1)) && bgcp $2; " \
	"else tail -c +$1 | head -c $2; fi; }; "

#define HELPER_PROGRAM \
	"exec 2>/dev/null; for _asp_b in mkdir rm sleep; do enable -f \"$_asp_b\" \"$_asp_b\"; done; " \
	BG_DIR BG_STATE BG_SIZE BG_READ_FN BG_LIST_FN BG_SIGNAL_FN BG_REMOVE_FN BG_START_FN HELPER_BGSL \
	"[ -d \"$HOME/.asp\" ] || mkdir -m 700 -- \"$HOME/.asp\"; _asp_e=$HOME/.asp/helper-$$.err; " \
	"[ -d /proc/$$ ] && for _asp_f in \"$HOME\"/.asp/helper-*.err; do _asp_p=${_asp_f##*/helper-}; " \
	"_asp_p=${_asp_p%.err}; [ -f \"$_asp_f\" ] && ! [ -d \"/proc/$_asp_p\" ] && rm -f -- \"$_asp_f\"; done; " \
	"trap 'rm -f -- \"$_asp_e\"' EXIT; trap exit HUP PIPE TERM; printf '%s\\n' \"$1\"; " \
	"while IFS= read -r -d '' _asp_q; do _asp_t=${_asp_q%% *}; _asp_q=${_asp_q#* }; " \
	"eval \"$_asp_q\" </dev/null 2>\"$_asp_e\"; _asp_s=$?; _asp_m=; " \
	"if [ $_asp_s != 0 ]; then _asp_m=$(head -c 200 -- \"$_asp_e\"); _asp_m=${_asp_m//[$'\\n\\r']/ }; fi; " \
	"printf '%s %s %s\\n' \"$_asp_t\" \"$_asp_s\" \"$_asp_m\"; done"

int asp__helper_boot(asp_buf *out, const char *hello)
{
	asp_buf prog = { 0 };
	int rc;

	rc = asp__buf_puts(&prog, "_asp_l=") || asp__quote(&prog, bg_launch) ||
	     asp__buf_puts(&prog, "; " HELPER_PROGRAM) ||
	     asp__buf_puts(out, "unset SSH_CLIENT SSH_CONNECTION SSH_TTY SSH_ORIGINAL_COMMAND ASP_CALL; "
			   "command -v bash >/dev/null 2>&1 || exit 109; exec bash -c ") ||
	     asp__quote(out, (const char *)prog.data) || asp__buf_printf(out, " asp-helper %s", hello);
	asp__buf_free(&prog);
	return rc ? ASP_ENOMEM : 0;
}
