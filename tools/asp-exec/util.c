/*
 * util.c - small things both programs need.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

void cli_say(int fd, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	memcpy(line, "asp-exec: ", 10);
	va_start(ap, fmt);
	n = vsnprintf(line + 10, sizeof(line) - 11, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	n = n > (int)sizeof(line) - 12 ? (int)sizeof(line) - 12 : n;
	line[10 + n] = '\n';
	if (write(fd, line, (size_t)n + 11) < 0)
		return; /* nowhere left to report to */
}

void cli_open_std_fds(void)
{
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", fd ? O_WRONLY : O_RDONLY) != fd)
			_exit(CLI_EXIT_FAILURE);
}
