/*
 * manage.c - `down`, `status` and `list`.
 *
 * `down` is owned teardown: it removes what carries the sandbox's label
 * (io.libasp.asf.name=NAME) or is named in its state, never anything else,
 * reports every object as removed, absent or failed, re-scans by label
 * afterwards, and can be run again at any time (it is idempotent).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asf.h"

static int contains(char **v, size_t n, const char *s)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(v[i], s))
			return 1;
	return 0;
}

/* Remove the labelled objects of one kind, plus `expected` (from the state) if it is ours. */
static int remove_kind(const char *kind, const char *name, const char *expected, cJSON *report)
{
	char **v = NULL;
	size_t n = 0, i;
	asf_err e = { "" };
	asf_out o;
	int failed = 0;

	if (podman_labelled(&v, &n, kind, name, &e)) {
		asf_note(report, kind, expected ? expected : name, "failed", e.msg);
		return 1;
	}
	if (expected && !contains(v, n, expected)) {
		/* Named in the state but not labelled: absent, or someone else's. */
		if (strcmp(kind, "volume") && engine_exists(kind, expected)) {
			asf_note(report, kind, expected, "failed", "exists without our label: left alone");
			failed++;
		} else {
			asf_note(report, kind, expected, "absent", NULL);
		}
	}
	for (i = 0; i < n; i++) {
		int rc;
		if (!strcmp(kind, "container"))
			/* --volumes: the anonymous volumes docker makes for an image's VOLUMEs. */
			rc = engine_docker() ? podman(&o, &e, "rm", "--force", "--volumes", v[i], (char *)NULL) :
			     podman(&o, &e, "rm", "--force", "--volumes", "--time", "5", v[i], (char *)NULL);
		else if (!strcmp(kind, "network"))
			rc = podman(&o, &e, "network", "rm", v[i], (char *)NULL);
		else
			rc = podman(&o, &e, "volume", "rm", "--force", v[i], (char *)NULL);
		if (rc) {
			asf_note(report, kind, v[i], "failed", e.msg);
			failed++;
		} else {
			out_free(&o);
			asf_note(report, kind, v[i], "removed", NULL);
		}
	}
	strv_free(v, n);
	return failed;
}

/*
 * The setuid and setgid bits of the regular files in the workspace, cleared
 * and reported once the sandbox is gone: a copy of a shell the agent marked
 * setuid would otherwise hand its owner's uid to anyone on the host who can
 * reach it, long after `down`. Walked from the workspace with openat, never
 * following a link, never leaving its filesystem; each file is changed
 * through the descriptor that was checked.
 */
#define SETID_NOTES 200
#define SETID_DEPTH 256

typedef struct setid_walk {
	cJSON *report;
	dev_t dev;
	int rootless;
	unsigned int found, failed;
} setid_walk;

static void setid_note(setid_walk *w, const char *path, mode_t mode, uid_t uid, const char *result, const char *why)
{
	char detail[512];

	if (++w->found > SETID_NOTES)
		return;
	str_fmt(detail, sizeof(detail), "mode %04o -> %04o, owner uid %d%s%s", (unsigned int)(mode & 07777),
		(unsigned int)(mode & 01777), (int)uid, why ? ": " : "", why ? why : "");
	asf_note(w->report, (mode & 06000) == 06000 ? "setuid+setgid" : (mode & 04000) ? "setuid file" : "setgid file",
		 path, result, detail);
}

static void setid_clear(setid_walk *w, int dfd, const char *name, const char *path, const struct stat *sb)
{
	struct stat now;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd >= 0 && (fstat(fd, &now) || now.st_ino != sb->st_ino || now.st_dev != sb->st_dev ||
			!S_ISREG(now.st_mode))) {
		close(fd);
		setid_note(w, path, sb->st_mode, sb->st_uid, "failed", "changed while looked at: left alone");
		w->failed++;
		return;
	}
	if (fd >= 0 && fchmod(fd, now.st_mode & 01777) == 0) {
		close(fd);
		setid_note(w, path, sb->st_mode, sb->st_uid, "cleared", NULL);
		return;
	}
	if (fd >= 0)
		close(fd);
	if (w->rootless) {
		/* A subordinate uid's file: changed as the namespace's root (the agent is gone). */
		asf_err e;
		asf_out o;
		if (podman(&o, &e, "unshare", "chmod", "ug-s", "--", path, (char *)NULL) == 0) {
			out_free(&o);
			setid_note(w, path, sb->st_mode, sb->st_uid, "cleared", NULL);
			return;
		}
	}
	setid_note(w, path, sb->st_mode, sb->st_uid, "failed", strerror(errno));
	w->failed++;
}

static void setid_dir(setid_walk *w, int dfd, const char *path, int depth)
{
	int fd = dup(dfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		if (fd >= 0)
			close(fd);
		asf_note(w->report, "workspace", path, "failed", "cannot read the directory for setuid files");
		w->failed++;
		return;
	}
	while ((de = readdir(d))) {
		char child[PATH_MAX];
		struct stat sb;
		int cfd;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) || sb.st_dev != w->dev)
			continue;
		if (str_fmt(child, sizeof(child), "%s/%s", path, de->d_name) < 0)
			str_fmt(child, sizeof(child), ".../%s", de->d_name);
		if (S_ISREG(sb.st_mode) && (sb.st_mode & 06000)) {
			setid_clear(w, dfd, de->d_name, child, &sb);
		} else if (S_ISDIR(sb.st_mode)) {
			if (depth >= SETID_DEPTH) {
				asf_note(w->report, "workspace", child, "failed", "too deep to scan for setuid files");
				w->failed++;
				continue;
			}
			cfd = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (cfd < 0) {
				asf_note(w->report, "workspace", child, "failed", strerror(errno));
				w->failed++;
				continue;
			}
			setid_dir(w, cfd, child, depth + 1);
			close(cfd);
		}
	}
	closedir(d);
}

/* Returns the number of failures. */
static int clear_setid(const cJSON *st, cJSON *report)
{
	const cJSON *ws = cJSON_GetObjectItemCaseSensitive(st, "workspace");
	const char *host = js(ws, "host");
	setid_walk w = { report, 0, jb(st, "rootless"), 0, 0 };
	struct stat sb;
	int fd;

	if (!host || jb(ws, "read_only"))
		return 0;
	fd = open(host, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb)) {
		if (fd >= 0)
			close(fd);
		return 0; /* gone: nothing of the agent's is left to clear */
	}
	w.dev = sb.st_dev;
	setid_dir(&w, fd, host, 0);
	close(fd);
	if (w.found > SETID_NOTES) {
		char more[64];
		str_fmt(more, sizeof(more), "%u more setuid/setgid files (not listed)", w.found - SETID_NOTES);
		asf_note(report, "workspace", host, w.failed ? "failed" : "cleared", more);
	}
	return w.failed ? 1 : 0;
}

/* Give the workspace directory back to the owner it had before `up`. */
static int restore_workspace(const cJSON *st, cJSON *report)
{
	const cJSON *ws = cJSON_GetObjectItemCaseSensitive(st, "workspace");
	const char *host = js(ws, "host");
	struct stat sb;
	uid_t uid = (uid_t)jn(st, "uid", 0);

	asf_err e;

	if (!host || !jb(ws, "chowned"))
		return 0;
	if (chown_dir(host, (uid_t)-1, (gid_t)-1, &sb, &e)) {
		asf_note(report, "workspace-owner", host, "absent", e.msg);
		return 0;
	}
	if (js(ws, "chowned_via"))
		uid = (uid_t)jn(ws, "host_uid", -1); /* rootless: the sandbox user's uid as the host sees it */
	if (sb.st_uid != uid) {
		asf_note(report, "workspace-owner", host, "absent", "owner changed since up: left alone");
		return 0;
	}
	if (js(ws, "chowned_via")) {
		/* Rootless: back to the user namespace's root, which is the caller on the host. */
		asf_out o;
		if (podman(&o, &e, "unshare", "chown", "-h", "0:0", host, (char *)NULL)) {
			asf_note(report, "workspace-owner", host, "failed", e.msg);
			return 1;
		}
		out_free(&o);
	} else if (chown_dir(host, (uid_t)jn(ws, "orig_uid", 0), (gid_t)jn(ws, "orig_gid", 0), NULL, &e)) {
		asf_note(report, "workspace-owner", host, "failed", e.msg);
		return 1;
	}
	asf_note(report, "workspace-owner", host, "restored", "original owner given back");
	return 0;
}

/* Remove the .asp.json `up` wrote, if it is still the one it wrote. */
static int remove_config(const char *name, const cJSON *st, cJSON *report)
{
	const char *out = js(st, "out");
	char copy[4400], *a, *b;
	asf_err e = { "" };
	struct stat sb;
	int same;

	state_dir(copy, sizeof(copy), name);
	strncat(copy, "/asp.json", sizeof(copy) - strlen(copy) - 1);
	if (!out || !strcmp(out, copy))
		return 0;
	if (lstat(out, &sb) && errno == ENOENT) {
		asf_note(report, "config", out, "absent", NULL);
		return 0;
	}
	/* Not followed, not blocked on, bounded: whatever is there now is only compared. */
	if (!(a = read_file(out, ASF_CONFIG_MAX, NULL, &e))) {
		char why[sizeof(e.msg) + 32];
		str_fmt(why, sizeof(why), "%s; left alone", e.msg);
		asf_note(report, "config", out, "absent", why);
		return 0;
	}
	b = read_file(copy, ASF_CONFIG_MAX, NULL, NULL);
	same = b && !strcmp(a, b);
	free(a);
	free(b);
	if (!same) {
		asf_note(report, "config", out, "absent", "changed since up: left alone");
		return 0;
	}
	if (unlink(out)) {
		asf_note(report, "config", out, "failed", strerror(errno));
		return 1;
	}
	asf_note(report, "config", out, "removed", NULL);
	return 0;
}

int teardown(const char *name, cJSON *report)
{
	const char *kinds[] = { "container", "network", "volume" };
	char derived[64], dir[4200];
	asf_err e = { "" };
	cJSON *st;
	int failed = 0;
	size_t i;

	str_fmt(derived, sizeof(derived), ASF_PREFIX "%s", name);
	st = state_load(name, &e);
	if (st && js(st, "backend") && !strcmp(js(st, "backend"), "kubernetes")) {
		failed += kube_teardown(name, st, report);
		goto common;
	}
	if (podman_ready(&e)) {
		asf_note(report, "podman", "podman", "failed", e.msg);
		cJSON_Delete(st);
		return 1;
	}
	failed += remove_kind("container", name, st ? js(st, "container") : derived, report);
	failed += remove_kind("network", name, st ? js(st, "network") : derived, report);
	failed += remove_kind("volume", name, NULL, report);
common:
	if (st) {
		failed += clear_setid(st, report);
		failed += restore_workspace(st, report);
		failed += remove_config(name, st, report);
	}
	state_dir(dir, sizeof(dir), name);
	{
		char detail[4600];
		int was;
		int rc = egress_teardown(dir, detail, sizeof(detail), &was);
		if (rc || was || (st && cJSON_GetObjectItemCaseSensitive(st, "proxy")))
			asf_note(report, "proxy", detail, rc ? "failed" : was ? "removed" : "absent", NULL);
		failed += rc != 0;
	}
	if (!state_exists(name)) {
		asf_note(report, "state", dir, "absent", NULL);
	} else if (failed) {
		asf_note(report, "state", dir, "failed", "kept: other objects could not be removed");
	} else if (state_remove(name, &e)) {
		asf_note(report, "state", dir, "failed", e.msg);
		failed++;
	} else {
		asf_note(report, "state", dir, "removed", NULL);
	}
	/* Re-scan: anything still labelled is a failure, whatever the steps above said
	 * (kube_teardown re-scans its own objects). */
	for (i = 0; i < 3 && !(st && js(st, "backend") && !strcmp(js(st, "backend"), "kubernetes")); i++) {
		char **v;
		size_t n, k;
		if (podman_labelled(&v, &n, kinds[i], name, &e)) {
			asf_note(report, kinds[i], name, "failed", e.msg);
			failed++;
			continue;
		}
		for (k = 0; k < n; k++) {
			asf_note(report, kinds[i], v[k], "failed", "still present after removal");
			failed++;
		}
		strv_free(v, n);
	}
	cJSON_Delete(st);
	return failed;
}

int cmd_down(const char *name, int json)
{
	cJSON *report = cJSON_CreateArray(), *out, *r;
	int failed;

	if (!name_valid(name)) {
		fprintf(stderr, "asf-provision: down: invalid name \"%s\"\n", name);
		cJSON_Delete(report);
		return 2;
	}
	failed = teardown(name, report);
	if (json) {
		out = cJSON_CreateObject();
		cJSON_AddStringToObject(out, "name", name);
		cJSON_AddBoolToObject(out, "ok", failed == 0);
		cJSON_AddItemToObject(out, "objects", report);
		print_json(out);
		cJSON_Delete(out);
	} else {
		cJSON_ArrayForEach(r, report) {
			const char *d = js(r, "detail");
			printf("%-16s %-40s %s%s%s\n", js(r, "object"), js(r, "name"), js(r, "result"),
			       d ? ": " : "", d ? d : "");
		}
		printf("down %s: %s\n", name, failed ? "FAILED (see above)" : "nothing left");
		cJSON_Delete(report);
	}
	return failed ? 1 : 0;
}

/* "present", "missing" or "unknown": the egress table inside the container's netns. */
static const char *firewall_state(long pid)
{
	asf_argv a = { 0 };
	asf_out o;
	asf_err e;
	const char *r = "unknown";

	netns_argv(&a, pid);
	argv_add(&a, "nft");
	argv_add(&a, "list");
	argv_add(&a, "table");
	argv_add(&a, "inet");
	argv_add(&a, ASF_NFT_TABLE);
	if (!a.oom && asf_run(&o, a.v, 10, &e) == 0) {
		r = o.status == 0 && nft_drops_by_default(o.out) ? "present" : "missing";
		out_free(&o);
	}
	argv_free(&a);
	return r;
}

static cJSON *status_of(const char *name)
{
	cJSON *s = cJSON_CreateObject(), *st;
	asf_err e = { "" };
	asf_out o;
	char ctr[64];
	long pid = 0;

	cJSON_AddStringToObject(s, "name", name);
	st = state_load(name, &e);
	str_fmt(ctr, sizeof(ctr), "%s", st && js(st, "container") ? js(st, "container") : "");
	if (!ctr[0])
		str_fmt(ctr, sizeof(ctr), ASF_PREFIX "%s", name);
	cJSON_AddStringToObject(s, "phase", st ? (js(st, "phase") ? js(st, "phase") : "?") : "no state (orphan)");
	cJSON_AddStringToObject(s, "container", ctr);
	if (podman(&o, &e, "inspect", "--type", "container", "--format", "{{.State.Status}} {{.State.Pid}}",
		   ctr, (char *)NULL) == 0) {
		char status[64] = "";
		sscanf(o.out, "%63s %ld", status, &pid);
		cJSON_AddStringToObject(s, "status", status);
		out_free(&o);
	} else {
		cJSON_AddStringToObject(s, "status", "missing");
	}
	cJSON_AddStringToObject(s, "firewall", pid > 0 ? firewall_state(pid) : "unknown");
	if (st) {
		cJSON_AddStringToObject(s, "ingress", js(st, "ingress") ? js(st, "ingress") : "");
		if (jn(st, "port", 0) > 0)
			cJSON_AddNumberToObject(s, "port", jn(st, "port", 0));
		if (js(st, "config"))
			cJSON_AddStringToObject(s, "config", js(st, "config"));
		cJSON_AddStringToObject(s, "created", js(st, "created") ? js(st, "created") : "");
	}
	cJSON_Delete(st);
	return s;
}

/* Names known from state directories and from labels (orphans included). */
static int all_names(char ***out, size_t *n, asf_err *e)
{
	char **v, **lab;
	size_t k, m, i;
	asf_out o;

	if (state_names(&v, &k))
		return asf_fail(e, "cannot read %s: %s", asf_state_root, strerror(errno));
	/* docker's .Labels is a string; its .Label method takes the key. */
	if (podman(&o, e, "ps", "-a", "--filter", "label=" ASF_LABEL "=1", "--format", engine_docker() ?
		   "{{.Label \"" ASF_LABEL_NAME "\"}}" : "{{index .Labels \"" ASF_LABEL_NAME "\"}}",
		   (char *)NULL) == 0) {
		char *line, *save = NULL;
		for (line = strtok_r(o.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			char **nv;
			if (!name_valid(line) || contains(v, k, line))
				continue;
			if (!(nv = realloc(v, (k + 1) * sizeof(*v))) || !(nv[k] = strdup(line)))
				break;
			v = nv;
			k++;
		}
		out_free(&o);
	}
	if (podman_labelled(&lab, &m, "network", NULL, e) == 0) {
		for (i = 0; i < m; i++) {
			const char *nm = lab[i] + (strncmp(lab[i], ASF_PREFIX, 4) ? 0 : 4);
			char **nv;
			if (!name_valid(nm) || contains(v, k, nm))
				continue;
			if (!(nv = realloc(v, (k + 1) * sizeof(*v))) || !(nv[k] = strdup(nm)))
				break;
			v = nv;
			k++;
		}
		strv_free(lab, m);
	}
	*out = v;
	*n = k;
	return 0;
}

int cmd_status(const char *name, int json)
{
	cJSON *all = cJSON_CreateArray(), *s;
	asf_err e = { "" };
	char **v = NULL;
	size_t n = 0, i;
	int rc = 0;

	if (podman_ready(&e)) {
		fprintf(stderr, "asf-provision: status: %s\n", e.msg);
		cJSON_Delete(all);
		return 2;
	}
	if (name) {
		char **lab;
		size_t m;
		if (!name_valid(name)) {
			fprintf(stderr, "asf-provision: status: invalid name \"%s\"\n", name);
			cJSON_Delete(all);
			return 2;
		}
		if (!state_exists(name) && podman_labelled(&lab, &m, "container", name, &e) == 0) {
			strv_free(lab, m);
			if (!m) {
				fprintf(stderr, "asf-provision: status: no sandbox named \"%s\"\n", name);
				cJSON_Delete(all);
				return 1;
			}
		}
		cJSON_AddItemToArray(all, status_of(name));
	} else {
		if (all_names(&v, &n, &e)) {
			fprintf(stderr, "asf-provision: status: %s\n", e.msg);
			cJSON_Delete(all);
			return 2;
		}
		for (i = 0; i < n; i++)
			cJSON_AddItemToArray(all, status_of(v[i]));
		strv_free(v, n);
	}
	cJSON_ArrayForEach(s, all)
		if (strcmp(js(s, "status"), "running") || strcmp(js(s, "firewall"), "present"))
			rc = 1; /* not healthy */
	if (json) {
		print_json(name ? cJSON_GetArrayItem(all, 0) : all);
	} else {
		cJSON_ArrayForEach(s, all) {
			printf("%s: container %s %s, firewall %s, phase %s", js(s, "name"), js(s, "container"),
			       js(s, "status"), js(s, "firewall"), js(s, "phase"));
			if (jn(s, "port", 0) > 0)
				printf(", ssh port %d", (int)jn(s, "port", 0));
			if (js(s, "config"))
				printf(", config %s", js(s, "config"));
			printf("\n");
		}
	}
	cJSON_Delete(all);
	return rc;
}

int cmd_list(int json)
{
	asf_err e = { "" };
	char **v;
	size_t n, i;

	if (podman_ready(&e) || all_names(&v, &n, &e)) {
		fprintf(stderr, "asf-provision: list: %s\n", e.msg);
		return 2;
	}
	if (json) {
		cJSON *a = cJSON_CreateArray();
		for (i = 0; i < n; i++)
			cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
		print_json(a);
		cJSON_Delete(a);
	} else {
		for (i = 0; i < n; i++)
			printf("%s%s\n", v[i], state_exists(v[i]) ? "" : "  (orphan: labelled objects, no state; "
									"`asf-provision down` removes them)");
	}
	strv_free(v, n);
	return 0;
}

/* Names of the engine's pods or containers (kind "pod" or "ps") labelled with group g, one per line. */
static int group_scan(const char *kind, const char *g, char *out, size_t outlen, asf_err *e)
{
	char filter[160];
	asf_out o;
	int rc;

	str_fmt(filter, sizeof(filter), "label=" ASF_LABEL_GROUP "=%s", g);
	if (!strcmp(kind, "pod"))
		rc = podman(&o, e, "pod", "ps", "--filter", filter, "--format", "{{.Name}}", (char *)NULL);
	else
		rc = podman(&o, e, "ps", "--all", "--filter", filter, "--format", "{{.Names}}", (char *)NULL);
	if (rc)
		return -1;
	str_fmt(out, outlen, "%s", o.out);
	out_free(&o);
	return 0;
}

/*
 * down --group G: teardown of every sandbox whose state says group G (each
 * with the engine that made it), then a re-scan of the engine (podman,
 * docker) by the group label: anything still labelled is a failure.
 */
int cmd_down_group(const char *group, int json)
{
	cJSON *report = cJSON_CreateArray(), *out, *r, *names = cJSON_CreateArray();
	char **v = NULL, left[4096];
	size_t n = 0, i;
	int failed = 0;
	asf_err e = { "" };

	if (state_names(&v, &n)) {
		fprintf(stderr, "asf-provision: down --group %s: cannot list the state directory %s\n", group,
			asf_state_root);
		cJSON_Delete(report);
		cJSON_Delete(names);
		return 1;
	}
	for (i = 0; i < n; i++) {
		cJSON *st = state_load(v[i], &e);
		int mine = st && js(st, "group") && !strcmp(js(st, "group"), group);
		if (mine && engine_set(js(st, "engine") ? js(st, "engine") : "podman", &e) == 0) {
			cJSON_AddItemToArray(names, cJSON_CreateString(v[i]));
			failed += teardown(v[i], report) != 0;
		} else if (mine) {
			asf_note(report, "state", v[i], "failed", e.msg);
			failed++;
		}
		cJSON_Delete(st);
	}
	strv_free(v, n);
	/* The engines' own view: pods (kube play) and containers still carrying the label. */
	if (strcmp(asf_engine, "kubectl") && podman_ready(&e) == 0) {
		const char *kinds[] = { "pod", "ps" };
		for (i = 0; i < 2; i++) {
			if (engine_docker() && i == 0)
				continue;
			if (group_scan(kinds[i], group, left, sizeof(left), &e)) {
				asf_note(report, kinds[i], group, "failed", e.msg);
				failed++;
			} else if (left[0]) {
				left[strcspn(left, "\n")] = '\0';
				asf_note(report, i ? "container" : "pod", left, "failed",
					 "still labelled " ASF_LABEL_GROUP " after down");
				failed++;
			}
		}
	}
	if (json) {
		out = cJSON_CreateObject();
		cJSON_AddStringToObject(out, "group", group);
		cJSON_AddItemToObject(out, "sandboxes", names);
		cJSON_AddBoolToObject(out, "ok", failed == 0);
		cJSON_AddItemToObject(out, "objects", report);
		print_json(out);
		cJSON_Delete(out);
	} else {
		cJSON_ArrayForEach(r, report) {
			const char *d = js(r, "detail");
			printf("%-16s %-40s %s%s%s\n", js(r, "object"), js(r, "name"), js(r, "result"),
			       d ? ": " : "", d ? d : "");
		}
		printf("down --group %s: %d sandbox(es), %s\n", group, cJSON_GetArraySize(names),
		       failed ? "FAILED (see above)" : "nothing left");
		cJSON_Delete(names);
		cJSON_Delete(report);
	}
	return failed ? 1 : 0;
}
