/*
 * asp.h - libasp, the client side of the Agent Sandbox Protocol (ASP v0).
 *
 * A harness finds `.asp.json`, opens an asp_sandbox, and sends its tools'
 * raw I/O (read, write, exec, and filesystem calls) to a remote sandbox over
 * SSH. This is the only header users include; it never includes libssh2.
 *
 * Conventions (all functions):
 *  - Fallible calls return int: ASP_OK (0) or a negative ASP_E* code.
 *  - Output parameters come first and are named `out`.
 *  - The last parameter is an optional, caller-owned `asp_error *err`; when
 *    not NULL it receives the code and a specific message naming the file,
 *    field or path involved. There is no hidden per-thread error state.
 *    Text a message quotes from the caller or the sandbox (paths, names,
 *    server messages, stderr) is escaped: control bytes, bidirectional
 *    controls, invalid UTF-8 and '\\' appear as \\xNN, so a message holds no
 *    terminal escape and no line break.
 *  - Memory that libasp returns is freed by libasp (asp_free, *_free);
 *    every *_free accepts NULL.
 *  - Options structs start with `unsigned int version`; initialise them with
 *    the ASP_*_OPTIONS_INIT macro or the *_options_init() function. NULL
 *    options mean defaults, and so does a zero-initialised struct with only
 *    `version` set: every field's zero value is its default (the INIT
 *    macros set nothing but the version). Unknown flag bits are ASP_EINVAL.
 *    Fields are only ever appended, and each addition bumps the version: a
 *    program built against an older asp.h passes its older version, and
 *    libasp reads (and, for asp_sandbox_info, writes) only the bytes that
 *    version had; the fields it lacks keep their defaults. A version newer
 *    than the library is ASP_EINVAL.
 *  - Names: an object's functions are asp_<noun>_<verb> (asp_config_find,
 *    asp_cancel_trigger, asp_exec_result_free) or asp_<noun>_<property>
 *    for accessors (asp_list_count, asp_sandbox_workspace); the sandbox's
 *    operations are plain verbs (asp_open, asp_read, asp_exec, asp_mkdir).
 *  - Calls that fail only on bad arguments, and so take no asp_error *:
 *    asp_*_options_init, asp_sandbox_info_init (ASP_EINVAL for NULL or an
 *    unknown version) and asp_list_stat (ASP_EINVAL for NULL or an index
 *    out of range); accessors that return a pointer or count return
 *    NULL/0 on bad arguments instead. There is nothing more to say about
 *    such a failure than its code.
 *
 * Copyright (c) 2026 The libasp authors. MIT licence, see LICENSE.
 */
#ifndef ASP_H
#define ASP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ASP_BUILDING) && defined(__GNUC__)
#define ASP_EXTERN(type) __attribute__((visibility("default"))) type
#else
#define ASP_EXTERN(type) type
#endif

/* Library version. ASP_VERSION_MAJOR is the SONAME major (libasp.so.0). */
#define ASP_VERSION_MAJOR 0
#define ASP_VERSION_MINOR 1
#define ASP_VERSION_PATCH 0
#define ASP_VERSION "0.1.0"

/* The version string of the running library, e.g. "0.1.0". */
ASP_EXTERN(const char *) asp_version(void);

/* ---------------------------------------------------------------- errors */

/*
 * Error codes. Never renumbered; new codes are only appended.
 */
typedef enum asp_error_code {
	ASP_OK = 0,
	ASP_ERROR = -1,       /* failure not covered by a more specific code */
	ASP_EINVAL = -2,      /* invalid argument (NULL, NUL byte in a path, bad option version) */
	ASP_ENOMEM = -3,      /* out of memory */
	ASP_ENOCONFIG = -4,   /* no .asp.json found by discovery */
	ASP_ECONFIG = -5,     /* .asp.json or identity invalid: message names file, field, expectation */
	ASP_EHOSTKEY = -6,    /* host key mismatch, revoked, or unusable: failed closed, no credentials sent */
	ASP_EAUTH = -7,       /* authentication failed */
	ASP_ECONNECT = -8,    /* could not connect or complete the SSH handshake */
	ASP_ECONNLOST = -9,   /* connection lost during an operation that may have had an effect */
	ASP_ETIMEOUT = -10,   /* a deadline passed (connect, handshake, I/O) */
	ASP_ECANCELLED = -11, /* cancelled through an asp_cancel token */
	ASP_ENOENT = -12,     /* no such file or directory */
	ASP_EISDIR = -13,     /* is a directory */
	ASP_EACCES = -14,     /* permission denied */
	ASP_EEXIST = -15,     /* already exists */
	ASP_ENOTDIR = -16,    /* a path component is not a directory */
	ASP_ENOTEMPTY = -17,  /* directory not empty */
	ASP_ENOSPC = -18,     /* no space left on the sandbox's device */
	ASP_EPROTO = -19,     /* the server broke the SSH/SFTP protocol or sent something unexpected */
	ASP_EIO = -20,        /* the sandbox reported an I/O failure */
	ASP_ELIMIT = -21,     /* a result would exceed a cap (asp_open_options.max_*): nothing returned */
	ASP_EROFS = -22,      /* the sandbox's file system holding the path is read-only */
	ASP_EBUSY = -23       /* no connection has room for another command: each of max_connections
				 carries as many as the server allows (its session limit) */
} asp_error_code;

#define ASP_ERROR_MESSAGE_MAX 512

/*
 * Caller-owned error detail. Zero it or leave it: libasp fills it on
 * failure (code and a NUL-terminated message) and leaves it untouched on
 * success. The layout is fixed for the life of ABI 0.
 */
typedef struct asp_error {
	int code;
	char message[ASP_ERROR_MESSAGE_MAX];
	/* Room for what a later version reports (e.g. which field or path),
	 * without a new layout; libasp 0.x leaves it as the caller set it. */
	uint32_t spare[4];
} asp_error;

/* Fixed, static text for a code, e.g. "no such file or directory". Never NULL. */
ASP_EXTERN(const char *) asp_strerror(int code);

/* The code's symbolic name, e.g. "ASP_ENOENT". Never NULL. */
ASP_EXTERN(const char *) asp_error_name(int code);

/* Free memory returned by libasp (paths, buffers). Accepts NULL. */
ASP_EXTERN(void) asp_free(void *ptr);

/* ---------------------------------------------------------------- config */

/*
 * Find the configuration file: $ASP_CONFIG if set and not empty (it must
 * name a regular file), else `.asp.json` in start_dir (NULL: the current
 * directory), then each parent up to `/`. *out receives an absolute path to
 * free with asp_free. Returns ASP_ENOCONFIG when nothing is found, and
 * ASP_ECONFIG when a `.asp.json` exists but cannot be used (a directory, a
 * dangling link) or is not trusted: a discovered file must belong to the
 * current user or root and be writable only by its owner, and so must
 * every directory from `/` down to it (a sticky directory such as /tmp
 * may be writable by others), except what $ASP_SAFE_DIRS lists
 * (colon-separated absolute directories; "*" trusts all): a listed
 * directory passes, and so does a .asp.json in it. The search stops there
 * rather than silently using a parent's file.
 *
 * Only a name: opening it again is a second lookup that someone who can
 * rename a directory above it may win. To use what was judged, call
 * asp_config_read, or asp_open with start_dir.
 */
ASP_EXTERN(int) asp_config_find(char **out, const char *start_dir, asp_error *err);

/*
 * Discovery as asp_config_find, returning what the file holds: the text is
 * read from the very descriptor that discovery opened and judged, so it is
 * the file the trust rules accepted even if the directories around it are
 * renamed meanwhile. (Opening asp_config_find's path again is a second
 * lookup, which someone who can rename a directory above it can win.) Pass
 * both to asp_open (asp_open_options.config_text and .config_path) to open
 * what was judged.
 *
 * *text: the content, NUL-terminated (asp_free); a file holding a NUL byte
 * is ASP_ECONFIG. *path (optional, may be NULL): its absolute name, for
 * messages and as config_path (asp_free). Errors as asp_config_find, and
 * ASP_ECONFIG for a file over 1 MiB or unreadable.
 */
ASP_EXTERN(int) asp_config_read(char **text, char **path, const char *start_dir, asp_error *err);

/*
 * Load and strictly validate a configuration file, including the syntax of
 * connection.host_key, without connecting. Useful for linting; asp_open
 * does the same internally.
 */
ASP_EXTERN(int) asp_config_check(const char *path, asp_error *err);

/* --------------------------------------------------------------- sandbox */

/*
 * An open sandbox: a validated configuration and its pool of SSH
 * connections. Safe to use from many threads at once.
 */
typedef struct asp_sandbox asp_sandbox;

/* Do not connect in asp_open; the first operation connects. */
#define ASP_OPEN_LAZY 0x1u

/*
 * How file calls (asp_read, asp_write, asp_stat, asp_list_dir, asp_mkdir,
 * asp_remove, asp_rename) reach the sandbox's files: in
 * asp_open_options.file_transport and asp_sandbox_info.file_transport.
 */
typedef enum asp_file_transport {
	ASP_FILES_AUTO = 0, /* SFTP when the server offers it, else shell commands;
			     * decided once per connection, and once a connection
			     * found no SFTP, the handle's later ones do not ask */
	ASP_FILES_SFTP = 1, /* SFTP only */
	ASP_FILES_EXEC = 2  /* POSIX shell commands on exec channels, never SFTP */
} asp_file_transport;

/*
 * How much a trace line matters (asp_open_options.log_level). A trace never
 * holds key text, a passphrase, the user name (a provider may put a token
 * there), environment values or a command's text.
 */
typedef enum asp_log_level {
	ASP_LOG_DEBUG = 1, /* each call: its route (SFTP or shell), duration and result */
	ASP_LOG_INFO = 2,  /* connections: connect time, host key check, auth method, pool growth, close */
	ASP_LOG_WARN = 3   /* retries, reconnects, failed connects */
} asp_log_level;

/*
 * Receives one trace line (NUL-terminated, no newline; valid during the
 * call only). Called from whichever thread does the work, the pool's
 * maintenance thread included, possibly from several at once; it must not
 * call back into the same sandbox handle.
 */
typedef void (*asp_log_fn)(asp_log_level level, const char *msg, void *userdata);

typedef struct asp_open_options {
	unsigned int version;
	/* Configuration file to use; NULL means discovery (asp_config_read:
	 * the file judged is the file read). */
	const char *config_path;
	/* Where discovery starts; NULL means the current directory. */
	const char *start_dir;
	/* Trust-on-first-use store; NULL means $ASP_KNOWN_HOSTS, else
	 * $XDG_CONFIG_HOME/asp/known_hosts (~/.config/asp/known_hosts). */
	const char *known_hosts;
	/* Most connections kept to the sandbox; 0 means 4. */
	unsigned int max_connections;
	/* Deadline for TCP connect + SSH handshake + auth, ms; 0 means 10000. */
	unsigned int connect_timeout_ms;
	/* Longest silence tolerated from the server during one protocol
	 * exchange, ms; 0 means 30000. Does not limit a running command:
	 * that is asp_exec_options.kill_after_ms. */
	unsigned int io_timeout_ms;
	/* Send a keepalive on a connection idle this long, s; 0 means 15. */
	unsigned int keepalive_s;
	/* Close connections idle this long, s; 0 means 300. */
	unsigned int idle_close_s;
	/* ASP_OPEN_* flags; other bits are ASP_EINVAL. */
	unsigned int flags;
	/* Overall deadline of one call, ms, from its start to its result,
	 * connecting and any retry included; 0 means 300000. A call's own
	 * asp_call_options.timeout_ms (also the `call` member of
	 * asp_write_options and asp_exec_options) replaces it. An exec with
	 * call.timeout_ms 0 counts only its start against it, not the
	 * command's run time (see asp_exec_options). */
	unsigned int op_timeout_ms;
	/* Most bytes one asp_read returns; a read that would return more fails
	 * with ASP_ELIMIT and returns nothing; 0 means 256 MiB. */
	uint64_t max_read_bytes;
	/* Default of asp_exec_options.max_output (bytes kept per stream); 0
	 * means 64 MiB. */
	size_t max_output;
	/* Most entries one asp_list_dir returns; a larger directory fails with
	 * ASP_ELIMIT; 0 means 100000. */
	unsigned int max_list_entries;
	/* An asp_file_transport value; 0 (ASP_FILES_AUTO) means SFTP when the
	 * server has it, else shell commands. Other values are ASP_EINVAL. */
	unsigned int file_transport;
	/* (Version 2.) The configuration's content (NUL-terminated JSON),
	 * used instead of reading a file: nothing is opened or searched for.
	 * config_path, when set, names it in messages and is where relative
	 * identity paths resolve. Like config_path it is the caller's choice
	 * and is not judged; asp_config_read gives the text of a discovered
	 * file that was. NULL: read config_path, or discover. */
	const char *config_text;
	/* (Version 2.) Most bytes of names one asp_list_dir holds (the names'
	 * lengths added up); a larger listing fails with ASP_ELIMIT; 0 means
	 * 32 MiB. Whatever this says, a name over 4096 bytes is ASP_ELIMIT. */
	uint64_t max_list_bytes;
	/* (Version 3.) The trace: log_fn receives each line of log_level
	 * (an asp_log_level; 0 means ASP_LOG_DEBUG, everything) or above, with
	 * log_userdata. NULL: no trace, unless $ASP_DEBUG is set and not "0",
	 * which writes every line to stderr as "asp: LEVEL: text". */
	asp_log_fn log_fn;
	void *log_userdata;
	unsigned int log_level;
} asp_open_options;

#define ASP_OPEN_OPTIONS_VERSION 3
#define ASP_OPEN_OPTIONS_INIT { ASP_OPEN_OPTIONS_VERSION, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, \
				NULL, NULL, 0 }

/* Initialise opts to defaults; version is 1 to ASP_OPEN_OPTIONS_VERSION (that version's fields). */
ASP_EXTERN(int) asp_open_options_init(asp_open_options *opts, unsigned int version);

/*
 * Open a sandbox: find and validate the configuration, resolve the
 * identity, and (unless ASP_OPEN_LAZY) make the first connection, so that a
 * wrong host key or credentials fail here. The host key is verified before
 * any credential is sent.
 * Errors: ASP_ENOCONFIG, ASP_ECONFIG, ASP_EHOSTKEY, ASP_EAUTH, ASP_ECONNECT,
 * ASP_ETIMEOUT, ASP_ENOMEM.
 */
ASP_EXTERN(int) asp_open(asp_sandbox **out, const asp_open_options *opts, asp_error *err);

/* Close every connection and free the handle. No call may be in flight. Accepts NULL. */
ASP_EXTERN(void) asp_close(asp_sandbox *sb);

/* The configuration file in use (absolute path). Owned by sb. */
ASP_EXTERN(const char *) asp_sandbox_config_path(const asp_sandbox *sb);

/* The sandbox workspace (absolute path). Owned by sb. */
ASP_EXTERN(const char *) asp_sandbox_workspace(const asp_sandbox *sb);

/* How the host key was trusted, in asp_sandbox_info.trust. */
typedef enum asp_trust {
	ASP_TRUST_PINNED = 1,     /* matched connection.host_key */
	ASP_TRUST_KNOWN = 2,      /* matched an entry in the trust-on-first-use store */
	ASP_TRUST_FIRST_USE = 3   /* first seen now and recorded in the store */
} asp_trust;

/* How the client authenticated, in asp_sandbox_info.auth. */
typedef enum asp_auth {
	ASP_AUTH_NONE = 1,      /* the server accepted the user name alone (token in `user`) */
	ASP_AUTH_PUBLICKEY = 2, /* connection.identity */
	ASP_AUTH_AGENT = 3      /* a key from ssh-agent */
} asp_auth;

/*
 * What the most recent connection established; for diagnostics such as
 * `asp-exec --check`. Strings are NUL-terminated.
 */
typedef struct asp_sandbox_info {
	unsigned int version;
	int trust;                       /* an asp_trust value */
	int auth;                        /* an asp_auth value */
	char host_key_type[32];          /* e.g. "ssh-ed25519" */
	char host_key_fingerprint[64];   /* "SHA256:..." */
	char known_hosts[1024];          /* the store consulted (empty when pinned) */
	/* What the key exchange negotiated, as libssh2 names them; cipher and
	 * mac read "A" when both directions agree, else "A (client to server),
	 * B (server to client)". */
	char kex[64];                    /* e.g. "curve25519-sha256" */
	char cipher[128];                /* e.g. "aes128-ctr" */
	char mac[128];                   /* e.g. "hmac-sha2-256" */
	/* e.g. "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3"; the server's text,
	 * escaped as messages are (control bytes, bidi controls, invalid
	 * UTF-8 and '\\' as \\xNN; cut with "..." when long). */
	char server_banner[256];
	/* ASP_FILES_SFTP or ASP_FILES_EXEC once a file call on this connection
	 * has decided; ASP_FILES_AUTO (0) before. */
	int file_transport;
} asp_sandbox_info;

#define ASP_SANDBOX_INFO_VERSION 1
#define ASP_SANDBOX_INFO_INIT { ASP_SANDBOX_INFO_VERSION, 0, 0, "", "", "", "", "", "", "", 0 }

/* Zero *out and set its version; version is 1 to ASP_SANDBOX_INFO_VERSION. */
ASP_EXTERN(int) asp_sandbox_info_init(asp_sandbox_info *out, unsigned int version);

/*
 * Describe the connection. This may touch the network: when no connection
 * is open (ASP_OPEN_LAZY, or all were closed idle) it connects first, with
 * the usual host key check and authentication, and so can fail like
 * asp_open (ASP_EHOSTKEY, ASP_EAUTH, ASP_ECONNECT, ASP_ETIMEOUT, ...).
 * out->version is 1 to ASP_SANDBOX_INFO_VERSION (ASP_SANDBOX_INFO_INIT or
 * asp_sandbox_info_init); only that version's fields are written.
 */
ASP_EXTERN(int) asp_sandbox_info_get(asp_sandbox_info *out, asp_sandbox *sb, asp_error *err);

/* ---------------------------------------------------------------- cancel */

/*
 * A cancellation token. asp_cancel_trigger may be called from any thread
 * (and from a signal handler); operations given the token stop promptly,
 * and a running command's whole remote process group is killed.
 */
typedef struct asp_cancel asp_cancel;

ASP_EXTERN(int) asp_cancel_new(asp_cancel **out, asp_error *err);
ASP_EXTERN(void) asp_cancel_trigger(asp_cancel *c);
ASP_EXTERN(int) asp_cancel_is_triggered(const asp_cancel *c);
/* Re-arm a token for another use. Not while an operation uses it. */
ASP_EXTERN(void) asp_cancel_reset(asp_cancel *c);
ASP_EXTERN(void) asp_cancel_free(asp_cancel *c);

/* ----------------------------------------------------------- call options */

/*
 * Per-call options of the file calls (asp_read, asp_stat, asp_mkdir,
 * asp_remove, asp_rename, asp_list_dir, asp_sandbox_warm), and the `call`
 * member of asp_write_options and asp_exec_options. NULL means defaults; a
 * zero-initialised struct with its version set means the same. Because
 * it is embedded in those structs, its layout is fixed for ABI 0.
 */
typedef struct asp_call_options {
	unsigned int version;
	/* Optional cancellation token: the call stops promptly with
	 * ASP_ECANCELLED (a recursive remove also stops its remote rm). */
	asp_cancel *cancel;
	/* Overall deadline of this call, ms (ASP_ETIMEOUT when it passes);
	 * 0 means the handle's asp_open_options.op_timeout_ms. */
	unsigned int timeout_ms;
} asp_call_options;

#define ASP_CALL_OPTIONS_VERSION 1
#define ASP_CALL_OPTIONS_INIT { ASP_CALL_OPTIONS_VERSION, NULL, 0 }

ASP_EXTERN(int) asp_call_options_init(asp_call_options *opts, unsigned int version);

/*
 * Connect until the pool holds `connections` (counting those open or being
 * opened), one after another in this thread, and leave the new ones idle:
 * that many concurrent calls then start without a handshake. They are
 * ordinary pooled connections (idle_close_s closes them). 0 does nothing;
 * more than max_connections is ASP_EINVAL. The first failure returns its
 * error and keeps the connections made before it. opts: cancel token and
 * deadline (NULL: defaults).
 * Errors: ASP_EINVAL, ASP_EHOSTKEY, ASP_EAUTH, ASP_ECONNECT, ASP_ETIMEOUT,
 * ASP_ECANCELLED, ASP_ENOMEM.
 */
ASP_EXTERN(int) asp_sandbox_warm(asp_sandbox *sb, unsigned int connections,
				 const asp_call_options *opts, asp_error *err);

/* ------------------------------------------------------------ read/write */

/* Pass as asp_read's limit to read to the end of the file. */
#define ASP_READ_ALL UINT64_MAX

/*
 * Read up to `limit` bytes from `offset`. Binary-safe. *out is a buffer of
 * *out_len bytes (plus a NUL terminator not counted) to free with asp_free.
 * Relative paths resolve against the workspace. At most the handle's
 * max_read_bytes are returned: a read that would return more (a huge file
 * with ASP_READ_ALL, a link to /dev/zero) fails with ASP_ELIMIT; read such
 * a file in ranges. opts: cancel token and deadline (NULL: defaults).
 * A read of 32 MiB or more of a regular file returns the bytes up to the
 * size the file had when the read began (it may move them over several
 * pooled connections at once); if the file becomes shorter meanwhile, it
 * fails with ASP_EIO.
 * Errors: ASP_ENOENT, ASP_EISDIR, ASP_EACCES, ASP_EINVAL, ASP_ELIMIT,
 * ASP_EIO, ASP_ETIMEOUT, ASP_ECANCELLED, connection errors.
 */
ASP_EXTERN(int) asp_read(unsigned char **out, size_t *out_len, asp_sandbox *sb,
			 const char *path, uint64_t offset, uint64_t limit,
			 const asp_call_options *opts, asp_error *err);

/*
 * asp_write_options.flags: create missing parent directories (mode 0755).
 * The same bit and meaning as ASP_MKDIR_PARENTS.
 */
#define ASP_WRITE_PARENTS 0x1u
/*
 * asp_write_options.flags: truncate the file and write it in place (needs
 * write permission on the file, not the directory). Without it (the
 * default) libasp writes a temporary file in the same directory and
 * renames it over the target, so readers see the old or the new content,
 * never a mix.
 */
#define ASP_WRITE_IN_PLACE 0x2u

typedef struct asp_write_options {
	unsigned int version;
	/* Cancel token and overall deadline, as for any call: call.cancel
	 * stops the write with ASP_ECANCELLED (an atomic write then leaves
	 * the target untouched; a cancel that comes once the rename was sent
	 * is too late, and the write completes: docs/api.md says where the
	 * exec transport differs); call.timeout_ms is its deadline (0: the
	 * handle's op_timeout_ms). call.version may be 0 or 1: the embedded
	 * struct has asp_call_options version 1's layout. */
	asp_call_options call;
	/* Permission bits for the file; 0 keeps an existing file's mode and
	 * gives a new file 0644 (less the server's umask). */
	unsigned int mode;
	/* ASP_WRITE_* flags; other bits are ASP_EINVAL. */
	unsigned int flags;
} asp_write_options;

#define ASP_WRITE_OPTIONS_VERSION 1
#define ASP_WRITE_OPTIONS_INIT { ASP_WRITE_OPTIONS_VERSION, { 0, NULL, 0 }, 0, 0 }

ASP_EXTERN(int) asp_write_options_init(asp_write_options *opts, unsigned int version);

/*
 * Write `len` bytes to `path`, creating or replacing it. Binary-safe.
 * Errors: ASP_ENOENT (parent missing and ASP_WRITE_PARENTS not set),
 * ASP_EISDIR, ASP_EACCES, ASP_ENOSPC, ASP_EROFS, ASP_EINVAL (also unknown
 * flag bits),
 * ASP_ETIMEOUT, ASP_ECANCELLED, connection errors. A failed atomic
 * (not ASP_WRITE_IN_PLACE) write leaves the target untouched; its temporary file is
 * removed at once, or, when the connection died, by the handle's next call
 * or asp_close, or by a later write into that directory once it is stale.
 */
ASP_EXTERN(int) asp_write(asp_sandbox *sb, const char *path, const void *data, size_t len,
			  const asp_write_options *opts, asp_error *err);

/* ------------------------------------------------------------------ exec */

/* A command's output stream. (An enum is int-sized on every supported ABI.) */
typedef enum asp_stream {
	ASP_STDOUT = 1,
	ASP_STDERR = 2
} asp_stream;

/*
 * Streaming callback: `len` bytes of `stream` as they arrive, on the
 * calling thread. Return 0 to go on; non-zero cancels the command (as
 * asp_cancel would).
 */
typedef int (*asp_output_cb)(asp_stream stream, const unsigned char *data, size_t len,
			     void *userdata);

/* asp_exec_options.flags: stream stdin_fd to the command's stdin. */
#define ASP_EXEC_STDIN_FD 0x1u

typedef struct asp_exec_options {
	unsigned int version;
	/* The call's cancel token and deadline. call.cancel stops the command
	 * (its group is killed; the result reports cancelled). call.timeout_ms
	 * 0: the handle's op_timeout_ms bounds only the start, until the
	 * server accepts the exec request, and the command then runs as long
	 * as kill_after_ms allows. Non-zero: it bounds the whole call, the run
	 * included; when it passes, the command's process group is killed
	 * (SIGTERM, then SIGKILL after kill_grace_ms) and asp_exec returns
	 * ASP_ETIMEOUT with no result. call.version may be 0 or 1: the
	 * embedded struct has asp_call_options version 1's layout. */
	asp_call_options call;
	/* Working directory; NULL means the workspace. Relative to the workspace. */
	const char *cwd;
	/* NULL-terminated array of "NAME=value" strings added to the environment. */
	const char *const *env;
	/* Bytes fed to the command's stdin, then EOF. NULL/0: immediate EOF. */
	const unsigned char *stdin_data;
	size_t stdin_len;
	/* The command's kill timer: this many ms after the command started,
	 * kill its process group; asp_exec then returns ASP_OK with a result
	 * whose asp_exec_result_timed_out is non-zero. 0 means no limit. */
	unsigned int kill_after_ms;
	/* After SIGTERM, wait this long before SIGKILL, ms; 0 means 2000. */
	unsigned int kill_grace_ms;
	/* Optional streaming callback and its userdata. */
	asp_output_cb on_output;
	void *userdata;
	/* Keep at most this many bytes of each stream in the result (half from
	 * the head, half from the tail); 0 means the handle's max_output
	 * (asp_open_options, default 64 MiB). on_output sees the dropped bytes too. */
	size_t max_output;
	/* With ASP_EXEC_STDIN_FD in flags: a local file descriptor streamed to
	 * the command's stdin until it reaches EOF (after stdin_data, if any);
	 * libasp polls it and does not close it. Without the flag it is
	 * ignored, so a zeroed struct never forwards the caller's fd 0. */
	int stdin_fd;
	/* ASP_EXEC_* flags; other bits are ASP_EINVAL. */
	unsigned int flags;
} asp_exec_options;

#define ASP_EXEC_OPTIONS_VERSION 1
#define ASP_EXEC_OPTIONS_INIT \
	{ ASP_EXEC_OPTIONS_VERSION, { 0, NULL, 0 }, NULL, NULL, NULL, 0, 0, 0, NULL, NULL, 0, 0, 0 }

ASP_EXTERN(int) asp_exec_options_init(asp_exec_options *opts, unsigned int version);

/* The outcome of a command; read it with the accessors below. */
typedef struct asp_exec_result asp_exec_result;

/*
 * Run `command` as shell text in a fresh shell in the sandbox (the login
 * user's shell, which must be POSIX-compatible), in opts->cwd, with the
 * given environment and stdin. stdout and stderr are captured separately
 * and drained together. The command runs in its own process group; the
 * kill timer (kill_after_ms) or a cancel kills that whole group (SIGTERM,
 * then SIGKILL after kill_grace_ms) and is reported in the result, not as
 * an error.
 *
 * The call's deadline: with call.timeout_ms 0, the handle's op_timeout_ms
 * bounds the command's start (until the server accepts the exec request)
 * and from then on only kill_after_ms and call.cancel stop it. A non-zero
 * call.timeout_ms bounds the whole call: when it passes, the command's
 * group is killed as above and the call fails with ASP_ETIMEOUT.
 *
 * Returns ASP_OK with *out set whenever the command ran to its end (or its
 * kill timer's or cancel's kill), whatever its exit status. Errors:
 * ASP_ENOENT (cwd missing), ASP_EINVAL, ASP_ETIMEOUT (call.timeout_ms or
 * the start's deadline passed; the command, if it started, was killed), ASP_ECONNLOST (the
 * connection died after the command may have started, or the server closed
 * the command's channel without an exit status, as sshd's ChannelTimeout
 * does to a quiet command, which is then stopped: it is never replayed),
 * ASP_EPROTO (the login shell did not run the command), connection errors.
 * Free *out with asp_exec_result_free.
 */
ASP_EXTERN(int) asp_exec(asp_exec_result **out, asp_sandbox *sb, const char *command,
			 const asp_exec_options *opts, asp_error *err);

/* Exit status 0..255, or -1 when the command was killed by a signal. */
ASP_EXTERN(int) asp_exec_result_exit_code(const asp_exec_result *r);
/* The terminating signal number (e.g. 15), or 0. */
ASP_EXTERN(int) asp_exec_result_signal(const asp_exec_result *r);
/* Non-zero when kill_after_ms passed and the command was killed. */
ASP_EXTERN(int) asp_exec_result_timed_out(const asp_exec_result *r);
/* Non-zero when the command was cancelled and killed. */
ASP_EXTERN(int) asp_exec_result_cancelled(const asp_exec_result *r);
/*
 * Captured bytes of a stream; *len receives the count. Owned by r. When
 * truncated (max_output), this is head + tail. NULL (and *len 0) for a
 * NULL r or a stream that is not ASP_STDOUT or ASP_STDERR.
 */
ASP_EXTERN(const unsigned char *) asp_exec_result_output(const asp_exec_result *r,
							 asp_stream stream, size_t *len);
/* Total bytes the stream produced, including any dropped by max_output. */
ASP_EXTERN(uint64_t) asp_exec_result_output_total(const asp_exec_result *r, asp_stream stream);
/* Non-zero when max_output dropped bytes from the middle of the stream. */
ASP_EXTERN(int) asp_exec_result_truncated(const asp_exec_result *r, asp_stream stream);
/* Wall time of the command, ms. */
ASP_EXTERN(uint64_t) asp_exec_result_duration_ms(const asp_exec_result *r);
ASP_EXTERN(void) asp_exec_result_free(asp_exec_result *r);

/* ------------------------------------------------------------------ proc */

/*
 * A running command with a handle: started without waiting for its end,
 * its stdin written while it runs, its output read as it comes, signalled,
 * waited for with a timeout, and ended with the same asp_exec_result that
 * asp_exec gives. The command runs as asp_exec's does (the same wrapper,
 * its own process group, the same kill path); it ends with the connection
 * that carries it (it is not a background process that outlives the
 * handle).
 *
 * A proc holds a channel, not a connection: between its calls, its
 * connection is back in the pool, and other calls of the handle (asp_exec,
 * file calls, other procs) run on it, so a handle with max_connections 1
 * carries several procs and still runs asp_exec. The pool hands other
 * calls a connection without procs first, and opens a new one (under
 * max_connections) rather than share one with procs; when a call does
 * share, a proc call waits for that call to hand the connection back.
 *
 * A proc's functions may be called from several threads at once (one
 * reads while another writes); each takes the proc's connection only for
 * what it does without waiting, and waits for news with nothing held.
 * Free every proc before asp_close.
 */
typedef struct asp_proc asp_proc;

/* asp_proc_options.flags: run the command on a pseudo-terminal (see asp_proc_start). */
#define ASP_PROC_PTY 0x1u

typedef struct asp_proc_options {
	unsigned int version;
	/* call.cancel kills the command's process group when triggered (the
	 * result then reports cancelled); it is noticed by any asp_proc_*
	 * call on the proc, at once by one that waits. call.timeout_ms bounds
	 * the start only (0: the handle's op_timeout_ms), until the server
	 * accepts the command. call.version may be 0 or 1. */
	asp_call_options call;
	/* Working directory (NULL: the workspace; relative to it) and
	 * "NAME=value" strings added to the environment (NULL-terminated), as
	 * for asp_exec. */
	const char *cwd;
	const char *const *env;
	/* Kill the command's process group this many ms after it started
	 * (SIGTERM, then SIGKILL after kill_grace_ms; 0 means 2000): the
	 * result then reports timed_out. 0 means no limit. Like cancel, it is
	 * acted on by the proc's calls (a wait sees it at its time). */
	unsigned int kill_after_ms;
	unsigned int kill_grace_ms;
	/* Bytes of each stream kept for the result, head and tail, as
	 * asp_exec_options.max_output (0: the handle's max_output). What
	 * asp_proc_read returns is not limited by it. */
	size_t max_output;
	/* ASP_PROC_* flags; other bits are ASP_EINVAL. */
	unsigned int flags;
	/* With ASP_PROC_PTY: the terminal type (TERM; NULL: "xterm-256color";
	 * letters, digits, '-', '.', '_', '+' only, at most 64 bytes) and its
	 * size in columns and rows (0: 80 and 24; at most 10000). Without the
	 * flag they are ignored. */
	const char *term;
	unsigned int cols;
	unsigned int rows;
} asp_proc_options;

#define ASP_PROC_OPTIONS_VERSION 1
#define ASP_PROC_OPTIONS_INIT \
	{ ASP_PROC_OPTIONS_VERSION, { 0, NULL, 0 }, NULL, NULL, 0, 0, 0, 0, NULL, 0, 0 }

ASP_EXTERN(int) asp_proc_options_init(asp_proc_options *opts, unsigned int version);

/*
 * Start `command` (shell text, as asp_exec runs it) and return at once
 * with *out, once the server has accepted it (one round trip; two with a
 * terminal, which the server sets up first). Its stdin stays open until
 * asp_proc_close_stdin. The command is never started twice.
 *
 * With ASP_PROC_PTY the command runs on a pseudo-terminal: `tty` names
 * it, TERM is set, stdout and stderr are one stream (ASP_STDOUT), the
 * terminal echoes what is written and turns "\n" into "\r\n", and
 * writing 0x03 (Ctrl-C) interrupts the foreground program as a keyboard
 * would (0x04, Ctrl-D, is end of input at a line's start; the terminal,
 * not asp_proc_close_stdin, is what a program on it reads EOF from).
 * Cancel, kill_after_ms and asp_proc_free still kill the whole process
 * group.
 *
 * Errors: ASP_EINVAL (also unknown flags, a bad term or size), ASP_ENOENT
 * (cwd missing: found by the first call that reads its start, reported
 * by asp_proc_wait), ASP_EACCES (the server refused a terminal),
 * ASP_EBUSY (every connection under max_connections carries as many
 * running commands as the server allows: end one, or open with more),
 * ASP_ETIMEOUT, ASP_ECANCELLED, connection errors. Free with
 * asp_proc_free.
 */
ASP_EXTERN(int) asp_proc_start(asp_proc **out, asp_sandbox *sb, const char *command,
			       const asp_proc_options *opts, asp_error *err);

/*
 * Write `len` bytes to the command's stdin. It returns once libssh2 took
 * the bytes and sent them: it never waits for a reply (only, when the
 * command does not read, for the channel's flow-control window). Writing
 * to a command that has ended is ASP_OK (the bytes are dropped, as a pipe
 * whose reader is gone would), unless the proc knows it ended: then
 * ASP_EIO. After asp_proc_close_stdin: ASP_EINVAL.
 */
ASP_EXTERN(int) asp_proc_write(asp_proc *p, const void *data, size_t len, asp_error *err);

/* Send EOF on the command's stdin, after what was written. Again: no effect. */
ASP_EXTERN(int) asp_proc_close_stdin(asp_proc *p, asp_error *err);

/*
 * Read the command's output as it comes: up to `cap` bytes of one stream
 * into buf, *out_len their count and *stream (optional) which stream
 * (stdout and stderr take turns when both have some; with a terminal,
 * always ASP_STDOUT). Waits up to timeout_ms for output (-1: no limit; 0:
 * only what is there). Returns ASP_OK with *out_len > 0 for output,
 * ASP_OK with *out_len 0 at the end (the command ended and everything was
 * read), and ASP_ETIMEOUT when nothing came in time (the command runs on).
 * Up to 1 MiB of output waits here unread; beyond that the command is made
 * to wait (flow control) until it is read, except while asp_proc_wait
 * waits: then output past that 1 MiB goes to the result only, and reads
 * return what was waiting, then the end. A lost connection: ASP_ECONNLOST.
 */
ASP_EXTERN(int) asp_proc_read(size_t *out_len, asp_stream *stream, asp_proc *p, void *buf, size_t cap,
			      int timeout_ms, asp_error *err);

/*
 * Send a signal to the command's process group: a name such as "TERM",
 * "SIGTERM", "INT", "KILL", "HUP", "USR1" (names, not numbers: the
 * sandbox's numbers need not be the caller's). One round trip. A command
 * that has ended: ASP_OK, nothing sent. Errors: ASP_EINVAL (an unknown
 * name), connection errors.
 */
ASP_EXTERN(int) asp_proc_signal(asp_proc *p, const char *signal, asp_error *err);

/* Tell the terminal its new size (1 to 10000 each); no reply awaited. ASP_EINVAL without ASP_PROC_PTY. */
ASP_EXTERN(int) asp_proc_resize(asp_proc *p, unsigned int cols, unsigned int rows, asp_error *err);

/*
 * Wait up to timeout_ms (-1: no limit; 0: a look) for the command to end,
 * and take its result: *out as asp_exec gives it (exit code or signal,
 * timed_out, cancelled, output kept per max_output), to free with
 * asp_exec_result_free. ASP_ETIMEOUT while it runs (wait again). Only
 * one call takes the result: later ones are ASP_EINVAL. Errors as
 * asp_exec's (ASP_ENOENT for a missing cwd, ASP_ECONNLOST, ...).
 */
ASP_EXTERN(int) asp_proc_wait(asp_exec_result **out, asp_proc *p, int timeout_ms, asp_error *err);

/*
 * Wait up to timeout_ms (-1: no limit; 0: a look) for any of n commands to
 * end, driving all of them meanwhile from this one thread as asp_proc_wait
 * drives one (output nobody read goes to the result; cancel tokens and
 * kill timers act): one thread can wait for a thousand commands. Returns
 * ASP_OK with *index the position of one that ended (of several, the one
 * whose end a call saw first, wherever it is in the list: taken one per
 * call, they are served in the order they ended), whose
 * asp_proc_wait then returns at once with its result or error; a command
 * whose connection fails is reported the same way. ASP_ETIMEOUT when none
 * ended in time. ASP_ECANCELLED when `wake` (optional) is or becomes
 * triggered: another thread's way to interrupt the wait, e.g. to add a
 * command (asp_cancel_reset re-arms it). NULL entries are skipped. The
 * procs must stay alive for the call; each may take other calls meanwhile
 * (a read, a signal). Errors: ASP_EINVAL, ASP_ENOMEM; *index is set for a
 * command's own failure that is not its end (e.g. ASP_ENOMEM), else left alone.
 */
ASP_EXTERN(int) asp_proc_wait_any(size_t *index, asp_proc *const *procs, size_t n, int timeout_ms,
				  asp_cancel *wake, asp_error *err);

/*
 * Free the proc. A command still running is killed first (its process
 * group, SIGTERM then SIGKILL after kill_grace_ms) and waited for. Accepts
 * NULL. No other call on p may be in flight.
 */
ASP_EXTERN(void) asp_proc_free(asp_proc *p);

/* ------------------------------------------------------------ filesystem */

/* The kind of a file, in asp_stat_info.type. */
typedef enum asp_file_type {
	ASP_TYPE_FILE = 1,
	ASP_TYPE_DIR = 2,
	ASP_TYPE_SYMLINK = 3,
	ASP_TYPE_OTHER = 4
} asp_file_type;

/* File metadata. */
typedef struct asp_stat_info {
	uint64_t size;
	int64_t mtime;     /* seconds since the epoch */
	uint32_t mode;     /* permission bits (07777) */
	uint32_t type;     /* an asp_file_type value (fixed width for the layout) */
	/* Zero: room for fields a later version adds (atime, uid, ...) without
	 * a new layout. */
	uint64_t spare[4];
} asp_stat_info;

/*
 * Metadata of `path`, following symlinks (a dangling link is ASP_ENOENT).
 * Errors: ASP_ENOENT (also when a path component is not a directory: the
 * SFTP server does not tell the two apart), ASP_EACCES, connection errors.
 */
ASP_EXTERN(int) asp_stat(asp_stat_info *out, asp_sandbox *sb, const char *path,
			 const asp_call_options *opts, asp_error *err);

/* asp_mkdir flags: also create missing parents; an existing directory is no
 * error. The same bit and meaning as ASP_WRITE_PARENTS. */
#define ASP_MKDIR_PARENTS 0x1u

/*
 * Create a directory (mode 0 means 0755). flags: ASP_MKDIR_* (other bits
 * are ASP_EINVAL). Errors: ASP_EEXIST (without ASP_MKDIR_PARENTS),
 * ASP_ENOENT, ASP_ENOTDIR, ASP_EACCES, ASP_EROFS, connection errors.
 */
ASP_EXTERN(int) asp_mkdir(asp_sandbox *sb, const char *path, unsigned int mode, unsigned int flags,
			  const asp_call_options *opts, asp_error *err);

/* asp_remove flags: remove a directory and everything in it (rm -rf). */
#define ASP_REMOVE_RECURSIVE 0x1u

/*
 * Remove a file or empty directory (ASP_ENOTEMPTY otherwise). flags:
 * ASP_REMOVE_* (other bits are ASP_EINVAL). On a read-only file system
 * ASP_EROFS.
 */
ASP_EXTERN(int) asp_remove(asp_sandbox *sb, const char *path, unsigned int flags,
			   const asp_call_options *opts, asp_error *err);

/* Rename `from` to `to`, replacing `to` if it is a file (ASP_EROFS on a read-only file system). */
ASP_EXTERN(int) asp_rename(asp_sandbox *sb, const char *from, const char *to,
			   const asp_call_options *opts, asp_error *err);

/* A directory listing; read it with the accessors below. */
typedef struct asp_list asp_list;

/*
 * List the entries of a directory (without "." and ".."), sorted by name.
 * Symlinks are reported as ASP_TYPE_SYMLINK with the link's own metadata.
 * A directory with more than the handle's max_list_entries, or whose names
 * add up to more than its max_list_bytes, fails with ASP_ELIMIT, and so
 * does an entry name over 4096 bytes. An entry name that is empty or holds '/' or a NUL byte (no
 * file system makes one; a broken or hostile SFTP server could send it)
 * fails the listing with ASP_EPROTO naming the directory.
 */
ASP_EXTERN(int) asp_list_dir(asp_list **out, asp_sandbox *sb, const char *path,
			     const asp_call_options *opts, asp_error *err);
ASP_EXTERN(size_t) asp_list_count(const asp_list *l);
/* Name of entry i (no directory part), or NULL when i is out of range. Owned by l. */
ASP_EXTERN(const char *) asp_list_name(const asp_list *l, size_t i);
/* Metadata of entry i; ASP_EINVAL when i is out of range. */
ASP_EXTERN(int) asp_list_stat(asp_stat_info *out, const asp_list *l, size_t i);
ASP_EXTERN(void) asp_list_free(asp_list *l);

/* --------------------------------------------------- background processes */

/*
 * A command started in the background: it outlives the call that started
 * it, the connection, and the harness, and lives as long as the sandbox
 * (or until it ends or is signalled). Everything about it is kept in the
 * sandbox, under ~/.asp/bg/ID/ of the sandbox user (mode 0700): a new
 * handle, in a new process, finds it by its id. It runs under bash
 * (`bash -c COMMAND`; the sandbox must have bash) in a process group of
 * its own, with stdin /dev/null and HUP ignored (as nohup), stdout and
 * stderr together into its kept output. Each call below is one command in
 * the sandbox (one round trip on a warm connection).
 *
 * Its output is kept bounded: in two chunks of max_output / 2 bytes; when
 * the newer is full, the older is dropped. Offsets count every byte the
 * command wrote; a read says where the kept bytes begin, so a reader knows
 * what it missed.
 */

/* asp_bg_status.state */
typedef enum asp_bg_state {
	ASP_BG_RUNNING = 1, /* the command has not ended */
	ASP_BG_EXITED = 2,  /* it ended; exit_code and signal say how */
	ASP_BG_LOST = 3     /* it is gone without a status: killed with the process that
			     * watched it (SIGKILL of its supervisor), or the sandbox restarted */
} asp_bg_state;

/* Pass as asp_bg_wait's timeout_ms to wait for as long as it takes. */
#define ASP_BG_FOREVER 0xffffffffu

/*
 * A background process's state and output counters, filled by
 * asp_bg_read and asp_bg_wait and held by each listed entry. Callers
 * allocate it; the layout is fixed for ABI 0 (spare room at the end).
 */
typedef struct asp_bg_status {
	int state;         /* an asp_bg_state value */
	int exit_code;     /* ASP_BG_EXITED: 0..255, or -1 when a signal ended it; else -1 */
	int signal;        /* the signal that ended it (the sandbox's number, e.g. 15), or 0 */
	int output_open;   /* non-zero while more output may come: the command, or a process
			    * that holds its output, still runs */
	uint64_t output_start; /* offset of the first output byte still kept */
	uint64_t output_size;  /* bytes of output written so far, kept or dropped (asp_bg_read,
				* while the command runs: at least the end of the bytes returned) */
	uint64_t offset;       /* asp_bg_read: the offset of the first byte returned */
	uint64_t spare[4];
} asp_bg_status;

typedef struct asp_bg_options {
	unsigned int version;
	/* The start call's cancel token and deadline (as asp_call_options). */
	asp_call_options call;
	/* A label, any text (up to 4096 bytes), stored and listed as given;
	 * it is never shell text. NULL means "". */
	const char *name;
	/* Working directory; NULL means the workspace. Relative to the workspace. */
	const char *cwd;
	/* NULL-terminated array of "NAME=value" strings added to the environment. */
	const char *const *env;
	/* Bytes of output kept in the sandbox (the newest, in two halves);
	 * 0 means 1 MiB. At least 2, at most 1 GiB (ASP_EINVAL otherwise). */
	uint64_t max_output;
} asp_bg_options;

#define ASP_BG_OPTIONS_VERSION 1
#define ASP_BG_OPTIONS_INIT { ASP_BG_OPTIONS_VERSION, { 0, NULL, 0 }, NULL, NULL, NULL, 0 }

ASP_EXTERN(int) asp_bg_options_init(asp_bg_options *opts, unsigned int version);

/*
 * Start `command` (shell text, run by bash) in the background and return
 * at once. *id receives its id (letters, digits and '-', to free with
 * asp_free), by which every call below finds it. Errors: ASP_EINVAL,
 * ASP_ENOENT (cwd missing), ASP_ERROR (no bash in the sandbox, or the
 * state directory could not be made: the message says), connection errors.
 */
ASP_EXTERN(int) asp_bg_start(char **id, asp_sandbox *sb, const char *command,
			     const asp_bg_options *opts, asp_error *err);

/*
 * Read up to `limit` bytes of output from `offset` (0 for the first byte
 * written; where the kept output begins later than offset, from there:
 * st->offset says where the bytes returned begin, st->output_start where
 * the kept ones do). *out (NUL-terminated, not counted in *out_len; free
 * with asp_free) may be empty: nothing new yet. limit 0 means 1 MiB; at
 * most 64 MiB (ASP_EINVAL beyond). Errors: ASP_ENOENT (no such id),
 * ASP_EINVAL, connection errors.
 */
ASP_EXTERN(int) asp_bg_read(unsigned char **out, size_t *out_len, asp_bg_status *st, asp_sandbox *sb,
			    const char *id, uint64_t offset, uint64_t limit,
			    const asp_call_options *opts, asp_error *err);

/*
 * Send signal `sig` (a <signal.h> number of this machine: SIGTERM,
 * SIGKILL, SIGINT, ...; sent by name, so it means the same in the
 * sandbox) to the command's whole process group. A process that has
 * ended is no error. Errors: ASP_ENOENT, ASP_EINVAL (a signal with no
 * portable name), connection errors.
 */
ASP_EXTERN(int) asp_bg_signal(asp_sandbox *sb, const char *id, int sig, const asp_call_options *opts,
			      asp_error *err);

/*
 * Wait up to timeout_ms (ASP_BG_FOREVER: no limit; 0: only look) for the
 * command to end, and fill *st. ASP_ETIMEOUT (with *st filled, state
 * ASP_BG_RUNNING) when it still runs. The wait runs in the sandbox, one
 * command polling every 50 ms, then every 250 ms after 2 s; opts' cancel
 * stops it. Errors: ASP_ENOENT, ASP_ETIMEOUT, connection errors.
 */
ASP_EXTERN(int) asp_bg_wait(asp_bg_status *st, asp_sandbox *sb, const char *id, unsigned int timeout_ms,
			    const asp_call_options *opts, asp_error *err);

/*
 * Remove an ended (or lost) process's files: its id is then unknown.
 * Errors: ASP_ENOENT, ASP_EINVAL (still running: signal it first),
 * connection errors.
 */
ASP_EXTERN(int) asp_bg_remove(asp_sandbox *sb, const char *id, const asp_call_options *opts,
			      asp_error *err);

/* One listed background process; strings are owned by the list. */
typedef struct asp_bg_entry {
	const char *id;
	const char *name;    /* as given to asp_bg_start, verbatim */
	const char *command; /* as given, verbatim */
	int64_t start_ms;    /* when it was started, ms since the epoch (the starter's clock) */
	int64_t pid;         /* the command's pid and process group in the sandbox (0: not yet known) */
	asp_bg_status status;
} asp_bg_entry;

typedef struct asp_bg_list asp_bg_list;

/*
 * Every background process the sandbox user has (started by any handle
 * or harness), ordered by start time. Errors: connection errors, ASP_EPROTO
 * (a listing that does not parse).
 */
ASP_EXTERN(int) asp_bg_list_all(asp_bg_list **out, asp_sandbox *sb, const asp_call_options *opts,
				asp_error *err);
ASP_EXTERN(size_t) asp_bg_list_count(const asp_bg_list *l);
/* Entry i, or NULL when i is out of range. Owned by l. */
ASP_EXTERN(const asp_bg_entry *) asp_bg_list_get(const asp_bg_list *l, size_t i);
ASP_EXTERN(void) asp_bg_list_free(asp_bg_list *l);

#ifdef __cplusplus
}
#endif

#endif /* ASP_H */
