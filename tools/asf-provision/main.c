/*
 * asf-provision - make, check and remove the far end of libasp: a hardened
 * Podman container running sshd with no egress, and the `.asp.json` that
 * reaches it. Run by the orchestrator on the sandbox host before the agent
 * starts; see docs/asf-provision.1.md and docs/SECURITY.md.
 *
 * Exit status: 0 success; 1 the operation ran and failed (or verify found a
 * failing check); 2 bad usage or an unusable host (nothing was created).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asf.h"

/* Each command's usage; the global options go before the command. */
static const struct {
	const char *cmd, *text;
} usages[] = {
	{ "up", "up --name N --workspace HOSTDIR[:ro] (--image IMG [--sshd auto|image|host] | --rootfs DIR)\n"
		"     [--runtime runc|crun|krun] [--ingress publish|exec]\n"
		"     [--egress none | --egress allow=HOST[:PORT][,...] [--proxy-hosts FILE]]\n"
		"     [--memory 1g] [--cpus 1] [--pids 512] [--publish ADDR[:PORT]]\n"
		"     [--uid UID [--allow-host-account-uid]] [--unprivileged] [--out FILE.asp.json] [--replace]\n"
		"     [--json] [--deadline SECONDS] [--count N [--parallel P]]\n"
		"  up|manifest --backend kubernetes --name N --image IMG\n"
		"     (--workspace HOSTDIR[:ro] | --workspace-volume emptydir|pvc:CLAIM[:ro])\n"
		"     [--unprivileged] [--namespace NS] [--ingress exec|service] [--manifest FILE]\n"
		"     [--memory ...] [--cpus ...] [--pids ...] [--deadline SECONDS] [--count N [--parallel P]]\n"
		"     [--out FILE.asp.json] [--replace] [--json]\n"
		"     (--engine kubectl, the default here: a cluster; podman: podman kube play)\n" },
	{ "manifest", "manifest --backend kubernetes --name N --image IMG\n"
		      "     (--workspace HOSTDIR[:ro] | --workspace-volume emptydir|pvc:CLAIM[:ro])\n"
		      "     [--unprivileged] [--namespace NS] [--ingress exec|service] [--manifest FILE]\n"
		      "     [--memory ...] [--cpus ...] [--pids ...] [--deadline SECONDS]\n"
		      "     [--out FILE.asp.json] [--replace] [--json]\n" },
	{ "verify", "verify N [--report FILE] [--json]\n" },
	{ "status", "status [N] [--json]\n" },
	{ "list", "list [--json]\n" },
	{ "down", "down N [--json]\n"
		  "  down --group G [--json]   (every sandbox of one up --count call)\n" },
};
#define NUSAGES (sizeof(usages) / sizeof(usages[0]))

static const char usage_tail[] =
	"\n"
	"--engine: the container engine (default podman); verify, status and down\n"
	"use the one recorded when the sandbox was made.\n"
	"State: --state-dir, $ASF_STATE_DIR, /var/lib/asf-provision (root) or\n"
	"$XDG_STATE_HOME/asf-provision. See asf-provision(1).\n";

static void usage(FILE *f)
{
	size_t k;

	fputs("usage: asf-provision [--state-dir DIR] [--engine podman|docker] COMMAND ...\n\n", f);
	for (k = 0; k < NUSAGES; k++)
		if (strcmp(usages[k].cmd, "manifest")) /* shown with up */
			fprintf(f, "  %s", usages[k].text);
	fputs(usage_tail, f);
}

/* `asf-provision CMD --help`: CMD's usage on stdout. Non-zero when CMD is not a command. */
static int command_usage(const char *cmd)
{
	size_t k;

	for (k = 0; k < NUSAGES; k++) {
		if (strcmp(usages[k].cmd, cmd))
			continue;
		printf("usage: asf-provision [OPTIONS] %s"
		       "OPTIONS: [--state-dir DIR] [--engine podman|docker|kubectl]\n%s", usages[k].text, usage_tail);
		return 0;
	}
	return -1;
}

/* A -h or --help among a command's arguments. */
static int wants_help(int argc, char **argv)
{
	int i;

	for (i = 0; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return 1;
	return 0;
}

/* The value of option argv[*i] ("--opt VALUE" or "--opt=VALUE"), or NULL. */
static const char *optval(int argc, char **argv, int *i, const char *opt)
{
	size_t n = strlen(opt);

	if (strncmp(argv[*i], opt, n))
		return NULL;
	if (argv[*i][n] == '=')
		return argv[*i] + n + 1;
	if (argv[*i][n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		fprintf(stderr, "asf-provision: %s needs a value\n", opt);
		exit(2);
	}
	return argv[++*i];
}

static int bad_arg(const char *cmd, const char *arg)
{
	fprintf(stderr, "asf-provision: %s: unexpected argument \"%s\" (try --help)\n", cmd, arg);
	return 2;
}

static int run_up(int argc, char **argv, const char *engine, int manifest_only)
{
	asf_up_opts o;
	const char *v, *count = NULL, *parallel = NULL;
	asf_err e;
	long n = 0, par = 4;
	int i;

	memset(&o, 0, sizeof(o));
	o.uid = 0; /* up chooses an id no host account has */
	o.manifest_only = manifest_only;
	for (i = 0; i < argc; i++) {
		if ((v = optval(argc, argv, &i, "--name"))) o.name = v;
		else if ((v = optval(argc, argv, &i, "--workspace"))) o.workspace = v;
		else if ((v = optval(argc, argv, &i, "--image"))) o.image = v;
		else if ((v = optval(argc, argv, &i, "--rootfs"))) o.rootfs = v;
		else if ((v = optval(argc, argv, &i, "--sshd"))) o.sshd = v;
		else if ((v = optval(argc, argv, &i, "--runtime"))) o.runtime = v;
		else if ((v = optval(argc, argv, &i, "--egress"))) o.egress = v;
		else if ((v = optval(argc, argv, &i, "--ingress"))) o.ingress = v;
		else if ((v = optval(argc, argv, &i, "--proxy-hosts"))) o.proxy_hosts = v;
		else if ((v = optval(argc, argv, &i, "--memory"))) o.memory = v;
		else if ((v = optval(argc, argv, &i, "--cpus"))) o.cpus = v;
		else if ((v = optval(argc, argv, &i, "--pids"))) o.pids = v;
		else if ((v = optval(argc, argv, &i, "--publish"))) o.publish = v;
		else if ((v = optval(argc, argv, &i, "--out"))) o.out = v;
		else if ((v = optval(argc, argv, &i, "--backend"))) o.backend = v;
		else if ((v = optval(argc, argv, &i, "--namespace"))) o.namespace_ = v;
		else if ((v = optval(argc, argv, &i, "--manifest"))) o.manifest = v;
		else if ((v = optval(argc, argv, &i, "--workspace-volume"))) o.ws_volume = v;
		else if ((v = optval(argc, argv, &i, "--deadline"))) o.deadline = v;
		else if ((v = optval(argc, argv, &i, "--count"))) count = v;
		else if ((v = optval(argc, argv, &i, "--parallel"))) parallel = v;
		else if (!strcmp(argv[i], "--unprivileged")) o.unprivileged = 1;
		else if ((v = optval(argc, argv, &i, "--uid"))) {
			char *end;
			unsigned long u = strtoul(v, &end, 10);
			if (*end || !*v || *v == '-' || u < 1 || u > 2147483646) {
				fprintf(stderr, "asf-provision: up: --uid %s: expected 1..2147483646 (not root)\n", v);
				return 2;
			}
			o.uid = (unsigned int)u;
		}
		else if (!strcmp(argv[i], "--allow-host-account-uid")) o.allow_host_uid = 1;
		else if (!strcmp(argv[i], "--replace")) o.replace = 1;
		else if (!strcmp(argv[i], "--json")) o.json = 1;
		else return bad_arg(manifest_only ? "manifest" : "up", argv[i]);
	}
	/* Required, before anything is looked at: the message names what is missing. */
	if (!o.name || (!o.workspace && !o.ws_volume) || (!o.image && !o.rootfs)) {
		fprintf(stderr, "asf-provision: %s: %s is required\n", manifest_only ? "manifest" : "up",
			!o.name ? "--name N" : !o.workspace ? "--workspace HOSTDIR[:ro]"
			: "--image IMG (or --rootfs DIR)");
		return 2;
	}
	if ((count || parallel) && manifest_only) {
		fprintf(stderr, "asf-provision: manifest: --count and --parallel are for up\n");
		return 2;
	}
	if (count || parallel) {
		char *end;
		n = strtol(count ? count : "", &end, 10);
		if (!count || *end || n < 1 || n > 1000) {
			fprintf(stderr, "asf-provision: up: --count %s: expected 1..1000%s\n", count ? count : "",
				count ? "" : " (--parallel needs --count)");
			return 2;
		}
		if (parallel) {
			par = strtol(parallel, &end, 10);
			if (*end || !*parallel || par < 1 || par > 64) {
				fprintf(stderr, "asf-provision: up: --parallel %s: expected 1..64\n", parallel);
				return 2;
			}
		}
	}
	/* A cluster unless --engine says otherwise (podman: podman kube play here). */
	if (o.backend && !strcmp(o.backend, "kubernetes") && !engine && engine_set("kubectl", &e)) {
		fprintf(stderr, "asf-provision: %s\n", e.msg);
		return 2;
	}
	if (manifest_only && !(o.backend && !strcmp(o.backend, "kubernetes"))) {
		fprintf(stderr, "asf-provision: manifest: needs --backend kubernetes\n");
		return 2;
	}
	if (count)
		return cmd_up_many(&o, n, par);
	return cmd_up(&o);
}

/* NAME plus the common flags of the other commands. */
static int parse_simple(const char *cmd, int argc, char **argv, const char **name, int *json,
			const char **report, int name_required)
{
	const char *v;
	int i;

	*name = NULL;
	*json = 0;
	for (i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			*json = 1;
		else if (report && (v = optval(argc, argv, &i, "--report")))
			*report = v;
		else if (argv[i][0] != '-' && !*name)
			*name = argv[i];
		else
			return bad_arg(cmd, argv[i]);
	}
	if (name_required && !*name) {
		fprintf(stderr, "asf-provision: %s: a sandbox name is required\n", cmd);
		return 2;
	}
	return 0;
}

/*
 * A sandbox is handled by the engine that made it (state.json "engine");
 * --engine naming another one is an error. Without state (an orphan found
 * by label), --engine or the default says where to look.
 */
static int engine_of(const char *cmd, const char *name, const char *given)
{
	asf_err e = { "" };
	const char *rec;
	cJSON *st;

	if (!name_valid(name) || !state_exists(name) || !(st = state_load(name, &e)))
		return 0;
	rec = js(st, "engine") ? js(st, "engine") : "podman";
	if (given && strcmp(given, rec)) {
		fprintf(stderr, "asf-provision: %s: sandbox %s was made with --engine %s, not %s\n", cmd,
			name, rec, given);
		cJSON_Delete(st);
		return 2;
	}
	if (engine_set(rec, &e)) {
		fprintf(stderr, "asf-provision: %s: %s: state.json \"engine\": %s\n", cmd, name, e.msg);
		cJSON_Delete(st);
		return 2;
	}
	cJSON_Delete(st);
	return 0;
}

/* down --group G (or --group=G) among the arguments. */
static int has_group(int argc, char **argv)
{
	int i;

	for (i = 0; i < argc; i++)
		if (!strcmp(argv[i], "--group") || !strncmp(argv[i], "--group=", 8))
			return 1;
	return 0;
}

/* verify and status look at the host's containers and namespaces: not a cluster's. */
static int on_cluster(const char *cmd, const char *name)
{
	fprintf(stderr, "asf-provision: %s: sandbox %s runs on a Kubernetes cluster (--engine kubectl): "
		"%s reads the container engine and network namespace on this host and cannot look "
		"into a cluster's node; see docs/kubernetes.md\n", cmd, name, cmd);
	return 2;
}

int main(int argc, char **argv)
{
	const char *state = NULL, *engine = NULL, *cmd, *name = NULL, *report = NULL, *v;
	asf_err e = { "" };
	int i = 1, json = 0, rc;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
		if ((v = optval(argc, argv, &i, "--state-dir")))
			state = v;
		else if ((v = optval(argc, argv, &i, "--engine")))
			engine = v;
		else
			return bad_arg("asf-provision", argv[i]);
	}
	if (i >= argc) {
		usage(stderr);
		return 2;
	}
	cmd = argv[i++];
	if (!strcmp(cmd, "help")) {
		if (i < argc && !command_usage(argv[i]))
			return 0;
		usage(stdout);
		return 0;
	}
	if (wants_help(argc - i, argv + i) && !command_usage(cmd))
		return 0;
	if (state_root_init(state, &e) || (engine && engine_set(engine, &e))) {
		fprintf(stderr, "asf-provision: %s\n", e.msg);
		return 2;
	}
	argc -= i;
	argv += i;
	if (!strcmp(cmd, "up") || !strcmp(cmd, "manifest"))
		return run_up(argc, argv, engine, !strcmp(cmd, "manifest"));
	if (!strcmp(cmd, "verify")) {
		if ((rc = parse_simple(cmd, argc, argv, &name, &json, &report, 1)) ||
		    (rc = engine_of(cmd, name, engine)))
			return rc;
		if (!strcmp(asf_engine, "kubectl"))
			return on_cluster(cmd, name);
		return cmd_verify(name, report, json);
	}
	if (!strcmp(cmd, "down") && has_group(argc, argv)) {
		const char *g = NULL;
		json = 0;
		for (i = 0; i < argc; i++) {
			if ((v = optval(argc, argv, &i, "--group")))
				g = v;
			else if (!strcmp(argv[i], "--json"))
				json = 1;
			else
				return bad_arg(cmd, argv[i]);
		}
		if (!g || !name_valid(g)) {
			fprintf(stderr, "asf-provision: down --group: expected a group name "
				"(the --name of up --count)\n");
			return 2;
		}
		return cmd_down_group(g, json);
	}
	if (!strcmp(cmd, "down")) {
		if ((rc = parse_simple(cmd, argc, argv, &name, &json, NULL, 1)) ||
		    (rc = engine_of(cmd, name, engine)))
			return rc;
		return cmd_down(name, json);
	}
	if (!strcmp(cmd, "status")) {
		if ((rc = parse_simple(cmd, argc, argv, &name, &json, NULL, 0)) ||
		    (name && (rc = engine_of(cmd, name, engine))))
			return rc;
		if (name && !strcmp(asf_engine, "kubectl"))
			return on_cluster(cmd, name);
		return cmd_status(name, json);
	}
	if (!strcmp(cmd, "list")) {
		if ((rc = parse_simple(cmd, argc, argv, &name, &json, NULL, 0)) || name)
			return rc ? rc : bad_arg(cmd, name);
		return cmd_list(json);
	}
	fprintf(stderr, "asf-provision: unknown command \"%s\" (try --help)\n", cmd);
	return 2;
}
