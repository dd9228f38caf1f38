/*
 * signals.c - Ctrl-C and friends cancel the remote command instead of
 * leaving it running. Everything the handler does is async-signal-safe:
 * lock-free atomics, the hook (asp_cancel_trigger: an atomic and a
 * write), send(2).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "cli.h"
#include "proto.h"

static volatile sig_atomic_t first_signal;
static void (*volatile signal_hook)(int);
static atomic_int target_sock = -1;

static void on_signal(int sig)
{
	int saved = errno, sock = atomic_load(&target_sock);

	if (!first_signal)
		first_signal = sig;
	if (signal_hook)
		signal_hook(sig);
	if (sock >= 0)
		proto_send_frame(sock, FRAME_CANCEL, sig);
	errno = saved;
}

void cli_signals_install(void (*hook)(int sig))
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa;

	signal_hook = hook;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: blocking calls see EINTR */
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* A signal that came before the socket was there still reaches the master. */
void cli_signals_target_sock(int sock)
{
	atomic_store(&target_sock, sock);
	if (sock >= 0 && first_signal)
		proto_send_frame(sock, FRAME_CANCEL, first_signal);
}

int cli_signals_received(void)
{
	return first_signal;
}
