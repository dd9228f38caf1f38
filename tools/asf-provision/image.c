/*
 * image.c - `up --image IMAGE` with a user's own local image: check it
 * before anything is created, and lend it the host's sshd when it has none.
 *
 *   - the image must be in the engine's local store: asf-provision never
 *     pulls (`image inspect`; `create` runs with --pull=never as well);
 *   - its OS and architecture must be this host's (the engine's metadata);
 *   - a probe container runs the image's own /bin/sh (no network, no
 *     capability, no_new_privs, read-only root, as nobody; removed at once)
 *     to learn whether it runs at all, whether /bin/bash is there, and
 *     whether /usr/sbin/sshd runs;
 *   - without a working sshd (or with --sshd host) the host's
 *     /usr/sbin/sshd, every library ldd names for it and its dynamic
 *     loader are copied into STATE/NAME/sshd-kit, which `up` mounts
 *     read-only (nosuid, nodev) at ASF_CTR_KIT; sshd then runs through that
 *     loader with that library path, so the image's own C library (or
 *     none) does not matter to it, while the agent's commands run with
 *     the image's shell and libraries.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "asf.h"

#define HOST_SSHD "/usr/sbin/sshd"

/* The probe: constant text, no value from the command line in it. */
static const char probe_script[] =
	"echo asf-probe-shell; "
	"if [ -x /bin/bash ]; then echo asf-probe-bash; fi; "
	"if [ -x " HOST_SSHD " ]; then echo \"asf-probe-sshd: $(" HOST_SSHD " -V 2>&1)\"; fi";

/* The engine's name for this host's architecture (Go's GOARCH); NULL when unknown. */
static const char *host_arch(void)
{
	static const char *const map[][2] = {
		{ "x86_64", "amd64" }, { "aarch64", "arm64" }, { "armv7l", "arm" }, { "armv6l", "arm" },
		{ "i686", "386" }, { "i386", "386" }, { "ppc64le", "ppc64le" }, { "s390x", "s390x" },
		{ "riscv64", "riscv64" },
	};
	static struct utsname u;
	size_t i;

	if (uname(&u))
		return NULL;
	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (!strcmp(u.machine, map[i][0]))
			return map[i][1];
	return NULL;
}

/* One line of text for a message: newlines become "; ", at most n bytes. */
static void one_line(char *out, size_t n, const char *s)
{
	size_t j = 0;

	for (; s && *s && j + 3 < n; s++) {
		if (*s == '\n') {
			if (s[1] && j) {
				out[j++] = ';';
				out[j++] = ' ';
			}
		} else if (*s != '\r') {
			out[j++] = *s;
		}
	}
	out[j] = '\0';
}

static int inspect_image(const char *image, asf_err *e)
{
	char os[64] = "", arch[64] = "", *slash;
	const char *want = host_arch();
	asf_out o;

	if (podman(&o, e, "image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", image, (char *)NULL)) {
		char why[400];
		one_line(why, sizeof(why), e->msg);
		return asf_fail(e, "--image %s: no such image in %s's local store (%s). asf-provision never pulls "
				   "from a registry: pull it yourself (`%s pull %s`), or build or import it "
				   "(`tar -C DIR -c . | %s import - %s`)", image, asf_engine, why, asf_engine, image,
				asf_engine, image);
	}
	str_fmt(os, sizeof(os), "%.*s", (int)strcspn(o.out, "\n"), o.out);
	out_free(&o);
	if ((slash = strchr(os, '/'))) {
		str_fmt(arch, sizeof(arch), "%s", slash + 1);
		*slash = '\0';
	}
	if (os[0] && strcmp(os, "linux"))
		return asf_fail(e, "--image %s: its OS is \"%s\"; the sandbox needs a linux image", image, os);
	if (want && arch[0] && strcmp(arch, want))
		return asf_fail(e, "--image %s: built for %s, but this host is %s: its programs (its shell "
				   "and sshd) cannot run here. Use an image for %s", image, arch, want, want);
	return 0;
}

/* The probe container's argv: confined like the sandbox, tighter still. */
static void probe_argv(asf_argv *a, const char *image, const char *runtime, const char *name)
{
	struct rlimit rl;

	argv_add(a, asf_podman);
	argv_add(a, "run");
	argv_add(a, "--rm");
	argv_add(a, "--pull=never");
	argv_add(a, "--name");
	argv_addf(a, ASF_PREFIX "%s-probe", name);
	argv_add(a, "--label");
	argv_add(a, ASF_LABEL "=1");
	argv_add(a, "--label");
	argv_addf(a, ASF_LABEL_NAME "=%s", name);
	if (runtime) {
		argv_add(a, "--runtime");
		argv_add(a, runtime);
	}
	argv_add(a, "--network=none");
	argv_add(a, "--cap-drop=ALL");
	argv_add(a, "--security-opt=no-new-privileges");
	argv_add(a, "--read-only");
	argv_add(a, "--user=65534:65534");
	argv_add(a, "--pids-limit=64");
	/* As for the sandbox: the engine's default may exceed this host's hard limit. */
	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 1024)
		rl.rlim_max = 1024;
	argv_addf(a, "--ulimit=nofile=%ld:%ld", (long)rl.rlim_max, (long)rl.rlim_max);
	if (getrlimit(RLIMIT_NPROC, &rl) || rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 64)
		rl.rlim_max = 64;
	argv_addf(a, "--ulimit=nproc=%ld:%ld", (long)rl.rlim_max, (long)rl.rlim_max);
	argv_add(a, "--entrypoint=/bin/sh");
	argv_add(a, image);
	argv_add(a, "-c");
	argv_add(a, probe_script);
}

int image_check(const asf_up_opts *opts, asf_image *img, asf_err *e)
{
	const char *mode = opts->sshd ? opts->sshd : "auto", *s;
	asf_argv a = { 0 };
	char said[600], sshd[300] = "";
	asf_out o;
	int rc;

	memset(img, 0, sizeof(*img));
	if (strcmp(mode, "auto") && strcmp(mode, "image") && strcmp(mode, "host"))
		return asf_fail(e, "--sshd %s: expected auto, image or host", mode);
	if (inspect_image(opts->image, e))
		return -1;
	probe_argv(&a, opts->image, opts->runtime, opts->name);
	rc = a.oom ? asf_fail(e, "out of memory") : asf_run(&o, a.v, 120, e);
	argv_free(&a);
	if (rc)
		return -1;
	if (!strstr(o.out, "asf-probe-shell\n") && o.status == 125) {
		/* 125: the engine itself could not run a container (a runtime it cannot use, ...). */
		one_line(said, sizeof(said), *o.err ? o.err : o.out);
		out_free(&o);
		asf_fail(e, "%s could not start a container%s%s (%s exit 125: %s); nothing was created",
			 asf_engine, opts->runtime ? " with --runtime " : "", opts->runtime ? opts->runtime : "",
			 asf_engine, said[0] ? said : "no output");
		return ASF_IMAGE_ENGINE_FAILED;
	}
	if (!strstr(o.out, "asf-probe-shell\n")) {
		one_line(said, sizeof(said), *o.err ? o.err : o.out);
		out_free(&o);
		return asf_fail(e, "--image %s: its /bin/sh does not run (%s exit %d: %s). The sandbox runs sshd's "
				   "sessions with the image's shell: it needs /bin/sh and the C library that shell "
				   "was built for", opts->image, asf_engine, o.status, said[0] ? said : "no output");
	}
	img->bash = strstr(o.out, "asf-probe-bash\n") != NULL;
	if ((s = strstr(o.out, "asf-probe-sshd: ")))
		one_line(sshd, sizeof(sshd), s + strlen("asf-probe-sshd: "));
	out_free(&o);
	if (!img->bash)
		fprintf(stderr, "asf-provision: up %s: %s has no /bin/bash: the sandbox user's shell is /bin/sh "
			"(verify's network probes need bash)\n", opts->name, opts->image);
	img->kit = strcmp(mode, "host") == 0 || !strstr(sshd, "OpenSSH_");
	if (img->kit && !strcmp(mode, "image"))
		return asf_fail(e, "--image %s --sshd image: %s", opts->image, sshd[0] ?
				"its " HOST_SSHD " does not run (`sshd -V` said something else than OpenSSH_...)" :
				"it has no " HOST_SSHD " (use --sshd auto or host to run this host's sshd in it)");
	if (img->kit && access(HOST_SSHD, X_OK))
		return asf_fail(e, "--image %s: %s, and this host has no " HOST_SSHD " to lend it (%s): install "
				   "OpenSSH's server here (Debian: apt-get install openssh-server), or use an image "
				   "with sshd", opts->image, sshd[0] ? "its " HOST_SSHD " does not run" :
				"it has no " HOST_SSHD, strerror(errno));
	if (sshd[0] && img->kit && strcmp(mode, "host"))
		fprintf(stderr, "asf-provision: up %s: %s's own " HOST_SSHD " does not run (%.200s); using this "
			"host's\n", opts->name, opts->image, sshd);
	return 0;
}

/* Copy src (following links: the file's content) to dst, mode 0755. */
static int copy_file(const char *src, const char *dst, asf_err *e)
{
	char real[PATH_MAX];
	size_t len;
	char *data;
	int rc;

	if (!realpath(src, real))
		return asf_fail(e, "%s: %s", src, strerror(errno));
	if (!(data = read_file(real, 64u << 20, &len, e)))
		return -1;
	rc = write_file(dst, data, len, 0755, NULL, e);
	free(data);
	return rc;
}

int image_kit(const char *dir, cJSON *st, asf_err *e)
{
	char kit[4400], lib[4400], path[4600], *line, *save = NULL;
	char *const argv[] = { "ldd", HOST_SSHD, NULL };
	cJSON *libs = cJSON_CreateArray();
	int loader = 0, rc = -1;
	asf_out o;

	str_fmt(kit, sizeof(kit), "%s/sshd-kit", dir);
	str_fmt(lib, sizeof(lib), "%s/lib", kit);
	cJSON_AddItemToObject(st, "sshd_kit", libs);
	if (mkdir_mode(kit, 0755, e) || mkdir_mode(lib, 0755, e))
		return -1;
	if (asf_run(&o, argv, 60, e))
		return -1;
	/* ldd's lines: "\tNAME => /PATH (0x...)", the loader "\t/PATH (0x...)", the vDSO "\tNAME (0x...)". */
	for (line = strtok_r(o.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[256], file[4096];
		const char *arrow = strstr(line, " => ");
		line += strspn(line, " \t");
		if (arrow) {
			if (sscanf(arrow + 4, "%4095s", file) != 1 || file[0] != '/') {
				asf_fail(e, "the host's " HOST_SSHD " needs a library ldd cannot find: %s", line);
				goto out;
			}
			str_fmt(name, sizeof(name), "%.*s", (int)(arrow - line), line);
			if (strchr(name, '/') || !name[0] || name[0] == '.') {
				asf_fail(e, "ldd " HOST_SSHD ": unexpected library name \"%s\"", name);
				goto out;
			}
			str_fmt(path, sizeof(path), "%s/%s", lib, name);
		} else if (line[0] == '/' && sscanf(line, "%4095s", file) == 1) {
			str_fmt(path, sizeof(path), "%s/ld.so", kit);
			loader = 1;
		} else {
			continue;
		}
		if (copy_file(file, path, e))
			goto out;
		cJSON_AddItemToArray(libs, cJSON_CreateString(file));
	}
	str_fmt(path, sizeof(path), "%s/sshd", kit);
	if (copy_file(HOST_SSHD, path, e))
		goto out;
	cJSON_AddItemToArray(libs, cJSON_CreateString(HOST_SSHD));
	/* A static sshd needs no loader: it runs as it is. */
	cJSON_AddBoolToObject(st, "sshd_kit_loader", loader);
	rc = 0;
out:
	out_free(&o);
	return rc;
}

void image_sshd_argv(asf_argv *a, const cJSON *st)
{
	if (!cJSON_GetObjectItemCaseSensitive(st, "sshd_kit")) {
		argv_add(a, HOST_SSHD);
		return;
	}
	if (jb(st, "sshd_kit_loader")) {
		argv_add(a, ASF_CTR_KIT "/ld.so");
		argv_add(a, "--library-path");
		argv_add(a, ASF_CTR_KIT "/lib");
	}
	argv_add(a, ASF_CTR_KIT "/sshd");
	argv_add(a, "-r"); /* no re-exec: sshd would exec itself without the loader */
}
