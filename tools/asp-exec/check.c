/*
 * check.c - `asp-exec --check`: is this sandbox usable, and how? Validates
 * the configuration, connects (always directly: it is a check of the
 * connection, not of a master), and prints the host key and how it was
 * trusted, the authentication method, what the key exchange negotiated,
 * how files are reached, and round-trip times.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli.h"

#define LATENCY_SAMPLES 5

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/*
 * Plain: one "label: value" line per fact as soon as it is known. --json:
 * the same facts gathered into one object printed at the end, with "ok"
 * and, on failure, "error" and "message".
 */
static cJSON *doc;

static void fact(const char *label, const char *key, const char *value)
{
	if (doc)
		cJSON_AddStringToObject(doc, key, value);
	else
		printf("%-11s %s\n", label, value);
}

static void fact_ms(const char *label, const char *key, double ms, const char *what)
{
	if (doc)
		cJSON_AddNumberToObject(doc, key, ms);
	else
		printf("%-11s %.2f ms (%s)\n", label, ms, what);
	fflush(stdout);
}

static void print_doc(void)
{
	char *text = cJSON_PrintUnformatted(doc);

	if (text)
		printf("%s\n", text);
	free(text);
}

static int failed(int rc, const asp_error *e)
{
	cli_say(2, "%s", e->message[0] ? e->message : asp_strerror(rc));
	if (doc) {
		cJSON_AddFalseToObject(doc, "ok");
		cJSON_AddStringToObject(doc, "error", asp_error_name(rc));
		cJSON_AddStringToObject(doc, "message", e->message[0] ? e->message : asp_strerror(rc));
	}
	return cli_exit_for_error(rc);
}

static const char *trust_name(int trust)
{
	switch (trust) {
	case ASP_TRUST_PINNED:
		return "pinned";
	case ASP_TRUST_KNOWN:
		return "known";
	default:
		return "first_use";
	}
}

static void print_trust(const asp_sandbox_info *info)
{
	char line[200];

	if (doc) {
		fact("", "host_key_type", info->host_key_type);
		fact("", "host_key_fingerprint", info->host_key_fingerprint);
		fact("", "trust", trust_name(info->trust));
		if (info->trust != ASP_TRUST_PINNED)
			fact("", "known_hosts", info->known_hosts);
		return;
	}
	printf("host key:   %s %s\n", info->host_key_type, info->host_key_fingerprint);
	if (info->trust == ASP_TRUST_PINNED)
		snprintf(line, sizeof(line), "pinned by connection.host_key");
	else if (info->trust == ASP_TRUST_KNOWN)
		snprintf(line, sizeof(line), "known, recorded in %.150s", info->known_hosts);
	else
		snprintf(line, sizeof(line), "first use, now recorded in %.150s", info->known_hosts);
	fact("trusted:", "", line);
}

static const char *auth_name(int auth)
{
	switch (auth) {
	case ASP_AUTH_NONE:
		return doc ? "none" : "none (the server accepted the user name alone)";
	case ASP_AUTH_PUBLICKEY:
		return doc ? "publickey" : "publickey (connection.identity)";
	case ASP_AUTH_AGENT:
		return doc ? "agent" : "publickey (ssh-agent)";
	default:
		return "unknown";
	}
}

/* The server's banner and what the key exchange agreed on: what to compare when another server fails. */
static void print_methods(const asp_sandbox_info *info)
{
	fact("server:", "server_banner", info->server_banner);
	fact("kex:", "kex", info->kex);
	fact("cipher:", "cipher", info->cipher);
	fact("mac:", "mac", info->mac);
}

/* How file calls reach the sandbox, once a file call has decided it. */
static void print_files(int transport)
{
	if (transport == ASP_FILES_SFTP)
		fact("files:", "file_transport", "sftp");
	else if (transport == ASP_FILES_EXEC)
		fact("files:", "file_transport", doc ? "exec" : "exec (shell commands: the server has no SFTP)");
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median time of a stat of the workspace: one round trip. */
static int stat_latency(asp_sandbox *sb, double *out, asp_error *e)
{
	double t[LATENCY_SAMPLES];
	asp_stat_info st;
	int rc;

	for (int i = 0; i < LATENCY_SAMPLES; i++) {
		double t0 = now_ms();

		if ((rc = asp_stat(&st, sb, asp_sandbox_workspace(sb), NULL, e)))
			return rc;
		t[i] = now_ms() - t0;
	}
	qsort(t, LATENCY_SAMPLES, sizeof(t[0]), cmp_double);
	*out = t[LATENCY_SAMPLES / 2];
	return 0;
}

static int exec_latency(asp_sandbox *sb, double *out, asp_error *e)
{
	asp_exec_result *r = NULL;
	double t0 = now_ms();
	int rc = asp_exec(&r, sb, "true", NULL, e);

	*out = now_ms() - t0;
	if (!rc && asp_exec_result_exit_code(r) != 0) {
		snprintf(e->message, sizeof(e->message), "`true` exited with status %d in the sandbox",
			 asp_exec_result_exit_code(r));
		rc = ASP_ERROR;
	}
	asp_exec_result_free(r);
	return rc;
}

static int report(asp_sandbox *sb, double connect_ms)
{
	asp_sandbox_info info;
	asp_error e = { 0 };
	double rtt, exec_ms;
	char what[64];
	int rc;

	memset(&info, 0, sizeof(info));
	info.version = ASP_SANDBOX_INFO_VERSION;
	if ((rc = asp_sandbox_info_get(&info, sb, &e)))
		return failed(rc, &e);
	print_trust(&info);
	fact("auth:", "auth", auth_name(info.auth));
	print_methods(&info);
	if (doc)
		cJSON_AddNumberToObject(doc, "connect_ms", connect_ms);
	else
		printf("connect:    %.1f ms (TCP, SSH handshake, host key, authentication)\n", connect_ms);
	fflush(stdout);
	if ((rc = stat_latency(sb, &rtt, &e)))
		return failed(rc, &e);
	/* The stat decided how files are reached on this connection. */
	if ((rc = asp_sandbox_info_get(&info, sb, &e)))
		return failed(rc, &e);
	print_files(info.file_transport);
	snprintf(what, sizeof(what), "stat of the workspace, median of %d", LATENCY_SAMPLES);
	fact_ms("round trip:", "round_trip_ms", rtt, what);
	if ((rc = exec_latency(sb, &exec_ms, &e)))
		return failed(rc, &e);
	fact_ms("exec:", "exec_ms", exec_ms, "`true`");
	if (doc)
		cJSON_AddTrueToObject(doc, "ok");
	else
		printf("ok\n");
	return 0;
}

static int check(const char *config)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	char *found = NULL, *text = NULL;
	double t0;
	int rc;

	/* A discovered file is opened from what discovery read and judged. */
	if (!config && (rc = asp_config_read(&text, &found, NULL, &e)))
		return failed(rc, &e);
	o.config_path = config ? config : found;
	o.config_text = text;
	fact("config:", "config", o.config_path);
	fflush(stdout);
	if (config && (rc = asp_config_check(config, &e)))
		return failed(rc, &e);
	t0 = now_ms();
	if (cli_trace_level)
		o.log_fn = cli_trace, o.log_level = cli_trace_level;
	rc = asp_open(&sb, &o, &e);
	asp_free(found);
	asp_free(text);
	if (rc)
		return failed(rc, &e);
	fact("workspace:", "workspace", asp_sandbox_workspace(sb));
	rc = report(sb, now_ms() - t0);
	asp_close(sb);
	return rc;
}

int cli_check(const char *config, int json)
{
	int rc;

	if (json && !(doc = cJSON_CreateObject())) {
		cli_say(2, "out of memory");
		return cli_exit_for_error(ASP_ENOMEM);
	}
	rc = check(config);
	if (doc) {
		print_doc();
		cJSON_Delete(doc);
		doc = NULL;
	}
	return rc;
}
