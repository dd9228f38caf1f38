/*
 * core.c - main() of asp-exec-core: what needs libasp. asp-exec hands it
 * calls that run directly (--no-master, or when no master can be used),
 * --check, and starts it as the master (--master SOCKET).
 */
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

/* The request a signal cancels (SIGINT and friends, see signals.c). */
static cli_io *_Atomic running;

static void cancel_running(int sig)
{
	cli_io *io = atomic_load(&running);

	if (io)
		cli_io_cancel(io, sig);
}

static int run_direct(const char *config, const cli_request *req)
{
	cli_io io = { 0, 1, 2, NULL, 0 };
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	int rc, status;

	if (asp_cancel_new(&io.cancel, &e)) {
		cli_say(2, "%s", e.message);
		return CLI_EXIT_FAILURE;
	}
	atomic_store(&running, &io);
	if (cli_signals_received()) /* one that came before */
		cli_io_cancel(&io, cli_signals_received());
	if ((rc = cli_open(&sb, config, NULL, 0, &e))) {
		cli_say(2, "%s", e.message);
		status = cli_exit_for_error(rc);
	} else {
		status = cli_run(sb, req, &io);
	}
	atomic_store(&running, NULL);
	asp_close(sb);
	asp_cancel_free(io.cancel);
	return status;
}

/* Masters are only started for configurations cli_discover finds. */
static int stop_master(const char *given)
{
	char *found = NULL;
	asp_error e = { 0 };
	int status, fd;
	char *config = cli_discover(given, &fd);

	if (config) {
		status = cli_client_stop(config, fd);
		close(fd);
		free(config);
		return status;
	}
	if (!given && asp_config_find(&found, NULL, &e)) {
		cli_say(2, "%s", e.message);
		return CLI_EXIT_CONFIG;
	}
	asp_free(found);
	cli_say(2, "no master is running for %s", given ? given : "this configuration");
	return CLI_EXIT_FILE;
}

static int run(const cli_options *o)
{
	if (o->master_socket)
		return cli_master_main(o->config, o->config_fd, o->master_socket, o->persist_s,
				       o->ready_fd);
	if (o->check)
		return cli_check(o->config, o->req->json);
	if (o->stop)
		return stop_master(o->config);
	cli_signals_install(cancel_running);
	return run_direct(o->config, o->req);
}

int main(int argc, char **argv)
{
	cli_options o;
	int rc;

	cli_open_std_fds();
	rc = cli_parse(&o, argc, argv);
	if (rc == 0)
		rc = run(&o);
	else
		rc = rc > 0 ? 0 : CLI_EXIT_USAGE;
	cli_options_free(&o);
	return rc;
}
