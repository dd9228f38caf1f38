/*
 * bg.c - the --bg requests: background processes through libasp's
 * asp_bg_* calls, the same through a master or directly. req->args[0] is
 * the operation; cli_parse put its parameters after it (opts.c):
 *   start NAME KEEP WORD...   (one WORD is shell text; several an argument vector)
 *   list
 *   output OFFSET LIMIT       (req->path: the id, as for the rest)
 *   signal SIG
 *   wait                      (req->timeout_ms; 0: no limit)
 *   remove
 */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "quote.h" /* asp__quote_argv */

static int fail(cli_io *io, int rc, const asp_error *e)
{
	if (rc == ASP_ECANCELLED && asp_cancel_is_triggered(io->cancel)) {
		int sig = atomic_load(&io->cancel_signal);
		return 128 + (sig ? sig : SIGTERM);
	}
	cli_say(io->err, "%s", e->message[0] ? e->message : asp_strerror(rc));
	/* A bad id or a process still running: the operation failed, as a --read of a bad path does. */
	return rc == ASP_EINVAL ? CLI_EXIT_FILE : cli_exit_for_error(rc);
}

static int say_line(cli_io *io, const char *text)
{
	return cli_write_all(io->out, text, strlen(text), io->cancel) ? 141 : 0;
}

/* cJSON's text of obj plus a newline, written; obj is freed. */
static int say_json(cli_io *io, cJSON *obj)
{
	char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
	int rc;

	cJSON_Delete(obj);
	if (!text) {
		cli_say(io->err, "out of memory");
		return CLI_EXIT_FAILURE;
	}
	rc = say_line(io, text) || say_line(io, "\n") ? 141 : 0;
	cJSON_free(text);
	return rc;
}

static const char *state_name(int state)
{
	return state == ASP_BG_RUNNING ? "running" : state == ASP_BG_EXITED ? "exited" : "lost";
}

/* The status's members: state, exit_code, signal (null when not so), output_*. 0 or -1. */
static int add_status(cJSON *o, const asp_bg_status *st)
{
	int exited = st->state == ASP_BG_EXITED;

	return cJSON_AddStringToObject(o, "state", state_name(st->state)) &&
	       (exited && !st->signal ? cJSON_AddNumberToObject(o, "exit_code", st->exit_code)
				      : cJSON_AddNullToObject(o, "exit_code")) &&
	       (st->signal ? cJSON_AddNumberToObject(o, "signal", st->signal) : cJSON_AddNullToObject(o, "signal")) &&
	       cJSON_AddNumberToObject(o, "output_start", (double)st->output_start) &&
	       cJSON_AddNumberToObject(o, "output_size", (double)st->output_size) &&
	       cJSON_AddBoolToObject(o, "output_open", st->output_open) ? 0 : -1;
}

static const struct {
	const char *name;
	int num;
} sigs[] = {
	{ "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "KILL", SIGKILL }, { "USR1", SIGUSR1 },
	{ "USR2", SIGUSR2 }, { "PIPE", SIGPIPE }, { "ALRM", SIGALRM }, { "TERM", SIGTERM }, { "CONT", SIGCONT },
	{ "STOP", SIGSTOP }, { "TSTP", SIGTSTP }, { "WINCH", SIGWINCH }, { "ABRT", SIGABRT },
};

/* TERM, SIGTERM, term or 15; 0 when it is none. */
static int signal_of(const char *s)
{
	size_t i;

	if (s[0] >= '0' && s[0] <= '9')
		return atoi(s);
	if (!strncasecmp(s, "SIG", 3))
		s += 3;
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (!strcasecmp(s, sigs[i].name))
			return sigs[i].num;
	return 0;
}

/* A name for a terminal line: '\\', tab, newline and other control bytes as \xNN. */
static char *shown(const char *s)
{
	size_t n = strlen(s), i, k = 0;
	char *out = malloc(4 * n + 1);

	if (!out)
		return NULL;
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c == 0x7f || c == '\\')
			k += (size_t)snprintf(out + k, 5, "\\x%02x", c);
		else
			out[k++] = (char)c;
	}
	out[k] = 0;
	return out;
}

static int bg_start(asp_sandbox *sb, const cli_request *req, cli_io *io)
{
	asp_bg_options o = ASP_BG_OPTIONS_INIT;
	asp_error e = { 0 };
	char *cmd = NULL, *id = NULL;
	char *const *words = req->args + 3;
	int rc;

	if (!req->args[1] || !req->args[2] || !words[0]) {
		cli_say(io->err, "--bg: no command given");
		return CLI_EXIT_USAGE;
	}
	if (words[1]) {
		if (asp__quote_argv(&cmd, (const char *const *)words, &e))
			return fail(io, ASP_ENOMEM, &e);
	} else if (!(cmd = strdup(words[0]))) {
		cli_say(io->err, "out of memory");
		return CLI_EXIT_FAILURE;
	}
	o.call.cancel = io->cancel;
	o.name = req->args[1];
	o.cwd = req->cwd;
	o.env = (const char *const *)req->env;
	o.max_output = strtoull(req->args[2], NULL, 10);
	rc = asp_bg_start(&id, sb, cmd, &o, &e);
	free(cmd);
	if (rc)
		return fail(io, rc, &e);
	if (req->json) {
		cJSON *obj = cJSON_CreateObject();
		if (obj && !cJSON_AddStringToObject(obj, "id", id)) {
			cJSON_Delete(obj);
			obj = NULL;
		}
		rc = say_json(io, obj);
	} else {
		rc = say_line(io, id) || say_line(io, "\n") ? 141 : 0;
	}
	asp_free(id);
	return rc;
}

static int bg_list(asp_sandbox *sb, const cli_request *req, cli_io *io)
{
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	asp_bg_list *l = NULL;
	asp_error e = { 0 };
	cJSON *arr = NULL;
	size_t i;
	int rc;

	co.cancel = io->cancel;
	if ((rc = asp_bg_list_all(&l, sb, &co, &e)))
		return fail(io, rc, &e);
	if (req->json && !(arr = cJSON_CreateArray()))
		goto oom;
	for (i = 0, rc = 0; i < asp_bg_list_count(l) && !rc; i++) {
		const asp_bg_entry *en = asp_bg_list_get(l, i);
		if (arr) {
			cJSON *o = cJSON_CreateObject();
			if (!o || !cJSON_AddItemToArray(arr, o) || !cJSON_AddStringToObject(o, "id", en->id) ||
			    !cJSON_AddStringToObject(o, "name", en->name) ||
			    !cJSON_AddStringToObject(o, "command", en->command) ||
			    !cJSON_AddNumberToObject(o, "start_ms", (double)en->start_ms) ||
			    !cJSON_AddNumberToObject(o, "pid", (double)en->pid) || add_status(o, &en->status))
				goto oom;
		} else {
			char line[256], code[24];
			char *name = shown(en->name);
			if (!name)
				goto oom;
			if (en->status.state != ASP_BG_EXITED)
				snprintf(code, sizeof(code), "-");
			else if (en->status.signal)
				snprintf(code, sizeof(code), "signal:%d", en->status.signal);
			else
				snprintf(code, sizeof(code), "%d", en->status.exit_code);
			snprintf(line, sizeof(line), "%s\t%s\t%s\t%lld\t%llu\t", en->id, state_name(en->status.state),
				 code, (long long)en->start_ms, (unsigned long long)en->status.output_size);
			rc = say_line(io, line) || say_line(io, name) || say_line(io, "\n") ? 141 : 0;
			free(name);
		}
	}
	asp_bg_list_free(l);
	return arr ? say_json(io, arr) : rc;
oom:
	cJSON_Delete(arr);
	asp_bg_list_free(l);
	cli_say(io->err, "out of memory");
	return CLI_EXIT_FAILURE;
}

static int bg_output(asp_sandbox *sb, const cli_request *req, cli_io *io)
{
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	asp_bg_status st;
	asp_error e = { 0 };
	unsigned char *data = NULL;
	uint64_t offset = strtoull(req->args[1], NULL, 10);
	size_t len = 0;
	int rc;

	co.cancel = io->cancel;
	if ((rc = asp_bg_read(&data, &len, &st, sb, req->path, offset, strtoull(req->args[2], NULL, 10), &co, &e)))
		return fail(io, rc, &e);
	if (req->json) {
		cJSON *obj = cJSON_CreateObject();
		if (obj && (!cJSON_AddStringToObject(obj, "id", req->path) ||
			    !cJSON_AddNumberToObject(obj, "offset", (double)st.offset) ||
			    !cJSON_AddNumberToObject(obj, "next", (double)(st.offset + len)) || add_status(obj, &st) ||
			    cli_json_add_bytes(obj, "data", data, len))) {
			cJSON_Delete(obj);
			obj = NULL;
		}
		asp_free(data);
		return say_json(io, obj);
	}
	if (st.offset > offset)
		cli_say(io->err, "%s: output before byte %llu was dropped (asked from %llu)", req->path,
			(unsigned long long)st.offset, (unsigned long long)offset);
	rc = cli_write_all(io->out, data, len, io->cancel) ? 141 : 0;
	asp_free(data);
	return rc;
}

static int bg_wait(asp_sandbox *sb, const cli_request *req, cli_io *io)
{
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	asp_bg_status st;
	asp_error e = { 0 };
	int rc;

	co.cancel = io->cancel;
	rc = asp_bg_wait(&st, sb, req->path, req->timeout_ms ? req->timeout_ms : ASP_BG_FOREVER, &co, &e);
	if (rc && rc != ASP_ETIMEOUT)
		return fail(io, rc, &e);
	if (req->json) {
		cJSON *obj = cJSON_CreateObject();
		int out;
		if (obj && (!cJSON_AddStringToObject(obj, "id", req->path) || add_status(obj, &st))) {
			cJSON_Delete(obj);
			obj = NULL;
		}
		if ((out = say_json(io, obj)))
			return out;
	}
	if (rc) {
		if (!req->json)
			cli_say(io->err, "%s", e.message);
		return CLI_EXIT_TIMEOUT;
	}
	if (st.state == ASP_BG_LOST) {
		cli_say(io->err, "%s: gone without an exit status (lost)", req->path);
		return CLI_EXIT_FAILURE;
	}
	return st.signal ? 128 + st.signal : st.exit_code;
}

int cli_run_bg(asp_sandbox *sb, const cli_request *req, cli_io *io)
{
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	asp_error e = { 0 };
	const char *op = req->args[0];
	int rc, sig;

	co.cancel = io->cancel;
	if (!op) {
		cli_say(io->err, "a --bg request without an operation");
		return CLI_EXIT_USAGE;
	}
	if (!strcmp(op, "start"))
		return bg_start(sb, req, io);
	if (!strcmp(op, "list"))
		return bg_list(sb, req, io);
	if (!req->path) {
		cli_say(io->err, "--bg-%s: no id given", op);
		return CLI_EXIT_USAGE;
	}
	if (!strcmp(op, "output") && req->args[1] && req->args[2])
		return bg_output(sb, req, io);
	if (!strcmp(op, "wait"))
		return bg_wait(sb, req, io);
	if (!strcmp(op, "remove"))
		return (rc = asp_bg_remove(sb, req->path, &co, &e)) ? fail(io, rc, &e) : 0;
	if (!strcmp(op, "signal") && req->args[1]) {
		if (!(sig = signal_of(req->args[1]))) {
			cli_say(io->err, "--signal: '%s' is not a signal name (TERM, KILL, INT, HUP, ...) or number",
				req->args[1]);
			return CLI_EXIT_USAGE;
		}
		return (rc = asp_bg_signal(sb, req->path, sig, &co, &e)) ? fail(io, rc, &e) : 0;
	}
	cli_say(io->err, "unknown --bg operation '%s'", op);
	return CLI_EXIT_USAGE;
}
