/*
 * egress.c - `--egress allow=HOST[:PORT],...`: the sandbox's only way out is
 * a forward proxy (Squid) that asf-provision runs on the host, listening on
 * the sandbox network's gateway address alone, allowing CONNECT (and plain
 * HTTP) to exactly the listed host:port pairs and nothing else. The
 * sandbox's ruleset lets new connections out to that address and port only;
 * the sandbox user's SSH sessions get HTTP(S)_PROXY pointing there. Names
 * are resolved by the proxy, never inside the sandbox.
 *
 * Files (STATE/NAME/proxy/): squid.conf, hosts (--proxy-hosts, copied),
 * squid.log (Squid's stderr). Squid reads its config and hosts file again
 * after dropping to the `proxy` user, which cannot enter the 0700 state
 * directory: it gets both as open descriptors (4 and 3) and reads them as
 * /proc/self/fd/N (both files are 0644: they hold no secret). The proxy
 * process is found again by its command line (`squid -N -d 1 -f
 * /proc/self/fd/4`) and what its descriptor 4 is, so `down` stops it even
 * when state.json is lost.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "asf.h"

#define ASF_ALLOW_MAX 64

/* ------------------------------------------------------------ parsing */

static int host_valid(char *h)
{
	struct in_addr in;
	size_t n = strlen(h), label = 0;
	char *p;

	if (inet_pton(AF_INET, h, &in) == 1)
		return 1;
	if (n == 0 || n > 253 || h[0] == '.' || h[n - 1] == '.')
		return 0;
	for (p = h; *p; p++) {
		*p = (char)tolower((unsigned char)*p);
		if (*p == '.') {
			if (!label || p[-1] == '-')
				return 0;
			label = 0;
			continue;
		}
		if (!isalnum((unsigned char)*p) && !(*p == '-' && label))
			return 0;
		if (++label > 63)
			return 0;
	}
	return p[-1] != '-';
}

int egress_parse(const char *spec, cJSON **allow, asf_err *e)
{
	char buf[4096], *tok, *save = NULL;
	cJSON *list;

	*allow = NULL;
	if (!spec || !strcmp(spec, "none"))
		return 0;
	if (strncmp(spec, "allow=", 6))
		return asf_fail(e, "--egress %s: expected none or allow=HOST[:PORT][,HOST[:PORT]...]", spec);
	if (str_fmt(buf, sizeof(buf), "%s", spec + 6) < 0 || !buf[0])
		return asf_fail(e, "--egress %s: expected allow=HOST[:PORT][,HOST[:PORT]...]", spec);
	list = cJSON_CreateArray();
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strrchr(tok, ':'), entry[300];
		long port = 443;

		if (colon) {
			char *end;
			*colon = '\0';
			port = strtol(colon + 1, &end, 10);
			if (end == colon + 1 || *end || port < 1 || port > 65535) {
				cJSON_Delete(list);
				return asf_fail(e, "--egress %s: \"%s\": PORT must be 1..65535", spec, colon + 1);
			}
		}
		if (!host_valid(tok)) {
			cJSON_Delete(list);
			return asf_fail(e, "--egress %s: \"%s\" is not a host name (letters, digits, '-', '.') "
					   "or an IPv4 address", spec, tok);
		}
		if (cJSON_GetArraySize(list) >= ASF_ALLOW_MAX) {
			cJSON_Delete(list);
			return asf_fail(e, "--egress %s: more than %d entries", spec, ASF_ALLOW_MAX);
		}
		str_fmt(entry, sizeof(entry), "%s:%ld", tok, port);
		cJSON_AddItemToArray(list, cJSON_CreateString(entry));
	}
	if (!cJSON_GetArraySize(list)) {
		cJSON_Delete(list);
		return asf_fail(e, "--egress %s: no host listed", spec);
	}
	*allow = list;
	return 0;
}

/* "host:port" -> host (out), port. */
void allow_split(const char *entry, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(entry, ':');

	str_fmt(host, hostlen, "%.*s", colon ? (int)(colon - entry) : (int)strlen(entry), entry);
	*port = colon ? atoi(colon + 1) : 443;
}

/*
 * --proxy-hosts FILE: "ADDRESS NAME..." lines (# comments), read like any
 * file someone else may have written, checked line by line, copied to
 * STATE/NAME/proxy/hosts.
 */
int egress_hosts_copy(const char *path, const char *dest, asf_err *e)
{
	char *text, *line, *save = NULL, *copy;
	size_t len;
	int lineno = 0, rc;

	if (!(text = read_file(path, 64u << 10, &len, e)))
		return -1;
	if (memchr(text, '\0', len)) {
		free(text);
		return asf_fail(e, "--proxy-hosts %s: contains a NUL byte", path);
	}
	if (!(copy = strdup(text))) {
		free(text);
		return asf_fail(e, "out of memory");
	}
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char addr[64], name[256];
		unsigned char bin[16];
		int n;

		lineno++;
		line[strcspn(line, "#")] = '\0';
		n = sscanf(line, " %63s %255s", addr, name);
		if (n <= 0)
			continue;
		if (n == 1 || (inet_pton(AF_INET, addr, bin) != 1 && inet_pton(AF_INET6, addr, bin) != 1)) {
			free(copy);
			free(text);
			return asf_fail(e, "--proxy-hosts %s: line %d: expected \"ADDRESS NAME...\"", path, lineno);
		}
	}
	free(copy);
	rc = write_file(dest, text, len, 0644, NULL, e);
	free(text);
	return rc;
}

/* ------------------------------------------------------------ the process */

static int squid_path(char *out, size_t outlen)
{
	if (asf_which("squid", out, outlen) == 0)
		return 0;
	str_fmt(out, outlen, "/usr/sbin/squid");
	return access(out, X_OK);
}

/*
 * The pid of the proxy started with this config (argv "squid ... -f
 * /proc/self/fd/4", descriptor 4 being conf), 0 when none runs. Scans
 * /proc: works without state.json.
 */
long proxy_find(const char *conf)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	long found = 0;

	if (!d)
		return 0;
	while (!found && (de = readdir(d))) {
		char path[300], argv[8192], stat[512];
		ssize_t n;
		int fd;
		long pid = strtol(de->d_name, NULL, 10);

		if (pid <= 0)
			continue;
		str_fmt(path, sizeof(path), "/proc/%ld/cmdline", pid);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		n = read(fd, argv, sizeof(argv) - 1);
		close(fd);
		if (n <= 0)
			continue;
		argv[n] = '\0';
		/* argv: squid -N -d 1 -f CONF (NUL-separated) */
		{
			const char *a = argv, *end = argv + n, *last = NULL, *prev = NULL;
			for (; a < end; a += strlen(a) + 1) {
				prev = last;
				last = a;
			}
			if (!prev || strcmp(prev, "-f") || strcmp(last, "/proc/self/fd/4") || !strstr(argv, "squid"))
				continue;
		}
		{
			char target[4400];
			str_fmt(path, sizeof(path), "/proc/%ld/fd/4", pid);
			n = readlink(path, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			if (strcmp(target, conf))
				continue;
		}
		/* Not a zombie (a proxy that died under `up` is still our child). */
		str_fmt(path, sizeof(path), "/proc/%ld/stat", pid);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		n = read(fd, stat, sizeof(stat) - 1);
		close(fd);
		if (n > 0) {
			const char *rp;
			stat[n] = '\0';
			rp = strrchr(stat, ')');
			if (rp && rp[1] == ' ' && rp[2] != 'Z')
				found = pid;
		}
	}
	closedir(d);
	return found;
}

/* Stop the proxy of this config, if one runs. 0 stopped (or none), -1 it stays. */
static int proxy_stop(const char *conf, int *was_running)
{
	long pid = proxy_find(conf);
	int i;

	*was_running = pid > 0;
	if (pid <= 0)
		return 0;
	kill((pid_t)pid, SIGTERM);
	for (i = 0; i < 100; i++) {
		waitpid((pid_t)pid, NULL, WNOHANG); /* our child during up's rollback */
		if (proxy_find(conf) != pid)
			return 0;
		if (i == 50)
			kill((pid_t)pid, SIGKILL);
		usleep(100 * 1000);
	}
	return -1;
}

/* A port the kernel calls free on addr (the proxy binds it right after). */
static int free_port(const char *addr, asf_err *e)
{
	struct sockaddr_in sa = { 0 };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port;

	sa.sin_family = AF_INET;
	if (fd < 0 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || getsockname(fd, (struct sockaddr *)&sa, &len)) {
		asf_fail(e, "cannot bind a port on the gateway %s for the proxy: %s", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static int connects(const char *addr, int port)
{
	struct sockaddr_in sa = { 0 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, addr, &sa.sin_addr);
	ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

static int is_addr(const char *host)
{
	struct in_addr in;

	return inet_pton(AF_INET, host, &in) == 1;
}

/*
 * acl asf_internal: the ranges no listed name may resolve to, and the
 * host's own addresses now (getifaddrs: every interface, up or not).
 */
static int internal_acl(FILE *f)
{
	static const char *const ranges[] = {
		"0.0.0.0/8",	  /* "this network": 0.0.0.0 reaches the host's loopback */
		"127.0.0.0/8",	  /* loopback */
		"169.254.0.0/16", /* link-local: cloud metadata */
		"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", /* RFC 1918 */
		"100.64.0.0/10",  /* CGNAT (RFC 6598) */
		"::/128", "::1", "fe80::/10", "fc00::/7",
	};
	struct ifaddrs *ifs = NULL, *ia;
	size_t k;

	fputs("# internal addresses: refused after resolution unless named in the list\nacl asf_internal dst", f);
	for (k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++)
		fprintf(f, " %s", ranges[k]);
	fputs("\n# the host's own addresses when the proxy started\n", f);
	if (getifaddrs(&ifs))
		return -1;
	{
		for (ia = ifs; ia; ia = ia->ifa_next) {
			char addr[INET6_ADDRSTRLEN];
			const void *bin;
			if (!ia->ifa_addr)
				continue;
			if (ia->ifa_addr->sa_family == AF_INET)
				bin = &((const struct sockaddr_in *)(const void *)ia->ifa_addr)->sin_addr;
			else if (ia->ifa_addr->sa_family == AF_INET6)
				bin = &((const struct sockaddr_in6 *)(const void *)ia->ifa_addr)->sin6_addr;
			else
				continue;
			if (inet_ntop(ia->ifa_addr->sa_family, bin, addr, sizeof(addr)))
				fprintf(f, "acl asf_internal dst %s\n", addr);
		}
		freeifaddrs(ifs);
	}
	return 0;
}

static int write_conf(const char *conf, const char *name, const cJSON *allow, const char *gw, int port,
		      const char *hosts, asf_err *e)
{
	char *text = NULL;
	size_t cap = 0;
	FILE *f = open_memstream(&text, &cap);
	const cJSON *a;
	int i = 0, rc;

	if (!f)
		return asf_fail(e, "out of memory");
	fprintf(f, "# egress proxy of sandbox %s, written by asf-provision: CONNECT and HTTP to the\n"
		   "# listed host:port pairs only. Run as squid -N -d 1 -f /proc/self/fd/4 (this file, %s).\n"
		   "http_port %s:%d\n"
		   "visible_hostname asf-%s\n"
		   "pid_filename none\n"
		   "cache_effective_user proxy\n"
		   "cache deny all\n"
		   "cache_mem 8 MB\n"
		   "access_log none\n"
		   "cache_store_log none\n"
		   "cache_log /dev/null\n"
		   "logfile_rotate 0\n"
		   "coredump_dir none\n"
		   "icp_port 0\n"
		   "htcp_port 0\n"
		   "pinger_enable off\n"
		   "shutdown_lifetime 0 seconds\n"
		   "forwarded_for delete\n"
		   "via off\n", name, conf, gw, port, name);
	/* Squid reads hosts_file after dropping to the proxy user, which cannot
	 * enter the 0700 state directory: it gets the file as descriptor 3. */
	if (hosts)
		fprintf(f, "# %s, resolved there only (no DNS)\nhosts_file /proc/self/fd/3\n"
			   "dns_nameservers 127.0.0.1\n", hosts);
	else
		fputs("hosts_file none\n", f);
	if (internal_acl(f)) {
		int err = errno;
		fclose(f);
		free(text);
		return asf_fail(e, "%s: cannot list the host's addresses (getifaddrs): %s", conf, strerror(err));
	}
	cJSON_ArrayForEach(a, allow) {
		char host[256];
		int p;
		allow_split(a->valuestring, host, sizeof(host), &p);
		i++;
		/* -n: compare the name as given, never a reverse lookup of an address. */
		fprintf(f, "acl asf_host_%d dstdomain -n %s\nacl asf_port_%d port %d\n", i, host, i, p);
		if (is_addr(host))
			fprintf(f, "acl asf_dst_%d dst %s\n", i, host);
	}
	/* 1. Addresses named in the list: literally, and as what a listed name of the same port resolves to. */
	fputs("# addresses named in the list, for their port\n", f);
	i = 0;
	cJSON_ArrayForEach(a, allow) {
		char host[256];
		const cJSON *b;
		int p, j = 0;
		allow_split(a->valuestring, host, sizeof(host), &p);
		i++;
		if (!is_addr(host))
			continue;
		fprintf(f, "http_access allow asf_host_%d asf_port_%d\n", i, i);
		cJSON_ArrayForEach(b, allow) {
			char bhost[256];
			int bp;
			allow_split(b->valuestring, bhost, sizeof(bhost), &bp);
			j++;
			if (bp == p && !is_addr(bhost))
				fprintf(f, "http_access allow asf_host_%d asf_port_%d asf_dst_%d\n", j, j, i);
		}
	}
	/* 2. The listed pairs, unless the name is or resolves to an internal address. The dst ACL comes
	 * last on the line: only a listed pair is resolved, and an unlisted name is refused at once. */
	fputs("# the listed pairs, none that is or resolves to an internal address\n", f);
	i = 0;
	cJSON_ArrayForEach(a, allow) {
		i++;
		fprintf(f, "http_access allow asf_host_%d asf_port_%d !asf_internal\n", i, i);
	}
	fputs("http_access deny all\n", f);
	if (fclose(f)) {
		free(text);
		return asf_fail(e, "out of memory");
	}
	rc = write_file(conf, text, strlen(text), 0644, NULL, e);
	free(text);
	return rc;
}

/*
 * Start the proxy for sandbox `name` on gw (a free port), recording
 * {address, port, config, pid} as st.proxy before it runs. Waits until it
 * accepts connections. dir is STATE/NAME.
 */
int egress_proxy_start(const char *dir, const char *name, const cJSON *allow, const char *gw, int have_hosts,
		       cJSON *st, asf_err *e)
{
	char squid[4096], pdir[4400], conf[4400], hosts[4400], log[4400];
	cJSON *px;
	time_t deadline;
	int port, logfd, conffd, hostfd = -1;
	pid_t pid;

	if (squid_path(squid, sizeof(squid)))
		return asf_fail(e, "--egress allow=...: squid not found in PATH or /usr/sbin "
				   "(Debian: apt-get install squid)");
	str_fmt(pdir, sizeof(pdir), "%s/proxy", dir);
	str_fmt(conf, sizeof(conf), "%s/squid.conf", pdir);
	str_fmt(hosts, sizeof(hosts), "%s/hosts", pdir);
	str_fmt(log, sizeof(log), "%s/squid.log", pdir);
	if ((port = free_port(gw, e)) < 0 ||
	    write_conf(conf, name, allow, gw, port, have_hosts ? hosts : NULL, e))
		return -1;
	px = cJSON_CreateObject();
	cJSON_AddStringToObject(px, "program", squid);
	cJSON_AddStringToObject(px, "address", gw);
	cJSON_AddNumberToObject(px, "port", port);
	cJSON_AddStringToObject(px, "config", conf);
	cJSON_AddStringToObject(px, "log", log);
	cJSON_AddItemToObject(st, "proxy", px);
	if (state_save(name, st, e))
		return -1;

	if ((logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
		return asf_fail(e, "%s: %s", log, strerror(errno));
	if ((conffd = open_regular(AT_FDCWD, conf, conf, NULL, e)) < 0) {
		close(logfd);
		return -1;
	}
	if (have_hosts && (hostfd = open_regular(AT_FDCWD, hosts, hosts, NULL, e)) < 0) {
		close(logfd);
		close(conffd);
		return -1;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		/* Above 4 first, so no dup2 below overwrites a descriptor still needed. */
		int fds[3] = { fcntl(logfd, F_DUPFD_CLOEXEC, 10), fcntl(conffd, F_DUPFD_CLOEXEC, 10),
			       hostfd >= 0 ? fcntl(hostfd, F_DUPFD_CLOEXEC, 10) : null };
		setsid();
		signal(SIGPIPE, SIG_DFL);
		if (dup2(null, 0) < 0 || dup2(fds[0], 1) < 0 || dup2(fds[0], 2) < 0 || dup2(fds[2], 3) < 0 ||
		    dup2(fds[1], 4) < 0)
			_exit(126);
		close_range(5, ~0U, 0);
		execl(squid, squid, "-N", "-d", "1", "-f", "/proc/self/fd/4", (char *)NULL);
		_exit(127);
	}
	close(logfd);
	close(conffd);
	if (hostfd >= 0)
		close(hostfd);
	if (pid < 0)
		return asf_fail(e, "fork: %s", strerror(errno));
	cJSON_AddNumberToObject(px, "pid", pid);
	deadline = time(NULL) + 20;
	while (!connects(gw, port)) {
		int status;
		if (waitpid(pid, &status, WNOHANG) == pid || time(NULL) >= deadline) {
			char *text = read_file(log, 1u << 20, NULL, NULL), *tail;
			size_t n = text ? strlen(text) : 0;
			tail = text ? text + (n > 600 ? n - 600 : 0) : NULL;
			asf_fail(e, "the egress proxy (%s -f %s) did not start listening on %s:%d; its log %s ends: %s",
				 squid, conf, gw, port, log, tail ? tail : "(unreadable)");
			free(text);
			return -1;
		}
		usleep(100 * 1000);
	}
	return 0;
}

/* down / rollback: stop the proxy of STATE/NAME, if one runs. */
int egress_teardown(const char *dir, char *detail, size_t n, int *was_running)
{
	char conf[4400];

	str_fmt(conf, sizeof(conf), "%s/proxy/squid.conf", dir);
	if (proxy_stop(conf, was_running)) {
		str_fmt(detail, n, "the proxy for %s (pid %ld) does not stop", conf, proxy_find(conf));
		return -1;
	}
	str_fmt(detail, n, "%s", conf);
	return 0;
}

/*
 * The TCP addresses process pid listens on ("ADDR:PORT[,...]"), from the
 * socket inodes among its descriptors and /proc/net/tcp{,6} of its netns.
 */
int proxy_listeners(long pid, char *out, size_t outlen)
{
	const char *tables[] = { "tcp", "tcp6" };
	unsigned long inodes[256];
	size_t ninodes = 0, t;
	char path[300];
	struct dirent *de;
	DIR *d;

	out[0] = '\0';
	str_fmt(path, sizeof(path), "/proc/%ld/fd", pid);
	if (!(d = opendir(path)))
		return -1;
	while ((de = readdir(d)) && ninodes < 256) {
		char link[300], target[128];
		ssize_t n;
		str_fmt(link, sizeof(link), "/proc/%ld/fd/%s", pid, de->d_name);
		if ((n = readlink(link, target, sizeof(target) - 1)) > 0) {
			target[n] = '\0';
			if (sscanf(target, "socket:[%lu]", &inodes[ninodes]) == 1)
				ninodes++;
		}
	}
	closedir(d);
	for (t = 0; t < 2; t++) {
		char line[512];
		FILE *f;
		str_fmt(path, sizeof(path), "/proc/%ld/net/%s", pid, tables[t]);
		if (!(f = fopen(path, "re")))
			continue;
		while (fgets(line, sizeof(line), f)) {
			char local[64], addr[INET6_ADDRSTRLEN];
			unsigned int st, port;
			unsigned long inode;
			size_t i;
			if (sscanf(line, " %*d: %63[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %*s %*s %lu", local, &port, &st,
				   &inode) != 4 || st != 0x0A)
				continue;
			for (i = 0; i < ninodes && inodes[i] != inode; i++)
				;
			if (i == ninodes)
				continue;
			if (t == 0) {
				struct in_addr in;
				in.s_addr = (in_addr_t)strtoul(local, NULL, 16);
				inet_ntop(AF_INET, &in, addr, sizeof(addr));
			} else {
				struct in6_addr in6;
				int k;
				for (k = 0; k < 4; k++) {
					char word[9];
					uint32_t w;
					memcpy(word, local + 8 * k, 8);
					word[8] = '\0';
					w = (uint32_t)strtoul(word, NULL, 16);
					memcpy(&in6.s6_addr[4 * k], &w, 4);
				}
				inet_ntop(AF_INET6, &in6, addr, sizeof(addr));
			}
			str_fmt(out + strlen(out), outlen - strlen(out), t ? "%s[%s]:%u" : "%s%s:%u",
				out[0] ? "," : "", addr, port);
		}
		fclose(f);
	}
	return 0;
}

char *nft_chain_text(const char *table, const char *name)
{
	char head[64];
	const char *p, *end;

	str_fmt(head, sizeof(head), "chain %s {", name);
	if (!(p = strstr(table, head)))
		return NULL;
	p += strlen(head);
	end = strstr(p, "chain ");
	return strndup(p, end ? (size_t)(end - p) : strlen(p));
}

int nft_drops_by_default(const char *table)
{
	char *out = nft_chain_text(table, "output"), *in = nft_chain_text(table, "input");
	int ok = out && in && strstr(out, "hook output") && strstr(out, "policy drop;") && strstr(in, "hook input") &&
		 strstr(in, "policy drop;");

	free(out);
	free(in);
	return ok;
}
