/*
 * discover.c - which configuration file a call uses (see discover.h).
 *
 * A .asp.json found by walking up from the working directory may not be
 * the user's: anyone can create one in a shared directory such as /tmp,
 * and whatever it says (the sandbox, x-asp-proxy-command) would run as the
 * harness user. So a discovered file is used only when no other user can
 * have written it or put it there: it and its directory belong to the
 * current user or root, and only their owner can write them (a sticky
 * directory, like /tmp, lets others add names but not replace ours, so it
 * protects an entry we own). The rule is git's safe.directory (CVE-2022-
 * 24765), and so is the way out: $ASP_SAFE_DIRS lists directories whose
 * .asp.json is trusted whatever its owner. A path named explicitly
 * ($ASP_CONFIG, asp_open_options.config_path, asp-exec --config) is the
 * caller's choice and is not judged.
 *
 * libc only, no allocation: asp-exec's front compiles this file too.
 */
#include "discover.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asp.h"

#define USER_MAX 320              /* "name (uid N)" */
#define REASON_MAX (PATH_MAX + 512)

static int say(char *why, size_t whylen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int say(char *why, size_t whylen, int code, const char *fmt, ...)
{
	va_list ap;

	if (why && whylen) {
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return code;
}

const char *asp__user_text(char *buf, size_t n, uid_t uid)
{
	struct passwd pw, *res = NULL;
	char tmp[1024];

	if (!getpwuid_r(uid, &pw, tmp, sizeof(tmp), &res) && res && res->pw_name)
		snprintf(buf, n, "%s (uid %u)", res->pw_name, (unsigned int)uid);
	else
		snprintf(buf, n, "uid %u", (unsigned int)uid);
	return buf;
}

const char *asp__file_type(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode) || S_ISBLK(mode))
		return "a device";
	return "a special file";
}

/*
 * An absolute name for path: the real path of its directory plus its last
 * component as written, so a symlinked file keeps the name the user knows.
 * -1 with errno on failure.
 */
static int absolute(char *out, size_t outlen, const char *path)
{
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	char dir[PATH_MAX], real[PATH_MAX];
	size_t n = slash ? (size_t)(slash - path) : 0;

	if (!slash) {
		strcpy(dir, ".");
	} else if (n == 0) {
		strcpy(dir, "/");
	} else if (n < sizeof(dir)) {
		memcpy(dir, path, n);
		dir[n] = '\0';
	} else {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (!realpath(dir, real))
		return -1;
	if ((size_t)snprintf(out, outlen, "%s%s%s", real, strcmp(real, "/") ? "/" : "", base) >=
	    outlen) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

/* $ASP_CONFIG must name an existing regular file; it is never searched for. */
static int from_env(char *out, size_t outlen, const char *value, char *why, size_t whylen)
{
	struct stat st;

	if (stat(value, &st) < 0)
		return say(why, whylen, ASP_ENOCONFIG, "ASP_CONFIG=%s: %s", value, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return say(why, whylen, ASP_ENOCONFIG, "ASP_CONFIG=%s: expected a regular file, got %s",
			   value, asp__file_type(st.st_mode));
	if (absolute(out, outlen, value))
		return say(why, whylen, ASP_ECONFIG, "%s: cannot resolve directory: %s", value,
			   strerror(errno));
	return 0;
}

/* ------------------------------------------------------------ trust */

static int owner_ok(uid_t uid)
{
	return uid == geteuid() || uid == 0;
}

static int others_can_write(mode_t mode)
{
	return (mode & (S_IWGRP | S_IWOTH)) != 0;
}

/* Is dir (canonical) listed in $ASP_SAFE_DIRS? "*" lists every directory. */
static int is_safe_dir(const char *dir)
{
	const char *list = getenv("ASP_SAFE_DIRS"), *p, *end;
	char entry[PATH_MAX], real[PATH_MAX];
	size_t n;

	for (p = list; p && *p; p = *end ? end + 1 : end) {
		end = strchr(p, ':');
		if (!end)
			end = p + strlen(p);
		n = (size_t)(end - p);
		if (n == 1 && *p == '*')
			return 1;
		/* Relative entries are ignored: relative to what? */
		if (n == 0 || *p != '/' || n >= sizeof(entry))
			continue;
		memcpy(entry, p, n);
		entry[n] = '\0';
		while (n > 1 && entry[n - 1] == '/')
			entry[--n] = '\0';
		if (!strcmp(entry, dir) || (realpath(entry, real) && !strcmp(real, dir)))
			return 1;
	}
	return 0;
}

/*
 * Does dir keep others from replacing an entry we own? Ours or root's, and
 * writable by its owner only or sticky. 0 yes; else -1 with the reason in r.
 */
static int dir_reason(char *r, size_t n, const char *dir)
{
	char user[USER_MAX];
	struct stat st;

	if (stat(dir, &st) < 0) {
		say(r, n, -1, "cannot check its directory %s: %s", dir, strerror(errno));
		return -1;
	}
	if (!owner_ok(st.st_uid)) {
		say(r, n, -1, "in %s, owned by %s", dir, asp__user_text(user, sizeof(user), st.st_uid));
		return -1;
	}
	if (others_can_write(st.st_mode) && !(st.st_mode & S_ISVTX)) {
		say(r, n, -1, "in %s, which group or others can write (mode %04o)", dir,
			 (unsigned int)(st.st_mode & 07777));
		return -1;
	}
	return 0;
}

/* Is the regular file st (in dir) trusted? 0 yes; else -1 with the reason in r. */
static int file_reason(char *r, size_t n, const struct stat *st, const char *dir)
{
	char user[USER_MAX], sub[REASON_MAX];

	asp__user_text(user, sizeof(user), st->st_uid);
	if (!owner_ok(st->st_uid))
		say(r, n, -1, "owned by %s", user);
	else if (others_can_write(st->st_mode))
		say(r, n, -1, "owned by %s and writable by group or others (mode %04o)", user,
			 (unsigned int)(st->st_mode & 07777));
	else if (dir_reason(sub, sizeof(sub), dir))
		say(r, n, -1, "owned by %s, %s", user, sub);
	else
		return 0;
	return -1;
}

/* "/a/b" -> "/a", "/a" -> "/". */
static void to_parent(char *dir)
{
	char *slash = strrchr(dir, '/');

	if (slash == dir)
		dir[1] = '\0';
	else if (slash)
		*slash = '\0';
}

/* A symlinked .asp.json: the link and its directory, then the file it names and that file's directory. */
static int link_reason(char *r, size_t n, const char *link, const struct stat *lst, const char *dir)
{
	char user[USER_MAX], sub[REASON_MAX], target[PATH_MAX], tdir[PATH_MAX];
	struct stat st;

	asp__user_text(user, sizeof(user), lst->st_uid);
	if (!owner_ok(lst->st_uid)) {
		say(r, n, -1, "a symbolic link owned by %s", user);
		return -1;
	}
	if (dir_reason(sub, sizeof(sub), dir)) {
		say(r, n, -1, "a symbolic link owned by %s, %s", user, sub);
		return -1;
	}
	if (!realpath(link, target) || stat(target, &st) < 0) {
		say(r, n, -1, "a symbolic link that cannot be followed: %s", strerror(errno));
		return -1;
	}
	memcpy(tdir, target, sizeof(tdir));
	to_parent(tdir);
	if (file_reason(sub, sizeof(sub), &st, tdir)) {
		say(r, n, -1, "a symbolic link to %s, %s", target, sub);
		return -1;
	}
	return 0;
}

/*
 * May the .asp.json found at candidate (in the canonical directory dir,
 * lstat'ed as lst) be used? 0, or ASP_ECONFIG saying why not and how to
 * trust it. The remedy comes before the rule, so a long path cuts the rule.
 */
static int judge(const char *candidate, const char *dir, const struct stat *lst, char *why,
		 size_t whylen)
{
	char reason[REASON_MAX], me[USER_MAX];
	int bad;

	if (is_safe_dir(dir))
		return 0;
	if (S_ISLNK(lst->st_mode))
		bad = link_reason(reason, sizeof(reason), candidate, lst, dir);
	else
		bad = file_reason(reason, sizeof(reason), lst, dir);
	if (!bad)
		return 0;
	return say(why, whylen, ASP_ECONFIG,
		   "%s: not trusted: %s; to use it, name it explicitly (ASP_CONFIG, asp-exec --config "
		   "or the config_path option) or add %s to ASP_SAFE_DIRS (a discovered .asp.json "
		   "must belong to root or the current user, %s, and only its owner may write it and "
		   "its directory)",
		   candidate, reason, dir, asp__user_text(me, sizeof(me), geteuid()));
}

/* ------------------------------------------------------------ the search */

/*
 * Is there a .asp.json at candidate? 1 yes (lst filled), 0 nothing there,
 * or an error. Something named .asp.json that cannot be used (a directory,
 * a dangling symlink) stops the search with ASP_ECONFIG: skipping it would
 * silently pick up a parent directory's file, which may name another
 * sandbox.
 */
static int probe(const char *candidate, struct stat *lst, char *why, size_t whylen)
{
	struct stat st;

	if (lstat(candidate, lst) < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		return say(why, whylen, ASP_ECONFIG, "%s: cannot check: %s", candidate,
			   strerror(errno));
	}
	if (stat(candidate, &st) < 0)
		return say(why, whylen, ASP_ECONFIG, "%s: cannot follow: %s", candidate,
			   strerror(errno));
	if (!S_ISREG(st.st_mode))
		return say(why, whylen, ASP_ECONFIG, "%s: expected a regular file, got %s", candidate,
			   asp__file_type(st.st_mode));
	return 1;
}

static int find_upward(char *out, size_t outlen, const char *start, char *why, size_t whylen)
{
	char real[PATH_MAX], dir[PATH_MAX], candidate[PATH_MAX + sizeof(ASP_CONFIG_NAME) + 1];
	struct stat st;
	int rc;

	if (!realpath(start, real))
		return say(why, whylen, ASP_ENOCONFIG, "cannot search for %s from %s: %s",
			   ASP_CONFIG_NAME, start, strerror(errno));
	if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode))
		return say(why, whylen, ASP_ENOCONFIG, "cannot search for %s from %s: not a directory",
			   ASP_CONFIG_NAME, start);
	memcpy(dir, real, sizeof(dir));
	for (;;) {
		snprintf(candidate, sizeof(candidate), "%s/%s", strcmp(dir, "/") ? dir : "",
			 ASP_CONFIG_NAME);
		if ((rc = probe(candidate, &st, why, whylen)) < 0)
			return rc;
		if (rc == 1)
			break;
		if (!strcmp(dir, "/"))
			return say(why, whylen, ASP_ENOCONFIG,
				   "no %s in %s or any parent directory (set ASP_CONFIG to name one)",
				   ASP_CONFIG_NAME, real);
		to_parent(dir);
	}
	if ((rc = judge(candidate, dir, &st, why, whylen)))
		return rc;
	if ((size_t)snprintf(out, outlen, "%s", candidate) >= outlen)
		return say(why, whylen, ASP_ECONFIG, "%s: path too long", candidate);
	return 0;
}

int asp__discover(char *out, size_t outlen, const char *start_dir, char *why, size_t whylen)
{
	const char *env = getenv("ASP_CONFIG");

	if (env && *env)
		return from_env(out, outlen, env, why, whylen);
	return find_upward(out, outlen, start_dir ? start_dir : ".", why, whylen);
}
