/*
 * opts.c - asp-exec's options, shared by the front and the core (which
 * gets the same arguments when the front hands a call over), and the
 * configuration they name or discovery finds.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "discover.h"

enum { OPT_CONFIG = 256, OPT_JSON, OPT_READ, OPT_WRITE, OPT_MKDIRS, OPT_CHECK, OPT_STOP,
	OPT_PERSIST, OPT_NO_MASTER, OPT_VERSION, OPT_MASTER, OPT_READY_FD, OPT_QUIET,
	OPT_CONFIG_FD, OPT_BG, OPT_BG_LIST, OPT_BG_OUTPUT, OPT_BG_SIGNAL, OPT_BG_WAIT, OPT_BG_REMOVE, OPT_NAME,
	OPT_KEEP, OPT_OFFSET, OPT_LIMIT, OPT_SIGNAL, OPT_TTY };

unsigned int cli_trace_level;

static const struct option long_options[] = {
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "cwd", required_argument, NULL, 'C' },
	{ "env", required_argument, NULL, 'e' },
	{ "timeout", required_argument, NULL, 't' },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "tty", no_argument, NULL, OPT_TTY },
	{ "read", required_argument, NULL, OPT_READ },
	{ "write", required_argument, NULL, OPT_WRITE },
	{ "mkdirs", no_argument, NULL, OPT_MKDIRS },
	{ "quiet", no_argument, NULL, OPT_QUIET },
	{ "check", no_argument, NULL, OPT_CHECK },
	{ "stop", no_argument, NULL, OPT_STOP },
	{ "persist", required_argument, NULL, OPT_PERSIST },
	{ "no-master", no_argument, NULL, OPT_NO_MASTER },
	{ "bg", no_argument, NULL, OPT_BG },
	{ "bg-list", no_argument, NULL, OPT_BG_LIST },
	{ "bg-output", required_argument, NULL, OPT_BG_OUTPUT },
	{ "bg-signal", required_argument, NULL, OPT_BG_SIGNAL },
	{ "bg-wait", required_argument, NULL, OPT_BG_WAIT },
	{ "bg-remove", required_argument, NULL, OPT_BG_REMOVE },
	{ "name", required_argument, NULL, OPT_NAME },
	{ "keep", required_argument, NULL, OPT_KEEP },
	{ "offset", required_argument, NULL, OPT_OFFSET },
	{ "limit", required_argument, NULL, OPT_LIMIT },
	{ "signal", required_argument, NULL, OPT_SIGNAL },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ "master", required_argument, NULL, OPT_MASTER },
	{ "ready-fd", required_argument, NULL, OPT_READY_FD },
	{ "config-fd", required_argument, NULL, OPT_CONFIG_FD },
	{ NULL, 0, NULL, 0 },
};

static const char usage_text[] =
	"usage: asp-exec [options] [--] COMMAND [ARG...]\n"
	"       asp-exec [options] --tty [--tty] [--] COMMAND [ARG...]\n"
	"       asp-exec [options] --read PATH [--quiet]\n"
	"       asp-exec [options] --write PATH [--mkdirs] [--quiet] < DATA\n"
	"       asp-exec [--config FILE] --check [--json] | --stop\n"
	"       asp-exec [options] --bg [--name NAME] [--keep BYTES] [--] COMMAND [ARG...]\n"
	"       asp-exec [options] --bg-list [--json]\n"
	"       asp-exec [options] --bg-output ID [--offset N] [--limit N] [--json]\n"
	"       asp-exec [options] --bg-signal ID [--signal SIG] | --bg-remove ID\n"
	"       asp-exec [options] --bg-wait ID [-t SECS] [--json]\n"
	"\n"
	"Runs COMMAND in the sandbox of the .asp.json found from the current directory\n"
	"upwards ($ASP_CONFIG or --config FILE win). A single ARG is shell text; several\n"
	"are quoted and joined, so each reaches the command exactly as given.\n"
	"\n"
	"      --config FILE     the configuration to use\n"
	"  -C, --cwd DIR         working directory (relative paths: from the workspace)\n"
	"  -e, --env NAME=VALUE  set an environment variable (repeatable)\n"
	"  -t, --timeout SECS    kill the command's process group after SECS (exit 124)\n"
	"      --json            print one JSON object: exit_code, signal, timed_out,\n"
	"                        cancelled, stdout, stderr (+ *_encoding), duration_ms\n"
	"      --tty             run COMMAND on a pseudo-terminal (this terminal's size and\n"
	"                        TERM; keys go to it raw, Ctrl-C included); twice: even\n"
	"                        when stdin is not a terminal. Its own connection\n"
	"      --read PATH       copy the file's bytes to stdout\n"
	"      --write PATH      replace the file with stdin's bytes, atomically\n"
	"      --mkdirs          with --write: create missing parent directories\n"
	"      --quiet           with --read/--write: no progress line on a terminal\n"
	"      --check           validate, connect, describe the connection (--json: as JSON)\n"
	"      --no-master       do not share a connection through a master process\n"
	"  -v, --verbose         trace connect, host key, auth and retries to stderr;\n"
	"                        -vv: each call's route and result too (implies --no-master)\n"
	"      --persist SECS    a master started by this call exits after SECS idle (300)\n"
	"      --stop            stop the master of this configuration\n"
	"      --bg              start COMMAND in the background (it outlives asp-exec\n"
	"                        and the connection); prints its id\n"
	"      --name NAME       with --bg: a label, listed as given\n"
	"      --keep BYTES      with --bg: output kept in the sandbox (1048576)\n"
	"      --bg-list         the background processes: id, state, exit, start ms,\n"
	"                        output size, name (--json: all of it)\n"
	"      --bg-output ID    its output from --offset N (0), at most --limit N bytes\n"
	"      --bg-signal ID    send --signal SIG (TERM) to its process group\n"
	"      --bg-wait ID      wait (-t SECS; none: no limit); exit with its status\n"
	"      --bg-remove ID    remove an ended one\n"
	"  -h, --help            this text\n"
	"      --version         the version\n"
	"\n"
	"Exit status: the command's (128+N when killed by signal N); 124 timeout;\n"
	"1 file error; 2 usage; 251 configuration; 252 host key; 253 authentication;\n"
	"254 connection; 255 other failure. See asp-exec(1).\n";

static int usage_error(const char *fmt, const char *arg)
{
	fputs("asp-exec: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\nTry 'asp-exec --help' for more information.\n", stderr);
	return -1;
}

/* Decimal seconds (fractions allowed) to ms, rounded up; 0 means no limit. */
static int parse_timeout(const char *s, unsigned int *ms)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0) || v * 1000 > UINT_MAX - 1)
		return usage_error("--timeout: expected seconds (e.g. 10 or 0.5), got '%s'", s);
	*ms = (unsigned int)(v * 1000);
	if (*ms < v * 1000)
		(*ms)++; /* never kill early */
	return 0;
}

static int parse_uint(const char *s, unsigned int min, unsigned int *out, const char *what)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < min || v > UINT_MAX)
		return usage_error(what, s);
	*out = (unsigned int)v;
	return 0;
}

static int is_name_char(char c, int first)
{
	return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (!first && c >= '0' && c <= '9');
}

static int valid_env(const char *e)
{
	const char *eq = strchr(e, '=');

	if (!eq || eq == e)
		return 0;
	for (const char *c = e; c < eq; c++)
		if (!is_name_char(*c, c == e))
			return 0;
	return 1;
}

static int set_path_mode(cli_options *o, int mode, const char *path, int *modes)
{
	(*modes)++;
	o->req->mode = mode;
	free(o->req->path);
	return (o->req->path = strdup(path)) ? 0 : -1;
}

static int set_bg(cli_options *o, const char *op, const char *id, int *modes)
{
	(*modes)++;
	o->req->mode = CLI_BG;
	o->bg_op = op;
	free(o->req->path);
	o->req->path = NULL;
	return id && !(o->req->path = strdup(id)) ? -1 : 0;
}

static int set_str(char **field, const char *arg)
{
	free(*field);
	return (*field = strdup(arg)) ? 0 : -1;
}

/* A decimal count, kept as text: asp-exec-core parses it again (bg.c). */
static int set_number(char **field, const char *arg, const char *what)
{
	if (!arg[0] || strspn(arg, "0123456789") != strlen(arg) || strlen(arg) > 19)
		return usage_error(what, arg);
	return set_str(field, arg);
}

static int parse_option(cli_options *o, int c, const char *arg, int *modes)
{
	cli_request *req = o->req;

	switch (c) {
	case OPT_CONFIG:
		free(o->config);
		/* Absolute, so the master and its socket name do not depend on our cwd. */
		o->config = realpath(arg, NULL);
		return o->config || (o->config = strdup(arg)) ? 0 : -1;
	case 'C':
		free(req->cwd);
		return (req->cwd = strdup(arg)) ? 0 : -1;
	case 'e':
		if (!valid_env(arg))
			return usage_error("--env: expected NAME=VALUE with NAME like "
					   "[A-Za-z_][A-Za-z0-9_]*, got '%s'", arg);
		return cli_list_add(&req->env, arg);
	case 't':
		return parse_timeout(arg, &req->timeout_ms);
	case OPT_JSON:
		req->json = 1;
		return 0;
	case OPT_TTY:
		req->tty += req->tty < 2;
		return 0;
	case OPT_READ:
		return set_path_mode(o, CLI_READ, arg, modes);
	case OPT_WRITE:
		return set_path_mode(o, CLI_WRITE, arg, modes);
	case OPT_MKDIRS:
		req->mkdirs = 1;
		return 0;
	case OPT_QUIET:
		req->quiet = 1;
		return 0;
	case OPT_CHECK:
		o->check = 1;
		(*modes)++;
		return 0;
	case OPT_STOP:
		o->stop = 1;
		(*modes)++;
		return 0;
	case OPT_PERSIST:
		return parse_uint(arg, 1, &o->persist_s, "--persist: expected whole seconds >= 1, got '%s'");
	case OPT_NO_MASTER:
		o->no_master = 1;
		return 0;
	case OPT_BG:
		return set_bg(o, "start", NULL, modes);
	case OPT_BG_LIST:
		return set_bg(o, "list", NULL, modes);
	case OPT_BG_OUTPUT:
		return set_bg(o, "output", arg, modes);
	case OPT_BG_SIGNAL:
		return set_bg(o, "signal", arg, modes);
	case OPT_BG_WAIT:
		return set_bg(o, "wait", arg, modes);
	case OPT_BG_REMOVE:
		return set_bg(o, "remove", arg, modes);
	case OPT_NAME:
		return set_str(&o->bg_name, arg);
	case OPT_KEEP:
		return set_number(&o->bg_keep, arg, "--keep: expected bytes, got '%s'");
	case OPT_OFFSET:
		return set_number(&o->bg_offset, arg, "--offset: expected a byte offset, got '%s'");
	case OPT_LIMIT:
		return set_number(&o->bg_limit, arg, "--limit: expected bytes, got '%s'");
	case OPT_SIGNAL:
		return set_str(&o->bg_signal, arg);
	case 'v':
		o->verbose++;
		return 0;
	case OPT_MASTER:
		o->master_socket = arg;
		return 0;
	case OPT_READY_FD:
		return parse_uint(arg, 0, (unsigned int *)&o->ready_fd, "--ready-fd: bad value '%s'");
	case OPT_CONFIG_FD:
		return parse_uint(arg, 0, (unsigned int *)&o->config_fd, "--config-fd: bad value '%s'");
	default:
		return usage_error("%s", "unknown option or missing argument");
	}
}

/* The --bg options: each takes only its own. */
static int check_bg(const cli_options *o, int nargs)
{
	const cli_request *req = o->req;
	int start = !strcmp(o->bg_op, "start");

	if (start != (nargs > 0))
		return usage_error("%s", start ? "--bg: no command given" : "a command applies to --bg only");
	if (!start && (req->cwd || req->env[0] || o->bg_name || o->bg_keep))
		return usage_error("%s", "--cwd, --env, --name and --keep apply to --bg only");
	if (req->timeout_ms && strcmp(o->bg_op, "wait"))
		return usage_error("%s", "--timeout applies to --bg-wait only");
	if ((o->bg_offset || o->bg_limit) && strcmp(o->bg_op, "output"))
		return usage_error("%s", "--offset and --limit apply to --bg-output only");
	if (o->bg_signal && strcmp(o->bg_op, "signal"))
		return usage_error("%s", "--signal applies to --bg-signal only");
	if (req->json && strcmp(o->bg_op, "list") && strcmp(o->bg_op, "output") && strcmp(o->bg_op, "wait") &&
	    !start)
		return usage_error("%s", "--json applies to --bg, --bg-list, --bg-output and --bg-wait");
	if (req->mkdirs || req->quiet)
		return usage_error("%s", "--mkdirs and --quiet apply to --read and --write only");
	return 0;
}

/* One mode, and only the options that mode takes. */
static int check_combination(const cli_options *o, int modes, int nargs)
{
	const cli_request *req = o->req;
	int exec = modes == 0;

	if (o->master_socket)
		return 0;
	if (modes > 1)
		return usage_error("%s", "--read, --write, --check, --stop and the --bg options exclude each other");
	if (req->tty && !exec)
		return usage_error("%s", "--tty applies to commands only, not to --read, --write, --check, "
				   "--stop or the --bg options");
	if (req->tty && req->json)
		return usage_error("%s", "--tty and --json exclude each other: a terminal's output is "
				   "shown as it comes, --json holds it for one object at the end");
	if (req->mode == CLI_BG)
		return check_bg(o, nargs);
	if (o->bg_name || o->bg_keep || o->bg_offset || o->bg_limit || o->bg_signal)
		return usage_error("%s", "--name, --keep, --offset, --limit and --signal apply to the --bg "
				   "options only");
	if (exec && nargs == 0)
		return usage_error("%s", "no command given");
	if (!exec && nargs > 0)
		return usage_error("%s", "a command cannot be combined with --read, --write, --check or --stop");
	if (!exec && ((req->json && !o->check) || req->cwd || req->env[0] || req->timeout_ms))
		return usage_error("%s", "--json applies to commands and --check only; --cwd, --env "
				   "and --timeout to commands only");
	if (req->mkdirs && req->mode != CLI_WRITE)
		return usage_error("%s", "--mkdirs applies to --write only");
	if (req->quiet && req->mode != CLI_READ && req->mode != CLI_WRITE)
		return usage_error("%s", "--quiet applies to --read and --write only");
	return 0;
}

int cli_parse(cli_options *o, int argc, char **argv)
{
	int c, modes = 0;

	memset(o, 0, sizeof(*o));
	o->persist_s = CLI_DEFAULT_PERSIST_S;
	o->ready_fd = -1;
	o->config_fd = -1;
	if (!(o->req = cli_request_new()))
		return -1;
	o->req->mode = CLI_EXEC;
	opterr = 0;
	/* "+": options end at the first COMMAND word, as they do for env(1) or ssh(1). */
	while ((c = getopt_long(argc, argv, "+C:e:t:hv", long_options, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage_text, stdout);
			return 1;
		}
		if (c == OPT_VERSION) {
			printf("asp-exec %s\n", ASP_VERSION);
			return 1;
		}
		if (c == '?')
			return usage_error("unknown option or missing argument: '%s'", argv[optind - 1]);
		if (parse_option(o, c, optarg, &modes))
			return -1;
	}
	if (check_combination(o, modes, argc - optind))
		return -1;
	/*
	 * A master takes a request and the caller's descriptors, not a stream of
	 * keys and window sizes: --tty runs on its own connection.
	 */
	if (o->req->tty)
		o->no_master = 1;
	/* The trace is of this process's own connection: a master's calls are not seen from here. */
	if (o->verbose) {
		o->no_master = 1;
		cli_trace_level = o->verbose > 1 ? ASP_LOG_DEBUG : ASP_LOG_INFO;
	}
	/* --bg*: the operation and its parameters first (cli.h), then a --bg's COMMAND words. */
	if (o->req->mode == CLI_BG) {
		const char *op = o->bg_op;
		if (cli_list_add(&o->req->args, op))
			return -1;
		if (!strcmp(op, "start") && (cli_list_add(&o->req->args, o->bg_name ? o->bg_name : "") ||
					     cli_list_add(&o->req->args, o->bg_keep ? o->bg_keep : "0")))
			return -1;
		if (!strcmp(op, "output") && (cli_list_add(&o->req->args, o->bg_offset ? o->bg_offset : "0") ||
					      cli_list_add(&o->req->args, o->bg_limit ? o->bg_limit : "0")))
			return -1;
		if (!strcmp(op, "signal") && cli_list_add(&o->req->args, o->bg_signal ? o->bg_signal : "TERM"))
			return -1;
	}
	for (int i = optind; i < argc; i++)
		if (cli_list_add(&o->req->args, argv[i]))
			return -1;
	return 0;
}

void cli_options_free(cli_options *o)
{
	cli_request_free(o->req);
	free(o->bg_name);
	free(o->bg_keep);
	free(o->bg_offset);
	free(o->bg_limit);
	free(o->bg_signal);
	free(o->config);
}

/*
 * The configuration a call uses, found by libasp's own discovery code
 * (libasp/config/discover.c, compiled into the front too), so that both always
 * agree. Whenever it cannot answer, NULL sends the call to asp-exec-core,
 * where libasp searches again and reports the problem.
 */
char *cli_discover(const char *given, int *fd)
{
	char path[PATH_MAX], why[ASP_ERROR_MESSAGE_MAX], *out;
	struct stat st;

	*fd = -1;
	if (given) { /* already absolute when it exists (cli_parse) */
		if (given[0] != '/' ||
		    (*fd = open(given, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)) < 0)
			return NULL;
		if (fstat(*fd, &st) == 0 && S_ISREG(st.st_mode) && (out = strdup(given)))
			return out;
	} else {
		if (asp__discover(fd, path, sizeof(path), NULL, why, sizeof(why)))
			return NULL;
		if ((out = strdup(path)))
			return out;
	}
	close(*fd);
	*fd = -1;
	return NULL;
}
