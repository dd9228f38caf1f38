/*
 * podman.c - argv builders and process spawning. Every external program
 * (podman, nsenter, nft, ip, ssh-keygen) runs through asf_run: fork and
 * execvp with an argv array, never a shell string, so no value from the
 * command line or a file can become shell syntax.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "asf.h"

char asf_podman[4096];
char asf_engine[16] = "podman";

int asf_fail(asf_err *e, const char *fmt, ...)
{
	va_list ap;

	if (e) {
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		va_end(ap);
	}
	return -1;
}

int str_fmt(char *out, size_t outlen, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out, outlen, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= outlen ? -1 : n;
}

/* ---------------------------------------------------------------- argv */

void argv_add(asf_argv *a, const char *s)
{
	char *copy;

	if (a->oom)
		return;
	if (a->n + 2 > a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 32;
		char **v = realloc(a->v, cap * sizeof(*v));
		if (!v) {
			a->oom = 1;
			return;
		}
		a->v = v;
		a->cap = cap;
	}
	if (!(copy = strdup(s))) {
		a->oom = 1;
		return;
	}
	a->v[a->n++] = copy;
	a->v[a->n] = NULL;
}

void argv_addf(asf_argv *a, const char *fmt, ...)
{
	char buf[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	argv_add(a, buf);
}

void argv_free(asf_argv *a)
{
	size_t i;

	for (i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	memset(a, 0, sizeof(*a));
}

static int needs_quotes(const char *s)
{
	if (!*s)
		return 1;
	for (; *s; s++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@%", *s))
			return 1;
	return 0;
}

char *argv_text(char *const *argv)
{
	size_t len = 1, i;
	char *out, *p;
	const char *s;

	for (i = 0; argv[i]; i++)
		len += strlen(argv[i]) * 4 + 3;
	if (!(out = p = malloc(len)))
		return NULL;
	for (i = 0; argv[i]; i++) {
		if (i)
			*p++ = ' ';
		if (!needs_quotes(argv[i])) {
			p = stpcpy(p, argv[i]);
			continue;
		}
		*p++ = '\'';
		for (s = argv[i]; *s; s++) {
			if (*s == '\'')
				p = stpcpy(p, "'\\''");
			else
				*p++ = *s;
		}
		*p++ = '\'';
	}
	*p = '\0';
	return out;
}

/* nft and ip live in /usr/sbin, which an unprivileged user's PATH often lacks. */
static void path_with_sbin(void)
{
	const char *path = getenv("PATH");
	char buf[8192];

	if (!path)
		path = "/usr/bin:/bin";
	if (strstr(path, "/usr/sbin") || str_fmt(buf, sizeof(buf), "%s:/usr/sbin:/sbin", path) < 0)
		return;
	setenv("PATH", buf, 1);
}

/*
 * nsenter into the network namespace of process pid. Rootless, the
 * namespace belongs to Podman's user namespace: enter that too, as its root
 * (the caller owns it), which is what may change the netns's firewall.
 */
void netns_argv(asf_argv *a, long pid)
{
	path_with_sbin();
	argv_add(a, "nsenter");
	argv_addf(a, "--target=%ld", pid);
	if (geteuid() != 0 && !engine_docker())
		argv_add(a, "--user");
	argv_add(a, "--net");
}

/* --------------------------------------------------------------- spawn */

void out_free(asf_out *o)
{
	free(o->out);
	free(o->err);
	o->out = o->err = NULL;
}

typedef struct sbuf {
	char *d;
	size_t n, cap;
} sbuf;

static int sbuf_put(sbuf *b, const char *d, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *nd;
		while (cap < b->n + n + 1)
			cap *= 2;
		if (!(nd = realloc(b->d, cap)))
			return -1;
		b->d = nd;
		b->cap = cap;
	}
	memcpy(b->d + b->n, d, n);
	b->n += n;
	b->d[b->n] = '\0';
	return 0;
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* Mark every descriptor from `first` on close-on-exec (the exec-failure pipe still works until exec). */
static void close_all_from(int first)
{
	long fd, max;

	if (close_range((unsigned int)first, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
		return;
	max = sysconf(_SC_OPEN_MAX);
	for (fd = first; fd < (max > 0 ? max : 1024); fd++)
		fcntl((int)fd, F_SETFD, FD_CLOEXEC);
}

/*
 * The child reports an execvp failure through a close-on-exec pipe, so
 * "not found" is told apart from a program that ran and exited 127.
 */
int asf_run(asf_out *o, char *const *argv, int timeout_s, asf_err *e)
{
	int pout[2], perr[2], pexec[2], status = 0, exec_errno = 0;
	sbuf bout = { 0 }, berr = { 0 };
	long deadline = now_ms() + (long)timeout_s * 1000L;
	pid_t pid;
	int open_fds = 2, timed_out = 0;

	memset(o, 0, sizeof(*o));
	if (pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC) || pipe2(pexec, O_CLOEXEC))
		return asf_fail(e, "pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		return asf_fail(e, "fork: %s", strerror(errno));
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);
		signal(SIGPIPE, SIG_DFL);
		dup2(devnull, 0);
		dup2(pout[1], 1);
		dup2(perr[1], 2);
		/* Nothing else we hold leaks into podman and on into conmon, which
		 * outlives us: an inherited pipe would keep our caller waiting for EOF. */
		close_all_from(3);
		execvp(argv[0], argv);
		exec_errno = errno;
		if (write(pexec[1], &exec_errno, sizeof(exec_errno)) < 0)
			_exit(127);
		_exit(127);
	}
	close(pout[1]);
	close(perr[1]);
	close(pexec[1]);
	while (open_fds > 0) {
		struct pollfd pf[2] = { { pout[0], POLLIN, 0 }, { perr[0], POLLIN, 0 } };
		long left = deadline - now_ms();
		char buf[8192];
		int i;

		if (left <= 0) {
			timed_out = 1;
			kill(pid, SIGKILL);
			break;
		}
		if (pf[0].fd < 0 && pf[1].fd < 0)
			break;
		if (poll(pf, 2, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
			break;
		for (i = 0; i < 2; i++) {
			ssize_t r;
			if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			r = read(pf[i].fd, buf, sizeof(buf));
			if (r > 0) {
				sbuf_put(i ? &berr : &bout, buf, (size_t)r);
			} else if (r == 0 || errno != EINTR) {
				close(pf[i].fd);
				if (i)
					perr[0] = -1;
				else
					pout[0] = -1;
				open_fds--;
			}
		}
	}
	if (pout[0] >= 0)
		close(pout[0]);
	if (perr[0] >= 0)
		close(perr[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (read(pexec[0], &exec_errno, sizeof(exec_errno)) != sizeof(exec_errno))
		exec_errno = 0;
	close(pexec[0]);
	sbuf_put(&bout, "", 0);
	sbuf_put(&berr, "", 0);
	o->out = bout.d ? bout.d : strdup("");
	o->err = berr.d ? berr.d : strdup("");
	if (exec_errno) {
		out_free(o);
		return asf_fail(e, "cannot run %s: %s", argv[0], strerror(exec_errno));
	}
	if (timed_out) {
		char *t = argv_text(argv);
		asf_fail(e, "timed out after %d s: %s", timeout_s, t ? t : argv[0]);
		free(t);
		out_free(o);
		return -1;
	}
	o->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	return 0;
}

int asf_which(const char *prog, char *out, size_t outlen)
{
	const char *path = getenv("PATH");
	const char *p, *end;

	if (strchr(prog, '/')) {
		if (access(prog, X_OK))
			return -1;
		str_fmt(out, outlen, "%s", prog);
		return 0;
	}
	if (!path)
		path = "/usr/bin:/bin";
	for (p = path; *p; p = *end ? end + 1 : end) {
		end = strchrnul(p, ':');
		if (end == p)
			continue;
		if ((size_t)str_fmt(out, outlen, "%.*s/%s", (int)(end - p), p, prog) >= outlen)
			continue;
		if (out[0] == '/' && !access(out, X_OK))
			return 0;
	}
	return -1;
}

/* -------------------------------------------------------------- podman */

/* Trim one trailing newline group for messages. */
static const char *trimmed(char *s)
{
	size_t n = strlen(s);

	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
		s[--n] = '\0';
	return s;
}

/*
 * The engines differ in a few places only, each marked engine_docker():
 * docker has no `podman init` (up starts the container behind a gate
 * instead), no `--rootfs`, no nosuid/nodev/noexec on bind mounts, no
 * `--no-hosts`, and its own `exists` and label syntax.
 */
int engine_docker(void)
{
	return !strcmp(asf_engine, "docker");
}

int engine_set(const char *name, asf_err *e)
{
	if (strcmp(name, "podman") && strcmp(name, "docker") && strcmp(name, "kubectl"))
		return asf_fail(e, "--engine %s: expected podman or docker (or, with --backend kubernetes, "
				   "kubectl or podman)", name);
	if (strcmp(asf_engine, name))
		asf_podman[0] = '\0'; /* found again for the new engine */
	str_fmt(asf_engine, sizeof(asf_engine), "%s", name);
	return 0;
}

int engine_exists(const char *kind, const char *name)
{
	asf_err e;
	asf_out o;
	int rc;

	/* `podman container exists`; docker has only inspect (which podman has too). */
	rc = podman(&o, &e, !strcmp(kind, "container") ? "container" : "network", "inspect", name,
		    (char *)NULL);
	if (rc == 0)
		out_free(&o);
	return rc == 0;
}

int podman_ready(asf_err *e)
{
	asf_out o;

	if (!asf_podman[0] && asf_which(asf_engine, asf_podman, sizeof(asf_podman))) {
		asf_podman[0] = '\0';
		return asf_fail(e, "%s not found in PATH (%s); install it (Debian: apt-get install %s) "
				   "or fix PATH", asf_engine, getenv("PATH") ? getenv("PATH") : "unset",
				engine_docker() ? "docker.io"
				: strcmp(asf_engine, "kubectl") ? "podman runc" : "kubectl");
	}
	if (!strcmp(asf_engine, "kubectl")) { /* the client only: `up` finds out about the cluster */
		if (podman(&o, e, "version", "--client", "--output=json", (char *)NULL))
			return -1;
		out_free(&o);
		return 0;
	}
	/* docker: the server's version, so a client without a daemon fails here. */
	if (podman(&o, e, "version", "--format", engine_docker() ? "{{.Server.Version}}" :
		   "{{.Client.Version}}", (char *)NULL)) {
		char why[sizeof(e->msg)];
		str_fmt(why, sizeof(why), "%s", e->msg);
		return asf_fail(e, "%s does not work: %s", asf_podman, why);
	}
	out_free(&o);
	return 0;
}

int podman_argv(asf_out *o, asf_argv *a, asf_err *e)
{
	if (a->oom)
		return asf_fail(e, "out of memory");
	if (asf_run(o, a->v, 300, e))
		return -1;
	if (o->status != 0) {
		/* podman's own words; the whole command line would bury them. */
		asf_fail(e, "%s %s%s%s failed (exit %d): %s", asf_engine, a->n > 1 ? a->v[1] : "",
			 a->n > 2 && a->v[2][0] != '-' ? " " : "", a->n > 2 && a->v[2][0] != '-' ? a->v[2] : "",
			 o->status, *o->err ? trimmed(o->err) : trimmed(o->out));
		out_free(o); /* on failure the caller has nothing to free */
		return -1;
	}
	return 0;
}

int podman(asf_out *o, asf_err *e, ...)
{
	asf_argv a = { 0 };
	const char *s;
	va_list ap;
	int rc;

	argv_add(&a, asf_podman[0] ? asf_podman : asf_engine);
	va_start(ap, e);
	while ((s = va_arg(ap, const char *)))
		argv_add(&a, s);
	va_end(ap);
	rc = podman_argv(o, &a, e);
	argv_free(&a);
	return rc;
}

void strv_free(char **v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Split text into non-empty lines. */
static int split_lines(char ***out, size_t *n, const char *text)
{
	const char *p = text, *nl;
	char **v = NULL;
	size_t k = 0;

	while (*p) {
		nl = strchrnul(p, '\n');
		if (nl > p) {
			char **nv = realloc(v, (k + 1) * sizeof(*v));
			if (!nv || !(nv[k] = strndup(p, (size_t)(nl - p)))) {
				strv_free(nv ? nv : v, k);
				return -1;
			}
			v = nv;
			k++;
		}
		p = *nl ? nl + 1 : nl;
	}
	*out = v;
	*n = k;
	return 0;
}

int podman_labelled(char ***out, size_t *n, const char *kind, const char *name, asf_err *e)
{
	char filter[512];
	asf_out o;
	int rc;

	*out = NULL;
	*n = 0;
	if (name)
		str_fmt(filter, sizeof(filter), "label=%s=%s", ASF_LABEL_NAME, name);
	else
		str_fmt(filter, sizeof(filter), "label=%s=1", ASF_LABEL);
	if (!strcmp(kind, "container"))
		rc = podman(&o, e, "ps", "-a", "--filter", filter, "--format", "{{.Names}}", (char *)NULL);
	else if (!strcmp(kind, "network"))
		rc = podman(&o, e, "network", "ls", "--filter", filter, "--format", "{{.Name}}", (char *)NULL);
	else
		rc = podman(&o, e, "volume", "ls", "--filter", filter, "--format", "{{.Name}}", (char *)NULL);
	if (rc)
		return -1;
	rc = split_lines(out, n, o.out);
	out_free(&o);
	return rc ? asf_fail(e, "out of memory") : 0;
}
