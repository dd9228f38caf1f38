/*
 * up.c - `asf-provision up`: make one sandbox, or nothing.
 *
 * Order (each step recorded in state.json before the next, so `down` and
 * the rollback below can undo a half-made sandbox):
 *   1. validate every option; choose or check the sandbox user's uid (an
 *      id no host account has: sandbox_uid); find podman; check the runtime
 *      (krun: KVM and libkrun) and that the name is free - nothing created yet;
 *   2. state dir (0700): keys, sshd_config, authorized_keys, passwd,
 *      group, resolv.conf, the nftables ruleset;
 *   3. the workspace directory is handed to the sandbox user (chown of
 *      the directory itself; recorded and undone by `down`);
 *   4. a labelled network asf-NAME (publish ingress) or none (exec ingress);
 *   5. `podman create` (least privilege, see create_argv), `podman init`:
 *      the namespaces exist but sshd does not run yet (docker: `docker
 *      start`, the container waiting at a gate file until step 7);
 *   6. --egress allow: the proxy on the network's gateway (egress.c); from
 *      the host, inside the container's network namespace: the egress
 *      ruleset, and no default route (loopback publishing); docker: the
 *      workspace remounted nosuid,nodev in its mount namespace; sshd_config;
 *   7. `podman start` (docker: the gate file); the .asp.json; a real
 *      connection through it.
 * --backend kubernetes leaves after step 3 for kube_build (kube.c).
 * Any failure after step 1 tears down everything labelled with the name.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <asp.h>

#include "asf.h"

typedef struct up_ctx {
	const asf_up_opts *o;
	char dir[4200];        /* state dir */
	char ctr[64];          /* container and network name: asf-NAME */
	char ws_host[PATH_MAX];
	int ws_ro;
	char rootfs[PATH_MAX];
	unsigned long long mem_bytes;
	long pids;
	double cpus;
	char pub_addr[INET_ADDRSTRLEN];
	int pub_port;          /* requested; 0 = any */
	int loopback;          /* publishing on 127.0.0.0/8 */
	int exec_ingress;
	int kube;              /* --backend kubernetes (kube.c) */
	int ws_kind;           /* kubernetes: ASF_WS_HOSTPATH (ws_host), ASF_WS_EMPTYDIR, ASF_WS_PVC */
	char claim[254];       /* ASF_WS_PVC: the claim's name */
	long deadline_s;       /* --deadline: 0 none */
	int service;           /* kubernetes: --ingress service */
	char manifest[PATH_MAX];
	int rootless;          /* rootless Podman (--ingress exec only) */
	unsigned int uid;      /* the sandbox user's uid and gid inside (sandbox_uid) */
	cJSON *allow;          /* --egress allow=...: "host:port" strings; NULL for none */
	char gw[INET_ADDRSTRLEN]; /* allow: the network's gateway, where the proxy listens */
	int proxy_port;
	char out[PATH_MAX];    /* the .asp.json */
	char host_key[512];    /* "ssh-ed25519 AAAA..." */
	char fingerprint[128];
	asf_image img;         /* --image: what its probe found (image.c) */
	cJSON *st;
} up_ctx;

/* ------------------------------------------------------------- parsing */

static int parse_memory(unsigned long long *out, const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -1;
	switch (*end | 0x20) { /* lower case; '\0' becomes ' ' */
	case ' ': case 'b': break;
	case 'k': v <<= 10; break;
	case 'm': v <<= 20; break;
	case 'g': v <<= 30; break;
	default: return -1;
	}
	if (*end && end[1])
		return -1;
	*out = v;
	return v >= (16ULL << 20) ? 0 : -1; /* sshd and a shell need a few MiB */
}

static int parse_publish(up_ctx *c, const char *s, asf_err *e)
{
	char addr[64];
	const char *colon = strrchr(s, ':');
	struct in_addr in;
	long port = 0;

	if (colon) {
		char *end;
		str_fmt(addr, sizeof(addr), "%.*s", (int)(colon - s), s);
		port = strtol(colon + 1, &end, 10);
		if (end == colon + 1 || *end || port < 0 || port > 65535)
			return asf_fail(e, "--publish %s: expected ADDR[:PORT] with PORT 0..65535", s);
	} else {
		str_fmt(addr, sizeof(addr), "%s", s);
	}
	if (inet_pton(AF_INET, addr, &in) != 1)
		return asf_fail(e, "--publish %s: ADDR must be an IPv4 address (e.g. 127.0.0.1)", s);
	str_fmt(c->pub_addr, sizeof(c->pub_addr), "%s", addr);
	c->pub_port = (int)port;
	c->loopback = (ntohl(in.s_addr) >> 24) == 127;
	return 0;
}

static int path_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0' || !strcmp(dir, "/"));
}

/* The real path of a file that may not exist yet (its directory must). */
static int out_realpath(char *out, const char *path, asf_err *e)
{
	char dir[PATH_MAX], real[PATH_MAX];
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;

	if (!*base)
		return asf_fail(e, "--out %s: expected a file name", path);
	str_fmt(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
	if (!dir[0])
		str_fmt(dir, sizeof(dir), "/");
	if (!realpath(dir, real))
		return asf_fail(e, "--out %s: %s: %s", path, dir, strerror(errno));
	if (str_fmt(out, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "", base) < 0)
		return asf_fail(e, "--out %s: path too long", path);
	return 0;
}

/*
 * The .asp.json is trusted by whoever runs the harness (its
 * proxyCommand is a host command): refuse a directory that anyone
 * but its owner could write, whose owner is neither the caller nor root,
 * or under an ancestor another user could rename it out of.
 */
static int out_dir_private(const char *out, asf_err *e)
{
	char dir[PATH_MAX], *slash;
	struct stat st;
	int first = 1;

	str_fmt(dir, sizeof(dir), "%s", out);
	for (;;) {
		if (!(slash = strrchr(dir, '/')))
			break;
		*(slash == dir ? slash + 1 : slash) = '\0';
		if (lstat(dir, &st))
			return asf_fail(e, "--out %s: directory %s: %s", out, dir, strerror(errno));
		if (!S_ISDIR(st.st_mode))
			return asf_fail(e, "--out %s: %s is not a directory", out, dir);
		if (st.st_uid != geteuid() && st.st_uid != 0)
			return asf_fail(e, "--out %s: directory %s belongs to uid %d, not to you or root: "
					   "its owner could replace the .asp.json (and the host command in "
					   "its proxyCommand); choose a directory of your own", out, dir,
					(int)st.st_uid);
		/* The directory itself: only its owner writes. An ancestor may be
		 * sticky (like /tmp): others then cannot rename what is ours in it. */
		if ((st.st_mode & 022) && (first || !(st.st_mode & S_ISVTX)))
			return asf_fail(e, "--out %s: directory %s is writable by %s (mode %04o): anyone who can "
					   "write there could replace the .asp.json (and the host command in "
					   "its proxyCommand); choose a directory only its owner can write",
					out, dir, (st.st_mode & 002) ? "others" : "its group",
					(unsigned int)(st.st_mode & 07777));
		first = 0;
		if (!strcmp(dir, "/"))
			break;
	}
	return 0;
}

/* --backend kubernetes and what goes with it; the container backend refuses its options. */
static int validate_backend(up_ctx *c, asf_err *e)
{
	const asf_up_opts *o = c->o;
	const char *ns = o->namespace_ ? o->namespace_ : "default";
	size_t i;

	if (o->backend && strcmp(o->backend, "container") && strcmp(o->backend, "kubernetes"))
		return asf_fail(e, "--backend %s: expected container or kubernetes", o->backend);
	c->kube = o->backend && !strcmp(o->backend, "kubernetes");
	if (!c->kube) {
		if (!strcmp(asf_engine, "kubectl"))
			return asf_fail(e, "--engine kubectl needs --backend kubernetes");
		if (o->namespace_ || o->manifest || o->manifest_only || o->ws_volume)
			return asf_fail(e, "%s needs --backend kubernetes", o->manifest_only ? "manifest" :
					o->namespace_ ? "--namespace" : o->manifest ? "--manifest" :
					"--workspace-volume");
		if (c->deadline_s && engine_docker())
			return asf_fail(e, "--deadline: docker has no container timeout; use --engine podman "
					   "(podman create --timeout) or --backend kubernetes");
		return 0;
	}
	if (engine_docker())
		return asf_fail(e, "--backend kubernetes --engine docker: expected --engine kubectl (a cluster) "
				   "or podman (podman kube play on this host)");
	if (!o->image)
		return asf_fail(e, "--backend kubernetes needs --image IMAGE (a pod runs an image, not --rootfs)");
	if (o->publish)
		return asf_fail(e, "--publish: not with --backend kubernetes (--ingress service makes a Service)");
	if (o->ingress && strcmp(o->ingress, "exec") && strcmp(o->ingress, "service"))
		return asf_fail(e, "--ingress %s: expected exec or service with --backend kubernetes", o->ingress);
	c->service = o->ingress && !strcmp(o->ingress, "service");
	if (c->service && strcmp(asf_engine, "kubectl"))
		return asf_fail(e, "--ingress service: podman kube play does not enforce NetworkPolicy, so its "
				   "pod gets no network; use --ingress exec (or --engine kubectl on a cluster)");
	if (o->runtime && !strcmp(asf_engine, "kubectl"))
		return asf_fail(e, "--runtime: on a cluster the RuntimeClass decides; not with --engine kubectl");
	if (o->uid && o->uid != 1000)
		return asf_fail(e, "--uid %u: the Kubernetes backend uses the image's /etc/passwd (agent is uid "
				   "1000 in mkrootfs.sh's image); only 1000", o->uid);
	for (i = 0; ns[i]; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789-", ns[i]))
			break;
	if (!ns[0] || ns[i] || i > 63 || ns[0] == '-' || ns[i - 1] == '-')
		return asf_fail(e, "--namespace %s: expected a DNS label (a-z, 0-9, '-', at most 63)", ns);
	if (o->manifest) {
		if (out_realpath(c->manifest, o->manifest, e))
			return -1;
	} else {
		str_fmt(c->manifest, sizeof(c->manifest), "%s/kubernetes.yaml", c->dir);
	}
	if (c->ws_kind == ASF_WS_HOSTPATH && path_under(c->manifest, c->ws_host))
		return asf_fail(e, "--manifest %s: must not be inside the workspace (it holds the host key)",
				c->manifest);
	return 0;
}

/* Does /etc/subuid-style file path give id to someone? Their name into who. */
static int subid_owner(const char *path, unsigned int id, char *who, size_t n)
{
	FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t cap = 0;
	int found = 0;

	if (!f)
		return 0;
	while (!found && getline(&line, &cap, f) > 0) {
		char owner[256];
		unsigned long long start, count;
		if (sscanf(line, "%255[^:]:%llu:%llu", owner, &start, &count) == 3 && id >= start &&
		    id - start < count) {
			str_fmt(who, n, "a subordinate id of %s (%s)", owner, path);
			found = 1;
		}
	}
	free(line);
	fclose(f);
	return found;
}

int id_owner(unsigned int id, int subids, char *who, size_t n)
{
	const char *sudo = getenv("SUDO_UID");
	struct passwd *pw = getpwuid(id);
	struct group *gr;

	if (pw)
		return str_fmt(who, n, "host account %s", pw->pw_name), 1;
	if (id == getuid() || id == geteuid() || (sudo && strtoul(sudo, NULL, 10) == id))
		return str_fmt(who, n, "the caller's uid"), 1;
	if ((gr = getgrgid(id)))
		return str_fmt(who, n, "the id of host group %s", gr->gr_name), 1;
	if (subids && (subid_owner("/etc/subuid", id, who, n) || subid_owner("/etc/subgid", id, who, n)))
		return 1;
	str_fmt(who, n, "no account");
	return 0;
}

/* The sandbox users' uids of the other sandboxes in this state root (*n of them; free it). */
static unsigned int *sandbox_ids(const char *self, size_t *n)
{
	unsigned int *ids;
	char **v;
	size_t k, i;

	*n = 0;
	if (state_names(&v, &k))
		return NULL;
	ids = calloc(k ? k : 1, sizeof(*ids));
	for (i = 0; ids && i < k; i++) {
		cJSON *st = strcmp(v[i], self) ? state_load(v[i], NULL) : NULL;
		if (st && jn(st, "uid", 0) > 0)
			ids[(*n)++] = (unsigned int)jn(st, "uid", 0);
		cJSON_Delete(st);
	}
	strv_free(v, k);
	return ids;
}

/*
 * The sandbox user's uid (and gid, the same number). Rootful Podman and
 * Docker run it as that id on the host; it must be nobody's there - no
 * account, no group, not the caller, no one's subordinate ids - or a file
 * the agent makes (a setuid copy of a shell, an .asp.json with a proxy
 * command) would be that account's. Not given: the first such id from
 * ASF_UID_FIRST that no other sandbox here uses. Rootless Podman maps it
 * through the caller's subordinate ids (checked once mapped, in
 * own_workspace_rootless); Kubernetes: the image's agent (1000).
 */
static int sandbox_uid(up_ctx *c, asf_err *e)
{
	const asf_up_opts *o = c->o;
	char who[512];
	unsigned int i, *used;
	size_t nused;

	if (o->uid && c->rootless) {
		c->uid = o->uid;
		return 0;
	}
	if (!o->uid && c->rootless) {
		c->uid = 1000;
		return 0;
	}
	if (c->kube) {
		/* The image's agent: checked against this host's accounts where the pod runs here. */
		c->uid = 1000;
		if (!strcmp(asf_engine, "kubectl") || o->allow_host_uid || c->ws_kind != ASF_WS_HOSTPATH ||
		    !id_owner(c->uid, 1, who, sizeof(who)))
			return 0;
		return asf_fail(e, "the Kubernetes backend runs the image's agent, uid %u, which on this host is %s: "
				   "files the agent makes in the hostPath workspace would be that account's; use "
				   "an image whose agent has an id no account here has, the container backend "
				   "(which chooses one), or force it with --allow-host-account-uid", c->uid, who);
	}
	if (o->uid) {
		c->uid = o->uid;
		if (!o->allow_host_uid && id_owner(o->uid, 1, who, sizeof(who)))
			return asf_fail(e, "--uid %u is %s: files the agent makes in the workspace (a setuid "
					   "copy of a shell, an .asp.json with a proxy command) would be that "
					   "account's on this host; omit --uid (up chooses an id no account has) "
					   "or force it with --allow-host-account-uid", o->uid, who);
		return 0;
	}
	used = sandbox_ids(o->name, &nused);
	for (i = 0; i < ASF_UID_COUNT; i++) {
		unsigned int id = ASF_UID_FIRST + i;
		size_t k;
		for (k = 0; k < nused && used[k] != id; k++)
			;
		if (k == nused && !id_owner(id, 1, who, sizeof(who))) {
			c->uid = id;
			free(used);
			return 0;
		}
	}
	free(used);
	return asf_fail(e, "no free id in %u..%u for the sandbox user (each is an account, a group, a "
			   "subordinate id or another sandbox's); give --uid", ASF_UID_FIRST,
			ASF_UID_FIRST + ASF_UID_COUNT - 1);
}

/* --workspace-volume hostpath|emptydir|pvc:CLAIM (--backend kubernetes; default hostpath). */
static int ws_volume_parse(up_ctx *c, asf_err *e)
{
	const char *v = c->o->ws_volume;
	size_t i, n;

	c->ws_kind = ASF_WS_HOSTPATH;
	if (!v || !strcmp(v, "hostpath"))
		return 0;
	if (!strcmp(v, "emptydir")) {
		c->ws_kind = ASF_WS_EMPTYDIR;
		return 0;
	}
	if (strncmp(v, "pvc:", 4))
		return asf_fail(e, "--workspace-volume %s: expected hostpath, emptydir or pvc:CLAIM", v);
	v += 4;
	n = strlen(v);
	if (n > 3 && !strcmp(v + n - 3, ":ro")) {
		c->ws_ro = 1;
		n -= 3;
	}
	for (i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789-.", v[i]))
			break;
	if (!n || i < n || n >= sizeof(c->claim) || v[0] == '-' || v[0] == '.' || v[n - 1] == '-' ||
	    v[n - 1] == '.')
		return asf_fail(e, "--workspace-volume pvc:%s: expected a claim name (a DNS subdomain: a-z, 0-9, "
				   "'-', '.'), optionally followed by :ro", v);
	str_fmt(c->claim, sizeof(c->claim), "%.*s", (int)n, v);
	c->ws_kind = ASF_WS_PVC;
	return 0;
}

static int validate(up_ctx *c, asf_err *e)
{
	const asf_up_opts *o = c->o;
	char ws[PATH_MAX];
	struct stat st;
	size_t n;

	if (!o->name || !name_valid(o->name))
		return asf_fail(e, "--name: expected 1-40 characters of a-z, 0-9, '-', '_', '.', "
				   "starting with a letter or digit");
	str_fmt(c->ctr, sizeof(c->ctr), ASF_PREFIX "%s", o->name);
	state_dir(c->dir, sizeof(c->dir), o->name);

	if (o->deadline) {
		char *end;
		c->deadline_s = strtol(o->deadline, &end, 10);
		if (*end || !*o->deadline || c->deadline_s < 1 || c->deadline_s > 31536000)
			return asf_fail(e, "--deadline %s: expected seconds, 1..31536000", o->deadline);
	}
	if (ws_volume_parse(c, e))
		return -1;
	if (c->ws_kind != ASF_WS_HOSTPATH) {
		if (o->workspace)
			return asf_fail(e, "--workspace %s: not with --workspace-volume %s (the workspace is a "
					   "volume of the pod, not a host directory)", o->workspace, o->ws_volume);
		goto workspace_done;
	}
	if (!o->workspace)
		return asf_fail(e, "--workspace HOSTDIR[:ro] is required");
	str_fmt(ws, sizeof(ws), "%s", o->workspace);
	n = strlen(ws);
	if (n > 3 && !strcmp(ws + n - 3, ":ro")) {
		ws[n - 3] = '\0';
		c->ws_ro = 1;
	} else if (n > 3 && !strcmp(ws + n - 3, ":rw")) {
		ws[n - 3] = '\0';
	}
	if (!realpath(ws, c->ws_host))
		return asf_fail(e, "--workspace %s: %s", ws, strerror(errno));
	if (stat(c->ws_host, &st) || !S_ISDIR(st.st_mode))
		return asf_fail(e, "--workspace %s: not a directory", ws);
	if (strpbrk(c->ws_host, ":,\n"))
		return asf_fail(e, "--workspace %s: ':', ',' and newlines cannot be passed to podman's mount "
				"syntax", ws);
	/* Both are real paths (state_root_init resolved the state directory). */
	if (!strcmp(c->ws_host, "/") || path_under(asf_state_root, c->ws_host))
		return asf_fail(e, "--workspace %s: must not contain the state directory %s "
				   "(the sandbox would see its own keys)", ws, asf_state_root);
	if (path_under(c->ws_host, asf_state_root))
		return asf_fail(e, "--workspace %s: must not be inside the state directory %s "
				   "(the sandbox would see the keys of sandboxes)", ws, asf_state_root);
workspace_done:

	if (!!o->image == !!o->rootfs)
		return asf_fail(e, "give exactly one of --image IMG or --rootfs DIR");
	if (o->sshd && (!o->image || (o->backend && !strcmp(o->backend, "kubernetes"))))
		return asf_fail(e, "--sshd %s: only with --image IMG and the container backend", o->sshd);
	if (o->sshd && strcmp(o->sshd, "auto") && strcmp(o->sshd, "image") && strcmp(o->sshd, "host"))
		return asf_fail(e, "--sshd %s: expected auto, image or host", o->sshd);
	if (o->rootfs && engine_docker())
		return asf_fail(e, "--rootfs %s: docker cannot run a directory; import it as an image "
				   "(tar -C DIR -c . | docker import - IMAGE) and give --image IMAGE", o->rootfs);
	if (o->rootfs) {
		if (!realpath(o->rootfs, c->rootfs) || stat(c->rootfs, &st) || !S_ISDIR(st.st_mode))
			return asf_fail(e, "--rootfs %s: not a directory", o->rootfs);
		char sshd[PATH_MAX + 32];
		str_fmt(sshd, sizeof(sshd), "%s/usr/sbin/sshd", c->rootfs);
		if (access(sshd, F_OK))
			return asf_fail(e, "--rootfs %s: no /usr/sbin/sshd in it "
					   "(tools/asf-provision/mkrootfs.sh builds one)", o->rootfs);
		if (c->ws_host[0] && (path_under(c->rootfs, c->ws_host) || path_under(c->ws_host, c->rootfs)))
			return asf_fail(e, "--rootfs and --workspace must not contain each other");
	}
	if (o->runtime && strcmp(o->runtime, "runc") && strcmp(o->runtime, "crun") &&
	    strcmp(o->runtime, "krun"))
		return asf_fail(e, "--runtime %s: expected runc, crun or krun", o->runtime);
	if (validate_backend(c, e))
		return -1;
	if (!c->kube && o->ingress && strcmp(o->ingress, "publish") && strcmp(o->ingress, "exec"))
		return asf_fail(e, "--ingress %s: expected publish or exec", o->ingress);
	c->exec_ingress = (o->ingress && !strcmp(o->ingress, "exec")) || (c->kube && !c->service);
	c->rootless = !c->kube && !engine_docker() && geteuid() != 0;
	if (c->rootless && !c->exec_ingress)
		return asf_fail(e, "--ingress publish needs rootful Podman (run as root): rootless, the "
				   "sandbox's network and its gateway live in Podman's own namespace, not on "
				   "the host, so verify cannot probe the sandbox's way to the host from here; "
				   "use --ingress exec");
	if (egress_parse(o->egress, &c->allow, e))
		return -1;
	if (c->allow && (c->kube || engine_docker()))
		return asf_fail(e, "--egress %s: allow-lists are implemented for the container backend with "
				   "--engine podman only (Kubernetes: egress is the NetworkPolicy's)", o->egress);
	if (c->allow && c->exec_ingress)
		return asf_fail(e, "--egress %s needs --ingress publish: with --ingress exec the sandbox has no "
				   "network, so it cannot reach the egress proxy either", o->egress);
	if (o->proxy_hosts && !c->allow)
		return asf_fail(e, "--proxy-hosts %s only makes sense with --egress allow=...", o->proxy_hosts);
	if (c->exec_ingress && o->publish)
		return asf_fail(e, "--publish makes no sense with --ingress exec (the sandbox has no network)");
	if (parse_publish(c, o->publish ? o->publish : "127.0.0.1", e))
		return -1;
	if (parse_memory(&c->mem_bytes, o->memory ? o->memory : "1g"))
		return asf_fail(e, "--memory %s: expected a size of at least 16m such as 512m or 2g",
				o->memory);
	{
		char *end;
		c->cpus = strtod(o->cpus ? o->cpus : "1", &end);
		if (*end || !(c->cpus >= 0.01 && c->cpus <= 1024))
			return asf_fail(e, "--cpus %s: expected a number such as 1 or 0.5", o->cpus);
		c->pids = strtol(o->pids ? o->pids : "512", &end, 10);
		if (*end || c->pids < 16 || c->pids > 4194304)
			return asf_fail(e, "--pids %s: expected an integer 16..4194304", o->pids);
	}
	if (o->uid > 2147483646u)
		return asf_fail(e, "--uid %u: expected 1..2147483646 (not root)", o->uid);
	if (sandbox_uid(c, e))
		return -1;

	if (o->out) {
		if (out_realpath(c->out, o->out, e))
			return -1;
	} else {
		str_fmt(c->out, sizeof(c->out), "%s/asp.json", c->dir);
	}
	/* An agent that can write the harness's .asp.json could point
	 * proxyCommand at any host command. */
	if (c->ws_host[0] && path_under(c->out, c->ws_host))
		return asf_fail(e, "--out %s: must not be inside the workspace (the sandbox could rewrite it)",
				c->out);
	if (o->out && out_dir_private(c->out, e))
		return -1;
	return 0;
}

/* ------------------------------------------------------------- runtime */

int krun_usable(asf_err *e)
{
	char why[768] = "", krun[4096];
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	void *lib;

	if (fd < 0)
		str_fmt(why + strlen(why), sizeof(why) - strlen(why), " /dev/kvm: %s;", strerror(errno));
	else
		close(fd);
	if (asf_which("krun", krun, sizeof(krun)))
		str_fmt(why + strlen(why), sizeof(why) - strlen(why),
			 " no `krun` OCI runtime in PATH (crun built with libkrun);");
	lib = dlopen("libkrun.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (!lib)
		str_fmt(why + strlen(why), sizeof(why) - strlen(why), " libkrun.so.1 not found;");
	else
		dlclose(lib);
	if (!why[0])
		return 0;
	why[strlen(why) - 1] = '\0';
	return asf_fail(e, "--runtime krun is not usable on this host:%s. A krun sandbox needs "
			   "/dev/kvm, libkrun and crun built with libkrun (installed as `krun`, e.g. "
			   "Fedora's crun-krun package); Debian 12 packages neither libkrun nor a "
			   "krun-enabled crun. Nothing was created.", why);
}

/* ------------------------------------------------------------- files */

static int write_in(const up_ctx *c, const char *rel, const char *text, mode_t mode, asf_err *e)
{
	char path[4400];

	str_fmt(path, sizeof(path), "%s/%s", c->dir, rel);
	return write_file(path, text, strlen(text), mode, NULL, e);
}

static int make_files(up_ctx *c, asf_err *e)
{
	char path[4400], pub[4400], client_pub[512], buf[4096];
	unsigned int uid = c->uid;

	/* The host key lives in the mounted sshd/ directory; its .pub beside state.json. */
	str_fmt(path, sizeof(path), "%s/sshd/ssh_host_ed25519_key", c->dir);
	str_fmt(buf, sizeof(buf), "%s host key (asf-provision)", c->ctr);
	if (key_generate(path, buf, e))
		return -1;
	str_fmt(pub, sizeof(pub), "%s/host_ed25519_key.pub", c->dir);
	str_fmt(buf, sizeof(buf), "%s.pub", path);
	if (rename(buf, pub))
		return asf_fail(e, "rename %s: %s", buf, strerror(errno));
	if (key_public_line(c->host_key, sizeof(c->host_key), pub, e) ||
	    key_fingerprint(c->fingerprint, sizeof(c->fingerprint), pub, e))
		return -1;

	str_fmt(path, sizeof(path), "%s/client_ed25519_key", c->dir);
	str_fmt(buf, sizeof(buf), "%s client key (asf-provision)", c->ctr);
	if (key_generate(path, buf, e))
		return -1;
	str_fmt(pub, sizeof(pub), "%s.pub", path);
	if (key_public_line(client_pub, sizeof(client_pub), pub, e))
		return -1;

	/* `restrict`: no pty, no forwarding of any kind, no ~/.ssh/rc. */
	str_fmt(buf, sizeof(buf), "restrict %s %s-client\n", client_pub, c->ctr);
	if (write_in(c, "sshd/authorized_keys", buf, 0644, e))
		return -1;

	str_fmt(buf, sizeof(buf),
		 "root:x:0:0:root:/root:/bin/sh\n"
		 "sshd:x:101:65534:sshd privilege separation:/run/sshd:/usr/sbin/nologin\n"
		 ASF_USER ":x:%u:%u:sandbox user:/home/" ASF_USER ":%s\n"
		 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", uid, uid,
		 c->o->image && !c->kube && !c->img.bash ? "/bin/sh" : "/bin/bash");
	if (write_in(c, "etc/passwd", buf, 0644, e))
		return -1;
	str_fmt(buf, sizeof(buf), "root:x:0:\n" ASF_USER ":x:%u:\nnogroup:x:65534:\n", uid);
	if (write_in(c, "etc/group", buf, 0644, e))
		return -1;
	if (write_in(c, "etc/resolv.conf", c->allow ?
		     "# asf-provision: no resolver here; the egress proxy (HTTP_PROXY) resolves names.\n"
		     "options timeout:1 attempts:1\n" :
		     "# asf-provision: this sandbox has no egress and no resolver.\n"
		     "options timeout:1 attempts:1\n", 0644, e))
		return -1;

	if (c->allow) {
		char dest[4400];
		str_fmt(path, sizeof(path), "%s/proxy", c->dir);
		str_fmt(dest, sizeof(dest), "%s/proxy/hosts", c->dir);
		if (mkdir_mode(path, 0700, e) ||
		    (c->o->proxy_hosts && egress_hosts_copy(c->o->proxy_hosts, dest, e)))
			return -1;
	}
	return 0;
}

/*
 * --unprivileged (container backend; kube.c does the same for its Secret):
 * sshd runs as the sandbox user and reads its host key through the group,
 * root:UID 0440, so no other user can. Rootless, UID is one only inside
 * Podman's user namespace: the chown is made there.
 */
static int hostkey_for_user(const up_ctx *c, asf_err *e)
{
	char path[4400], ids[32];
	asf_out o;

	str_fmt(path, sizeof(path), "%s/sshd/ssh_host_ed25519_key", c->dir);
	if (c->rootless) {
		str_fmt(ids, sizeof(ids), "0:%u", c->uid);
		if (podman(&o, e, "unshare", "chown", "-h", ids, path, (char *)NULL))
			return -1;
		out_free(&o);
	} else if (chown(path, 0, c->uid)) {
		return asf_fail(e, "chown 0:%u %s: %s", c->uid, path, strerror(errno));
	}
	if (chmod(path, 0440))
		return asf_fail(e, "chmod 0440 %s: %s", path, strerror(errno));
	return 0;
}

/*
 * sshd_config, written once the network is known: with --egress allow, every
 * session of the sandbox user gets the proxy in its environment (SetEnv).
 */
static int write_sshd_config(const up_ctx *c, asf_err *e)
{
	char buf[4096], env[512] = "";

	if (c->allow)
		str_fmt(env, sizeof(env), "SetEnv HTTP_PROXY=http://%s:%d HTTPS_PROXY=http://%s:%d "
			"http_proxy=http://%s:%d https_proxy=http://%s:%d NO_PROXY=localhost,127.0.0.1 "
			"no_proxy=localhost,127.0.0.1\n", c->gw, c->proxy_port, c->gw, c->proxy_port, c->gw,
			c->proxy_port, c->gw, c->proxy_port);
	str_fmt(buf, sizeof(buf),
		 "# sshd_config for sandbox %s, written by asf-provision. Read-only in the container.\n"
		 "Port %d\n"
		 "ListenAddress %s\n"
		 "AddressFamily inet\n"
		 "HostKey " ASF_CTR_ETC "/ssh_host_ed25519_key\n"
		 "AuthorizedKeysFile " ASF_CTR_ETC "/authorized_keys\n"
		 "AllowUsers " ASF_USER "\n"
		 "PermitRootLogin no\n"
		 "PubkeyAuthentication yes\n"
		 "PasswordAuthentication no\n"
		 "KbdInteractiveAuthentication no\n"
		 "UsePAM no\n"
		 "StrictModes yes\n"
		 "DisableForwarding yes\n"
		 "PermitTunnel no\n"
		 "PermitTTY no\n"
		 "PermitUserEnvironment no\n"
		 "PermitUserRC no\n"
		 "UseDNS no\n"
		 "PidFile none\n"
		 "PrintMotd no\n"
		 "PrintLastLog no\n"
		 "LogLevel VERBOSE\n"
		 "Subsystem sftp internal-sftp\n"
		 "%s",
		 c->o->name, ASF_SSHD_PORT, c->exec_ingress ? "127.0.0.1" : "0.0.0.0", env);
	return write_in(c, "sshd/sshd_config", buf, 0644, e);
}

/*
 * The egress ruleset, loaded from the host into the container's network
 * namespace: nothing new goes out (with --egress allow: only to the proxy);
 * only sshd comes in. Loopback is the sandbox's own, but for Docker's
 * embedded resolver (on a user-defined network): dockerd listens at
 * ASF_ENGINE_DNS inside the namespace and forwards names out - from the
 * host's namespace when the host's resolver is on loopback - so it is
 * dropped before loopback is let through (after Docker's DNAT, which
 * keeps the address and changes the port).
 */
static int write_ruleset(const up_ctx *c, asf_err *e)
{
	char buf[4096], proxy[160] = "";

	if (c->allow)
		str_fmt(proxy, sizeof(proxy), "\t\tip daddr %s tcp dport %d ct state new accept\n", c->gw,
			c->proxy_port);

	str_fmt(buf, sizeof(buf),
		 "# egress policy of sandbox %s: nothing new goes out%s; only sshd comes in.\n"
		 "table inet " ASF_NFT_TABLE " {\n"
		 "\tchain output {\n"
		 "\t\ttype filter hook output priority 0; policy drop;\n"
		 "\t\tip daddr " ASF_ENGINE_DNS " drop\n"
		 "\t\toifname \"lo\" accept\n"
		 "\t\tct state established,related accept\n"
		 "%s"
		 "\t}\n"
		 "\tchain input {\n"
		 "\t\ttype filter hook input priority 0; policy drop;\n"
		 "\t\tiifname \"lo\" accept\n"
		 "\t\tct state established,related accept\n"
		 "\t\ttcp dport %d ct state new accept\n"
		 "\t}\n"
		 "}\n", c->o->name, c->allow ? " but to the egress proxy" : "", proxy, ASF_SSHD_PORT);
	return write_in(c, "egress.nft", buf, 0600, e);
}

/* ------------------------------------------------------------- podman */

static void add_label(asf_argv *a, const char *name)
{
	argv_add(a, "--label");
	argv_add(a, ASF_LABEL "=1");
	argv_add(a, "--label");
	argv_addf(a, ASF_LABEL_NAME "=%s", name);
}

static rlim_t hard_limit(int resource, rlim_t want)
{
	struct rlimit rl;

	if (getrlimit(resource, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
		return rl.rlim_max;
	return want;
}

static void create_argv(asf_argv *a, const up_ctx *c, long *nofile, long *nproc)
{
	const asf_up_opts *o = c->o;
	asf_argv sshd = { 0 };
	size_t i;

	*nofile = (long)hard_limit(RLIMIT_NOFILE, 1024);
	*nproc = (long)hard_limit(RLIMIT_NPROC, (rlim_t)c->pids);

	argv_add(a, asf_podman);
	argv_add(a, "create");
	argv_add(a, "--name");
	argv_add(a, c->ctr);
	add_label(a, o->name);
	if (o->group) {
		argv_add(a, "--label");
		argv_addf(a, ASF_LABEL_GROUP "=%s", o->group);
	}
	if (c->deadline_s) /* conmon kills the container then: nothing outlives a crashed orchestrator */
		argv_addf(a, "--timeout=%ld", c->deadline_s);
	if (o->runtime) {
		argv_add(a, "--runtime");
		argv_add(a, o->runtime);
	}
	argv_add(a, "--hostname");
	argv_add(a, c->ctr);
	/* Least privilege: docs/SECURITY.md says why each of these is here. */
	argv_add(a, "--cap-drop=ALL");
	if (o->unprivileged) {
		/* sshd is the sandbox user: it serves only itself, and needs no capability. */
		argv_addf(a, "--user=%u:%u", c->uid, c->uid);
	} else {
		argv_add(a, "--cap-add=CAP_SETGID"); /* ASF_CAPS, one each: docker does not split commas */
		argv_add(a, "--cap-add=CAP_SETUID");
		argv_add(a, "--cap-add=CAP_SYS_CHROOT");
	}
	argv_add(a, "--security-opt=no-new-privileges");
	argv_add(a, "--read-only");
	if (!engine_docker())
		argv_add(a, "--read-only-tmpfs=false");
	argv_add(a, "--tmpfs=/run:rw,nosuid,nodev,noexec,mode=0755,size=16m");
	argv_add(a, "--tmpfs=/run/sshd:rw,nosuid,nodev,noexec,mode=0755,size=1m");
	argv_add(a, "--tmpfs=/tmp:rw,nosuid,nodev,mode=1777,size=256m");
	argv_addf(a, "--pids-limit=%ld", c->pids);
	argv_addf(a, "--memory=%llu", c->mem_bytes);
	argv_addf(a, "--memory-swap=%llu", c->mem_bytes); /* no swap beyond the limit */
	argv_addf(a, "--cpus=%g", c->cpus);
	argv_addf(a, "--ulimit=nofile=%ld:%ld", *nofile, *nofile);
	argv_addf(a, "--ulimit=nproc=%ld:%ld", *nproc, *nproc);
	argv_add(a, "--ulimit=core=0:0");
	argv_add(a, "--restart=no");
	if (!engine_docker())
		argv_add(a, "--no-hosts");
	argv_add(a, "--sysctl=net.ipv6.conf.all.disable_ipv6=1");
	argv_add(a, "--sysctl=net.ipv6.conf.default.disable_ipv6=1");
	if (c->exec_ingress) {
		argv_add(a, "--network=none");
	} else {
		argv_addf(a, "--network=%s", c->ctr);
		if (c->pub_port)
			argv_addf(a, "--publish=%s:%d:%d/tcp", c->pub_addr, c->pub_port, ASF_SSHD_PORT);
		else
			argv_addf(a, "--publish=%s::%d/tcp", c->pub_addr, ASF_SSHD_PORT);
	}
	if (engine_docker()) {
		/* docker's bind mounts take no nosuid/nodev/noexec: the configuration files are
		 * read-only (and no_new_privs holds); the workspace gets them from
		 * docker_workspace_nosuid before sshd starts. */
		argv_addf(a, "--mount=type=bind,src=%s/sshd,dst=" ASF_CTR_ETC ",readonly", c->dir);
		argv_addf(a, "--mount=type=bind,src=%s/etc/passwd,dst=/etc/passwd,readonly", c->dir);
		argv_addf(a, "--mount=type=bind,src=%s/etc/group,dst=/etc/group,readonly", c->dir);
		argv_addf(a, "--mount=type=bind,src=%s/etc/resolv.conf,dst=/etc/resolv.conf,readonly", c->dir);
		argv_addf(a, "--mount=type=bind,src=%s,dst=" ASF_CTR_WORKSPACE "%s", c->ws_host,
			  c->ws_ro ? ",readonly" : "");
	} else {
		argv_addf(a, "--volume=%s/sshd:" ASF_CTR_ETC ":ro,nosuid,nodev,noexec", c->dir);
		argv_addf(a, "--volume=%s/etc/passwd:/etc/passwd:ro,nosuid,nodev,noexec", c->dir);
		argv_addf(a, "--volume=%s/etc/group:/etc/group:ro,nosuid,nodev,noexec", c->dir);
		argv_addf(a, "--volume=%s/etc/resolv.conf:/etc/resolv.conf:ro,nosuid,nodev,noexec", c->dir);
		argv_addf(a, "--volume=%s:" ASF_CTR_WORKSPACE ":%s,nosuid,nodev", c->ws_host, c->ws_ro ? "ro" : "rw");
	}
	image_sshd_argv(&sshd, c->st);
	if (c->st && cJSON_GetObjectItemCaseSensitive(c->st, "sshd_kit")) {
		/* The host's sshd for an image without one (image.c): read-only, executable. */
		if (engine_docker())
			argv_addf(a, "--mount=type=bind,src=%s/sshd-kit,dst=" ASF_CTR_KIT ",readonly", c->dir);
		else
			argv_addf(a, "--volume=%s/sshd-kit:" ASF_CTR_KIT ":ro,nosuid,nodev", c->dir);
	}
	if (o->rootfs) {
		argv_add(a, "--rootfs");
		argv_add(a, c->rootfs);
	} else {
		/* A user's image: never pulled; its entrypoint, user and volumes do not apply. */
		argv_add(a, "--pull=never");
		if (!o->unprivileged)
			argv_add(a, "--user=0:0");
		if (!engine_docker())
			argv_add(a, "--image-volume=ignore");
		argv_add(a, "--entrypoint");
		argv_add(a, engine_docker() ? "/bin/sh" : sshd.oom ? "/usr/sbin/sshd" : sshd.v[0]);
		argv_add(a, o->image);
	}
	if (engine_docker()) {
		/* docker has no `podman init`: the container starts, but sshd only
		 * once the host has blocked egress and opened the gate. */
		char *words = sshd.oom ? NULL : argv_text(sshd.v);
		if (!o->image)
			argv_add(a, "/bin/sh");
		argv_add(a, "-c");
		argv_addf(a, "while [ ! -e " ASF_CTR_ETC "/" ASF_GATE " ]; do sleep 0.1; done; "
			  "exec %s -D -e -f " ASF_CTR_ETC "/sshd_config", words ? words : "/usr/sbin/sshd");
		free(words);
		argv_free(&sshd);
		return;
	}
	for (i = o->rootfs ? 0 : 1; i < sshd.n; i++) /* an image's entrypoint is the first word */
		argv_add(a, sshd.v[i]);
	argv_free(&sshd);
	argv_add(a, "-D");
	argv_add(a, "-e");
	argv_add(a, "-f");
	argv_add(a, ASF_CTR_ETC "/sshd_config");
}

/* Run a program in the network namespace of process pid (nsenter -t PID -n ...). */
static int in_netns(asf_out *o, long pid, asf_err *e, const char *const *args)
{
	asf_argv a = { 0 };
	size_t i;
	int rc;

	netns_argv(&a, pid);
	for (i = 0; args[i]; i++)
		argv_add(&a, args[i]);
	rc = a.oom ? asf_fail(e, "out of memory") : asf_run(o, a.v, 30, e);
	if (rc == 0 && o->status != 0) {
		char *t = argv_text(a.v);
		asf_fail(e, "%s failed (exit %d): %s", t ? t : "nsenter", o->status, o->err);
		free(t);
		out_free(o);
		rc = -1;
	}
	argv_free(&a);
	return rc;
}

static long container_pid(const char *ctr, asf_err *e)
{
	asf_out o;
	long pid;

	if (podman(&o, e, "inspect", "--type", "container", "--format", "{{.State.Pid}}", ctr, (char *)NULL))
		return -1;
	pid = strtol(o.out, NULL, 10);
	out_free(&o);
	if (pid <= 0)
		return asf_fail(e, "container %s has no process", ctr);
	return pid;
}

/*
 * docker's bind mounts take no nosuid or nodev (its local volume driver
 * applies them to a bind only read-only). So, before sshd runs, asf-provision
 * remounts the container's /workspace with them itself, from the host, in
 * the container's mount namespace: the flags live and die with the
 * container, and the host's own mounts are untouched. A forked child does
 * it (setns into a mount namespace needs a single-threaded caller). Not
 * root (a member of the docker group): no remount; no_new_privs still makes
 * a setuid file inert inside, and `up` says so.
 */
static int docker_workspace_nosuid(const up_ctx *c, long pid, asf_err *e)
{
	unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (c->ws_ro ? MS_RDONLY : 0);
	char ns[64];
	int fd, p[2], status, err[2] = { 0, 0 };
	pid_t child;

	if (!engine_docker())
		return 0;
	if (geteuid() != 0) {
		fprintf(stderr, "asf-provision: up %s: not root, so the workspace is not remounted nosuid,nodev "
			"(a setuid file there is still inert inside: no_new_privs)\n", c->o->name);
		return 0;
	}
	str_fmt(ns, sizeof(ns), "/proc/%ld/ns/mnt", pid);
	if ((fd = open(ns, O_RDONLY | O_CLOEXEC)) < 0)
		return asf_fail(e, "cannot open %s: %s", ns, strerror(errno));
	if (pipe2(p, O_CLOEXEC)) {
		close(fd);
		return asf_fail(e, "pipe: %s", strerror(errno));
	}
	child = fork();
	if (child == 0) {
		/* err[0]: which step failed (1 setns, 2 mount), err[1]: its errno. */
		if (setns(fd, CLONE_NEWNS))
			err[0] = 1;
		else if (mount(NULL, ASF_CTR_WORKSPACE, NULL, flags, NULL))
			err[0] = 2;
		err[1] = errno;
		if (write(p[1], err, sizeof(err)) != (ssize_t)sizeof(err))
			_exit(3);
		_exit(err[0]);
	}
	close(fd);
	close(p[1]);
	if (child < 0) {
		close(p[0]);
		return asf_fail(e, "fork: %s", strerror(errno));
	}
	if (read(p[0], err, sizeof(err)) != (ssize_t)sizeof(err))
		err[0] = 3;
	close(p[0]);
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	if (err[0] == 1)
		return asf_fail(e, "cannot enter the container's mount namespace (%s): %s", ns, strerror(err[1]));
	if (err[0])
		return asf_fail(e, "cannot remount " ASF_CTR_WORKSPACE " nosuid,nodev in the container: %s",
				err[0] == 2 ? strerror(err[1]) : "the helper process failed");
	return 0;
}

/* --egress allow: the gateway of the sandbox's network (the bridge exists once the container is initialised). */
static int start_proxy(up_ctx *c, asf_err *e)
{
	asf_out o;

	if (podman(&o, e, "inspect", "--type", "container", "--format",
		   "{{range .NetworkSettings.Networks}}{{.Gateway}}{{end}}", c->ctr, (char *)NULL))
		return -1;
	str_fmt(c->gw, sizeof(c->gw), "%.*s", (int)strcspn(o.out, "\n"), o.out);
	out_free(&o);
	if (!c->gw[0])
		return asf_fail(e, "%s inspect %s: no gateway on its network", asf_engine, c->ctr);
	if (egress_proxy_start(c->dir, c->o->name, c->allow, c->gw, c->o->proxy_hosts != NULL, c->st, e))
		return -1;
	c->proxy_port = (int)jn(cJSON_GetObjectItemCaseSensitive(c->st, "proxy"), "port", 0);
	return 0;
}

static int block_egress(up_ctx *c, long pid, asf_err *e)
{
	char nft[4400];
	const char *load[] = { "nft", "-f", nft, NULL };
	const char *show[] = { "ip", "-4", "route", "show", "default", NULL };
	const char *del[] = { "ip", "-4", "route", "del", "default", NULL };
	asf_out o;
	int has_default;

	str_fmt(nft, sizeof(nft), "%s/egress.nft", c->dir);
	if (in_netns(&o, pid, e, load))
		return -1;
	out_free(&o);
	cJSON_AddStringToObject(c->st, "firewall", "inet " ASF_NFT_TABLE);
	if (!c->loopback && !c->exec_ingress) {
		/* Replies to clients on other networks need the default route. */
		cJSON_AddBoolToObject(c->st, "default_route_removed", 0);
		return 0;
	}
	if (in_netns(&o, pid, e, show))
		return -1;
	has_default = o.out[0] != '\0';
	out_free(&o);
	if (has_default) {
		if (in_netns(&o, pid, e, del))
			return -1;
		out_free(&o);
	}
	cJSON_AddBoolToObject(c->st, "default_route_removed", 1);
	return 0;
}

static int published_port(up_ctx *c, asf_err *e)
{
	char spec[32], *colon;
	asf_out o;
	long port;

	str_fmt(spec, sizeof(spec), "%d/tcp", ASF_SSHD_PORT);
	if (podman(&o, e, "port", c->ctr, spec, (char *)NULL))
		return -1;
	colon = strrchr(o.out, ':');
	port = colon ? strtol(colon + 1, NULL, 10) : 0;
	out_free(&o);
	if (port <= 0 || port > 65535)
		return asf_fail(e, "%s did not publish port %d of %s", asf_engine, ASF_SSHD_PORT, c->ctr);
	return (int)port;
}

/* ------------------------------------------------------------- config */

/*
 * --out still names the file just written: the same inode, a regular file
 * of ours (no link followed), the same bytes. Read back with O_NOFOLLOW,
 * non-blocking and bounded, only to compare.
 */
static int out_unchanged(const char *out, const struct stat *written, const char *text, asf_err *e)
{
	struct stat st;
	size_t len;
	char *back;
	int fd = open_regular(AT_FDCWD, out, out, &st, e), same;

	if (fd < 0) {
		char why[sizeof(e->msg)];
		str_fmt(why, sizeof(why), "%s", e->msg);
		return asf_fail(e, "--out %s was replaced after it was written: %s", out, why);
	}
	back = read_fd(fd, out, ASF_CONFIG_MAX, &len, e);
	close(fd);
	same = back && st.st_dev == written->st_dev && st.st_ino == written->st_ino &&
	       st.st_uid == geteuid() && (st.st_mode & 07777) == 0644 && len == strlen(text) &&
	       !memcmp(back, text, len);
	free(back);
	if (!same)
		return asf_fail(e, "--out %s was replaced or changed after it was written", out);
	return 0;
}

/* STATE/NAME/asp.json: the copy of the config that only we can write. */
static void config_copy(const up_ctx *c, char *out, size_t outlen)
{
	str_fmt(out, outlen, "%s/asp.json", c->dir);
}

static int write_config(up_ctx *c, int port, asf_err *e)
{
	cJSON *cfg = cJSON_CreateObject(), *conn = cJSON_CreateObject(), *x = cJSON_CreateObject();
	char identity[4400], copy[4400], *text;
	asp_error aerr = { 0 };
	struct stat written;
	int rc;

	str_fmt(identity, sizeof(identity), "%s/client_ed25519_key", c->dir);
	cJSON_AddStringToObject(cfg, "version", "0");
	cJSON_AddStringToObject(cfg, "transport", "ssh");
	if (c->kube && c->service) {
		char host[256];
		str_fmt(host, sizeof(host), "%s.%s.svc.cluster.local", c->ctr, js(c->st, "namespace"));
		cJSON_AddStringToObject(conn, "host", host);
		cJSON_AddNumberToObject(conn, "port", 22);
		cJSON_AddStringToObject(conn, "user", ASF_USER);
		cJSON_AddStringToObject(conn, "identity", identity);
		cJSON_AddStringToObject(conn, "host_key", c->host_key);
	} else if (c->kube) {
		/* kubectl exec (or podman exec): the only difference between the two. */
		asf_argv a = { 0 };
		char *proxy;
		kube_proxy_argv(&a, c->st);
		proxy = a.oom ? NULL : argv_text(a.v);
		argv_free(&a);
		cJSON_AddStringToObject(conn, "host", c->ctr);
		cJSON_AddStringToObject(conn, "user", ASF_USER);
		cJSON_AddStringToObject(conn, "identity", identity);
		cJSON_AddStringToObject(conn, "host_key", c->host_key);
		cJSON_AddStringToObject(conn, "proxyCommand", proxy ? proxy : "");
		free(proxy);
	} else if (c->exec_ingress) {
		/* libasp runs this with /bin/sh -c: argv_text quotes every word. docker:
		 * the daemon up used (DOCKER_HOST), whatever the harness's environment. */
		const char *dh = engine_docker() ? getenv("DOCKER_HOST") : NULL;
		asf_argv a = { 0 };
		char *proxy;
		argv_add(&a, asf_podman);
		if (dh && *dh)
			argv_addf(&a, "--host=%s", dh);
		argv_add(&a, "exec");
		argv_add(&a, "-i");
		argv_add(&a, c->ctr);
		image_sshd_argv(&a, c->st);
		argv_add(&a, "-i");
		argv_add(&a, "-f");
		argv_add(&a, ASF_CTR_ETC "/sshd_config");
		proxy = a.oom ? NULL : argv_text(a.v);
		argv_free(&a);
		cJSON_AddStringToObject(conn, "host", c->ctr);
		cJSON_AddStringToObject(conn, "user", ASF_USER);
		cJSON_AddStringToObject(conn, "identity", identity);
		cJSON_AddStringToObject(conn, "host_key", c->host_key);
		cJSON_AddStringToObject(conn, "proxyCommand", proxy ? proxy : "");
		free(proxy);
	} else {
		cJSON_AddStringToObject(conn, "host", strcmp(c->pub_addr, "0.0.0.0") ? c->pub_addr : "127.0.0.1");
		cJSON_AddNumberToObject(conn, "port", port);
		cJSON_AddStringToObject(conn, "user", ASF_USER);
		cJSON_AddStringToObject(conn, "identity", identity);
		cJSON_AddStringToObject(conn, "host_key", c->host_key);
	}
	cJSON_AddItemToObject(cfg, "connection", conn);
	cJSON_AddStringToObject(cfg, "workspace", ASF_CTR_WORKSPACE);
	cJSON_AddStringToObject(x, "name", c->o->name);
	cJSON_AddStringToObject(x, "state", c->dir);
	cJSON_AddItemToObject(cfg, "x-asf-provision", x);
	text = cJSON_Print(cfg);
	cJSON_Delete(cfg);
	if (!text)
		return asf_fail(e, "out of memory");
	/*
	 * A copy beside state.json lets `down` recognise (and remove) the file
	 * it wrote, and is the one `up` and `verify` open: it is in the 0700
	 * state directory, where nobody else can swap it. --out is written
	 * once and only compared afterwards, never opened as a config here.
	 */
	str_fmt(copy, sizeof(copy), "%s/asp.json", c->dir);
	rc = write_file(copy, text, strlen(text), 0644, NULL, e);
	if (!rc && strcmp(copy, c->out))
		rc = write_file(c->out, text, strlen(text), 0644, &written, e);
	if (!rc && strcmp(copy, c->out))
		rc = out_unchanged(c->out, &written, text, e);
	cJSON_free(text);
	if (rc)
		return -1;
	cJSON_AddStringToObject(c->st, "config", c->out);
	if (asp_config_check(copy, &aerr))
		return asf_fail(e, "the written config %s does not validate: %s", copy, aerr.message);
	return 0;
}

/* sshd starts in well under a second; allow a slow host 20 s. */
static int wait_ready(up_ctx *c, asf_err *e)
{
	asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
	asp_error aerr = { 0 };
	asp_sandbox *sb = NULL;
	asp_sandbox_info info = ASP_SANDBOX_INFO_INIT;
	time_t deadline = time(NULL) + 20;
	char copy[4400];
	int rc;

	config_copy(c, copy, sizeof(copy));
	oo.config_path = copy;
	oo.connect_timeout_ms = 5000;
	for (;;) {
		rc = asp_open(&sb, &oo, &aerr);
		if (rc == 0)
			break;
		if (rc == ASP_EHOSTKEY || rc == ASP_EAUTH || rc == ASP_ECONFIG || time(NULL) >= deadline)
			return asf_fail(e, "the sandbox does not answer through %s: %s", copy, aerr.message);
		usleep(200 * 1000);
	}
	rc = asp_sandbox_info_get(&info, sb, &aerr);
	asp_close(sb);
	if (rc)
		return asf_fail(e, "the sandbox does not answer through %s: %s", copy, aerr.message);
	if (info.trust != ASP_TRUST_PINNED || strcmp(info.host_key_fingerprint, c->fingerprint))
		return asf_fail(e, "the sandbox answered with host key %s, expected %s",
				info.host_key_fingerprint, c->fingerprint);
	return 0;
}

/* krun only: a microVM has its own kernel; the same kernel means no VM. */
static int check_guest_kernel(up_ctx *c, asf_err *e)
{
	asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
	asp_error aerr = { 0 };
	asp_sandbox *sb = NULL;
	asp_exec_result *r = NULL;
	struct utsname u;
	char guest[256] = "";
	const unsigned char *out;
	size_t len;
	char copy[4400];

	config_copy(c, copy, sizeof(copy));
	oo.config_path = copy;
	if (asp_open(&sb, &oo, &aerr) || asp_exec(&r, sb, "uname -r", NULL, &aerr)) {
		asp_close(sb);
		return asf_fail(e, "krun: cannot read the guest kernel: %s", aerr.message);
	}
	out = asp_exec_result_output(r, ASP_STDOUT, &len);
	str_fmt(guest, sizeof(guest), "%.*s", (int)strcspn((const char *)out, "\n"), (const char *)out);
	asp_exec_result_free(r);
	asp_close(sb);
	uname(&u);
	cJSON_AddStringToObject(c->st, "guest_kernel", guest);
	cJSON_AddStringToObject(c->st, "host_kernel", u.release);
	if (!guest[0] || !strcmp(guest, u.release))
		return asf_fail(e, "krun: the sandbox runs the host's kernel (%s): not a microVM", u.release);
	return 0;
}

/* ------------------------------------------------------------- up */

static cJSON *initial_state(const up_ctx *c, long nofile, long nproc)
{
	const asf_up_opts *o = c->o;
	cJSON *st = cJSON_CreateObject(), *lim = cJSON_CreateObject(), *ws = cJSON_CreateObject();
	cJSON *caps = cJSON_CreateArray(), *labels = cJSON_CreateObject();
	char now[32], buf[4400];

	iso_time(now, sizeof(now));
	cJSON_AddNumberToObject(st, "version", 1);
	cJSON_AddStringToObject(st, "name", o->name);
	cJSON_AddStringToObject(st, "phase", "creating");
	cJSON_AddStringToObject(st, "created", now);
	if (c->kube) {
		/* podman kube play names the container POD-CONTAINER. */
		cJSON_AddStringToObject(st, "backend", "kubernetes");
		cJSON_AddStringToObject(st, "namespace", o->namespace_ ? o->namespace_ : "default");
		cJSON_AddStringToObject(st, "pod", c->ctr);
		snprintf(buf, sizeof(buf), "%s-sshd", c->ctr);
		cJSON_AddStringToObject(st, "container", strcmp(asf_engine, "kubectl") ? buf : "sshd");
		cJSON_AddStringToObject(st, "manifest", c->manifest);
		cJSON_AddStringToObject(st, "workspace_volume", c->ws_kind == ASF_WS_EMPTYDIR ? "emptydir" :
					c->ws_kind == ASF_WS_PVC ? "pvc" : "hostpath");
	} else {
		cJSON_AddStringToObject(st, "container", c->ctr);
	}
	if (!c->exec_ingress && !c->kube)
		cJSON_AddStringToObject(st, "network", c->ctr);
	cJSON_AddStringToObject(st, "runtime", o->runtime ? o->runtime : "");
	cJSON_AddBoolToObject(st, "unprivileged", o->unprivileged);
	cJSON_AddStringToObject(st, "ingress", c->exec_ingress ? "exec" : c->service ? "service" : "publish");
	cJSON_AddStringToObject(st, "egress", c->allow ? "allow" : "none");
	if (c->allow)
		cJSON_AddItemToObject(st, "allow", cJSON_Duplicate(c->allow, 1));
	if (!c->exec_ingress && !c->kube)
		cJSON_AddStringToObject(st, "publish_address", c->pub_addr);
	cJSON_AddStringToObject(st, "engine", asf_engine);
	cJSON_AddStringToObject(st, "podman", asf_podman);
	cJSON_AddBoolToObject(st, "rootless", c->rootless);
	if (o->rootfs)
		cJSON_AddStringToObject(st, "rootfs", c->rootfs);
	else
		cJSON_AddStringToObject(st, "image", o->image);
	if (!c->kube)
		cJSON_AddStringToObject(st, "sshd", o->rootfs ? "rootfs" : c->img.kit ? "host" : "image");
	if (c->ws_kind == ASF_WS_HOSTPATH)
		cJSON_AddStringToObject(ws, "host", c->ws_host);
	else if (c->ws_kind == ASF_WS_PVC)
		cJSON_AddStringToObject(ws, "claim", c->claim);
	cJSON_AddStringToObject(ws, "path", ASF_CTR_WORKSPACE);
	cJSON_AddBoolToObject(ws, "read_only", c->ws_ro);
	cJSON_AddItemToObject(st, "workspace", ws);
	cJSON_AddStringToObject(st, "user", ASF_USER);
	cJSON_AddNumberToObject(st, "uid", c->uid);
	if (o->allow_host_uid)
		cJSON_AddBoolToObject(st, "allow_host_account_uid", 1);
	cJSON_AddNumberToObject(lim, "memory_bytes", (double)c->mem_bytes);
	cJSON_AddNumberToObject(lim, "cpus", c->cpus);
	cJSON_AddNumberToObject(lim, "pids", (double)c->pids);
	cJSON_AddNumberToObject(lim, "nofile", (double)nofile);
	cJSON_AddNumberToObject(lim, "nproc", (double)nproc);
	if (c->rootless && access("/sys/fs/cgroup/cgroup.controllers", F_OK)) {
		/* Podman: "Resource limits are not supported and ignored on cgroups V1 rootless systems". */
		cJSON_AddBoolToObject(lim, "enforced", 0);
		cJSON_AddStringToObject(lim, "why_not", "rootless Podman on cgroup v1 ignores --memory, "
					"--cpus and --pids-limit; only the ulimits (nofile, nproc, core) apply");
	}
	cJSON_AddItemToObject(st, "limits", lim);
	if (!o->unprivileged) { /* unprivileged: none */
		cJSON_AddItemToArray(caps, cJSON_CreateString("CAP_SETGID"));
		cJSON_AddItemToArray(caps, cJSON_CreateString("CAP_SETUID"));
		cJSON_AddItemToArray(caps, cJSON_CreateString("CAP_SYS_CHROOT"));
	}
	cJSON_AddItemToObject(st, "capabilities", caps);
	if (c->deadline_s)
		cJSON_AddNumberToObject(st, "deadline_seconds", (double)c->deadline_s);
	cJSON_AddStringToObject(labels, ASF_LABEL, "1");
	cJSON_AddStringToObject(labels, ASF_LABEL_NAME, o->name);
	if (o->group) {
		cJSON_AddStringToObject(labels, ASF_LABEL_GROUP, o->group);
		cJSON_AddStringToObject(st, "group", o->group);
	}
	cJSON_AddItemToObject(st, "labels", labels);
	str_fmt(buf, sizeof(buf), "%s/client_ed25519_key", c->dir);
	cJSON_AddStringToObject(st, "identity", buf);
	cJSON_AddStringToObject(st, "out", c->out);
	return st;
}

/*
 * Rootless: the sandbox user's uid is one of ours only inside Podman's user
 * namespace (a subordinate uid on the host). `podman unshare chown` hands the
 * directory over there; `down` gives it back the same way to the
 * namespace's root, which is us. The host uid it gets is recorded, for
 * `verify` and `down` to compare with.
 */
static int own_workspace_rootless(up_ctx *c, const struct stat *before, asf_err *e)
{
	cJSON *ws = cJSON_GetObjectItemCaseSensitive(c->st, "workspace");
	char ids[32], who[512];
	struct stat st;
	asf_out o;

	if (before->st_uid != geteuid())
		return asf_fail(e, "--workspace %s belongs to uid %d, not to you (uid %d): rootless, only a "
				   "directory of your own can be handed to the sandbox user", c->ws_host,
				(int)before->st_uid, (int)geteuid());
	cJSON_AddNumberToObject(ws, "orig_uid", before->st_uid);
	cJSON_AddNumberToObject(ws, "orig_gid", before->st_gid);
	cJSON_AddStringToObject(ws, "chowned_via", "podman unshare");
	cJSON_AddBoolToObject(ws, "chowned", 1);
	if (state_save(c->o->name, c->st, e))
		return -1;
	str_fmt(ids, sizeof(ids), "%u:%u", c->uid, c->uid);
	/* -h: the directory itself, never what a link in its place points to. */
	if (podman(&o, e, "unshare", "chown", "-h", ids, c->ws_host, (char *)NULL))
		return -1;
	out_free(&o);
	if (chown_dir(c->ws_host, (uid_t)-1, (gid_t)-1, &st, e))
		return -1;
	cJSON_AddNumberToObject(ws, "host_uid", st.st_uid);
	/* What the agent's files will be owned by on the host: the mapped id (one of the
	 * caller's subordinate ids, as intended), never an account's. */
	if (!c->o->allow_host_uid && id_owner((unsigned int)st.st_uid, 0, who, sizeof(who)))
		return asf_fail(e, "--uid %u maps to host uid %d in Podman's user namespace, which is %s: "
				   "the agent's files would be that account's; fix /etc/subuid, choose another "
				   "--uid, or force it with --allow-host-account-uid", c->uid, (int)st.st_uid, who);
	return 0;
}

/* Hand the workspace directory (not its contents) to the sandbox user; `down` gives it back. */
static int own_workspace(up_ctx *c, asf_err *e)
{
	cJSON *ws = cJSON_GetObjectItemCaseSensitive(c->st, "workspace");
	struct stat st;

	if (c->ws_ro || c->ws_kind != ASF_WS_HOSTPATH)
		return 0;
	if (chown_dir(c->ws_host, (uid_t)-1, (gid_t)-1, &st, e))
		return -1;
	if (c->rootless)
		return own_workspace_rootless(c, &st, e);
	if (st.st_uid == c->uid && st.st_gid == c->uid)
		return 0;
	cJSON_AddNumberToObject(ws, "orig_uid", st.st_uid);
	cJSON_AddNumberToObject(ws, "orig_gid", st.st_gid);
	cJSON_AddBoolToObject(ws, "chowned", 1); /* recorded first: a crash leaves `down` able to undo it */
	if (state_save(c->o->name, c->st, e))
		return -1;
	if (chown_dir(c->ws_host, c->uid, c->uid, NULL, e)) {
		char why[sizeof(e->msg)];
		str_fmt(why, sizeof(why), "%s", e->msg);
		return asf_fail(e, "cannot hand the workspace to uid %u (run as root, or chown it "
				   "yourself): %s", c->uid, why);
	}
	return 0;
}

/* Nothing created yet: is the name free? */
static int name_free(up_ctx *c, asf_err *e)
{
	const char *kinds[] = { "container", "network", "volume" };
	size_t i, n;
	char **v;

	if (state_exists(c->o->name))
		return asf_fail(e, "sandbox \"%s\" exists (%s); use --replace, or `asf-provision down %s` first",
				c->o->name, c->dir, c->o->name);
	for (i = 0; i < 3 && !c->kube; i++) {
		if (podman_labelled(&v, &n, kinds[i], c->o->name, e))
			return -1;
		strv_free(v, n);
		if (n)
			return asf_fail(e, "%s objects labelled %s=%s exist (leftovers?); use --replace, "
					   "or `asf-provision down %s` first", asf_engine, ASF_LABEL_NAME, c->o->name,
					c->o->name);
	}
	if (!c->kube && engine_exists("container", c->ctr))
		return asf_fail(e, "a container named %s exists that asf-provision did not create", c->ctr);
	if (!c->kube && !c->exec_ingress && engine_exists("network", c->ctr))
		return asf_fail(e, "a network named %s exists that asf-provision did not create", c->ctr);
	if (!c->o->replace && faccessat(AT_FDCWD, c->out, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return asf_fail(e, "--out %s exists; remove it or use --replace", c->out);
	return 0;
}

/* --backend kubernetes: the manifest, then (unless `manifest`) apply, config, a connection. */
static int kube_build(up_ctx *c, long nofile, long nproc, asf_err *e)
{
	asf_kube k = { c->o->name, js(c->st, "namespace"), c->o->image, c->dir, c->ws_host, c->ws_ro,
		       c->ws_kind, c->claim, c->o->unprivileged, c->uid, c->deadline_s, c->o->group,
		       c->service, c->mem_bytes, c->cpus, c->pids, 0 };
	cJSON *objs = kube_objects(&k, e);
	int rc;

	if (!objs)
		return -1;
	rc = kube_write(c->manifest, c->o->name, objs, e);
	cJSON_Delete(objs);
	if (rc)
		return -1;
	if (c->o->manifest_only) {
		char pm[4400];
		/* --engine podman: podman kube play's copy too, the one `up` would play. */
		if ((!strcmp(asf_engine, "podman") && kube_podman_manifest(&k, pm, sizeof(pm), e)) ||
		    write_config(c, 0, e))
			return -1;
		cJSON_ReplaceItemInObjectCaseSensitive(c->st, "phase", cJSON_CreateString("rendered"));
		return state_save(c->o->name, c->st, e);
	}
	if (kube_apply(&k, c->manifest, c->o->runtime, nofile, nproc, c->st, e) ||
	    state_save(c->o->name, c->st, e) || write_config(c, 0, e) || wait_ready(c, e))
		return -1;
	cJSON_ReplaceItemInObjectCaseSensitive(c->st, "phase", cJSON_CreateString("ready"));
	return state_save(c->o->name, c->st, e);
}

static int build(up_ctx *c, asf_err *e)
{
	char path[4400];
	asf_argv a = { 0 };
	asf_out o;
	long nofile, nproc, pid;
	int port = 0;

	/* Step 2: the state directory and its files. */
	if (mkdir_mode(c->dir, 0700, e))
		return -1;
	create_argv(&a, c, &nofile, &nproc); /* for the limits it settles on */
	c->st = initial_state(c, nofile, nproc);
	if (state_save(c->o->name, c->st, e))
		goto fail;
	str_fmt(path, sizeof(path), "%s/sshd", c->dir);
	if (mkdir_mode(path, 0755, e))
		goto fail;
	str_fmt(path, sizeof(path), "%s/etc", c->dir);
	if (mkdir_mode(path, 0755, e) || make_files(c, e) ||
	    (!c->kube && c->o->unprivileged && hostkey_for_user(c, e)))
		goto fail;
	if (!c->kube && c->img.kit) {
		/* The host's sshd for the image (image.c); the container's command changes with it. */
		if (image_kit(c->dir, c->st, e) || state_save(c->o->name, c->st, e))
			goto fail;
		argv_free(&a);
		memset(&a, 0, sizeof(a));
		create_argv(&a, c, &nofile, &nproc);
	}
	cJSON_AddStringToObject(c->st, "host_key", c->host_key);
	cJSON_AddStringToObject(c->st, "host_key_fingerprint", c->fingerprint);
	/* Step 3. */
	if (own_workspace(c, e) || state_save(c->o->name, c->st, e))
		goto fail;
	if (c->kube) {
		/* kube.c puts both into its Secret and the pod's netns (no allow-list there). */
		int rc = write_ruleset(c, e) || write_sshd_config(c, e) ? -1 : kube_build(c, nofile, nproc, e);
		argv_free(&a);
		return rc;
	}
	/* Step 4. */
	if (!c->exec_ingress) {
		asf_argv n = { 0 };
		argv_add(&n, asf_podman);
		argv_add(&n, "network");
		argv_add(&n, "create");
		if (!engine_docker()) /* docker has none: the egress table drops its resolver (ASF_ENGINE_DNS) */
			argv_add(&n, "--disable-dns");
		add_label(&n, c->o->name);
		argv_add(&n, c->ctr);
		if (podman_argv(&o, &n, e)) {
			argv_free(&n);
			goto fail;
		}
		argv_free(&n);
		out_free(&o);
	}
	/* Step 5. */
	if (podman_argv(&o, &a, e))
		goto fail;
	cJSON_AddStringToObject(c->st, "container_id", strtok(o.out, "\n") ? o.out : "");
	out_free(&o);
	/* docker: started, but waiting at the gate (create_argv). */
	if (podman(&o, e, engine_docker() ? "start" : "init", c->ctr, (char *)NULL))
		goto fail;
	out_free(&o);
	if ((pid = container_pid(c->ctr, e)) < 0)
		goto fail;
	/* Step 6: before sshd runs, so there is no moment with open egress. */
	if ((c->allow && start_proxy(c, e)) || write_ruleset(c, e) || block_egress(c, pid, e) ||
	    docker_workspace_nosuid(c, pid, e) || write_sshd_config(c, e))
		goto fail;
	/* Step 7. */
	if (engine_docker()) {
		str_fmt(path, sizeof(path), "sshd/" ASF_GATE);
		if (write_in(c, path, "egress blocked\n", 0644, e))
			goto fail;
	} else if (podman(&o, e, "start", c->ctr, (char *)NULL)) {
		goto fail;
	} else {
		out_free(&o);
	}
	if (!c->exec_ingress && (port = published_port(c, e)) < 0)
		goto fail;
	if (port)
		cJSON_AddNumberToObject(c->st, "port", port);
	if (state_save(c->o->name, c->st, e) || write_config(c, port, e) || wait_ready(c, e))
		goto fail;
	if (c->o->runtime && !strcmp(c->o->runtime, "krun") && check_guest_kernel(c, e))
		goto fail;
	cJSON_ReplaceItemInObjectCaseSensitive(c->st, "phase", cJSON_CreateString("ready"));
	if (state_save(c->o->name, c->st, e))
		goto fail;
	argv_free(&a);
	return 0;
fail:
	argv_free(&a);
	return -1;
}

static void print_summary(const up_ctx *c)
{
	if (c->o->json) {
		print_json(c->st);
		return;
	}
	if (c->kube) {
		printf("sandbox %s %s\n", c->o->name, c->o->manifest_only ? "rendered (nothing applied)" : "is up");
		printf("  manifest   %s\n", c->manifest);
		printf("  pod        %s/%s (%s, %s ingress)\n", js(c->st, "namespace"), c->ctr, asf_engine,
		       c->service ? "service" : "exec");
		printf("  host key   %s\n", c->fingerprint);
		printf("  config     %s\n", c->out);
		printf("  state      %s\n", c->dir);
		fflush(stdout);
		return;
	}
	printf("sandbox %s is up\n", c->o->name);
	printf("  container  %s (%s ingress%s)\n", c->ctr, c->exec_ingress ? "exec" : "publish",
	       c->exec_ingress ? ", no network" : "");
	if (!c->exec_ingress)
		printf("  ssh        %s:%d\n", js(c->st, "publish_address"), (int)jn(c->st, "port", 0));
	if (c->allow) {
		char *list = cJSON_PrintUnformatted(c->allow);
		printf("  egress     through the proxy %s:%d to %s\n", c->gw, c->proxy_port, list ? list : "?");
		free(list);
	}
	printf("  workspace  %s -> " ASF_CTR_WORKSPACE "%s\n", c->ws_host, c->ws_ro ? " (read-only)" : "");
	printf("  host key   %s\n", c->fingerprint);
	printf("  config     %s\n", c->out);
	printf("  state      %s\n", c->dir);
	fflush(stdout);
}

int cmd_up(const asf_up_opts *opts)
{
	up_ctx c;
	asf_err e = { "" };
	int rc;

	memset(&c, 0, sizeof(c));
	c.o = opts;
	if (validate(&c, &e))
		goto refused;
	if (opts->manifest_only) {
		/* Nothing is run: the engine only names the proxy command's program. */
		if (asf_which(asf_engine, asf_podman, sizeof(asf_podman)))
			str_fmt(asf_podman, sizeof(asf_podman), "%s", asf_engine);
	} else if (podman_ready(&e)) {
		goto refused;
	}
	if (opts->runtime && !strcmp(opts->runtime, "krun") && krun_usable(&e))
		goto refused;
	if (opts->replace && name_free(&c, &e) != 0) {
		if (teardown(opts->name, NULL) != 0) {
			asf_fail(&e, "--replace: could not remove the old sandbox %s", opts->name);
			goto refused;
		}
	}
	if (name_free(&c, &e))
		goto refused;
	if (!c.kube && opts->image && !opts->manifest_only && (rc = image_check(opts, &c.img, &e))) {
		if (rc != ASF_IMAGE_ENGINE_FAILED)
			goto refused;
		/* Not the input's fault: the engine's, as when create fails (exit 1). */
		fprintf(stderr, "asf-provision: up %s: %s\n", opts->name, e.msg);
		cJSON_Delete(c.allow);
		return 1;
	}
	if (build(&c, &e)) {
		fprintf(stderr, "asf-provision: up %s: %s\n", opts->name, e.msg);
		if (c.st)
			state_save(opts->name, c.st, NULL);
		if (teardown(opts->name, NULL) == 0)
			fprintf(stderr, "asf-provision: up %s: rolled back; nothing is left\n", opts->name);
		else
			fprintf(stderr, "asf-provision: up %s: rollback incomplete; run `asf-provision down %s`\n",
				opts->name, opts->name);
		cJSON_Delete(c.st);
		cJSON_Delete(c.allow);
		return 1;
	}
	print_summary(&c);
	if (!jb(cJSON_GetObjectItemCaseSensitive(c.st, "limits"), "enforced") &&
	    cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c.st, "limits"), "enforced"))
		fprintf(stderr, "asf-provision: up %s: warning: %s\n", opts->name,
			js(cJSON_GetObjectItemCaseSensitive(c.st, "limits"), "why_not"));
	cJSON_Delete(c.st);
	cJSON_Delete(c.allow);
	return 0;
refused:
	fprintf(stderr, "asf-provision: up: %s\n", e.msg);
	cJSON_Delete(c.allow);
	return 2;
}

/* ------------------------------------------------------------- up --count */

/* Default deadline of a group: nothing of an orchestrator that crashed lives longer. */
#define ASF_GROUP_DEADLINE "14400"

/*
 * up --count N: NAME-1 .. NAME-N, each made by cmd_up in a child process
 * (at most `parallel` at once), each labelled io.libasp.asf.group=NAME and
 * with a deadline (--deadline, default 4 hours). All or none: when one
 * fails, every one made is torn down. Each .asp.json is STATE/NAME-i/asp.json.
 */
int cmd_up_many(const asf_up_opts *opts, long count, long parallel)
{
	asf_up_opts o = *opts;
	char (*names)[48] = NULL;
	struct timespec t0, t1;
	long started = 0, running = 0, done = 0, failed = 0, i;
	int status;
	pid_t pid;

	if (!name_valid(opts->name) || strlen(opts->name) + 1 + snprintf(NULL, 0, "%ld", count) > 40) {
		fprintf(stderr, "asf-provision: up: --name %s --count %ld: each name NAME-I must be a valid "
			"sandbox name of at most 40 characters\n", opts->name, count);
		return 2;
	}
	if (opts->out) {
		fprintf(stderr, "asf-provision: up: --out: not with --count (each sandbox's .asp.json is "
			"STATE/NAME-I/asp.json)\n");
		return 2;
	}
	if (!(names = calloc((size_t)count, sizeof(*names)))) {
		fprintf(stderr, "asf-provision: up: out of memory\n");
		return 1;
	}
	o.group = opts->name;
	o.json = 0;
	if (!o.deadline)
		o.deadline = ASF_GROUP_DEADLINE;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	fflush(stdout);
	fflush(stderr);
	while (done < count) {
		if (started < count && running < parallel && !failed) {
			str_fmt(names[started], sizeof(names[started]), "%s-%ld", opts->name, started + 1);
			pid = fork();
			if (pid == 0) {
				int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
				if (fd >= 0)
					dup2(fd, STDOUT_FILENO); /* the summary of each: the group's is printed below */
				o.name = names[started];
				_exit(cmd_up(&o));
			}
			if (pid < 0) {
				fprintf(stderr, "asf-provision: up: fork: %s\n", strerror(errno));
				failed++;
				count = started; /* nothing more starts; wait for what runs */
				continue;
			}
			started++;
			running++;
			continue;
		}
		if (running == 0) /* a failure stopped the starts: nothing left to wait for */
			break;
		pid = wait(&status);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		running--;
		done++;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (failed) {
		/* All or none: what was made goes (started ones only: the others never existed). */
		for (i = 0; i < started; i++)
			if (state_exists(names[i]))
				teardown(names[i], NULL);
		fprintf(stderr, "asf-provision: up --count %ld: %ld failed; the %ld made were removed "
			"(group %s)\n", count, failed, started, opts->name);
		free(names);
		return 1;
	}
	if (opts->json) {
		cJSON *out = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(out, "sandboxes");
		char path[4400];
		cJSON_AddStringToObject(out, "group", opts->name);
		cJSON_AddNumberToObject(out, "deadline_seconds", atof(o.deadline));
		cJSON_AddNumberToObject(out, "seconds", (double)(t1.tv_sec - t0.tv_sec) +
					(double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
		for (i = 0; i < count; i++) {
			cJSON *s = cJSON_CreateObject();
			state_dir(path, sizeof(path) - 10, names[i]);
			strcat(path, "/asp.json");
			cJSON_AddStringToObject(s, "name", names[i]);
			cJSON_AddStringToObject(s, "config", path);
			cJSON_AddItemToArray(arr, s);
		}
		str_fmt(path, sizeof(path), ASF_LABEL_GROUP "=%s", opts->name);
		cJSON_AddStringToObject(out, "selector", path);
		print_json(out);
		cJSON_Delete(out);
	} else {
		char path[4400];
		printf("group %s: %ld sandboxes ready in %.1f s (label " ASF_LABEL_GROUP "=%s, deadline %s s)\n",
		       opts->name, count, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
		       opts->name, o.deadline);
		for (i = 0; i < count; i++) {
			state_dir(path, sizeof(path), names[i]);
			printf("  %-24s %s/asp.json\n", names[i], path);
		}
	}
	free(names);
	return 0;
}
