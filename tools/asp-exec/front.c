/*
 * front.c - main() of asp-exec: the fast path. A command, --read or
 * --write goes to the master of its configuration (started if needed);
 * --stop is handled here too. Everything else, and any call no master can
 * take, is handed to asp-exec-core with the same arguments.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static int run_core(char **argv)
{
	char *core = cli_core_path();

	if (cli_signals_received())
		return 128 + cli_signals_received();
	if (core)
		execv(core, argv);
	cli_say(2, "cannot run %s: %s", core ? core : CLI_CORE_NAME, core ? strerror(errno) :
		"not found next to asp-exec");
	free(core);
	return CLI_EXIT_FAILURE;
}

static int run(const cli_options *o, char **argv)
{
	char *config;
	int status, fd;

	if (o->master_socket || o->check || o->no_master)
		return run_core(argv);
	cli_signals_install(NULL);
	if (!(config = cli_discover(o->config, &fd)))
		return run_core(argv); /* libasp finds it, or says why not */
	if (o->stop)
		status = cli_client_stop(config, fd);
	else if (cli_client_run(config, fd, o->persist_s, o->req, &status) != 0)
		status = -1;
	close(fd);
	free(config);
	return status >= 0 ? status : run_core(argv);
}

int main(int argc, char **argv)
{
	cli_options o;
	int rc;

	cli_open_std_fds();
	rc = cli_parse(&o, argc, argv);
	if (rc == 0)
		rc = run(&o, argv);
	else
		rc = rc > 0 ? 0 : CLI_EXIT_USAGE;
	cli_options_free(&o);
	return rc;
}
