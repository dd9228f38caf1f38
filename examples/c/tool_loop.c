/*
 * tool_loop.c - a minimal agent tool loop in C on libasp.
 *
 * A real harness gets its tool calls from a model; this one runs a fixed
 * plan, so it needs no LLM. Every tool runs in the sandbox named by the
 * .asp.json found from the current directory upwards.
 *
 * Each call is a fresh shell, and a command's processes are its own: a
 * server that must outlive its call (a dev server the next call queries)
 * is started in the background by the shell with its input and output on
 * files, so the call ends when the shell does and the server goes on; a
 * later call finds it by its pid file and stops it.
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
	/* A background server: started by one call, queried by the next, stopped by a third. */
	rc |= bash(sb, "if command -v python3 >/dev/null; then "
		       "python3 -u -m http.server 0 --bind 127.0.0.1 >server.log 2>&1 </dev/null & "
		       "echo $! >server.pid; echo server started; "
		       "else echo 'no python3 in the sandbox'; fi");
	rc |= bash(sb, "[ -f server.pid ] || exit 0; p=$(cat server.pid); "
		       "kill -0 \"$p\" || { echo 'the server is gone'; exit 1; }; i=0; "
		       "while ! grep -q ' port [0-9]' server.log && [ $i -lt 100 ]; do "
		       "sleep 0.1; i=$((i + 1)); done; "
		       "port=$(sed -n 's/.* port \\([0-9]*\\).*/\\1/p' server.log); "
		       "echo \"server $p is running, on port $port\"; "
		       "python3 -c 'import sys, urllib.request as u; "
		       "print(u.urlopen(sys.argv[1], timeout=10).read().decode(), end=\"\")' "
		       "\"http://127.0.0.1:$port/src/hello.c\"");
	rc |= bash(sb, "[ -f server.pid ] || exit 0; p=$(cat server.pid); kill \"$p\"; i=0; "
		       "while kill -0 \"$p\" 2>/dev/null && [ $i -lt 100 ]; do "
		       "sleep 0.1; i=$((i + 1)); done; "
		       "kill -0 \"$p\" 2>/dev/null && echo 'server still running' || echo server stopped; "
		       "rm -f server.pid server.log");
	asp_close(sb);
	return rc;
}
