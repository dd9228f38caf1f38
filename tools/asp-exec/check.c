/*
 * check.c - `asp-exec --check`: is this sandbox usable, and how? Validates
 * the configuration, connects (always directly: it is a check of the
 * connection, not of a master), and prints the host key and how it was
 * trusted, the authentication method and round-trip times.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define LATENCY_SAMPLES 5

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int failed(int rc, const asp_error *e)
{
	cli_say(2, "%s", e->message[0] ? e->message : asp_strerror(rc));
	return cli_exit_for_error(rc);
}

static void print_trust(const asp_sandbox_info *info)
{
	printf("host key:   %s %s\n", info->host_key_type, info->host_key_fingerprint);
	if (info->trust == ASP_TRUST_PINNED)
		printf("trusted:    pinned by connection.host_key\n");
	else if (info->trust == ASP_TRUST_KNOWN)
		printf("trusted:    known, recorded in %s\n", info->known_hosts);
	else
		printf("trusted:    first use, now recorded in %s\n", info->known_hosts);
}

static const char *auth_name(int auth)
{
	switch (auth) {
	case ASP_AUTH_NONE:
		return "none (the server accepted the user name alone)";
	case ASP_AUTH_PUBLICKEY:
		return "publickey (connection.identity)";
	case ASP_AUTH_AGENT:
		return "publickey (ssh-agent)";
	default:
		return "unknown";
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median time of an SFTP stat of the workspace: one round trip. */
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
	int rc;

	memset(&info, 0, sizeof(info));
	info.version = ASP_SANDBOX_INFO_VERSION;
	if ((rc = asp_sandbox_info_get(&info, sb, &e)))
		return failed(rc, &e);
	print_trust(&info);
	printf("auth:       %s\n", auth_name(info.auth));
	printf("connect:    %.1f ms (TCP, SSH handshake, host key, authentication)\n", connect_ms);
	fflush(stdout);
	if ((rc = stat_latency(sb, &rtt, &e)))
		return failed(rc, &e);
	printf("round trip: %.2f ms (SFTP stat of the workspace, median of %d)\n", rtt,
	       LATENCY_SAMPLES);
	fflush(stdout);
	if ((rc = exec_latency(sb, &exec_ms, &e)))
		return failed(rc, &e);
	printf("exec:       %.2f ms (`true`)\n", exec_ms);
	printf("ok\n");
	return 0;
}

int cli_check(const char *config)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_error e = { 0 };
	char *found = NULL;
	double t0;
	int rc;

	if (!config && (rc = asp_config_find(&found, NULL, &e)))
		return failed(rc, &e);
	o.config_path = config ? config : found;
	printf("config:     %s\n", o.config_path);
	fflush(stdout);
	if ((rc = asp_config_check(o.config_path, &e))) {
		asp_free(found);
		return failed(rc, &e);
	}
	t0 = now_ms();
	rc = asp_open(&sb, &o, &e);
	asp_free(found);
	if (rc)
		return failed(rc, &e);
	printf("workspace:  %s\n", asp_sandbox_workspace(sb));
	rc = report(sb, now_ms() - t0);
	asp_close(sb);
	return rc;
}
