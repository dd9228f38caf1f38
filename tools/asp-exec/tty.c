/*
 * tty.c - --tty: the command on a pseudo-terminal in the sandbox, as ssh -t
 * runs one (asp_proc_start with ASP_PROC_PTY).
 *
 * This terminal goes into raw mode for the run, as ssh puts it: every key
 * is a byte for the remote terminal (Ctrl-C interrupts the remote program,
 * not asp-exec), and the remote terminal's output ("\r\n" included) is
 * written as it comes. Its modes come back on every way out: the normal
 * end, an error, a cancel (SIGINT/SIGTERM/SIGHUP, signals.c), exit() from
 * anywhere (atexit), and the other signals that end a process (a handler
 * that restores them, then dies of the signal).
 *
 * Two threads: this one reads the output and writes it to io->out; a
 * second waits on stdin and SIGWINCH (a self-pipe) and forwards keys and
 * the window size. A proc's calls may run from several threads at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli.h"

#define TERM_MAX 64     /* asp_proc_options.term's limit */
#define SIZE_MAX_ 10000 /* asp_proc_options.cols, .rows */

/* ------------------------------------------------------------ the local terminal's modes */

static struct termios saved_modes;
static atomic_int raw_fd = -1; /* the terminal in raw mode, or -1 */

/* Async-signal-safe (tcsetattr is); a no-op once done. */
static void restore_modes(void)
{
	int fd = atomic_exchange(&raw_fd, -1);

	if (fd >= 0)
		tcsetattr(fd, TCSADRAIN, &saved_modes);
}

/* Signals that would end asp-exec with the terminal raw: restore, then die of it as before. */
static const int fatal_signals[] = { SIGQUIT, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGALRM,
				     SIGUSR1, SIGUSR2, SIGPWR, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF };

static void on_fatal(int sig)
{
	restore_modes();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* ssh's raw mode (clientloop.c enter_raw_mode): no local editing, echo, signals or output mapping. */
static int enter_raw(int fd)
{
	static int hooked;
	struct termios t;
	struct sigaction sa;

	if (tcgetattr(fd, &saved_modes) < 0)
		return -1;
	t = saved_modes;
	t.c_iflag |= IGNPAR;
	t.c_iflag &= ~(tcflag_t)(ISTRIP | INLCR | IGNCR | ICRNL | IXON | IXANY | IXOFF);
#ifdef IUCLC
	t.c_iflag &= ~(tcflag_t)IUCLC;
#endif
	t.c_lflag &= ~(tcflag_t)(ISIG | ICANON | ECHO | ECHOE | ECHOK | ECHONL | IEXTEN);
	t.c_oflag &= ~(tcflag_t)OPOST;
	t.c_cc[VMIN] = 1;
	t.c_cc[VTIME] = 0;
	if (!hooked) {
		hooked = 1;
		atexit(restore_modes);
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_fatal;
		sigemptyset(&sa.sa_mask);
		for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++) {
			struct sigaction old;

			/* A signal the caller ignores stays ignored. */
			if (sigaction(fatal_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
				sigaction(fatal_signals[i], &sa, NULL);
		}
	}
	atomic_store(&raw_fd, fd);
	if (tcsetattr(fd, TCSADRAIN, &t) < 0) {
		atomic_store(&raw_fd, -1);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ window size */

static int winch_pipe[2] = { -1, -1 };

static void on_winch(int sig)
{
	int saved = errno;
	char b = 1;

	(void)sig;
	if (write(winch_pipe[1], &b, 1) < 0) {
		/* full: a resize is already pending */
	}
	errno = saved;
}

/* The size of the terminal on fd (-1: none), clamped to what the remote terminal takes; 0 when unknown. */
static int window_size(int fd, unsigned int *cols, unsigned int *rows)
{
	struct winsize ws;

	if (fd < 0 || ioctl(fd, TIOCGWINSZ, &ws) < 0 || !ws.ws_col || !ws.ws_row)
		return 0;
	*cols = ws.ws_col < SIZE_MAX_ ? ws.ws_col : SIZE_MAX_;
	*rows = ws.ws_row < SIZE_MAX_ ? ws.ws_row : SIZE_MAX_;
	return 1;
}

/* $TERM when the remote terminal can take it (asp_proc_options.term); else NULL, libasp's default. */
static const char *local_term(void)
{
	const char *t = getenv("TERM");
	size_t n = t ? strlen(t) : 0;

	if (!n || n > TERM_MAX || strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._+") != n)
		return NULL;
	return t;
}

/* ------------------------------------------------------------ keys and resizes */

typedef struct input {
	asp_proc *p;
	int in;       /* io->in */
	int size_fd;  /* the terminal whose size the remote one follows, or -1 */
	int stop[2];  /* written to when the command is over */
} input;

static void *input_main(void *arg)
{
	input *t = arg;
	char buf[4096];
	int in_open = 1;
	asp_error e;

	for (;;) {
		struct pollfd f[3] = { { t->stop[0], POLLIN, 0 }, { winch_pipe[0], POLLIN, 0 },
				       { in_open ? t->in : -1, POLLIN, 0 } };
		unsigned int cols, rows;
		ssize_t n;

		if (poll(f, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (f[0].revents)
			break;
		if (f[1].revents) {
			while (read(winch_pipe[0], buf, sizeof(buf)) > 0)
				;
			if (window_size(t->size_fd, &cols, &rows))
				asp_proc_resize(t->p, cols, rows, &e); /* an ended command needs no size */
		}
		if (!f[2].revents)
			continue;
		n = read(t->in, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (n <= 0) {
			/* EOF (or a hung-up terminal): the remote terminal is what its program reads EOF from. */
			in_open = 0;
			asp_proc_close_stdin(t->p, &e);
			continue;
		}
		if (asp_proc_write(t->p, buf, (size_t)n, &e))
			in_open = 0; /* the command ended, or the run failed: the reader reports it */
	}
	return NULL;
}

/* ------------------------------------------------------------ the run */

/* Output to io->out until the command ends, then its result; 0 or the failed call's code (in e). */
static int relay(input *t, cli_io *io, int *broken, asp_exec_result **r, asp_error *e)
{
	char buf[65536];
	size_t n;
	int rc;

	while (!(rc = asp_proc_read(&n, NULL, t->p, buf, sizeof(buf), -1, e)) && n) {
		if (!*broken && cli_write_all(io->out, buf, n, io->cancel) &&
		    !asp_cancel_is_triggered(io->cancel)) {
			*broken = 1; /* a closed stdout: stop the command, as it would stop a local one */
			cli_io_cancel(io, SIGPIPE);
		}
	}
	return rc ? rc : asp_proc_wait(r, t->p, -1, e);
}

/* The command started: this terminal raw, keys in, output out; returns the exit status. */
static int interact(input *t, cli_io *io)
{
	asp_exec_result *r = NULL;
	asp_error e = { 0 };
	pthread_t thread;
	int rc, broken = 0, saved, status;
	char b = 1;

	/* Raw once the command runs, as ssh does: errors before it print on the terminal as it was. */
	if (isatty(io->in) && enter_raw(io->in) < 0) {
		saved = errno;
		cli_say(io->err, "--tty: cannot set the terminal's modes: %s", strerror(saved));
		return CLI_EXIT_FAILURE;
	}
	if ((rc = pthread_create(&thread, NULL, input_main, t)) != 0) {
		restore_modes();
		cli_say(io->err, "--tty: cannot start a thread: %s", strerror(rc));
		return CLI_EXIT_FAILURE;
	}
	rc = relay(t, io, &broken, &r, &e);
	if (write(t->stop[1], &b, 1) < 0) {
		/* cannot happen with an empty pipe; the join below would wait for a key */
	}
	pthread_join(thread, NULL);
	restore_modes(); /* before any message, so that it starts a clean line */
	status = rc ? cli_fail(io, rc, &e) : cli_exec_status(r, io, broken);
	asp_exec_result_free(r);
	return status;
}

int cli_run_tty(asp_sandbox *sb, const cli_request *req, cli_io *io)
{
	asp_proc_options o = ASP_PROC_OPTIONS_INIT;
	asp_error e = { 0 };
	struct sigaction sa, old_winch;
	input t = { NULL, io->in, -1, { -1, -1 } };
	char *command = cli_command_text(req->args);
	int rc, status;

	if (!command) {
		cli_say(io->err, "no command, or out of memory");
		return CLI_EXIT_FAILURE;
	}
	if ((winch_pipe[0] < 0 && pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) < 0) ||
	    pipe2(t.stop, O_CLOEXEC) < 0) {
		cli_say(io->err, "--tty: %s", strerror(errno));
		free(command);
		return CLI_EXIT_FAILURE;
	}
	/* The size is read after the handler is in place: no resize goes unseen. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_winch;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGWINCH, &sa, &old_winch);
	t.size_fd = isatty(io->in) ? io->in : isatty(io->out) ? io->out : -1;
	if (!window_size(t.size_fd, &o.cols, &o.rows))
		o.cols = o.rows = 0; /* libasp's 80 x 24 */
	o.flags = ASP_PROC_PTY;
	o.term = local_term();
	o.cwd = req->cwd;
	o.env = (const char *const *)req->env;
	o.kill_after_ms = req->timeout_ms;
	o.max_output = 1; /* streamed, not kept */
	o.call.cancel = io->cancel;
	if ((rc = asp_proc_start(&t.p, sb, command, &o, &e)))
		status = cli_fail(io, rc, &e);
	else
		status = interact(&t, io);
	asp_proc_free(t.p); /* kills what still runs (an error above), its process group */
	restore_modes();
	sigaction(SIGWINCH, &old_winch, NULL);
	close(t.stop[0]);
	close(t.stop[1]);
	free(command);
	return status;
}
