/*
 * run.c - one request on an open sandbox: a command (streamed, or captured
 * for --json), --read or --write. The direct mode and the master both call
 * cli_run(), so a request means the same either way.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "quote.h" /* asp__quote_argv */

/* How long a blocked read or write waits before looking at the cancel token again. */
#define CANCEL_CHECK_MS 200
/* --read fetches the file in ranges of this size. */
#define READ_RANGE (8u * 1024 * 1024)
/* A pipe is writable with at least one page free: writes this small never block. */
#define WRITE_CHUNK 4096

int cli_exit_for_error(int code)
{
	switch (code) {
	case ASP_ENOCONFIG:
	case ASP_ECONFIG:
		return CLI_EXIT_CONFIG;
	case ASP_EHOSTKEY:
		return CLI_EXIT_HOSTKEY;
	case ASP_EAUTH:
		return CLI_EXIT_AUTH;
	case ASP_ECONNECT:
	case ASP_ECONNLOST:
	case ASP_ETIMEOUT:
		return CLI_EXIT_CONNECT;
	case ASP_ENOENT:
	case ASP_EISDIR:
	case ASP_EACCES:
	case ASP_EEXIST:
	case ASP_ENOTDIR:
	case ASP_ENOTEMPTY:
	case ASP_ENOSPC:
	case ASP_EIO:
	case ASP_ELIMIT:
		return CLI_EXIT_FILE;
	default:
		return CLI_EXIT_FAILURE;
	}
}

int cli_open(asp_sandbox **out, const char *config, const char *text,
	     unsigned int max_connections, asp_error *err)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;

	o.config_path = config;
	o.config_text = text;
	o.max_connections = max_connections;
	o.flags = ASP_OPEN_LAZY;
	if (cli_trace_level)
		o.log_fn = cli_trace, o.log_level = cli_trace_level;
	return asp_open(out, &o, err);
}

void cli_trace(asp_log_level level, const char *msg, void *userdata)
{
	(void)userdata;
	cli_say(2, "%s: %s", level == ASP_LOG_DEBUG ? "debug" : level == ASP_LOG_INFO ? "info" : "warn", msg);
}

/* Poll fd for `events` until ready (1) or cancelled (0). */
static int wait_ready(int fd, short events, const asp_cancel *cancel)
{
	struct pollfd p = { fd, events, 0 };

	while (!asp_cancel_is_triggered(cancel))
		if (poll(&p, 1, CANCEL_CHECK_MS) > 0)
			return 1;
	return 0;
}

int cli_write_all(int fd, const void *data, size_t len, const asp_cancel *cancel)
{
	const unsigned char *p = data;

	/* Small writes after a poll: a reader that stops reading cannot wedge a cancel. */
	while (len) {
		size_t chunk = len < WRITE_CHUNK ? len : WRITE_CHUNK;
		ssize_t n;

		if (!wait_ready(fd, POLLOUT, cancel))
			return -1;
		n = write(fd, p, chunk);
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (n < 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

void cli_io_cancel(cli_io *io, int sig)
{
	int none = 0;

	atomic_compare_exchange_strong(&io->cancel_signal, &none, sig > 0 ? sig : SIGTERM);
	asp_cancel_trigger(io->cancel);
}

/* The exit status of a request that was cancelled by a signal (130 for SIGINT). */
static int cancelled_status(const cli_io *io)
{
	int sig = atomic_load(&io->cancel_signal);

	return 128 + (sig ? sig : SIGTERM);
}

int cli_fail(cli_io *io, int rc, const asp_error *e)
{
	if (rc == ASP_ECANCELLED && asp_cancel_is_triggered(io->cancel))
		return cancelled_status(io);
	cli_say(io->err, "%s", e->message[0] ? e->message : asp_strerror(rc));
	return cli_exit_for_error(rc);
}

/* ------------------------------------------------------------ exec */

typedef struct stream_ctx {
	cli_io *io;
	int broken; /* a local stdout/stderr write failed (a closed pipe) */
} stream_ctx;

static int on_output(asp_stream stream, const unsigned char *data, size_t len, void *userdata)
{
	stream_ctx *s = userdata;
	int fd = stream == ASP_STDERR ? s->io->err : s->io->out;

	if (cli_write_all(fd, data, len, s->io->cancel) == 0)
		return 0;
	if (!asp_cancel_is_triggered(s->io->cancel))
		s->broken = 1;
	return 1; /* cancels the command, as a closed pipe would stop a local one */
}

int cli_exec_status(const asp_exec_result *r, const cli_io *io, int broken)
{
	if (asp_exec_result_timed_out(r))
		return CLI_EXIT_TIMEOUT;
	if (asp_exec_result_cancelled(r))
		return broken ? 128 + SIGPIPE : cancelled_status(io);
	if (asp_exec_result_signal(r))
		return 128 + asp_exec_result_signal(r);
	return asp_exec_result_exit_code(r);
}

static int print_json(const asp_exec_result *r, cli_io *io, int status)
{
	char *text = cli_json_result(r);
	int rc;

	if (!text) {
		cli_say(io->err, "out of memory");
		return CLI_EXIT_FAILURE;
	}
	/* Printed even after a cancel: the result says what happened. */
	rc = cli_write_all(io->out, text, strlen(text), NULL);
	free(text);
	return rc ? 128 + SIGPIPE : status;
}

char *cli_command_text(char *const *args)
{
	char *quoted = NULL, *text;

	if (args[0] && !args[1]) {
		/* A leading space keeps text that starts with '-' from being read as
		 * options by bash's `eval` in libasp's wrapper (" -n" means "-n"). */
		return asprintf(&text, "%s%s", args[0][0] == '-' ? " " : "", args[0]) < 0 ? NULL : text;
	}
	if (!args[0] || asp__quote_argv(&quoted, (const char *const *)args, NULL))
		return NULL;
	text = strdup(quoted);
	asp_free(quoted);
	return text;
}

static int run_exec(asp_sandbox *sb, const cli_request *req, cli_io *io)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	stream_ctx s = { io, 0 };
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	cli_pump *pump;
	char *command = cli_command_text(req->args);
	int rc, status;

	if (!command) {
		cli_say(io->err, "no command, or out of memory");
		return CLI_EXIT_FAILURE;
	}
	if (cli_pump_start(&pump, io->in, &o.stdin_fd)) {
		cli_say(io->err, "cannot forward stdin: %s", strerror(errno));
		free(command);
		return CLI_EXIT_FAILURE;
	}
	o.flags |= ASP_EXEC_STDIN_FD;
	o.cwd = req->cwd;
	o.env = (const char *const *)req->env;
	o.kill_after_ms = req->timeout_ms;
	o.call.cancel = io->cancel;
	if (!req->json) {
		o.on_output = on_output;
		o.userdata = &s;
		o.max_output = 1; /* streamed, not kept */
	}
	rc = asp_exec(&r, sb, command, &o, &e);
	cli_pump_stop(pump);
	free(command);
	if (rc)
		return cli_fail(io, rc, &e);
	status = cli_exec_status(r, io, s.broken);
	if (req->json)
		status = print_json(r, io, status);
	asp_exec_result_free(r);
	return status;
}

/* ------------------------------------------------------------ read / write */

/*
 * Streamed in ranges, like cat: memory stays at one range whatever the
 * file's size (a link to /dev/zero streams until cancelled, as cat would).
 */
static int read_ranges(asp_sandbox *sb, const cli_request *req, cli_io *io, cli_progress *prog,
		       uint64_t size)
{
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	uint64_t off = 0;

	co.cancel = io->cancel;
	for (;;) {
		unsigned char *data = NULL;
		size_t len = 0;
		asp_error e = { 0 };
		int rc = asp_read(&data, &len, sb, req->path, off, READ_RANGE, &co, &e);

		if (rc) {
			cli_progress_end(prog, 0);
			return cli_fail(io, rc, &e);
		}
		rc = cli_write_all(io->out, data, len, io->cancel);
		asp_free(data);
		if (rc) {
			cli_progress_end(prog, 0);
			return asp_cancel_is_triggered(io->cancel) ? cancelled_status(io) : 128 + SIGPIPE;
		}
		off += len;
		cli_progress_set(prog, off, size > off ? size : off, NULL);
		if (len < READ_RANGE) {
			cli_progress_end(prog, 1);
			return 0;
		}
	}
}

static int run_read(asp_sandbox *sb, const cli_request *req, cli_io *io)
{
	cli_progress *prog = cli_progress_start(io->err, req->quiet, "read", req->path);
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	asp_stat_info st;
	asp_error e = { 0 };
	uint64_t size = 0;

	/* The size, for a percentage and an ETA: one more round trip, on a terminal only. */
	co.cancel = io->cancel;
	if (prog && asp_stat(&st, sb, req->path, &co, &e) == 0 && st.type == ASP_TYPE_FILE)
		size = st.size;
	cli_progress_set(prog, 0, size, NULL);
	return read_ranges(sb, req, io, prog, size);
}

/* All of fd until EOF, in a malloc'd buffer; -1 with errno (ECANCELED when cancelled). */
static int slurp(int fd, const asp_cancel *cancel, cli_progress *prog, unsigned char **out, size_t *len)
{
	size_t cap = 65536, n = 0;
	unsigned char *buf = malloc(cap), *bigger;
	ssize_t k;

	while (buf) {
		if (!wait_ready(fd, POLLIN, cancel)) {
			errno = ECANCELED;
			break;
		}
		if (n == cap) {
			if (!(bigger = realloc(buf, cap * 2)))
				break;
			buf = bigger;
			cap *= 2;
		}
		k = read(fd, buf + n, cap - n);
		if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (k < 0)
			break;
		if (k == 0) {
			*out = buf;
			*len = n;
			return 0;
		}
		n += (size_t)k;
		cli_progress_set(prog, n, 0, "reading stdin");
	}
	free(buf);
	return -1;
}

/*
 * asp_write sends the file in one call and tells nothing until it is done,
 * so the progress line counts stdin's bytes, then shows the time spent
 * sending.
 */
static int run_write(asp_sandbox *sb, const cli_request *req, cli_io *io)
{
	cli_progress *prog = cli_progress_start(io->err, req->quiet, "write", req->path);
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	unsigned char *data;
	size_t len;
	asp_error e = { 0 };
	int rc;

	if (slurp(io->in, io->cancel, prog, &data, &len)) {
		int saved = errno;

		cli_progress_end(prog, 0);
		if (saved == ECANCELED)
			return cancelled_status(io);
		cli_say(io->err, "write %s: reading stdin: %s", req->path, strerror(saved));
		return CLI_EXIT_FAILURE;
	}
	o.flags = req->mkdirs ? ASP_WRITE_PARENTS : 0;
	o.call.cancel = io->cancel;
	cli_progress_set(prog, 0, len, "sending");
	rc = asp_write(sb, req->path, data, len, &o, &e);
	free(data);
	cli_progress_set(prog, len, len, NULL);
	cli_progress_end(prog, rc == 0);
	return rc ? cli_fail(io, rc, &e) : 0;
}

int cli_run(asp_sandbox *sb, const cli_request *req, cli_io *io)
{
	switch (req->mode) {
	case CLI_EXEC:
		if (req->tty > 1 || (req->tty && isatty(io->in)))
			return cli_run_tty(sb, req, io);
		if (req->tty) /* as ssh -t does */
			cli_say(io->err, "--tty: stdin is not a terminal, so the command runs without a "
				"pseudo-terminal (--tty --tty forces one)");
		return run_exec(sb, req, io);
	case CLI_READ:
		return run_read(sb, req, io);
	case CLI_WRITE:
		return run_write(sb, req, io);
	case CLI_BG:
		return cli_run_bg(sb, req, io);
	default:
		cli_say(io->err, "unknown request mode %d", req->mode);
		return CLI_EXIT_FAILURE;
	}
}
