/*
 * use.c - a program of libasp's users, compiled against the installed
 * libasp-dev by tests/deb/test-deb.sh: open the sandbox of argv[1], run
 * argv[2], print its stdout and the library's version.
 */
#include <asp.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_exec_result *r = NULL;
	asp_error err = { 0 };
	const unsigned char *out;
	size_t len;
	int rc = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: use CONFIG COMMAND\n");
		return 2;
	}
	o.config_path = argv[1];
	if (asp_open(&sb, &o, &err) != ASP_OK) {
		fprintf(stderr, "use: asp_open %s: %s\n", argv[1], err.message);
		return 1;
	}
	if (asp_exec(&r, sb, argv[2], NULL, &err) != ASP_OK) {
		fprintf(stderr, "use: asp_exec: %s\n", err.message);
		goto fail;
	}
	out = asp_exec_result_output(r, ASP_STDOUT, &len);
	printf("libasp %s: %.*s", asp_version(), (int)len, (const char *)out);
	rc = asp_exec_result_exit_code(r);
	asp_exec_result_free(r);
fail:
	asp_close(sb);
	return rc;
}
