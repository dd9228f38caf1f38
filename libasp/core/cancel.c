/*
 * cancel.c - the cancel token (asp_cancel_*): an atomic flag and a
 * self-pipe whose read end a wait polls, so a trigger from any thread or a
 * signal handler wakes the call that waits.
 */
#include "cancel.h"
#include "errtext.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

struct asp_cancel {
	atomic_int triggered;
	int fds[2];
};

int asp_cancel_new(asp_cancel **out, asp_error *err)
{
	asp_cancel *c;

	ASP_ASSERT_ARG(out);
	if (!(c = asp__calloc(1, sizeof(*c))))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	if (pipe2(c->fds, O_CLOEXEC | O_NONBLOCK)) {
		asp__free(c);
		return asp__error(err, ASP_ERROR, "cannot create a cancel token: %s", ASP_ERRNO_TEXT(errno));
	}
	atomic_init(&c->triggered, 0);
	*out = c;
	return 0;
}

void asp_cancel_trigger(asp_cancel *c)
{
	char b = 1;
	ssize_t n;

	/* Async-signal-safe: an atomic store and a write(2). */
	if (c && !atomic_exchange(&c->triggered, 1))
		n = write(c->fds[1], &b, 1);
	(void)n;
}

int asp_cancel_is_triggered(const asp_cancel *c)
{
	return c ? atomic_load(&((asp_cancel *)c)->triggered) : 0;
}

void asp_cancel_reset(asp_cancel *c)
{
	char b[16];

	if (!c)
		return;
	while (read(c->fds[0], b, sizeof(b)) > 0)
		;
	atomic_store(&c->triggered, 0);
}

void asp_cancel_free(asp_cancel *c)
{
	if (!c)
		return;
	close(c->fds[0]);
	close(c->fds[1]);
	asp__free(c);
}

int asp__cancel_fd(const asp_cancel *c)
{
	return c ? c->fds[0] : -1;
}
