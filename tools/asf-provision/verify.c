/*
 * verify.c - `asf-provision verify NAME`: evidence, from inside the running
 * sandbox (through libasp and the written .asp.json) and from the host
 * (podman inspect, the container's network namespace), that the sandbox
 * is what `up` promised.
 *
 * Every check ends as pass, fail or error. "error" means the check could
 * not be made (podman broken, container stopped, no SSH session, a probe
 * that cannot run); it is never counted as a pass.
 *
 * Network rule for the probes: a TCP probe only ever targets a listener
 * this command started itself on the host (the sandbox network's gateway
 * and 127.0.0.1), or an address for which a route lookup inside the
 * sandbox's namespace found no route - there connect() fails with
 * ENETUNREACH before any packet exists. A probe whose route lookup finds
 * a route is not run; the check fails with the route as evidence. The one
 * exception is egress.allowed (--egress allow): it reaches the listed
 * hosts, through the proxy, as the sandbox is meant to.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <asp.h>

#include "asf.h"

#define PROBE_PRIVATE "192.168.1.1"  /* a typical LAN router */
#define PROBE_PUBLIC  "8.8.8.8"      /* a public resolver */
#define PROBE_PUBLIC6 "2001:4860:4860::8888"

typedef struct vctx {
	const char *name;
	cJSON *st;
	cJSON *inspect;      /* podman inspect (the container object) */
	cJSON *checks;
	asp_sandbox *sb;     /* NULL when SSH did not work */
	long pid;            /* container init pid; 0 when not running */
	int exec_ingress;
	const cJSON *allow;  /* --egress allow: "host:port" strings; NULL for none */
	const cJSON *proxy;  /* state.proxy: address, port, config */
	int probe_ok;        /* the TCP probe itself works (control) */
	int npass, nfail, nerr;
} vctx;

static void check(vctx *v, const char *name, const char *status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void check(vctx *v, const char *name, const char *status, const char *fmt, ...)
{
	char ev[4096];
	cJSON *c = cJSON_CreateObject();
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ev, sizeof(ev), fmt, ap);
	va_end(ap);
	cJSON_AddStringToObject(c, "check", name);
	cJSON_AddStringToObject(c, "status", status);
	cJSON_AddStringToObject(c, "evidence", ev);
	cJSON_AddItemToArray(v->checks, c);
	if (!strcmp(status, "pass"))
		v->npass++;
	else if (!strcmp(status, "fail"))
		v->nfail++;
	else
		v->nerr++;
}

/* ------------------------------------------------------------ helpers */

/* One line: newlines become " | ", trailing space trimmed. */
static void flatten(char *s)
{
	size_t n;
	char *p;

	for (p = s; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = ' ';
	n = strlen(s);
	while (n && s[n - 1] == ' ')
		s[--n] = '\0';
}

typedef struct sres {
	int ran;          /* 0: no session or asp_exec failed (msg in out) */
	int code;
	int timed_out;
	char out[8192];   /* stdout */
	char err[2048];   /* stderr */
} sres;

/* Run shell text in the sandbox as the sandbox user, through libasp. */
static void in_sandbox(vctx *v, sres *r, const char *cmd, unsigned int timeout_ms)
{
	asp_exec_options o = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *res = NULL;
	asp_error aerr = { 0 };
	const unsigned char *d;
	size_t len;

	memset(r, 0, sizeof(*r));
	if (!v->sb) {
		str_fmt(r->err, sizeof(r->err), "no SSH session to the sandbox");
		return;
	}
	o.kill_after_ms = timeout_ms;
	o.kill_grace_ms = 500;
	if (asp_exec(&res, v->sb, cmd, &o, &aerr)) {
		str_fmt(r->err, sizeof(r->err), "asp_exec: %s", aerr.message);
		return;
	}
	r->ran = 1;
	r->code = asp_exec_result_exit_code(res);
	r->timed_out = asp_exec_result_timed_out(res);
	d = asp_exec_result_output(res, ASP_STDOUT, &len);
	str_fmt(r->out, sizeof(r->out), "%.*s", (int)(len < sizeof(r->out) ? len : sizeof(r->out) - 1), d);
	d = asp_exec_result_output(res, ASP_STDERR, &len);
	str_fmt(r->err, sizeof(r->err), "%.*s", (int)(len < sizeof(r->err) ? len : sizeof(r->err) - 1), d);
	asp_exec_result_free(res);
}

/* Run a host program inside the container's network namespace. */
static int in_netns(vctx *v, asf_out *o, asf_err *e, const char *const *args)
{
	asf_argv a = { 0 };
	size_t i;
	int rc;

	netns_argv(&a, v->pid);
	for (i = 0; args[i]; i++)
		argv_add(&a, args[i]);
	rc = a.oom ? asf_fail(e, "out of memory") : asf_run(o, a.v, 30, e);
	argv_free(&a);
	return rc;
}

/*
 * Route lookup in the sandbox's namespace (no packet is sent).
 * 1: a route exists (text in out), 0: unreachable, -1: lookup failed.
 */
static int route_exists(vctx *v, const char *addr, char *out, size_t outlen)
{
	const char *args[] = { "ip", "-4", "-o", "route", "get", addr, NULL };
	asf_out o;
	asf_err e;
	int rc;

	if (in_netns(v, &o, &e, args)) {
		str_fmt(out, outlen, "%s", e.msg);
		return -1;
	}
	str_fmt(out, outlen, "%s", o.status == 0 ? o.out : o.err);
	flatten(out);
	if (o.status == 0)
		rc = 1;
	else if (strstr(o.err, "unreachable"))
		rc = 0;
	else
		rc = -1;
	out_free(&o);
	return rc;
}

/* A TCP listener on addr (port chosen by the kernel); -1 on failure. */
static int listener(const char *addr, int *port)
{
	struct sockaddr_in sa = { 0 };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	sa.sin_family = AF_INET;
	if (fd < 0 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

/* A UDP socket on addr (port chosen by the kernel); -1 on failure. */
static int udp_listener(const char *addr, int *port)
{
	struct sockaddr_in sa = { 0 };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	sa.sin_family = AF_INET;
	if (fd < 0 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || getsockname(fd, (struct sockaddr *)&sa, &len)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

/* How many datagrams arrived (all read). */
static int datagrams(int fd)
{
	char buf[512];
	int n = 0;

	while (recv(fd, buf, sizeof(buf), 0) >= 0)
		n++;
	return n;
}

/* How many connections reached the listener (all accepted and closed). */
static int accepted(int fd)
{
	int n = 0, c;

	while ((c = accept4(fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		close(c);
		n++;
	}
	return n;
}

/* A TCP connect from inside; "connected" or the error bash printed. */
static void tcp_probe(vctx *v, sres *r, const char *addr, int port)
{
	char cmd[256];

	str_fmt(cmd, sizeof(cmd), "bash -c 'exec 3<>/dev/tcp/%s/%d && echo connected' 2>&1", addr, port);
	in_sandbox(v, r, cmd, 3000);
	flatten(r->out);
}

static int probe_connected(const sres *r)
{
	return r->ran && !r->timed_out && strstr(r->out, "connected") && !strstr(r->out, "connect:");
}

/* ------------------------------------------------------------ host side */

static int check_container(vctx *v)
{
	asf_out o;
	asf_err e = { "" };
	const char *ctr = js(v->st, "container");
	const cJSON *state;

	if (podman_ready(&e)) {
		check(v, "container.running", "error", "%s", e.msg);
		return -1;
	}
	if (podman(&o, &e, "inspect", "--type", "container", ctr, (char *)NULL)) {
		check(v, "container.running", "error", "%s", e.msg);
		return -1;
	}
	v->inspect = cJSON_Parse(o.out);
	out_free(&o);
	if (!cJSON_IsArray(v->inspect) || !cJSON_GetArrayItem(v->inspect, 0)) {
		check(v, "container.running", "error", "%s inspect %s: unexpected output", asf_engine, ctr);
		return -1;
	}
	state = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(v->inspect, 0), "State");
	v->pid = (long)jn(state, "Pid", 0);
	if (!jb(state, "Running") || v->pid <= 0) {
		/* A definite answer, not a check that could not be made: the sandbox is not up. */
		check(v, "container.running", "fail", "container %s is %s, not running; nothing else checked", ctr,
		      js(state, "Status") ? js(state, "Status") : "?");
		v->pid = 0;
		return -1;
	}
	check(v, "container.running", "pass", "container %s running, pid %ld, runtime %s", ctr, v->pid,
	      js(cJSON_GetArrayItem(v->inspect, 0), "OCIRuntime") ?
	      js(cJSON_GetArrayItem(v->inspect, 0), "OCIRuntime") : "?");
	return 0;
}

static const cJSON *inspect_item(vctx *v, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(v->inspect, 0), key);
}

/* The sandbox network's gateway (the host's address on its bridge), or NULL. */
static const char *gateway(vctx *v)
{
	const cJSON *nets = cJSON_GetObjectItemCaseSensitive(inspect_item(v, "NetworkSettings"), "Networks");
	const char *gw = js(cJSON_GetArrayItem(nets, 0), "Gateway");

	return gw && *gw ? gw : NULL;
}

static void check_firewall(vctx *v)
{
	const char *args[] = { "nft", "list", "table", "inet", ASF_NFT_TABLE, NULL };
	char *out_chain, want[160] = "";
	asf_out o;
	asf_err e;
	int proxy_rule = 1, drops;

	if (in_netns(v, &o, &e, args)) {
		check(v, "egress.firewall", "error", "%s", e.msg);
		return;
	}
	if (o.status != 0) {
		flatten(o.err);
		check(v, "egress.firewall", "fail", "no table inet " ASF_NFT_TABLE " in the sandbox's "
		      "network namespace: %s", o.err);
		out_free(&o);
		return;
	}
	out_chain = nft_chain_text(o.out, "output");
	drops = nft_drops_by_default(o.out);
	flatten(o.out);
	if (v->allow) {
		str_fmt(want, sizeof(want), "ip daddr %s tcp dport %d ct state new accept",
			js(v->proxy, "address") ? js(v->proxy, "address") : "?", (int)jn(v->proxy, "port", 0));
		proxy_rule = out_chain && strstr(out_chain, want);
	}
	if (drops && proxy_rule)
		check(v, "egress.firewall", "pass", "nftables in the sandbox's netns: %s", o.out);
	else if (!proxy_rule)
		check(v, "egress.firewall", "fail", "no rule \"%s\" for the egress proxy: %s", want, o.out);
	else
		check(v, "egress.firewall", "fail", "ruleset does not drop by default: %s", o.out);
	free(out_chain);
	out_free(&o);
}

static void check_topology(vctx *v)
{
	const char *routes[] = { "ip", "-4", "-o", "route", "show", NULL };
	const char *links[] = { "ip", "-o", "link", "show", NULL };
	char ifs[512] = "";
	asf_out o, l;
	asf_err e;
	char *line, *save = NULL;
	int has_default;

	if (in_netns(v, &o, &e, routes) || in_netns(v, &l, &e, links)) {
		check(v, "network.topology", "error", "%s", e.msg);
		return;
	}
	for (line = strtok_r(l.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[64];
		if (sscanf(line, "%*d: %63[^:@]", name) == 1)
			str_fmt(ifs + strlen(ifs), sizeof(ifs) - strlen(ifs), "%s%s", ifs[0] ? "," : "", name);
	}
	has_default = strstr(o.out, "default") != NULL;
	flatten(o.out);
	if (v->exec_ingress) {
		if (!strcmp(ifs, "lo") && !o.out[0])
			check(v, "network.topology", "pass", "interfaces: %s; no routes (network none)", ifs);
		else
			check(v, "network.topology", "fail", "interfaces: %s; routes: %s (expected lo only)", ifs,
			      o.out);
	} else if (!has_default) {
		check(v, "network.topology", "pass", "interfaces: %s; routes: %s; no default route", ifs, o.out);
	} else {
		check(v, "network.topology", "fail", "interfaces: %s; routes: %s; a default route exists%s", ifs,
		      o.out, jb(v->st, "default_route_removed") ? "" :
		      " (kept for a non-loopback --publish: only the firewall blocks egress)");
	}
	out_free(&o);
	out_free(&l);
}

/* Does `ip -o` output (addr: "N: IFNAME ..." lines; route: "... dev IFNAME ...") name an interface but lo? */
static int beyond_lo(const char *text, int addr)
{
	const char *line = text;

	while (*line) {
		size_t n = strcspn(line, "\n");
		char ifname[64] = "";
		const char *dev;
		if (addr)
			sscanf(line, "%*d: %63s", ifname);
		else if ((dev = strstr(line, " dev ")) && (size_t)(dev - line) < n)
			sscanf(dev, " dev %63s", ifname);
		if (n && strcmp(ifname, "lo"))
			return 1;
		line += n + (line[n] == '\n');
	}
	return 0;
}

/*
 * IPv6, which the checks above (ip -4) do not see: no IPv6 address and no
 * IPv6 route on any interface but lo, and no route to a public IPv6 address.
 * `up` disables IPv6 in the namespace by sysctl; the values are evidence.
 */
static void check_ipv6(vctx *v)
{
	const char *sysctl[] = { "cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6",
				 "/proc/sys/net/ipv6/conf/default/disable_ipv6", NULL };
	const char *addrs[] = { "ip", "-6", "-o", "addr", "show", NULL };
	const char *routes[] = { "ip", "-6", "-o", "route", "show", NULL };
	const char *get[] = { "ip", "-6", "-o", "route", "get", PROBE_PUBLIC6, NULL };
	asf_out s, a, r, g;
	asf_err e;
	int ok;

	if (in_netns(v, &s, &e, sysctl)) {
		check(v, "network.ipv6", "error", "%s", e.msg);
		return;
	}
	if (in_netns(v, &a, &e, addrs) || in_netns(v, &r, &e, routes) || in_netns(v, &g, &e, get)) {
		check(v, "network.ipv6", "error", "%s", e.msg);
		out_free(&s);
		return;
	}
	/* Loopback's ::1 is no way out (like 127.0.0.1); any other address or route is. */
	ok = a.status == 0 && !beyond_lo(a.out, 1) && r.status == 0 && !beyond_lo(r.out, 0) && g.status != 0;
	flatten(s.out);
	flatten(a.out);
	flatten(r.out);
	flatten(g.out);
	flatten(g.err);
	/* A kernel without IPv6 has no /proc/sys/net/ipv6 and no addresses: that passes too. */
	check(v, "network.ipv6", ok ? "pass" : "fail",
	      "in the sandbox's netns: disable_ipv6 (all, default) %s; IPv6 addresses: %s; IPv6 routes: %s; "
	      "route lookup for %s: %s", s.status == 0 ? s.out : "(no IPv6 in this kernel)",
	      a.out[0] ? a.out : "none", r.out[0] ? r.out : "none", PROBE_PUBLIC6, g.status ? g.err : g.out);
	out_free(&s);
	out_free(&a);
	out_free(&r);
	out_free(&g);
}

static void check_mounts(vctx *v)
{
	const cJSON *m, *mounts = inspect_item(v, "Mounts");
	char dir[4200], list[3000] = "";
	const char *key = js(v->st, "identity");
	int bad = 0;

	state_dir(dir, sizeof(dir), v->name);
	cJSON_ArrayForEach(m, mounts) {
		const char *src = js(m, "Source"), *dst = js(m, "Destination");
		size_t n;
		if (!src || !dst)
			continue;
		n = strlen(src);
		str_fmt(list + strlen(list), sizeof(list) - strlen(list), "%s%s->%s(%s)", list[0] ? ", " : "",
			src, dst, jb(m, "RW") ? "rw" : "ro");
		/* The client key (or the directory holding it) must not be visible inside. */
		if (key && !strncmp(key, src, n) && (key[n] == '/' || key[n] == '\0'))
			bad = 1;
		if (!strcmp(src, dir) || strstr(src, "podman.sock") || strstr(src, "docker.sock"))
			bad = 1;
	}
	check(v, "mounts", bad ? "fail" : "pass", "%s%s", list,
	      bad ? " - the client key, the state directory or a container socket is mounted" :
	      "; the client key and the state directory are not mounted");
}

/* ------------------------------------------------------------ inside */

/*
 * The harness's .asp.json (--out) is still what `up` wrote: compared with
 * the copy in the state directory, read without following a link, without
 * blocking, bounded. It is never opened as a config here.
 */
static void check_config(vctx *v, const char *copy)
{
	const char *out = js(v->st, "config");
	char *a = NULL, *b = NULL;
	asf_err e = { "" };
	struct stat sb;
	int fd;

	if (!out) {
		check(v, "config", "fail", "no config in the state");
		return;
	}
	if (!(b = read_file(copy, ASF_CONFIG_MAX, NULL, &e))) {
		check(v, "config", "error", "%s", e.msg);
		return;
	}
	if (!strcmp(out, copy)) {
		check(v, "config", "pass", "%s is in the state directory (no --out)", out);
	} else if ((fd = open_regular(AT_FDCWD, out, out, &sb, &e)) < 0) {
		check(v, "config", "fail", "%s", e.msg);
	} else {
		a = read_fd(fd, out, ASF_CONFIG_MAX, NULL, &e);
		close(fd);
		if (!a)
			check(v, "config", "fail", "%s", e.msg);
		else if (strcmp(a, b))
			check(v, "config", "fail", "%s differs from %s, the config up wrote", out, copy);
		else if (sb.st_uid != geteuid() || (sb.st_mode & 022))
			check(v, "config", "fail", "%s: owner uid %d, mode %04o: others could change it", out,
			      (int)sb.st_uid, (unsigned int)(sb.st_mode & 07777));
		else
			check(v, "config", "pass", "%s is a regular file of uid %d, mode %04o, identical to %s",
			      out, (int)sb.st_uid, (unsigned int)(sb.st_mode & 07777), copy);
	}
	free(a);
	free(b);
}

static int check_ssh(vctx *v)
{
	asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox_info info = ASP_SANDBOX_INFO_INIT;
	asp_error aerr = { 0 };
	const char *fpr = js(v->st, "host_key_fingerprint");
	char cfg[4400];
	sres r;

	/* The copy in the 0700 state directory: nobody else can have swapped it. */
	state_dir(cfg, sizeof(cfg), v->name);
	strncat(cfg, "/asp.json", sizeof(cfg) - strlen(cfg) - 1);
	check_config(v, cfg);
	if (asp_config_check(cfg, &aerr)) {
		check(v, "ssh.pinned_host_key", "fail", "config %s: %s", cfg, aerr.message);
		check(v, "ssh.exec", "error", "no SSH session (see ssh.pinned_host_key)");
		return -1;
	}
	oo.config_path = cfg;
	oo.connect_timeout_ms = 10000;
	if (asp_open(&v->sb, &oo, &aerr) || asp_sandbox_info_get(&info, v->sb, &aerr)) {
		check(v, "ssh.pinned_host_key", "fail", "asp_open %s: %s (%s)", cfg, aerr.message,
		      asp_error_name(aerr.code));
		check(v, "ssh.exec", "error", "no SSH session (see ssh.pinned_host_key)");
		asp_close(v->sb);
		v->sb = NULL;
		return -1;
	}
	if (info.trust == ASP_TRUST_PINNED && fpr && !strcmp(info.host_key_fingerprint, fpr) &&
	    info.auth == ASP_AUTH_PUBLICKEY)
		check(v, "ssh.pinned_host_key", "pass", "asp_open %s: host key %s %s matched the pin; "
		      "public-key auth", cfg, info.host_key_type, info.host_key_fingerprint);
	else
		check(v, "ssh.pinned_host_key", "fail", "trust %d, auth %d, key %s, expected pinned %s",
		      info.trust, info.auth, info.host_key_fingerprint, fpr ? fpr : "?");

	in_sandbox(v, &r, "id -un; id -u; pwd", 10000);
	flatten(r.out);
	{
		char want[128];
		str_fmt(want, sizeof(want), ASF_USER " %d " ASF_CTR_WORKSPACE, (int)jn(v->st, "uid", 0));
		/* The session is open: an exec that cannot run is this check's failure, not a missing probe. */
		check(v, "ssh.exec", r.ran && !strcmp(r.out, want) ? "pass" : "fail",
		      "asp_exec \"id -un; id -u; pwd\" -> \"%s\" (exit %d), expected \"%s\"%s%s", r.out, r.code,
		      want, r.ran ? "" : ": ", r.ran ? "" : r.err);
	}
	return 0;
}

/*
 * The probe file is in the workspace, which the agent owns: between the
 * write and the host-side read it can replace it with anything - a link to
 * /dev/zero or to a host file, a FIFO. Its name is random; on the host it is
 * opened relative to the workspace directory (itself opened O_NOFOLLOW),
 * O_NOFOLLOW | O_NONBLOCK, checked to be a regular file of the sandbox
 * user, and read at most ASF_SMALL_MAX bytes. The sandbox side has a
 * deadline, so a FIFO there cannot hang verify either.
 */
/* The sandbox user's uid on the host (rootless: the subordinate uid it maps to). */
static uid_t owner_uid(vctx *v)
{
	const cJSON *ws = cJSON_GetObjectItemCaseSensitive(v->st, "workspace");

	return (uid_t)jn(ws, "host_uid", jn(v->st, "uid", 0));
}

static void check_workspace(vctx *v)
{
	const cJSON *ws = cJSON_GetObjectItemCaseSensitive(v->st, "workspace");
	const char *ws_host = js(ws, "host");
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_call_options co = ASP_CALL_OPTIONS_INIT;
	asp_error aerr = { 0 };
	char rel[80], data[96], host[4400], *onhost = NULL;
	unsigned char *back = NULL, rnd[8];
	size_t len = 0, hlen = 0;
	struct stat sb;
	asf_err e = { "" };
	int dfd, fd;

	if (!v->sb) {
		check(v, "workspace", "error", "no SSH session to the sandbox");
		return;
	}
	if (!ws_host && (!js(v->st, "workspace_volume") || !strcmp(js(v->st, "workspace_volume"), "hostpath"))) {
		check(v, "workspace", "error", "no workspace.host in the state");
		return;
	}
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		check(v, "workspace", "error", "getrandom: %s", strerror(errno));
		return;
	}
	str_fmt(rel, sizeof(rel), ".asf-verify-%d-%02x%02x%02x%02x%02x%02x%02x%02x", (int)getpid(), rnd[0],
		rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	str_fmt(data, sizeof(data), "asf-verify %d %ld %02x%02x%02x%02x\n", (int)getpid(), (long)time(NULL),
		rnd[4], rnd[5], rnd[6], rnd[7]);
	str_fmt(host, sizeof(host), "%s/%s", ws_host, rel);
	wo.call.timeout_ms = 15000;
	co.timeout_ms = 15000;
	if (jb(ws, "read_only")) {
		int rc = asp_write(v->sb, rel, data, strlen(data), &wo, &aerr);
		check(v, "workspace", rc ? "pass" : "fail", "read-only workspace: asp_write %s -> %s%s",
		      rel, rc ? asp_error_name(rc) : "succeeded", rc ? "" : " (it should have been refused)");
		if (!rc)
			asp_remove(v->sb, rel, 0, &co, NULL);
		return;
	}
	if (asp_write(v->sb, rel, data, strlen(data), &wo, &aerr) ||
	    asp_read(&back, &len, v->sb, rel, 0, ASF_SMALL_MAX, &co, &aerr)) {
		check(v, "workspace", "fail", "asp_write/asp_read %s: %s", rel, aerr.message);
		asp_remove(v->sb, rel, 0, &co, NULL);
		return;
	}
	if (!ws_host) { /* an emptyDir or a claim: the pod's own volume, no host directory to compare */
		check(v, "workspace", len == strlen(data) && !memcmp(back, data, len) ? "pass" : "fail",
		      "asp_write + asp_read " ASF_CTR_WORKSPACE "/%s round trip on the pod's %s volume", rel,
		      js(v->st, "workspace_volume") ? js(v->st, "workspace_volume") : "?");
		asp_free(back);
		asp_remove(v->sb, rel, 0, &co, NULL);
		return;
	}
	dfd = open(ws_host, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		check(v, "workspace", "error", "workspace %s: %s", ws_host, errno == ELOOP || errno == ENOTDIR ?
		      "not a directory (a symbolic link is not followed)" : strerror(errno));
	} else if ((fd = open_regular(dfd, rel, host, &sb, &e)) < 0) {
		check(v, "workspace", "fail", "round trip through %s: the host copy was replaced: %s", rel, e.msg);
	} else {
		onhost = read_fd(fd, host, ASF_SMALL_MAX, &hlen, &e);
		close(fd);
		if (!onhost)
			check(v, "workspace", "fail", "round trip through %s: %s", rel, e.msg);
		else if (len == strlen(data) && !memcmp(back, data, len) && hlen == len &&
			 !memcmp(onhost, data, len) && sb.st_uid == owner_uid(v)) {
			/* The agent's files belong to nobody on the host (unless --allow-host-account-uid). */
			char who[512];
			/* Rootless, it is one of the caller's subordinate ids by design. */
			int taken = id_owner((unsigned int)sb.st_uid, !jb(v->st, "rootless"), who, sizeof(who));
			int allowed = jb(v->st, "allow_host_account_uid");
			check(v, "workspace", !taken || allowed ? "pass" : "fail", "asp_write + asp_read "
			      ASF_CTR_WORKSPACE "/%s round trip; the file is %s on the host, a regular file owned "
			      "by uid %d, which is %s%s", rel, host, (int)sb.st_uid, who, !taken ? "" : allowed ?
			      " (allowed by --allow-host-account-uid)" : ": the agent's files are someone's");
		} else
			check(v, "workspace", "fail", "round trip through %s did not match (host copy %s: "
			      "%zu bytes, owner uid %d)", rel, host, hlen, (int)sb.st_uid);
	}
	if (dfd >= 0)
		close(dfd);
	free(onhost);
	asp_free(back);
	asp_remove(v->sb, rel, 0, &co, NULL);
}

static void check_egress(vctx *v)
{
	const char *gw = gateway(v);
	const struct { const char *check, *addr; int port; } far[] = {
		{ "egress.private", PROBE_PRIVATE, 80 },
		{ "egress.public", PROBE_PUBLIC, 443 },
	};
	char route[512];
	sres r;
	size_t i;
	int fd, port, n;

	/* Control: the probe must be able to succeed, or its failures prove nothing. */
	tcp_probe(v, &r, "127.0.0.1", ASF_SSHD_PORT);
	v->probe_ok = probe_connected(&r);
	check(v, "probe.control", v->probe_ok ? "pass" : "error",
	      "bash /dev/tcp to the sandbox's own sshd 127.0.0.1:%d -> %s", ASF_SSHD_PORT,
	      r.ran ? r.out : r.err);

	/* The host: a listener we own on the sandbox network's gateway. */
	if (v->exec_ingress) {
		check(v, "egress.host_gateway", "pass", "no network: the sandbox has no interface that "
		      "reaches the host (see network.topology)");
	} else if (!gw) {
		check(v, "egress.host_gateway", "error", "no gateway in %s inspect", asf_engine);
	} else if ((fd = listener(gw, &port)) < 0) {
		check(v, "egress.host_gateway", "error", "cannot listen on %s: %s", gw, strerror(errno));
	} else {
		tcp_probe(v, &r, gw, port);
		n = accepted(fd);
		close(fd);
		if (!v->probe_ok || !r.ran)
			check(v, "egress.host_gateway", "error", "probe could not run: %s", r.ran ? r.out : r.err);
		else if (!probe_connected(&r) && n == 0)
			check(v, "egress.host_gateway", "pass", "connect to host listener %s:%d -> %s; the "
			      "listener accepted 0 connections", gw, port,
			      r.timed_out ? "no answer in 3 s (dropped)" : r.out);
		else
			check(v, "egress.host_gateway", "fail", "connect to host listener %s:%d -> %s; the "
			      "listener accepted %d connection(s)", gw, port, r.timed_out ? "timed out" : r.out, n);
	}

	/* The host's loopback: a listener on 127.0.0.1 must be out of reach too. */
	if ((fd = listener("127.0.0.1", &port)) < 0) {
		check(v, "egress.host_loopback", "error", "cannot listen on 127.0.0.1: %s", strerror(errno));
	} else {
		tcp_probe(v, &r, "127.0.0.1", port);
		n = accepted(fd);
		close(fd);
		if (!v->probe_ok || !r.ran)
			check(v, "egress.host_loopback", "error", "probe could not run: %s", r.ran ? r.out : r.err);
		else
			check(v, "egress.host_loopback", !probe_connected(&r) && n == 0 ? "pass" : "fail",
			      "connect to 127.0.0.1:%d (host listener) from inside -> %s; the host listener "
			      "accepted %d connection(s)", port, r.timed_out ? "timed out" : r.out, n);
	}

	/* Third parties: route lookup first; probe only where no route exists. */
	for (i = 0; i < sizeof(far) / sizeof(far[0]); i++) {
		int rc = route_exists(v, far[i].addr, route, sizeof(route));
		if (rc < 0) {
			check(v, far[i].check, "error", "route lookup for %s failed: %s", far[i].addr, route);
			continue;
		}
		if (rc > 0) {
			check(v, far[i].check, "fail", "route lookup in the sandbox's netns: %s - a route "
			      "exists; not probed (no traffic to third parties)", route);
			continue;
		}
		tcp_probe(v, &r, far[i].addr, far[i].port);
		if (!v->probe_ok || !r.ran)
			check(v, far[i].check, "error", "probe could not run: %s", r.ran ? r.out : r.err);
		else if (strstr(r.out, "Network is unreachable"))
			check(v, far[i].check, "pass", "route lookup: %s; connect %s:%d from inside -> %s "
			      "(ENETUNREACH: no packet sent)", route, far[i].addr, far[i].port, r.out);
		else
			check(v, far[i].check, "fail", "route lookup: %s; connect %s:%d from inside -> %s",
			      route, far[i].addr, far[i].port, r.timed_out ? "timed out" : r.out);
	}
}

/* ------------------------------------------------------------ egress allow-list */

/*
 * From inside, as the sandbox user: CONNECT target through the proxy. out
 * gets the status line and Squid's X-Squid-Error header (one line), or
 * bash's error when the proxy cannot be reached.
 */
static void connect_probe(vctx *v, sres *r, const char *target)
{
	char cmd[1024];

	str_fmt(cmd, sizeof(cmd),
		"exec 3<>/dev/tcp/%s/%d 2>&1 || exit 9; "
		"printf 'CONNECT %%s HTTP/1.1\\r\\nHost: %%s\\r\\n\\r\\n' %s %s >&3; "
		"while IFS= read -r -t 5 l <&3; do l=${l%%$'\\r'}; [ -z \"$l\" ] && break; "
		"case $l in HTTP/*|X-Squid-Error:*) echo \"$l\";; esac; done",
		js(v->proxy, "address"), (int)jn(v->proxy, "port", 0), target, target);
	in_sandbox(v, r, cmd, 15000);
	flatten(r->out);
}

/* The proxy runs (found by its config), listens on the gateway and nowhere else, and sessions point at it. */
static void check_proxy(vctx *v)
{
	const char *conf = js(v->proxy, "config"), *addr = js(v->proxy, "address");
	int port = (int)jn(v->proxy, "port", 0);
	char want[96], listening[1024] = "", url[128], envs[512];
	long pid = conf ? proxy_find(conf) : 0;
	sres r;

	if (!conf || !addr || !port) {
		check(v, "egress.proxy", "fail", "no proxy recorded in the state");
		return;
	}
	if (pid <= 0) {
		check(v, "egress.proxy", "fail", "no proxy process runs with %s", conf);
		return;
	}
	proxy_listeners(pid, listening, sizeof(listening));
	str_fmt(want, sizeof(want), "%s:%d", addr, port);
	str_fmt(url, sizeof(url), "http://%s", want);
	in_sandbox(v, &r, "printf '%s ' \"$HTTP_PROXY\" \"$HTTPS_PROXY\" \"$http_proxy\" \"$https_proxy\"", 10000);
	if (!r.ran) {
		check(v, "egress.proxy", "error", "cannot read the session's environment: %s", r.err);
		return;
	}
	str_fmt(envs, sizeof(envs), "%s %s %s %s ", url, url, url, url);
	check(v, "egress.proxy", !strcmp(listening, want) && !strcmp(r.out, envs) ? "pass" : "fail",
	      "proxy pid %ld (%s) listens on %s (expected %s only); a session's HTTP_PROXY HTTPS_PROXY "
	      "http_proxy https_proxy: %s", pid, conf, listening[0] ? listening : "nothing", want, r.out);
}

/* Every listed host:port is reachable through the proxy. */
static void check_allowed(vctx *v)
{
	char ev[3000] = "";
	const cJSON *a;
	int bad = 0;
	sres r;

	cJSON_ArrayForEach(a, v->allow) {
		connect_probe(v, &r, a->valuestring);
		if (!r.ran) {
			check(v, "egress.allowed", "error", "probe could not run: %s", r.err);
			return;
		}
		bad |= strncmp(r.out, "HTTP/1.1 200", 12) != 0;
		str_fmt(ev + strlen(ev), sizeof(ev) - strlen(ev), "%sCONNECT %s -> %s", ev[0] ? "; " : "",
			a->valuestring, r.out[0] ? r.out : r.err);
	}
	check(v, "egress.allowed", bad ? "fail" : "pass", "through the proxy %s:%d from inside: %s",
	      js(v->proxy, "address"), (int)jn(v->proxy, "port", 0), ev);
}

static int denied(const sres *r)
{
	return r->ran && !strncmp(r->out, "HTTP/1.1 403", 12) && strstr(r->out, "ERR_ACCESS_DENIED");
}

/*
 * What is not listed is refused by the proxy itself: a live listener verify
 * opens on the gateway (which the proxy could reach), an unlisted name, and
 * a listed host at a port that is not listed.
 */
static void check_refused(vctx *v)
{
	const char *gw = js(v->proxy, "address");
	char target[300], host[256], ev[3000] = "";
	sres r;
	int fd, port, n, ok, lport;

	if (!gw || (fd = listener(gw, &port)) < 0) {
		check(v, "egress.refused", "error", "cannot listen on the gateway %s: %s", gw ? gw : "?",
		      strerror(errno));
		return;
	}
	str_fmt(target, sizeof(target), "%s:%d", gw, port);
	connect_probe(v, &r, target);
	n = accepted(fd);
	close(fd);
	if (!r.ran) {
		check(v, "egress.refused", "error", "probe could not run: %s", r.err);
		return;
	}
	ok = denied(&r) && n == 0;
	str_fmt(ev, sizeof(ev), "CONNECT %s (a listener verify opened on the host) -> %s, %d accepted", target,
		r.out, n);
	connect_probe(v, &r, "unlisted.asf-verify.invalid:443");
	ok = ok && denied(&r);
	str_fmt(ev + strlen(ev), sizeof(ev) - strlen(ev), "; CONNECT unlisted.asf-verify.invalid:443 -> %s",
		r.out);
	allow_split(cJSON_GetArrayItem(v->allow, 0)->valuestring, host, sizeof(host), &lport);
	str_fmt(target, sizeof(target), "%s:%d", host, lport == 1 ? 2 : 1);
	connect_probe(v, &r, target);
	ok = ok && denied(&r);
	str_fmt(ev + strlen(ev), sizeof(ev) - strlen(ev), "; CONNECT %s (listed host, port not listed) -> %s",
		target, r.out);
	check(v, "egress.refused", ok ? "pass" : "fail", "%s", ev);
}

/* The first listed host that is a name, not an address (getent resolves addresses itself). */
static int listed_name(vctx *v, char *host, size_t hostlen)
{
	const cJSON *a;
	struct in_addr in;
	int port;

	cJSON_ArrayForEach(a, v->allow) {
		allow_split(a->valuestring, host, hostlen, &port);
		if (inet_pton(AF_INET, host, &in) != 1)
			return 1;
	}
	return 0;
}

/*
 * A resolver on the sandbox's own loopback (Docker's embedded one at
 * ASF_ENGINE_DNS, or a loopback nameserver in resolv.conf): from inside, as
 * the sandbox user, a UDP query for the container's own name (which Docker's
 * resolver answers itself, forwarding nothing) and a TCP connect to port 53.
 * 1: it answered (evidence appended), 0: nothing came back, -1: could not run.
 */
static int resolver_answers(vctx *v, const char *addr, char *ev, size_t evlen)
{
	const char *ctr = js(v->st, "container") ? js(v->st, "container") : "asf";
	char query[512], cmd[1400];
	size_t len = strlen(ctr) > 63 ? 63 : strlen(ctr);
	int back = -1, tcp;
	sres r;

	/* header: id, recursion desired, one question; then the name as one label, type A, class IN */
	str_fmt(query, sizeof(query), "\\x61\\x73\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00"
		"\\x%02zx%.*s\\x00\\x00\\x01\\x00\\x01", len, (int)len, ctr);
	str_fmt(cmd, sizeof(cmd),
		"exec 3<>/dev/udp/%s/53 2>&1 || exit 9; "
		"if printf '%s' | dd bs=512 count=1 iflag=fullblock status=none 2>&1 >&3; then "
		"echo \"udp reply: $(timeout 3 dd bs=512 count=1 status=none <&3 | wc -c) bytes\"; fi; "
		"if timeout 2 bash -c 'exec 4<>/dev/tcp/%s/53' 2>/dev/null; then echo 'tcp: connected'; "
		"else echo 'tcp: no connection in 2 s'; fi",
		addr, query, addr);
	in_sandbox(v, &r, cmd, 10000);
	if (!r.ran) {
		str_fmt(ev + strlen(ev), evlen - strlen(ev), "; the probe of %s:53 could not run: %s", addr, r.err);
		return -1;
	}
	flatten(r.out);
	if (strstr(r.out, "udp reply: "))
		sscanf(strstr(r.out, "udp reply: "), "udp reply: %d", &back);
	tcp = strstr(r.out, "tcp: connected") != NULL;
	str_fmt(ev + strlen(ev), evlen - strlen(ev), "; a query for %s to %s:53 (UDP) and a connect (TCP) from "
		"inside -> %s", ctr, addr, r.out[0] ? r.out : "nothing");
	return back > 0 || tcp;
}

static void check_dns(vctx *v)
{
	char resolv[2048], route[512], evidence[3000] = "", host[256], *line, *save = NULL;
	sres r;
	int bad = 0;

	in_sandbox(v, &r, "cat /etc/resolv.conf", 10000);
	if (!r.ran || r.code != 0) {
		check(v, "dns", "error", "cannot read /etc/resolv.conf: %s", r.ran ? r.err : r.err);
		return;
	}
	str_fmt(resolv, sizeof(resolv), "%s", r.out);
	for (line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char ns[128];
		if (sscanf(line, " nameserver %127s", ns) != 1)
			continue;
		if (!strncmp(ns, "127.", 4) || !strcmp(ns, "::1")) {
			/* The sandbox's own loopback - unless something answers there (Docker's resolver). */
			int rc = strcmp(ns, "::1") ? resolver_answers(v, ns, evidence, sizeof(evidence)) : 0;
			str_fmt(evidence + strlen(evidence), sizeof(evidence) - strlen(evidence),
				"%snameserver %s is the sandbox's own loopback%s; ", evidence[0] ? "; " : "", ns,
				rc > 0 ? ", and a resolver answers there" : "");
			if (rc != 0) {
				check(v, "dns", rc > 0 ? "fail" : "error", "resolv.conf: nameserver %s: %s", ns,
				      evidence);
				return;
			}
			continue;
		}
		if (route_exists(v, ns, route, sizeof(route)) != 0) {
			str_fmt(evidence + strlen(evidence), sizeof(evidence) - strlen(evidence),
				"nameserver %s: %s; ", ns, route);
			bad = 1;
		} else {
			str_fmt(evidence + strlen(evidence), sizeof(evidence) - strlen(evidence),
				"nameserver %s has no route; ", ns);
		}
	}
	flatten(resolv);
	if (bad) {
		check(v, "dns", "fail", "resolv.conf: \"%s\"; %sgetent not run (a resolver may be reachable)",
		      resolv, evidence);
		return;
	}
	in_sandbox(v, &r, "getent hosts example.com", 10000);
	flatten(r.out);
	if (!r.ran || r.code == 127 || r.code == 126) {
		check(v, "dns", "error", "getent could not run: %s", r.err);
		return;
	}
	if (r.code == 0) {
		check(v, "dns", "fail", "getent hosts example.com resolved: %s", r.out);
		return;
	}
	str_fmt(evidence + strlen(evidence), sizeof(evidence) - strlen(evidence), "%sgetent hosts "
		"example.com -> exit %d%s", evidence[0] ? "" : "no nameserver (glibc tries 127.0.0.1, the "
		"sandbox's own loopback); ", r.code, r.timed_out ? " (timed out)" : "");
	if (v->allow && listed_name(v, host, sizeof(host))) {
		/* Names are the proxy's business: a listed one does not resolve inside either. */
		char cmd[300];
		str_fmt(cmd, sizeof(cmd), "getent hosts %s", host);
		in_sandbox(v, &r, cmd, 10000);
		flatten(r.out);
		if (!r.ran || r.code == 0) {
			check(v, "dns", r.ran ? "fail" : "error", "getent hosts %s (a listed host) inside -> %s",
			      host, r.ran ? r.out : r.err);
			return;
		}
		str_fmt(evidence + strlen(evidence), sizeof(evidence) - strlen(evidence), "; getent hosts %s "
			"(listed; the proxy resolves it) -> exit %d", host, r.code);
	}
	if (engine_docker() && !v->exec_ingress) {
		/* Docker's embedded resolver, on the sandbox's loopback whatever resolv.conf says. */
		int rc = resolver_answers(v, ASF_ENGINE_DNS, evidence, sizeof(evidence));
		if (rc != 0) {
			flatten(resolv);
			check(v, "dns", rc > 0 ? "fail" : "error", "resolv.conf: \"%s\"; %s%s", resolv, evidence,
			      rc > 0 ? " - Docker's embedded resolver answers, and forwards what it cannot "
				       "answer" : "");
			return;
		}
	}
	if (!v->exec_ingress) {
		/* A query sent anyway, to where a resolver on the host would listen. */
		const char *gw = gateway(v);
		char cmd[256];
		int fd, port, n;

		if (!gw || (fd = udp_listener(gw, &port)) < 0) {
			check(v, "dns", "error", "%s; cannot listen for UDP on the gateway %s: %s", evidence,
			      gw ? gw : "(none)", gw ? strerror(errno) : "no gateway in the engine's inspect");
			return;
		}
		str_fmt(cmd, sizeof(cmd), "bash -c 'echo asf-verify > /dev/udp/%s/%d' 2>&1", gw, port);
		in_sandbox(v, &r, cmd, 3000);
		usleep(200 * 1000);
		n = datagrams(fd);
		close(fd);
		flatten(r.out);
		if (!r.ran) {
			check(v, "dns", "error", "%s; the UDP probe could not run: %s", evidence, r.err);
			return;
		}
		str_fmt(evidence + strlen(evidence), sizeof(evidence) - strlen(evidence), "; a datagram "
			"from inside to a UDP listener on the gateway %s:%d -> %s, %d received", gw, port,
			r.out[0] ? r.out : "sent", n);
		bad = n != 0;
	}
	check(v, "dns", bad ? "fail" : "pass", "resolv.conf: \"%s\"; %s", resolv, evidence);
}

/* The value of "Key:\t..." in a /proc status text, or NULL. */
static const char *status_field(const char *text, const char *key, char *out, size_t outlen)
{
	char pat[64];
	const char *p;

	str_fmt(pat, sizeof(pat), "\n%s:", key);
	if (!(p = strstr(text, pat)))
		return NULL;
	p += strlen(pat);
	while (*p == ' ' || *p == '\t')
		p++;
	str_fmt(out, outlen, "%.*s", (int)strcspn(p, "\n"), p);
	return out;
}

static void check_privileges(vctx *v)
{
	char p1[40], s1[40], e1[40], pm[40], amb[40], nnp1[8], nnp[8], sec[8], caps[256] = "";
	const cJSON *c, *eff = inspect_item(v, "EffectiveCaps");
	char *self;
	sres r;

	in_sandbox(v, &r, "printf '\\n'; cat /proc/1/status; printf '=====\\n'; cat /proc/self/status", 10000);
	if (!r.ran || r.code != 0 || !(self = strstr(r.out, "=====\n"))) {
		check(v, "caps.bounding", "error", "cannot read /proc/1/status: %s", r.err);
		check(v, "caps.session", "error", "cannot read /proc/self/status: %s", r.err);
		check(v, "no_new_privs", "error", "cannot read /proc/self/status: %s", r.err);
		check(v, "seccomp", "error", "cannot read /proc/self/status: %s", r.err);
		return;
	}
	*self = '\0';         /* "=====" ends pid 1's text ... */
	self += 5;            /* ... and self starts at the "\n" after it */
	if (!eff) { /* docker: no EffectiveCaps; CapAdd is what is left when CapDrop is ALL */
		const cJSON *hc = inspect_item(v, "HostConfig");
		const cJSON *drop = cJSON_GetObjectItemCaseSensitive(hc, "CapDrop");
		if (cJSON_GetArraySize(drop) == 1 && cJSON_IsString(drop->child) &&
		    !strcmp(drop->child->valuestring, "ALL"))
			eff = cJSON_GetObjectItemCaseSensitive(hc, "CapAdd");
	}
	cJSON_ArrayForEach(c, eff)
		if (cJSON_IsString(c))
			str_fmt(caps + strlen(caps), sizeof(caps) - strlen(caps), "%s%s", caps[0] ? "," : "",
				c->valuestring);
	if (!status_field(r.out, "CapBnd", p1, sizeof(p1)) || !status_field(self, "CapBnd", s1, sizeof(s1)) ||
	    !status_field(self, "CapEff", e1, sizeof(e1)) || !status_field(self, "CapPrm", pm, sizeof(pm)) ||
	    !status_field(self, "CapAmb", amb, sizeof(amb)) || !status_field(r.out, "NoNewPrivs", nnp1, sizeof(nnp1)) ||
	    !status_field(self, "NoNewPrivs", nnp, sizeof(nnp)) || !status_field(self, "Seccomp", sec, sizeof(sec))) {
		check(v, "caps.bounding", "error", "unexpected /proc status format");
		return;
	}
	if (jb(v->st, "unprivileged")) {
		/* sshd itself runs as the sandbox user, with nothing in any capability set. */
		char uid1[64];
		unsigned long long want = (unsigned long long)jn(v->st, "uid", 0);
		int uid_ok = status_field(r.out, "Uid", uid1, sizeof(uid1)) && uid1[0] != '0' &&
			     strtoull(uid1, NULL, 10) == want;
		check(v, "caps.bounding",
		      !strtoull(p1, NULL, 16) && !strtoull(s1, NULL, 16) && !caps[0] && uid_ok ? "pass" : "fail",
		      "unprivileged: CapBnd of pid 1 %s, of a session process %s, expected 0; pid 1 Uid %s, "
		      "expected %llu (not root); %s inspect: \"%s\"", p1, s1, uid_ok ? uid1 : "?", want, asf_engine,
		      caps);
	} else
	check(v, "caps.bounding",
	      strtoull(p1, NULL, 16) == ASF_CAPS_MASK && strtoull(s1, NULL, 16) == ASF_CAPS_MASK &&
	      !strcmp(caps, "CAP_SETGID,CAP_SETUID,CAP_SYS_CHROOT") ? "pass" : "fail",
	      "CapBnd of pid 1 (sshd) %s, of a session process %s, expected %016llx "
	      "(SETGID, SETUID, SYS_CHROOT); %s inspect: %s",
	      p1, s1, ASF_CAPS_MASK, asf_engine, caps);
	check(v, "caps.session",
	      !strtoull(e1, NULL, 16) && !strtoull(pm, NULL, 16) && !strtoull(amb, NULL, 16) ? "pass" : "fail",
	      "an exec'd process of the sandbox user: CapEff %s CapPrm %s CapAmb %s", e1, pm, amb);
	check(v, "no_new_privs", !strcmp(nnp, "1") && !strcmp(nnp1, "1") ? "pass" : "fail",
	      "NoNewPrivs: %s in /proc/self/status of an exec'd process, %s for pid 1", nnp, nnp1);
	check(v, "seccomp", !strcmp(sec, "2") ? "pass" : "fail",
	      "Seccomp: %s (2 = filter mode, %s's default profile)", sec, asf_engine);
}

static void check_rootfs(vctx *v)
{
	char mi[8192], opts[256] = "", *line, *save = NULL;
	const cJSON *hc = inspect_item(v, "HostConfig");
	sres r;
	int ro = 0;

	in_sandbox(v, &r, "cat /proc/self/mountinfo", 10000);
	str_fmt(mi, sizeof(mi), "%s", r.out);
	for (line = strtok_r(mi, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char mnt[256], o[256];
		if (sscanf(line, "%*s %*s %*s %*s %255s %255s", mnt, o) == 2 && !strcmp(mnt, "/")) {
			str_fmt(opts, sizeof(opts), "%s", o);
			ro = !strncmp(o, "ro,", 3) || !strcmp(o, "ro") || strstr(o, ",ro,") != NULL;
		}
	}
	in_sandbox(v, &r, ": > /.asf-verify-probe", 10000);
	if (!r.ran || !opts[0]) {
		check(v, "rootfs.read_only", "error", "cannot inspect the root mount: %s", r.err);
		return;
	}
	flatten(r.err);
	check(v, "rootfs.read_only",
	      ro && r.code != 0 && strstr(r.err, "Read-only file system") && jb(hc, "ReadonlyRootfs") ? "pass" : "fail",
	      "mountinfo \"/\" options %s; a write to / -> exit %d: %s; %s ReadonlyRootfs %s", opts,
	      r.code, r.err, asf_engine, jb(hc, "ReadonlyRootfs") ? "true" : "false");
}

static void check_hostkey_private(vctx *v)
{
	sres r;

	if (jb(v->st, "unprivileged")) {
		/* sshd runs as the sandbox user, so it reads its own host key, by design
		 * (docs/kubernetes.md): what is checked is that nobody else can. */
		in_sandbox(v, &r, "stat -L -c '%a %u' " ASF_CTR_ETC "/ssh_host_ed25519_key", 10000);
		flatten(r.out);
		check(v, "hostkey.private", r.ran && r.code == 0 && r.out[0] && r.out[1] && r.out[2] == '0' &&
		      !strncmp(r.out + 3, " 0", 2) ? "pass" : "fail",
		      "unprivileged: sshd runs as the sandbox user and reads its host key; mode and owner of "
		      ASF_CTR_ETC "/ssh_host_ed25519_key: %s (expected no access for others, owner root)", r.out);
		return;
	}
	in_sandbox(v, &r, "cat " ASF_CTR_ETC "/ssh_host_ed25519_key", 10000);
	flatten(r.err);
	if (!r.ran)
		check(v, "hostkey.private", "error", "%s", r.err);
	else
		check(v, "hostkey.private", r.code != 0 && strstr(r.err, "Permission denied") ? "pass" : "fail",
		      "the sandbox user reading " ASF_CTR_ETC "/ssh_host_ed25519_key -> exit %d: %s", r.code,
		      r.code ? r.err : "(read it!)");
}

static void check_limits(vctx *v)
{
	const cJSON *lim = cJSON_GetObjectItemCaseSensitive(v->st, "limits");
	const cJSON *hc = inspect_item(v, "HostConfig");
	long long pids = 0, mem = 0, quota = 0, period = 0;
	double cpus;
	sres r;

	if (cJSON_GetObjectItemCaseSensitive(lim, "enforced") && !jb(lim, "enforced")) {
		check(v, "limits", "fail", "not enforced: %s (up recorded this when it made the sandbox)",
		      js(lim, "why_not") ? js(lim, "why_not") : "?");
		return;
	}
	/* cgroup v2 first, then v1 (this host's hybrid mode): the container's own cgroup. */
	in_sandbox(v, &r,
		   "cd /sys/fs/cgroup || exit 1; "
		   "if [ -f pids.max ]; then cat pids.max memory.max; cat cpu.max; "
		   "else cat pids/pids.max memory/memory.limit_in_bytes; "
		   "echo $(cat cpu/cpu.cfs_quota_us) $(cat cpu/cpu.cfs_period_us); fi", 10000);
	if (!r.ran || r.code != 0 || sscanf(r.out, "%lld %lld %lld %lld", &pids, &mem, &quota, &period) != 4) {
		flatten(r.out);
		check(v, "limits", "error", "cannot read the sandbox's cgroup limits: %s %s", r.out, r.err);
		return;
	}
	cpus = period > 0 ? (double)quota / (double)period : 0;
	check(v, "limits",
	      pids == (long long)jn(lim, "pids", -1) && mem == (long long)jn(lim, "memory_bytes", -1) &&
	      cpus > jn(lim, "cpus", 0) * 0.99 && cpus < jn(lim, "cpus", 0) * 1.01 &&
	      /* podman kube play: up wrote pids.max into the cgroups itself (kube.c) */
	      (jn(hc, "PidsLimit", 0) == jn(lim, "pids", -1) || jb(v->st, "pids_limit_by_cgroup")) ? "pass" : "fail",
	      "inside (cgroup): pids.max %lld, memory limit %lld, cpu quota %lld/%lld = %.2f CPUs; asked: "
	      "pids %.0f, memory %.0f, cpus %.2f; %s inspect: PidsLimit %.0f%s Memory %.0f NanoCpus %.0f",
	      pids, mem, quota, period, cpus, jn(lim, "pids", -1), jn(lim, "memory_bytes", -1),
	      jn(lim, "cpus", 0), asf_engine, jn(hc, "PidsLimit", 0), jb(v->st, "pids_limit_by_cgroup") ?
	      " (pids.max written into the cgroups by up)" : "", jn(hc, "Memory", 0), jn(hc, "NanoCpus", 0));
}

static void check_microvm(vctx *v)
{
	struct utsname u;
	sres r;

	if (!js(v->st, "runtime") || strcmp(js(v->st, "runtime"), "krun"))
		return;
	uname(&u);
	in_sandbox(v, &r, "uname -r", 10000);
	flatten(r.out);
	if (!r.ran || r.code)
		check(v, "microvm.kernel", "error", "uname -r: %s", r.err);
	else
		check(v, "microvm.kernel", strcmp(r.out, u.release) ? "pass" : "fail",
		      "guest kernel %s, host kernel %s", r.out, u.release);
}

/* ------------------------------------------------------------ report */

static int write_report(vctx *v, const char *path_opt, cJSON *rep, char *path, size_t pathlen)
{
	char dir[4200], now[32], *text;
	asf_err e;
	int rc;

	if (path_opt) {
		str_fmt(path, pathlen, "%s", path_opt);
	} else {
		str_fmt(dir, sizeof(dir), "%s/.evidence", asf_state_root);
		if (mkdir_mode(dir, 0700, &e))
			return -1;
		{
			time_t t = time(NULL);
			struct tm tm;
			gmtime_r(&t, &tm);
			strftime(now, sizeof(now), "%Y%m%dT%H%M%SZ", &tm);
		}
		str_fmt(path, pathlen, "%s/%s-%s-%d.json", dir, v->name, now, (int)getpid());
	}
	if (!(text = cJSON_Print(rep)))
		return -1;
	rc = write_file(path, text, strlen(text), 0644, NULL, &e);
	if (rc)
		fprintf(stderr, "asf-provision: verify: %s\n", e.msg);
	cJSON_free(text);
	return rc;
}

int cmd_verify(const char *name, const char *report_path, int json)
{
	vctx v;
	asf_err e = { "" };
	cJSON *rep, *c;
	char now[32], path[4400];
	const char *result;

	memset(&v, 0, sizeof(v));
	v.name = name;
	if (!name_valid(name)) {
		fprintf(stderr, "asf-provision: verify: invalid name \"%s\"\n", name);
		return 2;
	}
	if (!(v.st = state_load(name, &e))) {
		fprintf(stderr, "asf-provision: verify: %s\n", e.msg);
		return 2;
	}
	v.checks = cJSON_CreateArray();
	v.exec_ingress = js(v.st, "ingress") && !strcmp(js(v.st, "ingress"), "exec");
	if (js(v.st, "egress") && !strcmp(js(v.st, "egress"), "allow")) {
		v.allow = cJSON_GetObjectItemCaseSensitive(v.st, "allow");
		v.proxy = cJSON_GetObjectItemCaseSensitive(v.st, "proxy");
		if (!cJSON_GetArraySize(v.allow)) {
			fprintf(stderr, "asf-provision: verify: %s: egress \"allow\" without an allow list\n", name);
			cJSON_Delete(v.st);
			cJSON_Delete(v.checks);
			return 2;
		}
	}

	if (check_container(&v) == 0) {
		check_firewall(&v);
		check_topology(&v);
		check_ipv6(&v);
		check_mounts(&v);
		check_ssh(&v);
		check_workspace(&v);
		check_egress(&v);
		if (v.allow) {
			check_proxy(&v);
			check_allowed(&v);
			check_refused(&v);
		}
		check_dns(&v);
		check_privileges(&v);
		check_rootfs(&v);
		check_hostkey_private(&v);
		check_limits(&v);
		check_microvm(&v);
	}
	asp_close(v.sb);

	result = v.nerr ? "error" : v.nfail ? "fail" : "pass";
	iso_time(now, sizeof(now));
	rep = cJSON_CreateObject();
	cJSON_AddStringToObject(rep, "name", name);
	cJSON_AddStringToObject(rep, "time", now);
	cJSON_AddStringToObject(rep, "container", js(v.st, "container") ? js(v.st, "container") : "");
	cJSON_AddStringToObject(rep, "ingress", js(v.st, "ingress") ? js(v.st, "ingress") : "");
	cJSON_AddStringToObject(rep, "config", js(v.st, "config") ? js(v.st, "config") : "");
	cJSON_AddStringToObject(rep, "result", result);
	cJSON_AddNumberToObject(rep, "passed", v.npass);
	cJSON_AddNumberToObject(rep, "failed", v.nfail);
	cJSON_AddNumberToObject(rep, "errors", v.nerr);
	cJSON_AddItemToObject(rep, "checks", v.checks);
	if (write_report(&v, report_path, rep, path, sizeof(path)) == 0)
		cJSON_AddStringToObject(rep, "report", path);
	if (json) {
		print_json(rep);
	} else {
		cJSON_ArrayForEach(c, v.checks)
			printf("%-5s %-22s %s\n", js(c, "status"), js(c, "check"), js(c, "evidence"));
		printf("verify %s: %s (%d passed, %d failed, %d errors)\n", name, result, v.npass, v.nfail, v.nerr);
		if (js(rep, "report"))
			printf("evidence: %s\n", js(rep, "report"));
	}
	cJSON_Delete(rep);
	cJSON_Delete(v.inspect);
	cJSON_Delete(v.st);
	return v.nerr ? 2 : v.nfail ? 1 : 0;
}
