/*
 * test_probes.c - every check of `asf-provision verify` shown to fail:
 * on one live sandbox, each property verify guards is broken in turn (from
 * the host: nsenter into its namespaces, its cgroup, its mounted files, or
 * the container re-created with one flag changed), verify must fail exactly
 * the checks that property covers and pass all the others; the break is then
 * undone and verify passes again. Plus the egress allow-list (a forward
 * proxy on the host) and rootless Podman.
 *
 * Needs root, podman and runc; otherwise SKIPPED and exit 0 (exit 1 when
 * ASF_REQUIRE_PODMAN=1).
 *
 * Network rule: probes only target listeners this test starts (127.0.0.1,
 * the sandbox bridge's gateway) or addresses for which the sandbox has no
 * route; the proxy resolves the test's names from a hosts file of its own.
 *
 *   make check-provision   (ASF_TEST_ONLY=test[,test...] runs only those)
 */
#include <arpa/inet.h>
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char bin[PATH_MAX];      /* asf-provision */
static char top[64];            /* per-run temp dir */
static char state[128];
static char rootfs[128];
static char mkrootfs[PATH_MAX];
static pid_t run_id;

/* ---------------------------------------------------------------- helpers */

typedef struct run_out {
	int status;
	char out[65536];
	char err[16384];
} run_out;

/* Run argv (no shell), capturing both streams; a watchdog kills it after 300 s. */
static int runv(run_out *r, char *const *argv)
{
	int po[2], pe[2], status;
	size_t n[2] = { 0, 0 };
	char *buf[2] = { r->out, r->err };
	size_t cap[2] = { sizeof(r->out), sizeof(r->err) };
	time_t deadline = time(NULL) + 300;
	struct pollfd pf[2];
	pid_t pid;

	r->status = -1;
	r->out[0] = r->err[0] = '\0';
	if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC))
		return -1;
	fflush(NULL);
	if ((pid = fork()) == 0) {
		int null = open("/dev/null", O_RDONLY);
		dup2(null, 0);
		dup2(po[1], 1);
		dup2(pe[1], 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	pf[0].fd = po[0];
	pf[1].fd = pe[0];
	pf[0].events = pf[1].events = POLLIN;
	while (pf[0].fd >= 0 || pf[1].fd >= 0) {
		int i;
		if (time(NULL) >= deadline) {
			kill(pid, SIGKILL);
			deadline = time(NULL) + 3600;
		}
		if (poll(pf, 2, 1000) <= 0)
			continue;
		for (i = 0; i < 2; i++) {
			char tmp[4096];
			ssize_t got;
			if (pf[i].fd < 0 || !pf[i].revents)
				continue;
			if ((got = read(pf[i].fd, tmp, sizeof(tmp))) <= 0) {
				close(pf[i].fd);
				pf[i].fd = -1;
				continue;
			}
			if ((size_t)got > cap[i] - 1 - n[i])
				got = (ssize_t)(cap[i] - 1 - n[i]);
			memcpy(buf[i] + n[i], tmp, (size_t)got);
			n[i] += (size_t)got;
			buf[i][n[i]] = '\0';
		}
	}
	waitpid(pid, &status, 0);
	r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	return r->status;
}

static int vcmd(run_out *r, const char *first, va_list ap)
{
	char *argv[96];
	const char *s = first;
	int n = 0;

	while (s && n < 95) {
		argv[n++] = (char *)s;
		s = va_arg(ap, const char *);
	}
	argv[n] = NULL;
	return runv(r, argv);
}

/* cmd(r, "prog", args..., NULL) */
static int cmd(run_out *r, const char *first, ...)
{
	va_list ap;
	int rc;

	va_start(ap, first);
	rc = vcmd(r, first, ap);
	va_end(ap);
	return rc;
}

/* asf-provision --state-dir STATE ARGS... (NULL-terminated) */
static int asf_(run_out *r, const char *first, ...)
{
	char *argv[96];
	const char *s = first;
	va_list ap;
	int n = 0;

	argv[n++] = bin;
	argv[n++] = "--state-dir";
	argv[n++] = state;
	va_start(ap, first);
	while (s && n < 95) {
		argv[n++] = (char *)s;
		s = va_arg(ap, const char *);
	}
	va_end(ap);
	argv[n] = NULL;
	return runv(r, argv);
}
#define asf(r, ...) asf_(r, __VA_ARGS__, (char *)NULL)
#define sh(r, ...) cmd(r, __VA_ARGS__, (char *)NULL)

static const char *jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsString(v) ? v->valuestring : "";
}

static void trim(char *s)
{
	size_t n = strlen(s);

	while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
		s[--n] = '\0';
}

static long container_pid(const char *ctr)
{
	run_out r;

	ck_assert_int_eq(sh(&r, "podman", "inspect", "--type", "container", "--format", "{{.State.Pid}}", ctr), 0);
	return strtol(r.out, NULL, 10);
}

static void container_gateway(const char *ctr, char *gw, size_t n)
{
	run_out r;

	ck_assert_int_eq(sh(&r, "podman", "inspect", "--type", "container", "--format",
			    "{{range .NetworkSettings.Networks}}{{.Gateway}}{{end}}", ctr), 0);
	snprintf(gw, n, "%.*s", (int)strcspn(r.out, "\n"), r.out);
	ck_assert_msg(gw[0], "no gateway for %s", ctr);
}

/* Run a host program in the container's network namespace; its exit status. */
static int in_netns(run_out *r, long pid, const char *first, ...)
{
	char *argv[32], spid[32];
	const char *s = first;
	va_list ap;
	int n = 0;

	snprintf(spid, sizeof(spid), "--target=%ld", pid);
	argv[n++] = "nsenter";
	argv[n++] = spid;
	argv[n++] = "--net";
	va_start(ap, first);
	while (s && n < 31) {
		argv[n++] = (char *)s;
		s = va_arg(ap, const char *);
	}
	va_end(ap);
	argv[n] = NULL;
	return runv(r, argv);
}
#define netns(r, pid, ...) in_netns(r, pid, __VA_ARGS__, (char *)NULL)

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w"); /* in place: a bind mount keeps following this inode */

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	fputs(text, f);
	fclose(f);
}

static void read_text(const char *path, char *buf, size_t n)
{
	FILE *f = fopen(path, "r");
	size_t got;

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	got = fread(buf, 1, n - 1, f);
	buf[got] = '\0';
	fclose(f);
}

/* A TCP listener we own on addr, at *port (0: any; the port in *port). */
static int listen_on(const char *addr, int *port)
{
	struct sockaddr_in sa = { 0 };
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;

	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)*port);
	ck_assert_int_eq(inet_pton(AF_INET, addr, &sa.sin_addr), 1);
	ck_assert_msg(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind %s: %s", addr, strerror(errno));
	ck_assert_int_eq(listen(fd, 16), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

static int accepted_count(int fd)
{
	int n = 0, c;

	while ((c = accept4(fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		close(c);
		n++;
	}
	return n;
}

/* verify --json; the report (caller frees). */
static cJSON *verify(const char *name, int *status)
{
	run_out r;
	cJSON *rep;

	asf(&r, "verify", name, "--json");
	*status = r.status;
	rep = cJSON_Parse(r.out);
	ck_assert_msg(rep != NULL, "verify %s: not JSON (exit %d): %s %s", name, r.status, r.out, r.err);
	return rep;
}

static int listed(const char *csv, const char *name)
{
	size_t n = strlen(name);
	const char *p = csv;

	while (p && *p) {
		if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == '\0'))
			return 1;
		p = strchr(p, ',');
		p = p ? p + 1 : NULL;
	}
	return 0;
}

static int count_listed(const char *csv)
{
	int n = csv[0] != '\0';

	for (; *csv; csv++)
		n += *csv == ',';
	return n;
}

/*
 * verify fails exactly the checks in `want` (comma-separated; "" = none),
 * reports exactly those in `errs` as errors (could not be made), and
 * passes every other one; `what` names the break in messages.
 * Returns the report (caller frees) for further assertions.
 */
static cJSON *verify_expect(const char *name, const char *want, const char *errs, const char *what)
{
	const cJSON *c;
	int status, seen = 0, nwant = count_listed(want) + count_listed(errs);
	cJSON *rep = verify(name, &status);

	cJSON_ArrayForEach(c, cJSON_GetObjectItem(rep, "checks")) {
		const char *check = jstr(c, "check"), *st = jstr(c, "status");
		const char *expect = listed(want, check) ? "fail" : listed(errs, check) ? "error" : "pass";
		ck_assert_msg(!strcmp(st, expect), "%s: %s should be %s, is %s: %s", what, check, expect, st,
			      jstr(c, "evidence"));
		seen += strcmp(expect, "pass") != 0;
	}
	ck_assert_msg(seen == nwant, "%s: expected failing checks %s and errors %s, saw %d of them", what, want,
		      errs, seen);
	ck_assert_msg(status == (errs[0] ? 2 : want[0] ? 1 : 0), "%s: verify exit %d", what, status);
	if (getenv("ASF_TEST_VERBOSE")) {
		cJSON_ArrayForEach(c, cJSON_GetObjectItem(rep, "checks"))
			if (listed(want, jstr(c, "check")) || listed(errs, jstr(c, "check")))
				fprintf(stderr, "[%s] %s: %s\n", what, jstr(c, "check"), jstr(c, "evidence"));
	}
	return rep;
}

static cJSON *verify_only(const char *name, const char *want, const char *what)
{
	return verify_expect(name, want, "", what);
}

static void verify_break(const char *name, const char *want, const char *what)
{
	cJSON_Delete(verify_only(name, want, what));
}

static void verify_break_errors(const char *name, const char *want, const char *errs, const char *what)
{
	cJSON_Delete(verify_expect(name, want, errs, what));
}

/* Checks that need a session to the sandbox: without one they cannot be made. */
#define SESSION_CHECKS "ssh.exec,workspace,probe.control,egress.host_gateway,egress.host_loopback,egress.public," \
	"egress.private,dns,caps.bounding,caps.session,no_new_privs,seccomp,rootfs.read_only,hostkey.private,limits"
/* Commands refused: the SFTP round trip fails (ForceCommand replaces the subsystem too); the rest get no evidence. */
#define EXEC_FAILS "workspace"
#define EXEC_ERRORS "probe.control,egress.host_gateway,egress.host_loopback,egress.public,egress.private,dns," \
	"caps.bounding,caps.session,no_new_privs,seccomp,rootfs.read_only,hostkey.private,limits"

/* ------------------------------------------------- breaks from the host */

/* Remount the container's root read-write (ro = 0) or back (ro = 1), in its own mount namespace. */
static void remount_root(long pid, int ro)
{
	char path[64];
	pid_t child;
	int status;

	snprintf(path, sizeof(path), "/proc/%ld/ns/mnt", pid);
	if ((child = fork()) == 0) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNS))
			_exit(1);
		/* setns put our root and cwd at the namespace's root: "/" is the container's. */
		if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | (ro ? MS_RDONLY : 0), NULL))
			_exit(2);
		_exit(0);
	}
	ck_assert_int_gt(child, 0);
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "remount / %s in pid %ld's namespace: %d",
		      ro ? "ro" : "rw", pid, status);
}

/* The container's pids.max on the host (cgroup v1 or v2). */
static void pids_max_path(long pid, char *out, size_t n)
{
	char path[64], line[512];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/cgroup", pid);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	out[0] = '\0';
	while (fgets(line, sizeof(line), f)) {
		char *p;
		trim(line);
		if ((p = strstr(line, ":pids:")))
			snprintf(out, n, "/sys/fs/cgroup/pids%s/pids.max", p + 6);
		else if (!strncmp(line, "0::", 3) && !out[0])
			snprintf(out, n, "/sys/fs/cgroup%s/pids.max", line + 3);
	}
	fclose(f);
	ck_assert_msg(out[0] && access(out, W_OK) == 0, "no writable pids.max for pid %ld (%s)", pid, out);
}

/*
 * Re-create the container the way `up` made it (its CreateCommand), with
 * `drop` removed (if not NULL) and `add` added (if not NULL), then redo what
 * `up` does around it: init, the egress ruleset into the new netns, no
 * default route, start. The published port stays the one in the .asp.json.
 */
static void recreate(const char *name, const char *drop, const char *add)
{
	char ctr[96], nft[PATH_MAX], pubport[64];
	char *argv[128];
	run_out r;
	cJSON *cc, *st, *a;
	long pid;
	int n = 0;

	snprintf(ctr, sizeof(ctr), "asf-%s", name);
	ck_assert_int_eq(sh(&r, "podman", "inspect", "--type", "container", "--format",
			    "{{json .Config.CreateCommand}}", ctr), 0);
	cc = cJSON_Parse(r.out);
	ck_assert_ptr_nonnull(cc);
	snprintf(nft, sizeof(nft), "%s/%s/state.json", state, name);
	{
		static char text[65536];
		read_text(nft, text, sizeof(text));
		st = cJSON_Parse(text);
		ck_assert_ptr_nonnull(st);
	}
	snprintf(pubport, sizeof(pubport), "--publish=127.0.0.1:%d:2222/tcp",
		 (int)cJSON_GetNumberValue(cJSON_GetObjectItem(st, "port")));
	cJSON_Delete(st);
	cJSON_ArrayForEach(a, cc) {
		const char *s = a->valuestring;
		if (drop && !strcmp(s, drop))
			continue;
		if (!strcmp(s, "--publish=127.0.0.1::2222/tcp"))
			s = pubport;
		if (add && !strcmp(s, "--rootfs"))
			argv[n++] = (char *)add;
		argv[n++] = (char *)s;
	}
	argv[n] = NULL;
	if (drop) {
		int found = 0;
		cJSON_ArrayForEach(a, cc)
			found |= !strcmp(a->valuestring, drop);
		ck_assert_msg(found, "%s is not in the create command", drop);
	}
	ck_assert_int_eq(sh(&r, "podman", "rm", "--force", "--time", "1", ctr), 0);
	ck_assert_msg(runv(&r, argv) == 0, "podman create: %s", r.err);
	cJSON_Delete(cc);
	ck_assert_msg(sh(&r, "podman", "init", ctr) == 0, "podman init: %s", r.err);
	pid = container_pid(ctr);
	snprintf(nft, sizeof(nft), "%s/%s/egress.nft", state, name);
	ck_assert_msg(netns(&r, pid, "nft", "-f", nft) == 0, "nft -f: %s", r.err);
	ck_assert_msg(netns(&r, pid, "ip", "-4", "route", "del", "default") == 0, "route del: %s", r.err);
	ck_assert_msg(sh(&r, "podman", "start", ctr) == 0, "podman start: %s", r.err);
}

static char bridge_localnet[128]; /* /proc/sys/.../route_localnet of the bridge, set by the test */
static char bridge_localnet_was[8];

/* Open (on = 1) or close the path to the host's loopback used for egress.host_loopback. */
static void host_loopback_path(const char *name, const char *ctr, long pid, const char *gw, int on)
{
	char ip[64], br[64], rule[512], net[96];
	run_out r;

	snprintf(net, sizeof(net), "asf-%s", name);
	ck_assert_int_eq(sh(&r, "podman", "network", "inspect", net, "--format", "{{.NetworkInterface}}"), 0);
	snprintf(br, sizeof(br), "%.*s", (int)strcspn(r.out, "\n"), r.out);
	ck_assert_int_eq(sh(&r, "podman", "inspect", "--type", "container", "--format",
			    "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", ctr), 0);
	snprintf(ip, sizeof(ip), "%.*s", (int)strcspn(r.out, "\n"), r.out);
	snprintf(bridge_localnet, sizeof(bridge_localnet), "/proc/sys/net/ipv4/conf/%s/route_localnet", br);
	if (!on) {
		ck_assert_int_eq(sh(&r, "nft", "delete", "table", "ip", "asf_egress_break_host"), 0);
		write_text(bridge_localnet, bridge_localnet_was);
		bridge_localnet[0] = '\0';
		ck_assert_int_eq(netns(&r, pid, "nft", "delete", "table", "ip", "asf_egress_break"), 0);
		ck_assert_int_eq(netns(&r, pid, "sh", "-c", "echo 0 > /proc/sys/net/ipv4/conf/eth0/route_localnet"), 0);
		return;
	}
	snprintf(rule, sizeof(rule),
		 "echo 1 > /proc/sys/net/ipv4/conf/eth0/route_localnet && "
		 "nft add table ip asf_egress_break && "
		 "nft 'add chain ip asf_egress_break out { type nat hook output priority -100; }' && "
		 "nft add rule ip asf_egress_break out ip daddr 127.0.0.1 tcp dport != 2222 dnat to %s && "
		 "nft 'add chain ip asf_egress_break post { type nat hook postrouting priority 100; }' && "
		 "nft add rule ip asf_egress_break post oifname eth0 ip saddr 127.0.0.1 masquerade && "
		 "nft insert rule inet asf_egress output ct status dnat accept", gw);
	ck_assert_msg(netns(&r, pid, "sh", "-c", rule) == 0, "sandbox side: %s", r.err);
	read_text(bridge_localnet, bridge_localnet_was, sizeof(bridge_localnet_was));
	write_text(bridge_localnet, "1\n");
	snprintf(rule, sizeof(rule),
		 "nft add table ip asf_egress_break_host && "
		 "nft 'add chain ip asf_egress_break_host pre { type nat hook prerouting priority -100; }' && "
		 "nft add rule ip asf_egress_break_host pre iifname %s ip saddr %s ip daddr %s meta l4proto tcp "
		 "dnat to 127.0.0.1", br, ip, gw);
	ck_assert_msg(sh(&r, "sh", "-c", rule) == 0, "host side: %s", r.err);
}

/* The inode of the socket listening on sshd's port in pid's network namespace, or 0. */
static unsigned long sshd_listen_inode(long pid)
{
	char path[64], line[512];
	unsigned long inode, found = 0;
	unsigned int port, st;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/net/tcp", pid);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, " %*d: %*x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*d %lu", &port, &st, &inode) == 3 &&
		    port == 2222 && st == 0x0A)
			found = inode;
	fclose(f);
	return found;
}

/*
 * sshd (the container's pid 1) re-reads its config and host key: SIGHUP,
 * then wait until it listens again on a new socket (a 10 s watchdog).
 */
static void sshd_reload(long pid)
{
	unsigned long before = sshd_listen_inode(pid), now = 0;
	int i;

	ck_assert_msg(before != 0, "sshd (pid %ld) does not listen", pid);
	ck_assert_int_eq(kill((pid_t)pid, SIGHUP), 0);
	for (i = 0; i < 100; i++) {
		now = sshd_listen_inode(pid);
		if (now && now != before)
			return;
		usleep(100 * 1000);
	}
	ck_abort_msg("sshd (pid %ld) did not listen again after SIGHUP", pid);
}

/* asf-provision status NAME: its "firewall" field. */
static void status_firewall(const char *name, const char *want)
{
	run_out r;
	cJSON *st;

	asf(&r, "status", name, "--json");
	st = cJSON_Parse(r.out);
	ck_assert_msg(st != NULL, "status %s: %s %s", name, r.out, r.err);
	if (cJSON_IsArray(st))
		ck_assert_str_eq(jstr(cJSON_GetArrayItem(st, 0), "firewall"), want);
	else
		ck_assert_str_eq(jstr(st, "firewall"), want);
	cJSON_Delete(st);
}

/* ------------------------------------------------------------------ tests */

START_TEST(each_break_fails_its_check)
{
	char name[64], ws[256], ctr[96], gw[64], key[PATH_MAX], resolv[PATH_MAX], saved[4096], pids[PATH_MAX];
	char dir[512], vol[600], nft[PATH_MAX], out[300], cfg[8192], cat[300];
	static char orig_key[8192], new_key[8192], sshd_cfg[8192];
	char agent_uid[32];
	time_t t0 = time(NULL);
	run_out r;
	long pid;

	snprintf(name, sizeof(name), "e%d-probes", (int)run_id);
	snprintf(ws, sizeof(ws), "%s/ws-probes", top);
	mkdir(ws, 0755);
	snprintf(ctr, sizeof(ctr), "asf-%s", name);
	snprintf(out, sizeof(out), "%s/probes.asp.json", top);
	ck_assert_msg(asf(&r, "up", "--name", name, "--workspace", ws, "--rootfs", rootfs, "--runtime", "runc",
			  "--pids", "256", "--out", out) == 0, "up: %s", r.err);
	pid = container_pid(ctr);
	container_gateway(ctr, gw, sizeof(gw));
	snprintf(dir, sizeof(dir), "%s/%s", state, name);
	snprintf(nft, sizeof(nft), "%s/egress.nft", dir);
	verify_break(name, "", "intact");
	status_firewall(name, "present");

	/* config: the harness's --out made writable by others, then changed (the pin) behind verify's back. */
	ck_assert_int_eq(chmod(out, 0666), 0);
	verify_break(name, "config", "--out mode 0666");
	ck_assert_int_eq(chmod(out, 0644), 0);
	read_text(out, cfg, sizeof(cfg));
	{
		char changed[8192], *p = strstr(cfg, "\"host_key\"");
		ck_assert_ptr_nonnull(p);
		snprintf(changed, sizeof(changed), "%s", cfg);
		p = strstr(changed + (p - cfg), "AAAA");
		ck_assert_ptr_nonnull(p);
		p[4] = p[4] == 'B' ? 'C' : 'B';
		write_text(out, changed);
	}
	verify_break(name, "config", "pin changed in --out");
	write_text(out, cfg);

	/*
	 * ssh.pinned_host_key: sshd's host key rotated (and sshd reloaded), so
	 * the pin no longer matches. libasp refuses the session - the point of
	 * the pin - so every check that needs one cannot be made: errors, not
	 * passes. Host-side checks still pass.
	 */
	snprintf(key, sizeof(key), "%s/sshd/ssh_host_ed25519_key", dir);
	read_text(key, orig_key, sizeof(orig_key));
	{
		char tmpkey[300], tmppub[310];
		snprintf(tmpkey, sizeof(tmpkey), "%s/rotated_host_key", top);
		snprintf(tmppub, sizeof(tmppub), "%s.pub", tmpkey);
		ck_assert_msg(sh(&r, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rotated", "-f", tmpkey) == 0,
			      "ssh-keygen: %s", r.err);
		read_text(tmpkey, new_key, sizeof(new_key));
		unlink(tmpkey);
		unlink(tmppub);
	}
	write_text(key, new_key);
	sshd_reload(pid);
	verify_break_errors(name, "ssh.pinned_host_key", SESSION_CHECKS, "host key rotated");
	write_text(key, orig_key);
	sshd_reload(pid);
	verify_break(name, "", "host key restored");

	/*
	 * ssh.exec: ForceCommand /bin/false - the session opens (the pin
	 * matches) but runs nothing (libasp: its command wrapper did not run).
	 * Every other check that runs a command inside gets no evidence:
	 * errors, never passes; the workspace round trip (SFTP, which
	 * ForceCommand replaces too) fails.
	 */
	snprintf(vol, sizeof(vol), "%s/sshd/sshd_config", dir);
	read_text(vol, sshd_cfg, sizeof(sshd_cfg));
	{
		char changed[8400];
		snprintf(changed, sizeof(changed), "%sForceCommand /bin/false\n", sshd_cfg);
		write_text(vol, changed);
	}
	sshd_reload(pid);
	verify_break_errors(name, "ssh.exec," EXEC_FAILS, EXEC_ERRORS, "ForceCommand /bin/false");
	write_text(vol, sshd_cfg);
	sshd_reload(pid);

	/*
	 * probe.control: the sandbox user's TCP to its own sshd rejected. The
	 * control is an error, not a fail (nothing leaks; the probes are blind),
	 * and every probe that relies on it becomes an error too: never a pass.
	 */
	{
		/* The sandbox user's uid, as up chose it. */
		char stp[PATH_MAX], text[16384];
		cJSON *stj;
		snprintf(stp, sizeof(stp), "%s/state.json", dir);
		read_text(stp, text, sizeof(text));
		ck_assert_ptr_nonnull(stj = cJSON_Parse(text));
		snprintf(agent_uid, sizeof(agent_uid), "%.0f", cJSON_GetNumberValue(cJSON_GetObjectItem(stj, "uid")));
		cJSON_Delete(stj);
	}
	ck_assert_int_eq(netns(&r, pid, "nft", "insert", "rule", "inet", "asf_egress", "output", "meta", "skuid",
			       agent_uid, "ip", "daddr", "127.0.0.1", "tcp", "dport", "2222", "reject"), 0);
	verify_break_errors(name, "",
			    "probe.control,egress.host_gateway,egress.host_loopback,egress.public,egress.private",
			    "control probe blocked");
	ck_assert_int_eq(netns(&r, pid, "nft", "delete", "table", "inet", "asf_egress"), 0);
	ck_assert_int_eq(netns(&r, pid, "nft", "-f", nft), 0);

	/*
	 * egress.firewall: the table gone. The gateway is on the sandbox's own
	 * link, so only the firewall kept TCP and UDP from the host's address
	 * there: those probes fail with it. A policy of accept (with a final
	 * drop rule, so nothing opens) fails the firewall check alone.
	 */
	ck_assert_int_eq(netns(&r, pid, "nft", "delete", "table", "inet", "asf_egress"), 0);
	verify_break(name, "egress.firewall,egress.host_gateway,dns", "table deleted");
	ck_assert_int_eq(netns(&r, pid, "nft", "-f", nft), 0);
	ck_assert_int_eq(netns(&r, pid, "nft", "chain", "inet", "asf_egress", "output", "{", "policy", "accept", ";",
			       "}"), 0);
	ck_assert_int_eq(netns(&r, pid, "nft", "add", "rule", "inet", "asf_egress", "output", "drop"), 0);
	verify_break(name, "egress.firewall", "output policy accept");
	status_firewall(name, "missing"); /* status reads each chain's own policy too */
	ck_assert_int_eq(netns(&r, pid, "nft", "delete", "table", "inet", "asf_egress"), 0);
	ck_assert_int_eq(netns(&r, pid, "nft", "-f", nft), 0);

	/* network.topology: a default route - which is also a route to the public and private probes. */
	ck_assert_int_eq(netns(&r, pid, "ip", "-4", "route", "add", "default", "via", gw), 0);
	verify_break(name, "network.topology,egress.public,egress.private", "default route");
	ck_assert_int_eq(netns(&r, pid, "ip", "-4", "route", "del", "default"), 0);

	/* egress.public / egress.private: a path to just that address (the route lookup sees it; no packet). */
	ck_assert_int_eq(netns(&r, pid, "ip", "-4", "route", "add", "8.8.8.8/32", "via", gw), 0);
	verify_break(name, "egress.public", "route to 8.8.8.8");
	ck_assert_int_eq(netns(&r, pid, "ip", "-4", "route", "del", "8.8.8.8/32"), 0);
	ck_assert_int_eq(netns(&r, pid, "ip", "-4", "route", "add", "192.168.1.1/32", "via", gw), 0);
	verify_break(name, "egress.private", "route to 192.168.1.1");
	ck_assert_int_eq(netns(&r, pid, "ip", "-4", "route", "del", "192.168.1.1/32"), 0);

	/* egress.host_gateway: TCP to the host's bridge address let through (verify's listener answers). */
	ck_assert_int_eq(netns(&r, pid, "nft", "insert", "rule", "inet", "asf_egress", "output", "meta", "l4proto",
			       "tcp", "ip", "daddr", gw, "accept"), 0);
	verify_break(name, "egress.host_gateway", "TCP to the gateway accepted");
	ck_assert_int_eq(netns(&r, pid, "nft", "delete", "table", "inet", "asf_egress"), 0);
	ck_assert_int_eq(netns(&r, pid, "nft", "-f", nft), 0);

	/*
	 * egress.host_loopback: a path from the sandbox's 127.0.0.1 to the
	 * host's. In the sandbox: connections to 127.0.0.1 (but sshd's port) are
	 * DNATed to the gateway and let through; on the host, the same traffic
	 * from the sandbox's address is DNATed to 127.0.0.1 (route_localnet on
	 * the bridge) - how the probe would reach a host listener if the
	 * namespaces leaked loopback (slirp4netns allow_host_loopback does alike).
	 */
	host_loopback_path(name, ctr, pid, gw, 1);
	verify_break(name, "egress.host_loopback", "path to the host's loopback");
	host_loopback_path(name, ctr, pid, gw, 0);
	ck_assert_int_eq(netns(&r, pid, "nft", "delete", "table", "inet", "asf_egress"), 0);
	ck_assert_int_eq(netns(&r, pid, "nft", "-f", nft), 0);

	/* network.ipv6: IPv6 switched back on in the namespace (addresses and a link route appear). */
	ck_assert_int_eq(netns(&r, pid, "sh", "-c", "for i in all default lo eth0; do "
			       "echo 0 > /proc/sys/net/ipv6/conf/$i/disable_ipv6; done"), 0);
	verify_break(name, "network.ipv6", "IPv6 enabled");
	ck_assert_int_eq(netns(&r, pid, "sh", "-c", "for i in all default lo eth0; do "
			       "echo 1 > /proc/sys/net/ipv6/conf/$i/disable_ipv6; done"), 0);

	/* dns: a nameserver the sandbox can route to (its gateway). */
	snprintf(resolv, sizeof(resolv), "%s/etc/resolv.conf", dir);
	read_text(resolv, saved, sizeof(saved));
	{
		char text[4200];
		snprintf(text, sizeof(text), "%snameserver %s\n", saved, gw);
		write_text(resolv, text);
	}
	verify_break(name, "dns", "a reachable nameserver");
	write_text(resolv, saved);

	/* rootfs.read_only: / remounted read-write in the container's mount namespace. */
	remount_root(pid, 0);
	verify_break(name, "rootfs.read_only", "root remounted rw");
	remount_root(pid, 1);

	/* hostkey.private: the key handed to the sandbox user (sshd still loads it: not root's, 0644). */
	ck_assert_int_eq(chown(key, 1000, 1000), 0);
	ck_assert_int_eq(chmod(key, 0644), 0);
	verify_break(name, "hostkey.private", "host key readable");
	ck_assert_int_eq(chown(key, 0, 0), 0);
	ck_assert_int_eq(chmod(key, 0600), 0);

	/* limits: the pids limit lowered behind Podman's back, in the cgroup itself. */
	pids_max_path(pid, pids, sizeof(pids));
	write_text(pids, "100\n");
	verify_break(name, "limits", "pids.max changed");
	write_text(pids, "256\n");

	verify_break(name, "", "every break undone");

	/* Re-created with one flag changed: what the running container cannot be talked out of. */
	recreate(name, NULL, "--cap-add=CAP_NET_RAW");
	verify_break(name, "caps.bounding", "CAP_NET_RAW added");
	recreate(name, "--cap-add=CAP_NET_RAW", NULL);
	recreate(name, "--security-opt=no-new-privileges", NULL);
	verify_break(name, "no_new_privs", "without no-new-privileges");
	/*
	 * caps.session: a file capability on the cat verify's session runs. With
	 * no_new_privs (as up makes it) exec ignores file capabilities, so a
	 * session can gain one only with no_new_privs off: the two fail together.
	 */
	snprintf(cat, sizeof(cat), "%s/usr/bin/cat", rootfs);
	ck_assert_msg(sh(&r, "setcap", "cap_setuid+ep", cat) == 0, "setcap: %s", r.err);
	verify_break(name, "no_new_privs,caps.session", "file capability on cat, without no-new-privileges");
	ck_assert_msg(sh(&r, "setcap", "-r", cat) == 0, "setcap -r: %s", r.err);
	recreate(name, NULL, "--security-opt=no-new-privileges");
	recreate(name, NULL, "--security-opt=seccomp=unconfined");
	verify_break(name, "seccomp", "seccomp unconfined");
	recreate(name, "--security-opt=seccomp=unconfined", NULL);
	snprintf(vol, sizeof(vol), "--volume=%s:/mnt/asf-state:ro", dir);
	recreate(name, NULL, vol);
	verify_break(name, "mounts", "state directory mounted");
	recreate(name, vol, NULL);
	verify_break(name, "", "re-created as up made it");

	/* container.running: stopped. A definite fail; nothing else can be checked, so nothing else is reported. */
	ck_assert_int_eq(sh(&r, "podman", "stop", "--time", "1", ctr), 0);
	{
		cJSON *rep = verify_only(name, "container.running", "container stopped");
		ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(rep, "checks")), 1);
		cJSON_Delete(rep);
	}

	ck_assert_msg(asf(&r, "down", name) == 0, "down: %s%s", r.out, r.err);
	fprintf(stderr, "each_break_fails_its_check: %ld s\n", (long)(time(NULL) - t0));
}
END_TEST

/* ------------------------------------------------------- egress allow-list */

/* CONNECT target through the proxy from inside, as the sandbox user; status line and X-Squid-Error. */
static void proxy_connect(const char *ctr, const char *proxy, int pport, const char *target, char *out, size_t n)
{
	char script[1024];
	run_out r;

	snprintf(script, sizeof(script),
		 "exec 3<>/dev/tcp/%s/%d || exit 9; printf 'CONNECT %%s HTTP/1.1\r\nHost: %%s\r\n\r\n' %s %s >&3; "
		 "while IFS= read -r -t 5 l <&3; do l=${l%%$'\r'}; [ -z \"$l\" ] && break; "
		 "case $l in HTTP/*|X-Squid-Error:*) printf '%%s ' \"$l\";; esac; done",
		 proxy, pport, target, target);
	sh(&r, "podman", "exec", "--user", "1000", ctr, "bash", "-c", script);
	snprintf(out, n, "%.*s", (int)(n - 1), r.out);
	trim(out);
}

static int count_of(const char *text, const char *needle)
{
	int n = 0;

	while ((text = strstr(text, needle))) {
		n++;
		text++;
	}
	return n;
}

/*
 * Rewrite the proxy's config in place (it holds the file open), have it
 * re-read it (SIGHUP), and wait until its log says it listens again on
 * every http_port of the new text. A watchdog of 60 s, not a timing.
 */
static void proxy_reconfigure(const char *conf, const char *text, long pid)
{
	static char log[1 << 20];
	char path[700];
	int before, want, i;

	snprintf(path, sizeof(path), "%.*s/squid.log", (int)(strrchr(conf, '/') - conf), conf);
	read_text(path, log, sizeof(log));
	before = count_of(log, "Accepting HTTP Socket connections");
	want = count_of(text, "\nhttp_port ");
	write_text(conf, text);
	ck_assert_int_eq(kill((pid_t)pid, SIGHUP), 0);
	for (i = 0; i < 600; i++) {
		read_text(path, log, sizeof(log));
		if (count_of(log, "Accepting HTTP Socket connections") >= before + want)
			return;
		usleep(100 * 1000);
	}
	ck_abort_msg("the proxy did not take its new config (%s)", path);
}

START_TEST(egress_allow_list)
{
	char name[64], ws[256], ctr[96], hosts[512], allow[128], gw[64], out[4096], target[128], conf[600];
	char orig[8192], changed[8400], *p;
	int la, pa = 0, lb, pb = 0, lg, pg = 0, pport;
	const cJSON *c, *px;
	cJSON *rep, *st;
	run_out r;
	long ppid = 0;
	struct stat sb;

	snprintf(name, sizeof(name), "e%d-allow", (int)run_id);
	snprintf(ws, sizeof(ws), "%s/ws-allow", top);
	mkdir(ws, 0755);
	snprintf(ctr, sizeof(ctr), "asf-%s", name);

	/* Bad lists: refused before anything exists. */
	asf(&r, "up", "--name", name, "--workspace", ws, "--rootfs", rootfs, "--egress", "allow=");
	ck_assert_msg(r.status == 2 && strstr(r.err, "--egress allow="), "empty list: %d %s", r.status, r.err);
	asf(&r, "up", "--name", name, "--workspace", ws, "--rootfs", rootfs, "--egress", "allow=bad_host!");
	ck_assert_msg(r.status == 2 && strstr(r.err, "\"bad_host!\" is not a host name"), "%s", r.err);
	asf(&r, "up", "--name", name, "--workspace", ws, "--rootfs", rootfs, "--egress", "allow=a.test:0");
	ck_assert_msg(r.status == 2 && strstr(r.err, "PORT must be 1..65535"), "%s", r.err);
	asf(&r, "up", "--name", name, "--workspace", ws, "--rootfs", rootfs, "--egress", "allow=a.test",
	    "--ingress", "exec");
	ck_assert_msg(r.status == 2 && strstr(r.err, "needs --ingress publish"), "%s", r.err);
	asf(&r, "up", "--name", name, "--workspace", ws, "--rootfs", rootfs, "--proxy-hosts", "/etc/hostname");
	ck_assert_msg(r.status == 2 && strstr(r.err, "--proxy-hosts"), "%s", r.err);
	{
		char dir[600];
		snprintf(dir, sizeof(dir), "%s/%s", state, name);
		ck_assert_int_ne(stat(dir, &sb), 0);
	}

	/* A proxy that does not start: up says why (its log) and rolls back. */
	{
		char fake[300], path[400], dir[600];
		snprintf(fake, sizeof(fake), "%s/fakebin", top);
		mkdir(fake, 0755);
		snprintf(path, sizeof(path), "%s/squid", fake);
		write_text(path, "#!/bin/sh\necho 'FATAL: a squid that does not start' >&2\nexit 3\n");
		ck_assert_int_eq(chmod(path, 0755), 0);
		snprintf(path, sizeof(path), "PATH=%s:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", fake);
		sh(&r, "env", path, bin, "--state-dir", state, "up", "--name", name, "--workspace", ws,
		   "--rootfs", rootfs, "--runtime", "runc", "--egress", "allow=a.asf-egress.test");
		ck_assert_msg(r.status == 1 && strstr(r.err, "did not start listening") &&
			      strstr(r.err, "FATAL: a squid that does not start") &&
			      strstr(r.err, "rolled back; nothing is left"),
			      "fake squid: %d %s", r.status, r.err);
		snprintf(dir, sizeof(dir), "%s/%s", state, name);
		ck_assert_int_ne(stat(dir, &sb), 0);
		ck_assert_int_eq(sh(&r, "podman", "container", "exists", ctr), 1);
	}

	/* The listed host and an unlisted one: listeners of ours, named only in the proxy's hosts file. */
	la = listen_on("127.0.0.1", &pa);
	lb = listen_on("127.0.0.1", &pb);
	snprintf(hosts, sizeof(hosts), "%s/proxy-hosts", top);
	write_text(hosts, "# the test's names, for the proxy only\n127.0.0.1 a.asf-egress.test b.asf-egress.test\n");
	/* Their address is the host's loopback, which a listed name reaches only when it is named too. */
	snprintf(allow, sizeof(allow), "allow=a.asf-egress.test:%d,127.0.0.1:%d", pa, pa);
	ck_assert_msg(asf(&r, "up", "--name", name, "--workspace", ws, "--rootfs", rootfs, "--runtime", "runc",
			  "--egress", allow, "--proxy-hosts", hosts, "--json") == 0, "up: %s", r.err);
	st = cJSON_Parse(r.out);
	ck_assert_ptr_nonnull(st);
	ck_assert_str_eq(jstr(st, "egress"), "allow");
	px = cJSON_GetObjectItem(st, "proxy");
	pport = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(px, "port"));
	snprintf(conf, sizeof(conf), "%s", jstr(px, "config"));
	container_gateway(ctr, gw, sizeof(gw));
	ck_assert_str_eq(jstr(px, "address"), gw);
	cJSON_Delete(st);

	/* The proxy listens on the gateway (and, by its pid, nowhere else). */
	ck_assert_int_eq(sh(&r, "ss", "-Hltnp"), 0);
	{
		char want[96], pidpat[32], *line, *save = NULL, *pp;
		int mine = 0;
		snprintf(want, sizeof(want), "%s:%d ", gw, pport);
		for (line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			if (strstr(line, "\"squid\"") && strstr(line, want) && (pp = strstr(line, "pid="))) {
				ppid = strtol(pp + 4, NULL, 10);
				mine++;
			}
		ck_assert_msg(mine == 1 && ppid > 0, "squid is not listening on %s", want);
		ck_assert_int_eq(sh(&r, "ss", "-Hltnp"), 0);
		snprintf(pidpat, sizeof(pidpat), "pid=%ld,", ppid);
		mine = 0;
		for (line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			mine += strstr(line, pidpat) != NULL;
		ck_assert_int_eq(mine, 1);
	}

	rep = verify_only(name, "", "allow-list");
	{
		int seen = 0;
		cJSON_ArrayForEach(c, cJSON_GetObjectItem(rep, "checks"))
			seen += !strcmp(jstr(c, "check"), "egress.proxy") ||
				!strcmp(jstr(c, "check"), "egress.allowed") ||
				!strcmp(jstr(c, "check"), "egress.refused");
		ck_assert_int_eq(seen, 3);
	}
	cJSON_Delete(rep);
	ck_assert_int_ge(accepted_count(la), 1);  /* verify's CONNECT reached the listed listener */
	ck_assert_int_eq(accepted_count(lb), 0);

	/* Our own probes: listed works, unlisted (alive, in the proxy's hosts file) and a wrong port do not. */
	snprintf(target, sizeof(target), "a.asf-egress.test:%d", pa);
	proxy_connect(ctr, gw, pport, target, out, sizeof(out));
	ck_assert_msg(!strncmp(out, "HTTP/1.1 200", 12), "%s: %s", target, out);
	ck_assert_int_eq(accepted_count(la), 1);
	snprintf(target, sizeof(target), "b.asf-egress.test:%d", pb);
	proxy_connect(ctr, gw, pport, target, out, sizeof(out));
	ck_assert_msg(strstr(out, "403") && strstr(out, "ERR_ACCESS_DENIED"), "%s: %s", target, out);
	snprintf(target, sizeof(target), "a.asf-egress.test:%d", pb);
	proxy_connect(ctr, gw, pport, target, out, sizeof(out));
	ck_assert_msg(strstr(out, "403") && strstr(out, "ERR_ACCESS_DENIED"), "%s: %s", target, out);
	ck_assert_int_eq(accepted_count(lb), 0);
	/* Around the proxy: a listener of ours on the gateway, directly. */
	lg = listen_on(gw, &pg);
	snprintf(out, sizeof(out), "exec 3<>/dev/tcp/%s/%d && echo connected", gw, pg);
	sh(&r, "podman", "exec", "--user", "1000", ctr, "timeout", "3", "bash", "-c", out);
	ck_assert_msg(r.status != 0 && !strstr(r.out, "connected"), "direct to %s:%d: %s", gw, pg, r.out);
	ck_assert_int_eq(accepted_count(lg), 0);
	close(lg);

	/* Shown to fail. The listed host down: egress.allowed alone. */
	close(la);
	verify_break(name, "egress.allowed", "listed host down");
	la = listen_on("127.0.0.1", &pa); /* the same port again */
	verify_break(name, "", "listed host back");
	/* The proxy told to allow everything: egress.refused alone. */
	read_text(conf, orig, sizeof(orig));
	p = strstr(orig, "http_access deny all");
	ck_assert_ptr_nonnull(p);
	snprintf(changed, sizeof(changed), "%.*shttp_access allow all\n%s", (int)(p - orig), orig, p);
	proxy_reconfigure(conf, changed, ppid);
	verify_break(name, "egress.refused", "proxy allows all");
	/* Listening on 127.0.0.1 as well: egress.proxy alone. */
	{
		int pl = 0, lp = listen_on("127.0.0.1", &pl);
		close(lp);
		snprintf(changed, sizeof(changed), "%shttp_port 127.0.0.1:%d\n", orig, pl);
	}
	proxy_reconfigure(conf, changed, ppid);
	verify_break(name, "egress.proxy", "proxy also on 127.0.0.1");
	proxy_reconfigure(conf, orig, ppid);
	verify_break(name, "", "proxy config restored");

	ck_assert_msg(asf(&r, "down", name) == 0, "down: %s%s", r.out, r.err);
	ck_assert_msg(strstr(r.out, "proxy") && strstr(r.out, "removed"), "%s", r.out);
	{
		/* Gone, or a zombie until reaped (whose cmdline is empty). */
		char path[64];
		FILE *f;
		snprintf(path, sizeof(path), "/proc/%ld/cmdline", ppid);
		out[0] = '\0';
		if ((f = fopen(path, "r"))) {
			size_t got = fread(out, 1, sizeof(out) - 1, f);
			out[got] = '\0';
			fclose(f);
		}
		ck_assert_msg(!strstr(out, "squid"), "the proxy (pid %ld) still runs", ppid);
	}

	/* An address rather than a name, and no --proxy-hosts: the proxy needs no resolution at all. */
	snprintf(allow, sizeof(allow), "allow=127.0.0.1:%d", pa);
	ck_assert_msg(asf(&r, "up", "--name", name, "--workspace", ws, "--rootfs", rootfs, "--runtime", "runc",
			  "--egress", allow) == 0, "up %s: %s", allow, r.err);
	verify_break(name, "", "allow-list of an address");
	ck_assert_int_ge(accepted_count(la), 1);
	ck_assert_msg(asf(&r, "down", name) == 0, "down: %s%s", r.out, r.err);
	close(la);
	close(lb);
}
END_TEST

/*
 * A listed NAME that resolves to an internal address (here the host's
 * loopback, through the proxy's hosts file) is refused: the proxy checks
 * the address after resolution. Naming the address itself in the list
 * (IP:PORT) lets it through, for that port.
 */
START_TEST(egress_allow_internal)
{
	char name[64], ws[256], ctr[96], hosts[512], allow[256], gw[64], out[4096], target[128];
	int la, pa = 0, lb, pb = 0, pport;
	const cJSON *px;
	cJSON *st;
	run_out r;

	snprintf(name, sizeof(name), "e%d-internal", (int)run_id);
	snprintf(ws, sizeof(ws), "%s/ws-internal", top);
	mkdir(ws, 0755);
	snprintf(ctr, sizeof(ctr), "asf-%s", name);
	la = listen_on("127.0.0.1", &pa);
	lb = listen_on("127.0.0.1", &pb);
	snprintf(hosts, sizeof(hosts), "%s/proxy-hosts-internal", top);
	/* c and d: other spellings of the host's loopback (0.0.0.0 connects there; IPv4-mapped). */
	write_text(hosts, "127.0.0.1 a.asf-egress.test b.asf-egress.test\n0.0.0.0 c.asf-egress.test\n"
			  "::ffff:127.0.0.1 d.asf-egress.test\n");
	/* a, c, d: listed by name only; b: listed by name and its address named too. */
	snprintf(allow, sizeof(allow), "allow=a.asf-egress.test:%d,b.asf-egress.test:%d,127.0.0.1:%d,"
		 "c.asf-egress.test:%d,d.asf-egress.test:%d", pa, pb, pb, pa, pa);
	ck_assert_msg(asf(&r, "up", "--name", name, "--workspace", ws, "--rootfs", rootfs, "--runtime", "runc",
			  "--egress", allow, "--proxy-hosts", hosts, "--json") == 0, "up: %s", r.err);
	st = cJSON_Parse(r.out);
	ck_assert_ptr_nonnull(st);
	px = cJSON_GetObjectItem(st, "proxy");
	pport = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(px, "port"));
	container_gateway(ctr, gw, sizeof(gw));
	cJSON_Delete(st);

	snprintf(target, sizeof(target), "a.asf-egress.test:%d", pa);
	proxy_connect(ctr, gw, pport, target, out, sizeof(out));
	ck_assert_msg(strstr(out, "403") && strstr(out, "ERR_ACCESS_DENIED"), "listed name -> 127.0.0.1: %s: %s",
		      target, out);
	ck_assert_int_eq(accepted_count(la), 0);
	snprintf(target, sizeof(target), "c.asf-egress.test:%d", pa);
	proxy_connect(ctr, gw, pport, target, out, sizeof(out));
	ck_assert_msg(strstr(out, "403") && strstr(out, "ERR_ACCESS_DENIED"), "listed name -> 0.0.0.0: %s: %s",
		      target, out);
	snprintf(target, sizeof(target), "d.asf-egress.test:%d", pa);
	proxy_connect(ctr, gw, pport, target, out, sizeof(out));
	ck_assert_msg(strstr(out, "403") && strstr(out, "ERR_ACCESS_DENIED"), "listed name -> ::ffff:127.0.0.1: %s: %s",
		      target, out);
	ck_assert_int_eq(accepted_count(la), 0);
	snprintf(target, sizeof(target), "b.asf-egress.test:%d", pb);
	proxy_connect(ctr, gw, pport, target, out, sizeof(out));
	ck_assert_msg(!strncmp(out, "HTTP/1.1 200", 12), "%s (127.0.0.1 named): %s", target, out);
	ck_assert_int_eq(accepted_count(lb), 1);
	snprintf(target, sizeof(target), "127.0.0.1:%d", pb);
	proxy_connect(ctr, gw, pport, target, out, sizeof(out));
	ck_assert_msg(!strncmp(out, "HTTP/1.1 200", 12), "%s: %s", target, out);
	ck_assert_int_eq(accepted_count(lb), 1);
	/* The named address is let through for its own port only. */
	snprintf(target, sizeof(target), "127.0.0.1:%d", pa);
	proxy_connect(ctr, gw, pport, target, out, sizeof(out));
	ck_assert_msg(strstr(out, "403"), "%s: %s", target, out);
	ck_assert_int_eq(accepted_count(la), 0);
	/* The sandbox's gateway is the host's own address: refused by name too. */
	{
		char hosts2[256];
		int lg, pg = 0;
		lg = listen_on(gw, &pg);
		ck_assert_msg(asf(&r, "down", name) == 0, "down: %s%s", r.out, r.err);
		snprintf(hosts2, sizeof(hosts2), "%s g.asf-egress.test\n", gw);
		write_text(hosts, hosts2);
		snprintf(allow, sizeof(allow), "allow=g.asf-egress.test:%d", pg);
		ck_assert_msg(asf(&r, "up", "--name", name, "--workspace", ws, "--rootfs", rootfs, "--runtime", "runc",
				  "--egress", allow, "--proxy-hosts", hosts, "--json") == 0, "up: %s", r.err);
		st = cJSON_Parse(r.out);
		ck_assert_ptr_nonnull(st);
		pport = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(st, "proxy"), "port"));
		/* The gateway is private anyway; the host's own addresses are listed by address as well. */
		{
			static char conftext[1 << 16];
			char want[96];
			read_text(jstr(cJSON_GetObjectItem(st, "proxy"), "config"), conftext, sizeof(conftext));
			snprintf(want, sizeof(want), "\nacl asf_internal dst %s\n", gw);
			ck_assert_msg(strstr(conftext, want), "the host's address %s not in asf_internal", gw);
		}
		cJSON_Delete(st);
		container_gateway(ctr, out, sizeof(out));
		ck_assert_str_eq(out, gw);
		snprintf(target, sizeof(target), "g.asf-egress.test:%d", pg);
		proxy_connect(ctr, gw, pport, target, out, sizeof(out));
		ck_assert_msg(strstr(out, "403") && strstr(out, "ERR_ACCESS_DENIED"), "listed name -> gateway: %s: %s",
			      target, out);
		ck_assert_int_eq(accepted_count(lg), 0);
		close(lg);
	}
	ck_assert_msg(asf(&r, "down", name) == 0, "down: %s%s", r.out, r.err);
	close(la);
	close(lb);
}
END_TEST

/* ------------------------------------------------------------ rootless */

#define RL_USER "asp-egress-rootless"

static char rl_home[256], rl_env_home[300], rl_env_xdg[300];

/* Run argv as RL_USER (runuser), with a login-like environment of its own. */
static int as_user(run_out *r, const char *first, ...)
{
	char *argv[64];
	const char *s = first;
	va_list ap;
	int n = 0;

	argv[n++] = "runuser";
	argv[n++] = "-u";
	argv[n++] = RL_USER;
	argv[n++] = "--";
	argv[n++] = "env";
	argv[n++] = "-i";
	argv[n++] = "PATH=/usr/local/bin:/usr/bin:/bin"; /* no sbin: asf-provision finds nft and ip itself */
	argv[n++] = rl_env_home;
	argv[n++] = rl_env_xdg;
	va_start(ap, first);
	while (s && n < 63) {
		argv[n++] = (char *)s;
		s = va_arg(ap, const char *);
	}
	va_end(ap);
	argv[n] = NULL;
	return runv(r, argv);
}
#define user(r, ...) as_user(r, __VA_ARGS__, (char *)NULL)

/* Kill what the user still runs (Podman's pause process), by pid; remove the user and its runtime dir. */
static void rootless_cleanup(void)
{
	char *line, *save = NULL;
	run_out r;
	struct passwd *pw = getpwnam(RL_USER);

	if (!pw)
		return;
	user(&r, "podman", "rm", "--all", "--force");
	if (sh(&r, "pgrep", "-u", RL_USER) == 0)
		for (line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			kill((pid_t)strtol(line, NULL, 10), SIGKILL);
	usleep(200 * 1000);
	snprintf(rl_env_xdg, sizeof(rl_env_xdg), "/run/user/%d", (int)pw->pw_uid);
	sh(&r, "rm", "-rf", rl_env_xdg);
	sh(&r, "userdel", "--remove", RL_USER);
}

static int strict(void)
{
	return getenv("ASF_REQUIRE_PODMAN") && !strcmp(getenv("ASF_REQUIRE_PODMAN"), "1");
}

/*
 * verify NAME as the rootless user: every check passes but those listed in
 * want_fail (cgroup v1: limits); unpriv: the checks of --unprivileged ran.
 */
static void rootless_verify(const char *bin_u, const char *name, const char *want_fail, int unpriv)
{
	const cJSON *c;
	cJSON *rep;
	run_out r;

	user(&r, bin_u, "verify", name, "--json");
	rep = cJSON_Parse(r.out);
	ck_assert_msg(rep != NULL, "rootless verify %s: %s %s", name, r.out, r.err);
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(rep, "checks")) {
		const char *check = jstr(c, "check");
		ck_assert_msg(!strcmp(jstr(c, "status"), listed(want_fail, check) ? "fail" : "pass"),
			      "rootless %s: %s %s: %s", name, check, jstr(c, "status"), jstr(c, "evidence"));
		if (!strcmp(check, "limits") && want_fail[0])
			ck_assert_ptr_nonnull(strstr(jstr(c, "evidence"), "cgroup v1"));
		if (unpriv && (!strcmp(check, "caps.bounding") || !strcmp(check, "hostkey.private")))
			ck_assert_msg(strstr(jstr(c, "evidence"), "unprivileged:") != NULL, "%s: %s", check,
				      jstr(c, "evidence"));
	}
	ck_assert_int_eq(r.status, want_fail[0] ? 1 : 0);
	ck_assert_int_ge(cJSON_GetArraySize(cJSON_GetObjectItem(rep, "checks")), 20);
	cJSON_Delete(rep);
}

START_TEST(rootless_exec_ingress)
{
	char bin_u[300], mk[300], rfs[300], ws[300], xdg[64], want_fail[32];
	const char *need[] = { "/usr/bin/newuidmap", "/usr/bin/newgidmap", "/usr/sbin/useradd" };
	struct passwd *pw;
	struct stat sb;
	run_out r;
	cJSON *rep, *st;
	const cJSON *c;
	size_t i;
	long pid;

	for (i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if (access(need[i], X_OK)) {
			ck_assert_msg(!strict(), "rootless: %s missing (ASF_REQUIRE_PODMAN=1)", need[i]);
			fprintf(stderr, "rootless_exec_ingress: SKIPPED: %s missing\n", need[i]);
			return;
		}
	rootless_cleanup(); /* a previous run that died half-way */
	ck_assert_msg(sh(&r, "useradd", "--create-home", "--shell", "/bin/bash", RL_USER) == 0, "useradd: %s", r.err);
	ck_assert_ptr_nonnull(pw = getpwnam(RL_USER));
	/* Subordinate ids: useradd assigns them where login.defs says so; otherwise add a range. */
	if (sh(&r, "grep", "-q", "^" RL_USER ":", "/etc/subuid") != 0)
		ck_assert_msg(sh(&r, "usermod", "--add-subuids", "3100000-3165535", "--add-subgids", "3100000-3165535",
				 RL_USER) == 0, "usermod: %s", r.err);
	snprintf(rl_home, sizeof(rl_home), "%s", pw->pw_dir);
	snprintf(rl_env_home, sizeof(rl_env_home), "HOME=%s", pw->pw_dir);
	snprintf(xdg, sizeof(xdg), "/run/user/%d", (int)pw->pw_uid);
	snprintf(rl_env_xdg, sizeof(rl_env_xdg), "XDG_RUNTIME_DIR=%s", xdg);
	mkdir("/run/user", 0755);
	ck_assert_int_eq(mkdir(xdg, 0700), 0);
	ck_assert_int_eq(chown(xdg, pw->pw_uid, pw->pw_gid), 0);
	/* The user's own copies (our tree may not be readable to it). */
	snprintf(bin_u, sizeof(bin_u), "%s/asf-provision", rl_home);
	snprintf(mk, sizeof(mk), "%s/mkrootfs.sh", rl_home);
	snprintf(rfs, sizeof(rfs), "%s/rootfs", rl_home);
	snprintf(ws, sizeof(ws), "%s/ws", rl_home);
	ck_assert_int_eq(sh(&r, "install", "-o", RL_USER, "-m", "0755", bin, bin_u), 0);
	ck_assert_int_eq(sh(&r, "install", "-o", RL_USER, "-m", "0644", mkrootfs, mk), 0);
	ck_assert_int_eq(user(&r, "mkdir", "-p", ws), 0);
	/* Built inside Podman's user namespace: files of its root (the user), agent's 1000 mapped. */
	ck_assert_msg(user(&r, "podman", "unshare", "sh", mk, rfs) == 0, "mkrootfs as %s: %s%s", RL_USER, r.out, r.err);

	/* Publish ingress is refused, clearly, with nothing made. */
	user(&r, bin_u, "up", "--name", "rl", "--workspace", ws, "--rootfs", rfs, "--runtime", "runc");
	ck_assert_msg(r.status == 2 && strstr(r.err, "--ingress publish needs rootful Podman"), "%d %s", r.status,
		      r.err);

	ck_assert_msg(user(&r, bin_u, "up", "--name", "rl", "--workspace", ws, "--rootfs", rfs, "--runtime", "runc",
			   "--ingress", "exec", "--json") == 0, "rootless up: %s", r.err);
	st = cJSON_Parse(r.out);
	ck_assert_ptr_nonnull(st);
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(st, "rootless")));
	cJSON_Delete(st);
	/* The workspace belongs to the sandbox user inside: a subordinate uid on the host. */
	ck_assert_int_eq(stat(ws, &sb), 0);
	ck_assert_uint_ne(sb.st_uid, pw->pw_uid);
	ck_assert_uint_ne(sb.st_uid, 1000);

	/* cgroup v1 (this host): Podman cannot enforce limits rootless, and verify says so. */
	snprintf(want_fail, sizeof(want_fail), "%s",
		 access("/sys/fs/cgroup/cgroup.controllers", F_OK) ? "limits" : "");
	rootless_verify(bin_u, "rl", want_fail, 0);

	/* A probe shown to fail rootless too: the firewall, removed through the user namespace. */
	ck_assert_int_eq(user(&r, "podman", "inspect", "--format", "{{.State.Pid}}", "asf-rl"), 0);
	pid = strtol(r.out, NULL, 10);
	{
		char spid[32];
		snprintf(spid, sizeof(spid), "--target=%ld", pid);
		ck_assert_msg(user(&r, "nsenter", spid, "--user", "--net", "/usr/sbin/nft", "delete", "table", "inet",
				   "asf_egress") == 0, "nft as %s: %s", RL_USER, r.err);
	}
	user(&r, bin_u, "verify", "rl", "--json");
	rep = cJSON_Parse(r.out);
	ck_assert_ptr_nonnull(rep);
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(rep, "checks")) {
		const char *check = jstr(c, "check");
		int should_fail = !strcmp(check, "egress.firewall") || listed(want_fail, check);
		ck_assert_msg(!strcmp(jstr(c, "status"), should_fail ? "fail" : "pass"),
			      "rootless, no firewall: %s %s: %s", check, jstr(c, "status"), jstr(c, "evidence"));
	}
	cJSON_Delete(rep);

	ck_assert_msg(user(&r, bin_u, "down", "rl") == 0, "rootless down: %s%s", r.out, r.err);
	ck_assert_ptr_nonnull(strstr(r.out, "nothing left"));
	ck_assert_int_eq(stat(ws, &sb), 0);
	ck_assert_uint_eq(sb.st_uid, pw->pw_uid); /* given back */

	/*
	 * --unprivileged, rootless: sshd is the agent inside the user namespace, the host key's
	 * chown to its group is made there (podman unshare), and verify's checks of that mode pass.
	 */
	ck_assert_msg(user(&r, bin_u, "up", "--name", "rlu", "--workspace", ws, "--rootfs", rfs, "--runtime", "runc",
			   "--ingress", "exec", "--unprivileged", "--json") == 0, "rootless up --unprivileged: %s",
		      r.err);
	rootless_verify(bin_u, "rlu", want_fail, 1);
	ck_assert_msg(user(&r, bin_u, "down", "rlu") == 0, "rootless down --unprivileged: %s%s", r.out, r.err);
	ck_assert_int_eq(stat(ws, &sb), 0);
	ck_assert_uint_eq(sb.st_uid, pw->pw_uid); /* given back */
	ck_assert_int_eq(user(&r, "podman", "ps", "--all", "--quiet"), 0);
	ck_assert_msg(!r.out[0], "containers left: %s", r.out);
	rootless_cleanup();
	ck_assert_ptr_null(getpwnam(RL_USER));
}
END_TEST

/* ------------------------------------------------------------------ setup */

static void cleanup(void)
{
	const char *suffixes[] = { "probes", "allow" };
	char name[64];
	run_out r;
	size_t i;

	if (getpid() != run_id)
		return;
	if (bridge_localnet[0]) { /* each_break_fails_its_check stopped with the host side open */
		sh(&r, "nft", "delete", "table", "ip", "asf_egress_break_host");
		write_text(bridge_localnet, bridge_localnet_was);
	}
	rootless_cleanup();
	for (i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		snprintf(name, sizeof(name), "e%d-%s", (int)run_id, suffixes[i]);
		asf(&r, "down", name);
	}
	if (top[0])
		sh(&r, "rm", "-rf", top);
}

static int usable(char *why, size_t n)
{
	run_out r;

	if (geteuid() != 0) {
		snprintf(why, n, "not root (rootful Podman, nsenter and nft need it)");
		return 0;
	}
	if (sh(&r, "podman", "version") != 0) {
		snprintf(why, n, "podman does not run: %.400s", r.err);
		return 0;
	}
	if (sh(&r, "runc", "--version") != 0) {
		snprintf(why, n, "runc is not installed");
		return 0;
	}
	return 1;
}

int main(void)
{
	const char *env = getenv("ASF_PROVISION");
	char why[512];
	SRunner *sr;
	Suite *s;
	TCase *tc;
	run_out r;
	int failed;

	run_id = getpid();
	if (!usable(why, sizeof(why))) {
		printf("test-probes: SKIPPED: %s\n", why);
		return getenv("ASF_REQUIRE_PODMAN") && !strcmp(getenv("ASF_REQUIRE_PODMAN"), "1") ? 1 : 0;
	}
	if (!realpath(env ? env : "build/bin/asf-provision", bin)) {
		fprintf(stderr, "test-probes: no asf-provision binary; run make first\n");
		return 1;
	}
	if (!realpath(getenv("ASF_MKROOTFS") ? getenv("ASF_MKROOTFS") : "tools/asf-provision/mkrootfs.sh",
		      mkrootfs)) {
		fprintf(stderr, "test-probes: no mkrootfs.sh\n");
		return 1;
	}
	snprintf(top, sizeof(top), "/tmp/asf-egress-test.XXXXXX");
	if (!mkdtemp(top) || chmod(top, 0755))
		return 1;
	snprintf(state, sizeof(state), "%s/state", top);
	snprintf(rootfs, sizeof(rootfs), "%s/rootfs", top);
	if (sh(&r, "sh", mkrootfs, rootfs) != 0) {
		fprintf(stderr, "test-probes: building the rootfs failed: %s%s\n", r.out, r.err);
		sh(&r, "rm", "-rf", top);
		return 1;
	}
	atexit(cleanup);

	s = suite_create("probes");
	tc = tcase_create("podman");
	tcase_set_timeout(tc, 600);
	{
		const TTest *all[] = { each_break_fails_its_check, egress_allow_list, egress_allow_internal,
				       rootless_exec_ingress };
		const char *only = getenv("ASF_TEST_ONLY");
		size_t i;

		for (i = 0; i < sizeof(all) / sizeof(all[0]); i++)
			if (!only || !*only || listed(only, all[i]->name))
				tcase_add_test(tc, all[i]);
	}
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
