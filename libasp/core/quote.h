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
 *   cd -- CWD || report "nocwd"; export NAME=VALUE... ASP_CALL=TOKEN; report "$$";
 *   eval COMMAND
 * The wrapper shell is a session and process-group leader under sshd, so
 * $$ is the process group that a timeout or cancel kills. The report is the
 * line "<marker>:<pid>\n" (or "<marker>:nocwd\n") on stdout; anything a
 * login script printed before it is discarded by the reader.
 * env entries must be NAME=value with a valid NAME (ASP_EINVAL otherwise).
 * token: the call's "asp-call-<hex>", letters, digits and '-' only (the
 * kill script's pattern); every process of the call inherits it.
 * own: COMMAND is one of libasp's own scripts (asp__shfs_*_script, the
 * bg scripts but a wait's), which may `exit`: it runs in the wrapper's
 * shell, an EXIT trap writes the end line, and no watchdog is started (the
 * script ends on its own; fd 3, the end line's, stays open in it: a
 * process it leaves running closes it).
 * primed: the script goes to a primed shell (asp__prime_boot), whose
 * watchdog runs already, for `token`, the shell's (asp__chan_shell_token).
 */
int asp__exec_script(asp_buf *out, const char *marker, const char *token, const char *cwd,
		     const char *const *env, const char *command, int own, int primed, asp_error *err);

/*
 * The primed shell (exec.c). ASP_PRIME_BOOT ends the exec request that
 * starts it (asp__prime_boot): the login shell reads lines from stdin,
 * each behind one byte of framing, until a line ".", then evals what it
 * read (each line without its first byte) and exits. Stdin then holds
 * what follows that line: the command's stdin. Stdin that ends before the
 * "." line runs nothing. A shell reads such lines a byte at a time (it
 * never reads past the line it takes), so only short scripts are sent this
 * way. asp__prime_frame appends `script` so framed: "x" before each line,
 * `unset s` (the loop's variable) first, the "." line last. 0 or
 * ASP_ENOMEM.
 */
#define ASP_PRIME_BOOT \
	"s=;while IFS= read -r l;do case $l in .)unset l;eval \"$s\";exit;;esac;s=\"$s${l#?}\n\";done"
int asp__prime_frame(asp_buf *out, const char *script, size_t len);

/*
 * Append the exec request that starts a primed shell: the watchdog's
 * definition and its start for `token`, the call the shell will run, then
 * ASP_PRIME_BOOT. 0 or ASP_ENOMEM.
 */
int asp__prime_boot(asp_buf *out, const char *token);

/*
 * prefix and 24 random hex digits, NUL-terminated, into out[size]: a
 * command's marker ("asp-"), a call token. 0, or ASP_ERROR when there is
 * no randomness or no room.
 */
int asp__random_name(char *out, size_t size, const char *prefix);

/* A new call token, "asp-call-<hex>" (the wrapper's ASP_CALL: see asp__kill_script). */
#define ASP_TOKEN_SIZE 40
int asp__call_token(char token[ASP_TOKEN_SIZE]);

/* Check that every env entry is NAME=value with a valid NAME (ASP_EINVAL otherwise). */
int asp__env_check(const char *const *env, asp_error *err);

/*
 * The script that kills a call: process group `pgid`, the session it leads,
 * and, where /proc exists, every descendant of those and every process whose
 * environment carries `token` (asp__exec_script's ASP_CALL), stopped as
 * found; SIGTERM, then SIGKILL if any is still alive after grace_ms.
 */
int asp__kill_script(asp_buf *out, long pgid, const char *token, unsigned int grace_ms);

/*
 * Send signal `name` (a bare name such as TERM, checked by the caller
 * against exec.c's list) to process group pgid (> 0). 0, ASP_EINVAL (a name
 * that is not all capitals) or ASP_ENOMEM.
 */
int asp__signal_script(asp_buf *out, long pgid, const char *name);

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
int asp__cut_check_script(asp_buf *out, long pgid, const char *token, unsigned int grace_ms);


/*
 * Scripts of the shell-command file transport (shfs.c), for a POSIX sh
 * with test, printf, dd, mkdir, rmdir, rm, mv, chmod, stat (GNU or
 * BusyBox `stat -c`) and, for listings, xargs -0. Paths are absolute and
 * reach the shell single-quoted. Each script says how it ended in its exit
 * status: 0, or one of ASP_SHFS_*; anything else is a failure whose
 * stderr explains it. Data goes to stdout (read: the bytes; stat: "HEX
 * SIZE MTIME\n"; list: every name NUL-terminated, an empty name, then
 * "HEX SIZE MTIME NAME\n" per entry that still exists).
 */
enum {
	ASP_SHFS_ENOENT = 100,
	ASP_SHFS_EACCES = 101,
	ASP_SHFS_EISDIR = 102,
	ASP_SHFS_ENOTDIR = 103,
	ASP_SHFS_EEXIST = 104,
	ASP_SHFS_ENOTEMPTY = 105,
	ASP_SHFS_ELIMIT = 106,
	ASP_SHFS_ENOSPC = 107,
	ASP_SHFS_EIO = 108,
	ASP_SHFS_NOTOOL = 109,   /* a tool the call needs is missing (stderr names it) */
	ASP_SHFS_SYMLINK = 110,  /* write: the target is a link; stdout holds the resolved path */
	ASP_SHFS_NODIR = 111     /* rename: the target's directory does not exist */
};

/* Append data as printf(1) format text: printable ASCII as is, the rest as \ooo (and % as %%). */
int asp__printf_escape(asp_buf *out, const void *data, size_t len);

/*
 * Read: [offset, offset + span) of path to stdout, in 64 KiB dd blocks.
 * When size_over is non-zero (a read to the end under a cap), a regular
 * file larger than size_over bytes ends with ASP_SHFS_ELIMIT before any
 * byte is sent, and the span is rounded up to whole blocks (one dd, not
 * two: up to 64 KiB past span may come, which the caller's cap check
 * sees as over the cap, as it would span's last byte).
 */
int asp__shfs_read_script(asp_buf *out, const char *path, uint64_t offset, uint64_t span,
			  uint64_t size_over);

/*
 * Write data (inline as printf text when inline_data is non-NULL, else
 * from stdin) to path: atomic through tmp (same directory) and mv, or in
 * place when tmp is NULL. mode 0 keeps an existing file's mode (new files:
 * 0644 less the umask); mkdirs creates missing parents.
 */
int asp__shfs_write_script(asp_buf *out, const char *path, const char *tmp,
			   const void *inline_data, size_t len, unsigned int mode, int mkdirs);

int asp__shfs_stat_script(asp_buf *out, const char *path, int follow);
/* At most max entries (more: ASP_SHFS_ELIMIT before any name is sent). */
int asp__shfs_list_script(asp_buf *out, const char *path, size_t max);
int asp__shfs_mkdir_script(asp_buf *out, const char *path, unsigned int mode, int parents);
int asp__shfs_remove_script(asp_buf *out, const char *path);
/*
 * Is the file system holding path (or its nearest existing ancestor)
 * mounted read-only? Prints "ro" or "rw" from /proc/self/mountinfo (the
 * longest mount point over the path, its mount or super block options);
 * nothing when that cannot be told (no /proc).
 */
int asp__shfs_rofs_script(asp_buf *out, const char *path);
int asp__shfs_rename_script(asp_buf *out, const char *from, const char *to);
/* rm -f each path; stdout gets 'y' (gone) or 'n' per path, in order. */
int asp__shfs_forget_script(asp_buf *out, char *const *paths, size_t n);
/*
 * For the sweep of stale temp files (fs.c): the server's clock (date +%s)
 * on the first line, then a listing as above of the names in dir shaped
 * like a temp file (nothing after the clock when there are more than max).
 */
int asp__shfs_temps_script(asp_buf *out, const char *dir, size_t max);
/* The server's clock, then per path "HEX SIZE MTIME" (lstat) or "-", a line each. */
int asp__shfs_lstat_many_script(asp_buf *out, char *const *paths, size_t n);

/*
 * Background processes (bg.c): state under $HOME/.asp/bg/ID/ in the
 * sandbox (0700): name, cmd and start (what asp_bg_start was given), sup
 * (the supervisor's pid), pid (the command's pid and process group),
 * status (its wait status as the shell reports it: 128+N for signal N),
 * end (the output is complete), and the kept output, o.OFFSET files of
 * at most chunk bytes each, named by the offset of their first byte. The
 * writer removes the chunk two back when it starts one, so at most two
 * chunks (2 x chunk bytes) are kept. It is a bash loop of dd: each dd
 * reads at most count blocks of chunk/64 bytes and writes every read at
 * once (head -c, the obvious tool, holds its output in stdio's buffer
 * until 4 KiB or its end; dd's count_bytes counts no partial reads from a
 * pipe), and says in its last line how many bytes it copied; a chunk ends
 * when less than a block of room is left (it holds 63/64 of chunk or
 * more), the output when a dd copies nothing. One dd per up to 64 reads
 * of the pipe: a process per 64 lines of a trickle, per chunk of a flood.
 * The launcher needs bash
 * (`set -m` gives the command a process group of its own without a
 * terminal; dash, BusyBox sh and zsh refuse it); the others run in any
 * POSIX login shell. id is checked by bg.c (letters, digits, '-', '_');
 * it is quoted all the same. Exit statuses: 0, or one of ASP_BG_X_*. A
 * script never ends in `exit 0` or `exec`: it runs off its end. A wait's
 * runs in asp_exec's wrapper, which prints its end line only then (else
 * exec.c asks the sandbox whether the command still runs, one more exec:
 * check_cut); the others run as libasp's own (bg.c), whose EXIT trap
 * prints it.
 *
 * Records: read, wait, list print "STATE CODE OPEN START SIZE" (STATE r,
 * x or l: running, exited, lost; CODE the status or '-'; OPEN 1 while the
 * output may grow; START the first byte kept, SIZE the bytes written);
 * read puts the offset its bytes begin at first ("OFFSET " + record, a
 * line, then the bytes); list prints per process "ID MS PID " + record,
 * a line, then the name and the command, each ended by a NUL byte.
 */
enum {
	ASP_BG_X_ENOENT = 100, /* no such id */
	ASP_BG_X_BUSY = 101,   /* remove: still running */
	ASP_BG_X_EEXIST = 104, /* start: the id exists */
	ASP_BG_X_NOPID = 105,  /* signal: the command's pid never appeared */
	ASP_BG_X_EIO = 108,    /* read: the kept files kept changing under the reader */
	ASP_BG_X_NOBASH = 109  /* start: no bash in the sandbox */
};
int asp__bg_start_script(asp_buf *out, const char *id, const char *name, const char *command,
			 long long start_ms, uint64_t chunk);
int asp__bg_read_script(asp_buf *out, const char *id, uint64_t offset, uint64_t limit);
/* timeout_ms UINT_MAX: no limit. */
int asp__bg_wait_script(asp_buf *out, const char *id, unsigned int timeout_ms);
int asp__bg_list_script(asp_buf *out);
/* signame: a signal's name without SIG (bg.c maps numbers to names), e.g. "TERM". */
int asp__bg_signal_script(asp_buf *out, const char *id, const char *signame);
int asp__bg_remove_script(asp_buf *out, const char *id);

/*
 * The bg helper (libasp/exec/helper.c): one bash per connection that has
 * every bg function above defined once and runs requests read from its
 * stdin. asp__helper_boot is its exec request: the login shell drops what
 * the wrapper drops (SSH_CLIENT, ...), checks for bash (exit 109, having
 * printed nothing, when there is none) and becomes `bash -c PROGRAM`,
 * which prints the line `hello` (a token of the caller's, letters, digits
 * and '-') once its functions are defined, then loops: a request is
 * "END-TOKEN SHELL-TEXT" ended by a NUL byte; the text runs in a subshell
 * with stdin /dev/null, its stdout is the answer, and the line
 * "END-TOKEN STATUS MESSAGE" follows it (MESSAGE: the start of its stderr,
 * one line, when STATUS is not 0). EOF on stdin ends the helper.
 * The *_request builders make the SHELL-TEXT for each bg call; the
 * *_script ones above are the same call with its functions defined first,
 * for the exec route. A start's request does what the exec wrapper does
 * first (cd CWD, exit 126 when it cannot; export each env entry; env is
 * checked as there, ASP_EINVAL).
 */
int asp__helper_boot(asp_buf *out, const char *hello);
int asp__bg_start_request(asp_buf *out, const char *cwd, const char *const *env, const char *id,
			  const char *name, const char *command, long long start_ms, uint64_t chunk,
			  asp_error *err);
int asp__bg_read_request(asp_buf *out, const char *id, uint64_t offset, uint64_t limit);
int asp__bg_list_request(asp_buf *out);
int asp__bg_signal_request(asp_buf *out, const char *id, const char *signame);
int asp__bg_remove_request(asp_buf *out, const char *id);

#endif
