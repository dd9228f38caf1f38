/*
 * cli.h - asp-exec, the command-line client for shell harnesses: what its
 * parts share. See docs/asp-exec.1.md for the user's view.
 *
 * Two programs, so that a call through the master starts fast:
 *
 *   asp-exec       the front: links only libc and cJSON (starting a program
 *                  that links libcrypto costs ~1.5 ms, a third of a call).
 *                  It parses the options, finds the configuration, and hands
 *                  the request to the master (starting one if needed). For
 *                  anything else it execs asp-exec-core with the same
 *                  arguments.
 *   asp-exec-core  links libasp: runs a request directly (--no-master, or
 *                  when no master can be used), --check, and is the master.
 *
 *   opts.c      options -> cli_options; the configuration to use (both)
 *   libasp/config/discover.c
 *               libasp's discovery, libc only: the front compiles
 *               it, the core has it in libasp
 *   client.c    a request through the master, starting it (both)
 *   proto.c     the master's wire format; the request type (both)
 *   rundir.c    the private per-user directory and socket names (both)
 *   sha256.c    SHA-256 for socket names (both)
 *   signals.c   SIGINT/SIGTERM/SIGHUP cancel what runs (both)
 *   util.c      messages (both)
 *   front.c     main() of asp-exec
 *   core.c      main() of asp-exec-core; the direct run
 *   run.c       one request on an open sandbox -> exit status (core)
 *   json.c      the --json rendering of a result (core)
 *   pump.c      a blocking stdin turned into a pipe libasp can poll (core)
 *   tty.c       --tty: the command on a pseudo-terminal, this terminal raw (core)
 *   progress.c  --read/--write progress on a terminal (core)
 *   check.c     --check (core)
 *   master.c    the master: one asp_sandbox, a socket, a thread per request (core)
 *   bg.c        --bg, --bg-list, --bg-output, --bg-signal, --bg-wait, --bg-remove (core)
 *
 * Direct runs and the master both go through cli_run(), so a request means
 * the same either way.
 */
#ifndef ASP_CLI_H
#define ASP_CLI_H

#include <stdatomic.h>
#include <stddef.h>

#include "asp.h"

/* Exit statuses of asp-exec's own failures (a command's status passes through). */
#define CLI_EXIT_FILE 1       /* --read/--write failed, --cwd missing, no master to --stop */
#define CLI_EXIT_USAGE 2
#define CLI_EXIT_TIMEOUT 124  /* --timeout passed and the command was killed */
#define CLI_EXIT_CONFIG 251   /* no .asp.json, or it (or its identity) is invalid */
#define CLI_EXIT_HOSTKEY 252  /* host key mismatch, revoked or unusable */
#define CLI_EXIT_AUTH 253     /* authentication failed */
#define CLI_EXIT_CONNECT 254  /* could not connect, or the connection was lost */
#define CLI_EXIT_FAILURE 255  /* any other failure of asp-exec itself */

#define CLI_DEFAULT_PERSIST_S 300
#define CLI_CORE_NAME "asp-exec-core"

enum cli_mode { CLI_EXEC = 1, CLI_READ = 2, CLI_WRITE = 3, CLI_STOP = 4, CLI_BG = 5 };

/* What to do; every string is malloc'd and owned by the request. */
typedef struct cli_request {
	int mode;                /* enum cli_mode */
	int json;                /* CLI_EXEC: print one JSON object instead of streaming */
	int mkdirs;              /* CLI_WRITE: create missing parent directories */
	int quiet;               /* CLI_READ, CLI_WRITE: no progress on a terminal */
	unsigned int timeout_ms; /* CLI_EXEC: 0 means none */
	int tty;                 /* CLI_EXEC: --tty given this many times (2: even when stdin is no
				    terminal). Never sent to a master: --tty runs directly (opts.c) */
	char *cwd;               /* CLI_EXEC: NULL means the workspace */
	char **env;              /* CLI_EXEC: "NAME=value" entries; NULL-terminated, never NULL */
	char **args;             /* CLI_EXEC: the COMMAND words (one word is shell text);
				    NULL-terminated, never NULL */
	char *path;              /* CLI_READ, CLI_WRITE; CLI_BG: the id (NULL for start and list) */
} cli_request;

/* An empty request; NULL when out of memory. */
cli_request *cli_request_new(void);
/* Append a copy of s to a NULL-terminated list (req->env, req->args). 0 or -1. */
int cli_list_add(char ***list, const char *s);
void cli_request_free(cli_request *req);

/* ---------------------------------------------------------------- options */

typedef struct cli_options {
	cli_request *req;
	char *config;              /* --config, made absolute when it exists */
	int no_master, check, stop;
	int verbose;               /* -v given this many times */
	unsigned int persist_s;
	const char *master_socket; /* hidden --master SOCKET: run as the master */
	int ready_fd;              /* hidden --ready-fd N: the master's ready pipe */
	int config_fd;             /* hidden --config-fd N: the master's configuration, open */
	/* The --bg options: the operation (start, list, output, signal, wait, remove), and the
	 * parameters cli_parse puts in req->args after it (numbers as text) */
	const char *bg_op;
	char *bg_name, *bg_keep, *bg_offset, *bg_limit, *bg_signal;
} cli_options;

/*
 * Parse argv. 0 to go on; 1 when done (--help, --version printed); -1 on a
 * usage error (reported). Free with cli_options_free.
 */
int cli_parse(cli_options *o, int argc, char **argv);
void cli_options_free(cli_options *o);

/* Closed standard descriptors become /dev/null, so they can be passed and written. */
void cli_open_std_fds(void);

/* "asp-exec: <message>\n" on fd, in one write. */
void cli_say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------------- discovery */

/*
 * The configuration libasp would use, as an absolute path (malloc'd):
 * realpath(given) for --config, else what libasp's discovery finds
 * ($ASP_CONFIG, else the first .asp.json from the current directory up,
 * when trusted). *fd is the file open for reading (close-on-exec): for a
 * discovered file, the very descriptor discovery judged. What the path
 * names may change after the judging; the master is handed *fd, never the
 * path to open. NULL (and *fd -1) when there is none to use (nothing
 * found, an unusable or untrusted candidate, an error): then
 * asp-exec-core runs the call and libasp reports the problem.
 */
char *cli_discover(const char *given, int *fd);

/* ---------------------------------------------------------------- signals */

/*
 * Local SIGINT, SIGTERM and SIGHUP: the first one is remembered; each is
 * passed to `hook` (may be NULL; it must be async-signal-safe) and, as a
 * CANCEL frame, to the master's socket given to cli_signals_target_sock.
 * SIGPIPE is ignored: a closed stdout is an error to handle, not a death.
 */
void cli_signals_install(void (*hook)(int sig));
void cli_signals_target_sock(int sock); /* -1: none */
/* The first signal received, or 0. */
int cli_signals_received(void);

/* ---------------------------------------------------------------- the master, client side */

/*
 * Run the request through the master for `config` (absolute), starting one
 * (persist_s idle seconds) if none answers; a master started here reads
 * its configuration from config_fd (cli_discover's), not from the path.
 * Returns 0 with *status set when the master ran it, -1 when no master
 * could be used (then run directly: nothing has run yet).
 */
int cli_client_run(const char *config, int config_fd, unsigned int persist_s,
		   const cli_request *req, int *status);

/* --stop: ask the master for `config` to exit; returns the exit status. */
int cli_client_stop(const char *config, int config_fd);

/* asp-exec-core next to this program (malloc'd), or NULL. */
char *cli_core_path(void);

/* Paths of the master for one configuration. */
typedef struct cli_paths {
	char dir[70];     /* short enough for sock */
	char sock[108];   /* sizeof(sockaddr_un.sun_path) */
	char lock[120];
} cli_paths;

/*
 * The private directory ($XDG_RUNTIME_DIR/asp when that is ours, else
 * ~/.cache/asp/run; never a name in shared /tmp),
 * created 0700 when missing, and the socket and lock names for `config`
 * (an absolute path, its content read from config_fd with pread) in it. -1 with a reason in `why` when the directory
 * is not ours or not private, or a name does not fit.
 */
int cli_master_paths(cli_paths *out, const char *config, int config_fd, char *why,
		     size_t whylen);

/* The directory is a real directory owned by us with no group/other bits. */
int cli_dir_is_private(const char *dir, char *why, size_t whylen);

/* SHA-256, streaming. */
typedef struct cli_sha256 {
	unsigned int h[8];
	unsigned char block[64];
	size_t used;
	unsigned long long bytes;
} cli_sha256;

void cli_sha256_init(cli_sha256 *s);
void cli_sha256_update(cli_sha256 *s, const void *data, size_t len);
void cli_sha256_final(cli_sha256 *s, unsigned char out[32]);

/* ---------------------------------------------------------------- core only */

/*
 * Where a request reads and writes, and how it is cancelled. The
 * descriptors belong to the caller. cancel_signal (a signal number, set
 * before cancel is triggered) decides the exit status of a cancelled run:
 * 128 + it, as a shell reports a process killed by that signal.
 */
typedef struct cli_io {
	int in, out, err;
	asp_cancel *cancel;
	atomic_int cancel_signal;
} cli_io;

/* Cancel io's request because of signal `sig` (async-signal-safe). */
void cli_io_cancel(cli_io *io, int sig);

/* Run the request; returns asp-exec's exit status. Messages go to io->err. */
int cli_run(asp_sandbox *sb, const cli_request *req, cli_io *io);

/*
 * The shell text for the COMMAND words: one word is shell text already,
 * several are quoted and joined (malloc'd; NULL when out of memory).
 */
char *cli_command_text(char *const *args);
/* A shell's view of a result: the exit code, 128 + N for signal N, 124 for a timeout. broken: stdout closed. */
int cli_exec_status(const asp_exec_result *r, const cli_io *io, int broken);
/* The exit status of a failed call (rc, e), its message on io->err unless the call was cancelled. */
int cli_fail(cli_io *io, int rc, const asp_error *e);

/*
 * --tty (tty.c): run the command on a pseudo-terminal of this terminal's
 * size and TERM, with io->in in raw mode (restored on every way out) and
 * its bytes forwarded as they come; returns the exit status.
 */
int cli_run_tty(asp_sandbox *sb, const cli_request *req, cli_io *io);

/*
 * Open the sandbox lazily (the first operation connects), as both modes
 * do. text (may be NULL): the configuration's content, named config; else
 * config is read (NULL: libasp's discovery, which reads what it judged).
 */
int cli_open(asp_sandbox **out, const char *config, const char *text,
	     unsigned int max_connections, asp_error *err);

/*
 * -v: 0 (no trace), ASP_LOG_INFO, or ASP_LOG_DEBUG (-vv). cli_open and
 * --check then pass the trace to cli_trace, which writes
 * "asp-exec: LEVEL: text" lines to stderr.
 */
extern unsigned int cli_trace_level;
void cli_trace(asp_log_level level, const char *msg, void *userdata);

/* The exit status for an asp_error_code. */
int cli_exit_for_error(int code);

/* Write all of data, waiting while fd is full; gives up (-1) on an error or a cancel (may be NULL). */
int cli_write_all(int fd, const void *data, size_t len, const asp_cancel *cancel);

/* --json: the result as one line of JSON (malloc'd, ends in "\n"); NULL when out of memory. */
char *cli_json_result(const asp_exec_result *r);
/* obj[name] = the bytes as a string (UTF-8 without NUL) or base64, and obj[name_encoding] says which. 0 or -1. */
struct cJSON;
int cli_json_add_bytes(struct cJSON *obj, const char *name, const unsigned char *data, size_t len);

/* The --bg* requests (bg.c): req->args[0] names the operation (see opts.c). */
int cli_run_bg(asp_sandbox *sb, const cli_request *req, cli_io *io);

/*
 * A stdin that libasp can poll: a regular file or a non-blocking
 * descriptor as it is, else a pipe fed by a thread (libasp reads stdin_fd
 * without waiting for it, and O_NONBLOCK on a shared terminal or pipe would
 * leak to other processes).
 */
typedef struct cli_pump cli_pump;
/* *fd_out is what to give asp_exec_options.stdin_fd (with ASP_EXEC_STDIN_FD): src or a pipe. */
int cli_pump_start(cli_pump **out, int src, int *fd_out);
/* Stop the thread (if any) and close the pipe. Accepts NULL. */
void cli_pump_stop(cli_pump *p);

/*
 * Progress of a --read or --write on stderr (progress.c): NULL, and every
 * call a no-op, when fd is not a terminal or `quiet`. `verb` and `path`
 * name the transfer ("read PATH").
 */
typedef struct cli_progress cli_progress;
cli_progress *cli_progress_start(int fd, int quiet, const char *verb, const char *path);
/* Bytes done so far, of total (0: not known); phase: what happens now, or NULL (a static string). */
void cli_progress_set(cli_progress *p, uint64_t done, uint64_t total, const char *phase);
/* Totals and a newline after success, else the line erased; frees p. */
void cli_progress_end(cli_progress *p, int ok);

/* --check: describe the connection (one JSON object with json); returns the exit status. */
int cli_check(const char *config, int json);

/*
 * The hidden `--master SOCKET` mode; ready_fd gets one byte once it
 * listens. The configuration is read from config_fd (the file its client
 * judged), config only names it: the master never opens that path.
 */
int cli_master_main(const char *config, int config_fd, const char *socket_path,
		    unsigned int persist_s, int ready_fd);

#endif
