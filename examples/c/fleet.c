/*
 * fleet.c - one command in many sandboxes at once, from one thread.
 *
 * An eval or RL run drives many sandboxes from one process. asp_exec
 * blocks, so running N commands at once with it takes N threads. Here one
 * thread does it all: it opens each sandbox (one .asp.json per argument),
 * starts the command in each with a handle (asp_proc_start returns once
 * the server has accepted it), and then waits for all of them at once
 * (asp_proc_wait_any: one poll over every connection). The results print
 * in the order the commands end. Each command finds FLEET_INDEX, its
 * sandbox's place among the arguments (from 0), in its environment.
 *
 * A sandbox that cannot be opened, or whose command cannot start, is
 * reported by name and the others run on. The exit status is 0 when every
 * command ran and exited 0, else 1; 2 for a wrong command line.
 *
 * Opens run one after another here (a connection's handshake each); a
 * run with hundreds of sandboxes can spread them over a few threads, and
 * still wait for every command from one.
 *
 *   cc fleet.c $(pkg-config --cflags --libs libasp) -o fleet
 *   ./fleet 'make test' a/.asp.json b/.asp.json c/.asp.json
 */
#include <asp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A sandbox's failure: the message, and its config when the message does not name it. */
static void failed(size_t i, const char *config, const asp_error *err)
{
	if (strstr(err->message, config))
		printf("[%zu] %s (%s)\n", i, err->message, asp_error_name(err->code));
	else
		printf("[%zu] %s: %s (%s)\n", i, config, err->message, asp_error_name(err->code));
}

/* Print a command's end and its output, each line marked with the sandbox's index. */
static int report(size_t i, const asp_exec_result *r)
{
	const unsigned char *out;
	size_t len, start = 0;
	int code = asp_exec_result_exit_code(r);

	out = asp_exec_result_output(r, ASP_STDOUT, &len);
	for (size_t k = 0; k < len; k++) {
		if (out[k] == '\n' || k + 1 == len) {
			printf("[%zu] ", i);
			fwrite(out + start, 1, k - start + (out[k] != '\n'), stdout);
			putchar('\n');
			start = k + 1;
		}
	}
	if (code < 0)
		printf("[%zu] killed by signal %d%s\n", i, asp_exec_result_signal(r),
		       asp_exec_result_timed_out(r) ? " (timed out)" : "");
	else
		printf("[%zu] exit %d\n", i, code);
	return code == 0;
}

int main(int argc, char **argv)
{
	size_t n = argc > 2 ? (size_t)argc - 2 : 0, running = 0, ok = 0;
	const char *command = argc > 1 ? argv[1] : NULL;
	asp_sandbox **sbs;
	asp_proc **procs;

	if (n == 0) {
		fprintf(stderr, "usage: fleet COMMAND CONFIG...\n");
		return 2;
	}
	sbs = calloc(n, sizeof(*sbs));
	procs = calloc(n, sizeof(*procs));
	if (!sbs || !procs) {
		fprintf(stderr, "fleet: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
		asp_proc_options po = ASP_PROC_OPTIONS_INIT;
		asp_error err = { 0 };
		char var[40];
		const char *env[] = { var, NULL };

		snprintf(var, sizeof(var), "FLEET_INDEX=%zu", i);
		oo.config_path = argv[i + 2];
		oo.max_connections = 1; /* one command each: one connection is all it needs */
		po.env = env;
		po.kill_after_ms = 600000; /* nothing runs on for ever */
		if (asp_open(&sbs[i], &oo, &err) || asp_proc_start(&procs[i], sbs[i], command, &po, &err) ||
		    asp_proc_close_stdin(procs[i], &err)) {
			failed(i, argv[i + 2], &err);
			asp_proc_free(procs[i]);
			procs[i] = NULL;
			continue;
		}
		running++;
	}
	fflush(stdout);
	while (running > 0) {
		asp_exec_result *r;
		asp_error err = { 0 };
		size_t k;

		if (asp_proc_wait_any(&k, procs, n, -1, NULL, &err)) {
			fprintf(stderr, "fleet: wait: %s (%s)\n", err.message, asp_error_name(err.code));
			break;
		}
		if (asp_proc_wait(&r, procs[k], 0, &err)) {
			failed(k, argv[k + 2], &err);
		} else {
			ok += (size_t)report(k, r);
			asp_exec_result_free(r);
		}
		fflush(stdout);
		asp_proc_free(procs[k]);
		procs[k] = NULL; /* wait_any skips it from now on */
		running--;
	}
	for (size_t i = 0; i < n; i++) {
		asp_proc_free(procs[i]);
		asp_close(sbs[i]);
	}
	free(procs);
	free(sbs);
	return ok == n ? 0 : 1;
}
