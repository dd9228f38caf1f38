/*
 * tool_loop.c - a minimal agent tool loop in C on libasp.
 *
 * A real harness gets its tool calls from a model; this one runs a fixed
 * plan, so it needs no LLM. Every tool runs in the sandbox named by the
 * .asp.json found from the current directory upwards.
 *
 *   cc tool_loop.c $(pkg-config --cflags --libs libasp) -o tool_loop
 */
#include <asp.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *what, const asp_error *err)
{
	fprintf(stderr, "%s failed: %s (%s)\n", what, err->message, asp_error_name(err->code));
	return 1;
}

/* The "bash" tool: run a command, show its output and status. */
static int bash(asp_sandbox *sb, const char *command)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r;
	asp_error err = { 0 };
	const unsigned char *out;
	size_t len;

	o.kill_after_ms = 10000; /* the command's kill timer: timed_out in the result */
	printf("$ %s\n", command);
	if (asp_exec(&r, sb, command, &o, &err))
		return fail("exec", &err);
	out = asp_exec_result_output(r, ASP_STDOUT, &len);
	fwrite(out, 1, len, stdout);
	out = asp_exec_result_output(r, ASP_STDERR, &len);
	fwrite(out, 1, len, stdout);
	printf("[exit %d]\n\n", asp_exec_result_exit_code(r));
	asp_exec_result_free(r);
	return 0;
}

/* The "read" tool: show a file with line numbers, as agents expect. */
static int read_file(asp_sandbox *sb, const char *path)
{
	unsigned char *data;
	size_t len, i, line = 1;
	asp_error err = { 0 };

	printf("read %s\n", path);
	if (asp_read(&data, &len, sb, path, 0, ASP_READ_ALL, NULL, &err))
		return fail("read", &err);
	printf("%6zu\t", line);
	for (i = 0; i < len; i++) {
		putchar(data[i]);
		if (data[i] == '\n' && i + 1 < len)
			printf("%6zu\t", ++line);
	}
	printf("\n");
	asp_free(data);
	return 0;
}

/* The "write" tool: atomic, creating parent directories. */
static int write_file(asp_sandbox *sb, const char *path, const char *text)
{
	asp_write_options o = ASP_WRITE_OPTIONS_INIT;
	asp_error err = { 0 };

	o.flags = ASP_WRITE_PARENTS;
	printf("write %s (%zu bytes)\n\n", path, strlen(text));
	if (asp_write(sb, path, text, strlen(text), &o, &err))
		return fail("write", &err);
	return 0;
}

int main(void)
{
	asp_sandbox *sb;
	asp_sandbox_info info = ASP_SANDBOX_INFO_INIT;
	asp_error err = { 0 };
	int rc = 0;

	if (asp_open(&sb, NULL, &err))
		return fail("open", &err);
	if (asp_sandbox_info_get(&info, sb, &err) == 0)
		printf("sandbox: %s, workspace %s, host key %s\n\n", asp_sandbox_config_path(sb),
		       asp_sandbox_workspace(sb), info.host_key_fingerprint);
	rc |= write_file(sb, "src/hello.c",
			 "#include <stdio.h>\nint main(void)\n{\n\tputs(\"hello from the sandbox\");\n"
			 "\treturn 0;\n}\n");
	rc |= read_file(sb, "src/hello.c");
	rc |= bash(sb, "cc -o hello src/hello.c 2>&1 || echo 'no compiler in the sandbox'; "
		       "[ -x hello ] && ./hello; uname -n; id -un; pwd");
	rc |= bash(sb, "ls -la src");
	asp_close(sb);
	return rc;
}
