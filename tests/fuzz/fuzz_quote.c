/*
 * fuzz_quote.c - property: whatever the bytes, the shell sees exactly them.
 * The input (up to the first NUL, which C strings cannot carry) is quoted
 * with asp__quote and given to /bin/sh as `printf %s QUOTED`; the output
 * must equal the input byte for byte.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "quote.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t run_shell(const char *script, char *out, size_t cap)
{
	int p[2];
	pid_t pid;
	size_t got = 0;
	ssize_t n;

	if (pipe(p))
		abort();
	if ((pid = fork()) == 0) {
		dup2(p[1], 1);
		close(p[0]);
		execl("/bin/sh", "sh", "-c", script, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	while (got < cap && (n = read(p[0], out + got, cap - got)) > 0)
		got += (size_t)n;
	close(p[0]);
	waitpid(pid, NULL, 0);
	return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	asp_buf script = { 0 };
	char *s, out[8192];
	size_t len = strnlen((const char *)data, size), got;

	if (len > 4096)
		return 0;
	if (!(s = malloc(len + 1)))
		return 0;
	memcpy(s, data, len);
	s[len] = '\0';
	if (asp__buf_puts(&script, "printf %s ") || asp__quote(&script, s))
		abort();
	got = run_shell((const char *)script.data, out, sizeof(out));
	if (got != len || memcmp(out, s, len))
		__builtin_trap();
	asp__buf_free(&script);
	free(s);
	return 0;
}
