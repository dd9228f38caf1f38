/*
 * kube.c - the Kubernetes backend: the objects of one sandbox, written as
 * a manifest, applied with `kubectl` (a cluster) or `podman kube play`
 * (this host: the same YAML run by a real consumer of it), and removed.
 *
 * The manifest is a multi-document YAML file whose documents are JSON
 * objects (JSON is YAML): a comment line first, so kubectl reads it as YAML
 * (a stream starting with '{' would be read as JSON, where "---" is an
 * error), then "---" between documents, which podman kube play needs.
 * Objects, in apply order: Secret (sshd_config, host key, authorized_keys),
 * NetworkPolicy (no egress; ingress only to sshd, only with a Service),
 * Service (only with --ingress service), Pod.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "asf.h"

static void add_labels(cJSON *meta, const asf_kube *k)
{
	cJSON *l = cJSON_AddObjectToObject(meta, "labels");

	cJSON_AddStringToObject(l, ASF_LABEL, "1");
	cJSON_AddStringToObject(l, ASF_LABEL_NAME, k->name);
	if (k->group)
		cJSON_AddStringToObject(l, ASF_LABEL_GROUP, k->group);
}

static cJSON *object(const char *api, const char *kind, const asf_kube *k, const char *suffix)
{
	cJSON *o = cJSON_CreateObject(), *meta;
	char name[96];

	str_fmt(name, sizeof(name), ASF_PREFIX "%s%s", k->name, suffix);
	cJSON_AddStringToObject(o, "apiVersion", api);
	cJSON_AddStringToObject(o, "kind", kind);
	meta = cJSON_AddObjectToObject(o, "metadata");
	cJSON_AddStringToObject(meta, "name", name);
	cJSON_AddStringToObject(meta, "namespace", k->namespace_);
	add_labels(meta, k);
	return o;
}

/* data["key"] = base64 of STATE/NAME/sshd/key (k->podman: the text itself). */
static int secret_file(cJSON *data, const asf_kube *k, const char *key, asf_err *e)
{
	char path[4400], *text, *b64;
	size_t len;

	str_fmt(path, sizeof(path), "%s/sshd/%s", k->dir, key);
	if (!(text = read_file(path, ASF_SMALL_MAX, &len, e)))
		return -1;
	if (k->podman) {
		cJSON_AddStringToObject(data, key, text);
		free(text);
		return 0;
	}
	b64 = malloc(4 * ((len + 2) / 3) + 1);
	if (!b64) {
		free(text);
		return asf_fail(e, "out of memory");
	}
	EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)text, (int)len);
	cJSON_AddStringToObject(data, key, b64);
	free(b64);
	free(text);
	return 0;
}

static cJSON *str_array(const char *const *v)
{
	cJSON *a = cJSON_CreateArray();

	for (; *v; v++)
		cJSON_AddItemToArray(a, cJSON_CreateString(*v));
	return a;
}

/*
 * The Pod. Root mode: sshd starts as root with SETUID, SETGID and
 * SYS_CHROOT (to become the session user and chroot its privilege
 * separation child). Unprivileged mode (k->unprivileged): sshd runs as the
 * sandbox user itself (runAsUser), with no capability at all: as non-root
 * OpenSSH serves only its own user, chroots nothing and setuids nothing,
 * and reads its host key through the group (fsGroup) - the pod meets the
 * Pod Security Standard "restricted" (docs/kubernetes.md).
 */
static cJSON *pod(const asf_kube *k)
{
	static const char *const cmd[] = { "/usr/sbin/sshd", "-D", "-e", "-f", ASF_CTR_ETC "/sshd_config", NULL };
	static const char *const caps[] = { "SETGID", "SETUID", "SYS_CHROOT", NULL }; /* ASF_CAPS */
	static const char *const all[] = { "ALL", NULL };
	static const char *const ns[] = { "127.0.0.1", NULL };
	cJSON *p = object("v1", "Pod", k, ""), *spec = cJSON_AddObjectToObject(p, "spec");
	cJSON *ctr, *sc, *cap, *res, *lim, *mounts, *vols, *v, *m, *dns;
	char name[96], buf[64];

	cJSON_AddBoolToObject(spec, "automountServiceAccountToken", 0);
	cJSON_AddBoolToObject(spec, "enableServiceLinks", 0);
	cJSON_AddBoolToObject(spec, "hostNetwork", 0);
	cJSON_AddBoolToObject(spec, "hostPID", 0);
	cJSON_AddBoolToObject(spec, "hostIPC", 0);
	cJSON_AddStringToObject(spec, "restartPolicy", "Never");
	str_fmt(name, sizeof(name), ASF_PREFIX "%s", k->name);
	cJSON_AddStringToObject(spec, "hostname", name);
	/* No resolver: the only nameserver is the pod's own loopback, where nothing listens. */
	cJSON_AddStringToObject(spec, "dnsPolicy", "None");
	dns = cJSON_AddObjectToObject(spec, "dnsConfig");
	cJSON_AddItemToObject(dns, "nameservers", str_array(ns));
	if (k->deadline_s > 0) /* nothing outlives a crashed orchestrator */
		cJSON_AddNumberToObject(spec, "activeDeadlineSeconds", (double)k->deadline_s);
	sc = cJSON_AddObjectToObject(spec, "securityContext");
	if (k->unprivileged) {
		cJSON_AddBoolToObject(sc, "runAsNonRoot", 1);
		cJSON_AddNumberToObject(sc, "runAsUser", k->uid);
		cJSON_AddNumberToObject(sc, "runAsGroup", k->uid);
		cJSON_AddNumberToObject(sc, "fsGroup", k->uid); /* the Secret's files and the volume: the group's */
		cJSON_AddStringToObject(sc, "fsGroupChangePolicy", "OnRootMismatch");
	}
	cJSON_AddStringToObject(cJSON_AddObjectToObject(sc, "seccompProfile"), "type", "RuntimeDefault");

	ctr = cJSON_CreateObject();
	cJSON_AddItemToArray(cJSON_AddArrayToObject(spec, "containers"), ctr);
	cJSON_AddStringToObject(ctr, "name", "sshd");
	cJSON_AddStringToObject(ctr, "image", k->image);
	cJSON_AddStringToObject(ctr, "imagePullPolicy", "IfNotPresent");
	if (k->podman && k->deadline_s > 0) {
		/* podman kube play ignores activeDeadlineSeconds: timeout(1) in the image is the pod's init. */
		cJSON *a = cJSON_CreateArray();
		const char *const *c;
		char secs[32];
		str_fmt(secs, sizeof(secs), "%ld", k->deadline_s);
		cJSON_AddItemToArray(a, cJSON_CreateString("/usr/bin/timeout"));
		cJSON_AddItemToArray(a, cJSON_CreateString("--signal=KILL"));
		cJSON_AddItemToArray(a, cJSON_CreateString(secs));
		for (c = cmd; *c; c++)
			cJSON_AddItemToArray(a, cJSON_CreateString(*c));
		cJSON_AddItemToObject(ctr, "command", a);
	} else {
		cJSON_AddItemToObject(ctr, "command", str_array(cmd));
	}
	if (k->service) {
		cJSON *port = cJSON_CreateObject();
		cJSON_AddStringToObject(port, "name", "ssh");
		cJSON_AddNumberToObject(port, "containerPort", ASF_SSHD_PORT);
		cJSON_AddStringToObject(port, "protocol", "TCP");
		cJSON_AddItemToArray(cJSON_AddArrayToObject(ctr, "ports"), port);
	}
	/* Root mode: sshd runs as root (it must setuid to the session user); the session does not. */
	sc = cJSON_AddObjectToObject(ctr, "securityContext");
	cJSON_AddBoolToObject(sc, "privileged", 0);
	cJSON_AddBoolToObject(sc, "allowPrivilegeEscalation", 0);
	cJSON_AddBoolToObject(sc, "readOnlyRootFilesystem", 1);
	if (k->unprivileged) {
		cJSON_AddBoolToObject(sc, "runAsNonRoot", 1);
		cJSON_AddNumberToObject(sc, "runAsUser", k->uid);
		cJSON_AddNumberToObject(sc, "runAsGroup", k->uid);
	}
	cap = cJSON_AddObjectToObject(sc, "capabilities");
	cJSON_AddItemToObject(cap, "drop", str_array(all));
	if (!k->unprivileged)
		cJSON_AddItemToObject(cap, "add", str_array(caps));
	cJSON_AddStringToObject(cJSON_AddObjectToObject(sc, "seccompProfile"), "type", "RuntimeDefault");
	res = cJSON_AddObjectToObject(ctr, "resources");
	lim = cJSON_AddObjectToObject(res, "limits");
	str_fmt(buf, sizeof(buf), "%gm", k->cpus * 1000); /* millicores: "1000m", "500m" */
	cJSON_AddStringToObject(lim, "cpu", buf);
	str_fmt(buf, sizeof(buf), "%llu", k->mem_bytes);
	cJSON_AddStringToObject(lim, "memory", buf);
	cJSON_AddItemToObject(res, "requests", cJSON_Duplicate(lim, 1));

	/*
	 * No volume on /run or /run/sshd: Kubernetes makes emptyDir 0777, which
	 * sshd refuses as its privilege-separation directory; the image's
	 * read-only /run/sshd serves (sshd writes nothing there, PidFile none).
	 */
	mounts = cJSON_AddArrayToObject(ctr, "volumeMounts");
	vols = cJSON_AddArrayToObject(spec, "volumes");
	str_fmt(name, sizeof(name), ASF_PREFIX "%s", k->name);
	m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "name", name);
	cJSON_AddStringToObject(m, "mountPath", ASF_CTR_ETC);
	cJSON_AddBoolToObject(m, "readOnly", 1);
	cJSON_AddItemToArray(mounts, m);
	v = cJSON_CreateObject();
	cJSON_AddStringToObject(v, "name", name);
	{
		cJSON *s = cJSON_AddObjectToObject(v, k->podman ? "configMap" : "secret");
		cJSON_AddStringToObject(s, k->podman ? "name" : "secretName", name);
		/* root only (unprivileged: root and the fsGroup, i.e. sshd): the host key */
		cJSON_AddNumberToObject(s, "defaultMode", k->unprivileged ? 0440 : 0400);
		cJSON_AddBoolToObject(s, "optional", 0);
	}
	cJSON_AddItemToArray(vols, v);

	str_fmt(name, sizeof(name), ASF_PREFIX "%s-tmp", k->name);
	m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "name", name);
	cJSON_AddStringToObject(m, "mountPath", "/tmp");
	cJSON_AddItemToArray(mounts, m);
	v = cJSON_CreateObject();
	cJSON_AddStringToObject(v, "name", name);
	{
		cJSON *d = cJSON_AddObjectToObject(v, "emptyDir");
		cJSON_AddStringToObject(d, "medium", "Memory");
		cJSON_AddStringToObject(d, "sizeLimit", "256Mi");
	}
	cJSON_AddItemToArray(vols, v);

	str_fmt(name, sizeof(name), ASF_PREFIX "%s-workspace", k->name);
	m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "name", name);
	cJSON_AddStringToObject(m, "mountPath", ASF_CTR_WORKSPACE);
	cJSON_AddBoolToObject(m, "readOnly", k->ws_ro);
	cJSON_AddItemToArray(mounts, m);
	v = cJSON_CreateObject();
	cJSON_AddStringToObject(v, "name", name);
	if (k->ws_kind == ASF_WS_EMPTYDIR) {
		cJSON_AddObjectToObject(v, "emptyDir"); /* the pod's own, gone with it */
	} else if (k->ws_kind == ASF_WS_PVC) {
		cJSON *c = cJSON_AddObjectToObject(v, "persistentVolumeClaim");
		cJSON_AddStringToObject(c, "claimName", k->claim);
		cJSON_AddBoolToObject(c, "readOnly", k->ws_ro);
	} else {
		cJSON *h = cJSON_AddObjectToObject(v, "hostPath");
		cJSON_AddStringToObject(h, "path", k->workspace);
		cJSON_AddStringToObject(h, "type", "Directory");
	}
	cJSON_AddItemToArray(vols, v);
	return p;
}

static cJSON *network_policy(const asf_kube *k)
{
	static const char *const types[] = { "Ingress", "Egress", NULL };
	cJSON *np = object("networking.k8s.io/v1", "NetworkPolicy", k, "");
	cJSON *spec = cJSON_AddObjectToObject(np, "spec"), *sel, *ingress;

	sel = cJSON_AddObjectToObject(cJSON_AddObjectToObject(spec, "podSelector"), "matchLabels");
	cJSON_AddStringToObject(sel, ASF_LABEL_NAME, k->name);
	cJSON_AddItemToObject(spec, "policyTypes", str_array(types));
	cJSON_AddArrayToObject(spec, "egress"); /* empty: nothing goes out, DNS included */
	ingress = cJSON_AddArrayToObject(spec, "ingress");
	if (k->service) {
		/* sshd only, and only from pods labelled as this sandbox's client. */
		cJSON *rule = cJSON_CreateObject(), *from = cJSON_CreateObject(), *port = cJSON_CreateObject();
		sel = cJSON_AddObjectToObject(cJSON_AddObjectToObject(from, "podSelector"), "matchLabels");
		cJSON_AddStringToObject(sel, ASF_LABEL_CLIENT, k->name);
		cJSON_AddItemToArray(cJSON_AddArrayToObject(rule, "from"), from);
		cJSON_AddStringToObject(port, "protocol", "TCP");
		cJSON_AddNumberToObject(port, "port", ASF_SSHD_PORT);
		cJSON_AddItemToArray(cJSON_AddArrayToObject(rule, "ports"), port);
		cJSON_AddItemToArray(ingress, rule);
	}
	return np;
}

static cJSON *service(const asf_kube *k)
{
	cJSON *s = object("v1", "Service", k, ""), *spec = cJSON_AddObjectToObject(s, "spec"), *port;

	cJSON_AddStringToObject(spec, "type", "ClusterIP");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(spec, "selector"), ASF_LABEL_NAME, k->name);
	port = cJSON_CreateObject();
	cJSON_AddStringToObject(port, "name", "ssh");
	cJSON_AddStringToObject(port, "protocol", "TCP");
	cJSON_AddNumberToObject(port, "port", 22);
	cJSON_AddNumberToObject(port, "targetPort", ASF_SSHD_PORT);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(spec, "ports"), port);
	return s;
}

cJSON *kube_objects(const asf_kube *k, asf_err *e)
{
	cJSON *objs = cJSON_CreateArray(), *sec = object("v1", k->podman ? "ConfigMap" : "Secret", k, "");
	cJSON *data;

	if (!k->podman)
		cJSON_AddStringToObject(sec, "type", "Opaque");
	data = cJSON_AddObjectToObject(sec, "data");
	if (secret_file(data, k, "sshd_config", e) || secret_file(data, k, "ssh_host_ed25519_key", e) ||
	    secret_file(data, k, "authorized_keys", e)) {
		cJSON_Delete(sec);
		cJSON_Delete(objs);
		return NULL;
	}
	cJSON_AddItemToArray(objs, sec);
	cJSON_AddItemToArray(objs, network_policy(k));
	if (k->service)
		cJSON_AddItemToArray(objs, service(k));
	cJSON_AddItemToArray(objs, pod(k));
	return objs;
}

int kube_write(const char *path, const char *name, const cJSON *objs, asf_err *e)
{
	size_t len = 0, cap = 4096;
	char *text = malloc(cap), *doc;
	const cJSON *o;
	int rc;

	if (!text)
		return asf_fail(e, "out of memory");
	len = (size_t)snprintf(text, cap, "# Kubernetes objects of sandbox %s, written by asf-provision "
				      "(JSON documents; the host key is in the Secret: keep this file "
				      "private)\n", name);
	cJSON_ArrayForEach(o, objs) {
		size_t n;
		if (!(doc = cJSON_PrintUnformatted(o))) {
			free(text);
			return asf_fail(e, "out of memory");
		}
		n = strlen(doc);
		if (len + n + 8 > cap) {
			char *t;
			while (len + n + 8 > cap)
				cap *= 2;
			if (!(t = realloc(text, cap))) {
				cJSON_free(doc);
				free(text);
				return asf_fail(e, "out of memory");
			}
			text = t;
		}
		len += (size_t)sprintf(text + len, "---\n%s\n", doc);
		cJSON_free(doc);
	}
	rc = write_file(path, text, len, 0600, NULL, e);
	free(text);
	return rc;
}

/* ------------------------------------------------------------ apply */

static int run_ok(asf_argv *a, int timeout_s, asf_err *e)
{
	asf_out o;

	if (a->oom)
		return asf_fail(e, "out of memory");
	if (asf_run(&o, a->v, timeout_s, e))
		return -1;
	if (o.status != 0) {
		char *t = argv_text(a->v);
		size_t n = strlen(o.err);
		while (n && o.err[n - 1] == '\n')
			o.err[--n] = '\0';
		asf_fail(e, "%s failed (exit %d): %s", t ? t : a->v[0], o.status, *o.err ? o.err : o.out);
		free(t);
		out_free(&o);
		return -1;
	}
	out_free(&o);
	return 0;
}

/*
 * podman kube play: Kubernetes has no per-pod pids limit nor ulimits
 * (kubelet and the runtime set them); here a containers.conf of the
 * sandbox's own (CONTAINERS_CONF) gives the pod the same limits as the
 * container backend, and the runtime.
 */
static int podman_conf(const asf_kube *k, const char *runtime, long nofile, long nproc, char *path,
		       size_t pathlen, asf_err *e)
{
	char text[1024];

	str_fmt(path, pathlen, "%s/containers.conf", k->dir);
	str_fmt(text, sizeof(text),
		"# podman kube play settings of sandbox %s, written by asf-provision\n"
		"[containers]\n"
		"default_ulimits = [\"nofile=%ld:%ld\", \"nproc=%ld:%ld\", \"core=0:0\"]\n"
		"pids_limit = %ld\n"
		"%s%s%s", k->name, nofile, nofile, nproc, nproc, k->pids,
		runtime ? "[engine]\nruntime = \"" : "", runtime ? runtime : "", runtime ? "\"\n" : "");
	return write_file(path, text, strlen(text), 0644, NULL, e);
}

/*
 * podman kube play applies no pids limit (containers.conf's pids_limit is
 * not used for kube pods, and 4.3 has no `podman update --pids-limit`): it
 * is written into the cgroup (v1 pids controller, else v2) of the pod
 * before sshd starts - the limit that holds, hierarchically - and of the
 * sshd container once it runs, where the sandbox itself reads it.
 */
static int set_pids(const char *what, const char *fmt, const char *obj, long pids, asf_err *e)
{
	char cg[1024], path[1200], val[32];
	const char *roots[] = { "/sys/fs/cgroup/pids", "/sys/fs/cgroup" };
	asf_out o;
	size_t i;

	if (podman(&o, e, what, "inspect", "--format", fmt, obj, (char *)NULL))
		return -1;
	str_fmt(cg, sizeof(cg), "%.*s", (int)strcspn(o.out, "\n"), o.out);
	out_free(&o);
	if (cg[0] != '/' || strstr(cg, ".."))
		return asf_fail(e, "%s %s: unexpected cgroup path \"%s\"", what, obj, cg);
	str_fmt(val, sizeof(val), "%ld\n", pids);
	for (i = 0; i < 2; i++) {
		str_fmt(path, sizeof(path), "%s%s/pids.max", roots[i], cg);
		if (access(path, W_OK) == 0) {
			FILE *f = fopen(path, "w");
			int bad = !f || fputs(val, f) < 0;
			if (f && fclose(f))
				bad = 1;
			if (bad)
				return asf_fail(e, "write %s: %s", path, strerror(errno));
			return 0;
		}
	}
	return asf_fail(e, "%s %s: no pids.max for cgroup %s", what, obj, cg);
}

/* The netns of the pod (its infra container): created, not yet running sshd. */
static long pod_infra_pid(const char *pod, asf_err *e)
{
	asf_out o;
	char infra[128];
	long pid;

	if (podman(&o, e, "pod", "inspect", "--format", "{{.InfraContainerID}}", pod, (char *)NULL))
		return -1;
	str_fmt(infra, sizeof(infra), "%.*s", (int)strcspn(o.out, "\n"), o.out);
	out_free(&o);
	if (!infra[0])
		return asf_fail(e, "pod %s has no infra container", pod);
	if (podman(&o, e, "start", infra, (char *)NULL))
		return -1;
	out_free(&o);
	if (podman(&o, e, "inspect", "--type", "container", "--format", "{{.State.Pid}}", infra, (char *)NULL))
		return -1;
	pid = strtol(o.out, NULL, 10);
	out_free(&o);
	return pid > 0 ? pid : asf_fail(e, "infra container of pod %s has no process", pod);
}

/*
 * podman 4.3 writes a Secret volume's data into the files without
 * base64-decoding it (and refuses data that is not base64), and ignores
 * defaultMode. So it gets its own copy of the manifest, in which the Secret
 * is a ConfigMap of the same name holding the same files as text; after
 * `kube play --start=false` the host key is made 0400 on the volume, and
 * what podman wrote is compared with the state directory's files.
 */
int kube_podman_manifest(const asf_kube *k, char *path, size_t pathlen, asf_err *e)
{
	asf_kube raw = *k;
	cJSON *objs;
	int rc;

	raw.podman = 1;
	str_fmt(path, pathlen, "%s/podman-kube.yaml", k->dir);
	if (!(objs = kube_objects(&raw, e)))
		return -1;
	rc = kube_write(path, k->name, objs, e);
	cJSON_Delete(objs);
	return rc;
}

static int secret_as_written(const asf_kube *k, const char *volume, asf_err *e)
{
	static const char *const files[] = { "sshd_config", "ssh_host_ed25519_key", "authorized_keys" };
	char dir[4096], mine[4400], theirs[4400], *a, *b;
	asf_out o;
	size_t i;
	int same;

	if (podman(&o, e, "volume", "inspect", "--format", "{{.Mountpoint}}", volume, (char *)NULL))
		return -1;
	str_fmt(dir, sizeof(dir), "%.*s", (int)strcspn(o.out, "\n"), o.out);
	out_free(&o);
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		str_fmt(theirs, sizeof(theirs), "%s/%s", dir, files[i]);
		str_fmt(mine, sizeof(mine), "%s/sshd/%s", k->dir, files[i]);
		if (!(a = read_file(theirs, ASF_SMALL_MAX, NULL, e)))
			return -1;
		b = read_file(mine, ASF_SMALL_MAX, NULL, e);
		same = b && !strcmp(a, b);
		free(a);
		free(b);
		if (!same)
			return asf_fail(e, "podman kube play wrote %s, which differs from %s", theirs, mine);
	}
	/* defaultMode 0400, which podman ignores; root owns the file already. Unprivileged:
	 * 0440 and the group fsGroup, which podman ignores too - what a kubelet does. */
	str_fmt(theirs, sizeof(theirs), "%s/ssh_host_ed25519_key", dir);
	if (k->unprivileged && chown(theirs, 0, k->uid))
		return asf_fail(e, "chown 0:%u %s: %s", k->uid, theirs, strerror(errno));
	if (chmod(theirs, k->unprivileged ? 0440 : 0400))
		return asf_fail(e, "chmod %s: %s", theirs, strerror(errno));
	return 0;
}

/*
 * Unprivileged with an emptyDir workspace: podman makes the volume root's
 * 0755 and ignores fsGroup; a kubelet gives an emptyDir mode 0777 (and the
 * fsGroup). Here the volume's directory is handed to the sandbox user.
 */
static int workspace_volume_owned(const asf_kube *k, asf_err *e)
{
	char vol[96], dir[4096];
	asf_out o;

	str_fmt(vol, sizeof(vol), ASF_PREFIX "%s-workspace", k->name);
	if (podman(&o, e, "volume", "inspect", "--format", "{{.Mountpoint}}", vol, (char *)NULL))
		return -1;
	str_fmt(dir, sizeof(dir), "%.*s", (int)strcspn(o.out, "\n"), o.out);
	out_free(&o);
	if (dir[0] != '/')
		return asf_fail(e, "volume %s: unexpected mountpoint \"%s\"", vol, dir);
	return chown_dir(dir, k->uid, k->uid, NULL, e);
}

int kube_apply(const asf_kube *k, const char *manifest, const char *runtime, long nofile, long nproc,
	       cJSON *st, asf_err *e)
{
	asf_argv a = { 0 };
	char conf[4400], pod[96], pm[4400];
	int rc;

	str_fmt(pod, sizeof(pod), ASF_PREFIX "%s", k->name);
	if (!strcmp(asf_engine, "kubectl")) {
		argv_add(&a, asf_podman);
		argv_add(&a, "apply");
		argv_add(&a, "-f");
		argv_add(&a, manifest);
		cJSON_AddBoolToObject(st, "applied", 1); /* before: a half-applied manifest is deleted too */
		if (state_save(k->name, st, e) || run_ok(&a, 120, e)) {
			argv_free(&a);
			return -1;
		}
		argv_free(&a);
		argv_add(&a, asf_podman);
		argv_add(&a, "wait");
		argv_add(&a, "--namespace");
		argv_add(&a, k->namespace_);
		argv_add(&a, "--for=condition=Ready");
		argv_addf(&a, "pod/%s", pod);
		argv_add(&a, "--timeout=180s");
		rc = run_ok(&a, 200, e);
		argv_free(&a);
		return rc;
	}
	/* podman kube play, with no network at all: NetworkPolicy is not
	 * enforced by podman, so the pod gets none (exec ingress only). */
	if (podman_conf(k, runtime, nofile, nproc, conf, sizeof(conf), e) ||
	    kube_podman_manifest(k, pm, sizeof(pm), e))
		return -1;
	argv_add(&a, "env");
	argv_addf(&a, "CONTAINERS_CONF=%s", conf);
	argv_add(&a, asf_podman);
	argv_add(&a, "kube");
	argv_add(&a, "play");
	argv_add(&a, "--network=none");
	argv_add(&a, "--start=false");
	argv_add(&a, pm);
	cJSON_AddBoolToObject(st, "applied", 1);
	rc = state_save(k->name, st, e) || run_ok(&a, 300, e) || secret_as_written(k, pod, e) ||
	     (k->ws_kind == ASF_WS_EMPTYDIR && workspace_volume_owned(k, e)) ? -1 : 0;
	argv_free(&a);
	if (rc)
		return -1;
	{
		/* The egress table in the pod's netns before sshd starts, as up does for a container. */
		char nft[4400], spid[32];
		long pid = pod_infra_pid(pod, e);
		if (pid < 0)
			return -1;
		str_fmt(nft, sizeof(nft), "%s/egress.nft", k->dir);
		str_fmt(spid, sizeof(spid), "--target=%ld", pid);
		argv_add(&a, "nsenter");
		argv_add(&a, spid);
		argv_add(&a, "--net");
		argv_add(&a, "nft");
		argv_add(&a, "-f");
		argv_add(&a, nft);
		rc = run_ok(&a, 30, e);
		argv_free(&a);
		if (rc)
			return -1;
		cJSON_AddStringToObject(st, "firewall", "inet " ASF_NFT_TABLE);
	}
	if (set_pids("pod", "{{.CgroupPath}}", pod, k->pids, e))
		return -1;
	cJSON_AddBoolToObject(st, "pids_limit_by_cgroup", 1);
	argv_add(&a, asf_podman);
	argv_add(&a, "pod");
	argv_add(&a, "start");
	argv_add(&a, pod);
	rc = run_ok(&a, 120, e);
	argv_free(&a);
	if (rc)
		return -1;
	str_fmt(pod, sizeof(pod), ASF_PREFIX "%s-sshd", k->name);
	return set_pids("container", "{{.State.CgroupPath}}", pod, k->pids, e);
}

void kube_proxy_argv(asf_argv *a, const cJSON *st)
{
	const char *name = js(st, "name");

	argv_add(a, js(st, "podman"));
	argv_add(a, "exec");
	argv_add(a, "-i");
	if (!strcmp(js(st, "engine"), "kubectl")) {
		argv_add(a, "--namespace");
		argv_add(a, js(st, "namespace"));
		argv_addf(a, ASF_PREFIX "%s", name);
		argv_add(a, "--container=sshd");
		argv_add(a, "--");
	} else {
		argv_add(a, js(st, "container"));
	}
	argv_add(a, "/usr/sbin/sshd");
	argv_add(a, "-i");
	argv_add(a, "-f");
	argv_add(a, ASF_CTR_ETC "/sshd_config");
}

/* ------------------------------------------------------------ teardown */

/* One object: removed, absent or failed. */
static int remove_one(cJSON *report, const char *object, const char *name, asf_argv *exists, asf_argv *rm)
{
	asf_err e = { "" };
	asf_out o;
	int there;

	if (exists->oom || rm->oom) {
		asf_note(report, object, name, "failed", "out of memory");
		return 1;
	}
	if (asf_run(&o, exists->v, 60, &e)) {
		asf_note(report, object, name, "failed", e.msg);
		return 1;
	}
	there = o.status == 0;
	out_free(&o);
	if (!there) {
		asf_note(report, object, name, "absent", NULL);
		return 0;
	}
	if (run_ok(rm, 120, &e)) {
		asf_note(report, object, name, "failed", e.msg);
		return 1;
	}
	if (asf_run(&o, exists->v, 60, &e) == 0) {
		there = o.status == 0;
		out_free(&o);
		if (there) {
			asf_note(report, object, name, "failed", "still present after removal");
			return 1;
		}
	}
	asf_note(report, object, name, "removed", NULL);
	return 0;
}

static int podman_object(cJSON *report, const char *kind, const char *name)
{
	asf_argv x = { 0 }, r = { 0 };
	int failed;

	argv_add(&x, asf_podman);
	argv_add(&x, kind);
	argv_add(&x, !strcmp(kind, "secret") || !strcmp(kind, "volume") ? "inspect" : "exists");
	argv_add(&x, name);
	argv_add(&r, asf_podman);
	argv_add(&r, kind);
	argv_add(&r, "rm");
	if (strcmp(kind, "secret"))
		argv_add(&r, "--force");
	argv_add(&r, name);
	failed = remove_one(report, kind, name, &x, &r);
	argv_free(&x);
	argv_free(&r);
	return failed;
}

/*
 * What the manifest made, by name (and on a cluster by label too). The
 * pod only when it carries our label: a pod of the same name that is
 * someone else's is left alone.
 */
int kube_teardown(const char *name, const cJSON *st, cJSON *report)
{
	char obj[96], sel[160];
	asf_err e = { "" };
	asf_out o;
	int failed = 0;

	if (engine_set(js(st, "engine") ? js(st, "engine") : "kubectl", &e) || podman_ready(&e)) {
		asf_note(report, asf_engine, asf_engine, "failed", e.msg);
		return 1;
	}
	str_fmt(obj, sizeof(obj), ASF_PREFIX "%s", name);
	str_fmt(sel, sizeof(sel), ASF_LABEL_NAME "=%s", name);
	if (!strcmp(asf_engine, "kubectl")) {
		asf_argv x = { 0 }, r = { 0 };
		const char *ns = js(st, "namespace") ? js(st, "namespace") : "default";
		if (!jb(st, "applied")) {
			asf_note(report, "kubernetes", obj, "absent", "never applied");
			return 0;
		}
		argv_add(&x, asf_podman);
		argv_add(&x, "get");
		argv_add(&x, "pod,secret,networkpolicy,service");
		argv_add(&x, "--namespace");
		argv_add(&x, ns);
		argv_add(&x, "--selector");
		argv_add(&x, sel);
		argv_add(&x, "--output=name");
		argv_add(&r, asf_podman);
		argv_add(&r, "delete");
		argv_add(&r, "pod,secret,networkpolicy,service");
		argv_add(&r, "--namespace");
		argv_add(&r, ns);
		argv_add(&r, "--selector");
		argv_add(&r, sel);
		argv_add(&r, "--wait=true");
		argv_add(&r, "--timeout=120s");
		failed = run_ok(&r, 150, &e);
		asf_note(report, "kubernetes", sel, failed ? "failed" : "removed", failed ? e.msg : NULL);
		/* Re-scan: anything still labelled is a failure. */
		if (!failed && asf_run(&o, x.v, 60, &e) == 0) {
			if (o.status != 0 || o.out[0]) {
				asf_note(report, "kubernetes", sel, "failed", o.status ? o.err : o.out);
				failed = 1;
			}
			out_free(&o);
		}
		argv_free(&x);
		argv_free(&r);
		return failed;
	}
	/* podman kube play: the pod (its containers with it), the secret, the volumes. */
	{
		char filter[160];
		int labelled;
		str_fmt(filter, sizeof(filter), "label=%s", sel);
		if (podman(&o, &e, "pod", "ps", "--filter", filter, "--format", "{{.Name}}", (char *)NULL)) {
			asf_note(report, "pod", obj, "failed", e.msg);
			return 1;
		}
		labelled = strstr(o.out, obj) != NULL;
		out_free(&o);
		if (labelled) {
			failed += podman_object(report, "pod", obj);
		} else if (podman(&o, &e, "pod", "exists", obj, (char *)NULL) == 0) {
			out_free(&o);
			asf_note(report, "pod", obj, "failed", "exists without our label: left alone");
			failed++;
		} else {
			asf_note(report, "pod", obj, "absent", NULL);
		}
	}
	failed += podman_object(report, "volume", obj);  /* the ConfigMap's files */
	str_fmt(obj, sizeof(obj), ASF_PREFIX "%s-tmp", name);
	failed += podman_object(report, "volume", obj);  /* the emptyDir */
	if (js(st, "workspace_volume") && strcmp(js(st, "workspace_volume"), "hostpath")) {
		str_fmt(obj, sizeof(obj), ASF_PREFIX "%s-workspace", name);
		failed += podman_object(report, "volume", obj);  /* an emptyDir workspace */
	}
	return failed;
}
