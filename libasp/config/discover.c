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
 * What is judged is what is read (CVE-2022-24765's lesson, one step on):
 * the walk from / opens each directory with O_NOFOLLOW and judges it with
 * fstat, the file is opened relative to its judged directory and judged
 * with fstat too, and the caller reads that descriptor. Judging a path and
 * then opening it again let a user who can rename an ancestor's entries
 * swap their own project in between. For the same reason every directory
 * from / down to the file counts, not only the file's own: one that others
 * can write (and is not sticky) lets them move whole subtrees around.
 *
 * libc only, no allocation: asp-exec's front compiles this file too.
 */
#include "discover.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asp.h"
#include "errtext.h"

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

/* A file to read: O_NONBLOCK keeps a FIFO from hanging the open. */
#define READ_FLAGS (O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
/* One step of the walk: a directory, never a symlink; search permission is enough. */
#define WALK_FLAGS (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/*
 * Open path (relative to dirfd) for reading, with extra open flags: the fd
 * when it is a regular file; -1 with errno when it cannot be opened; -2
 * with *mode when it is something else (closed again).
 */
static int open_regular(int dirfd, const char *path, int flags, mode_t *mode)
{
	struct stat st;
	int fd = openat(dirfd, path, READ_FLAGS | flags), saved;

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0) {
		saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		*mode = st.st_mode;
		return -2;
	}
	return fd;
}

/* $ASP_CONFIG must name an existing regular file; it is never searched for. */
static int from_env(int *fd, char *out, size_t outlen, const char *value, char *why,
		    size_t whylen)
{
	mode_t mode = 0;
	int rc;

	*fd = open_regular(AT_FDCWD, value, 0, &mode);
	if (*fd == -1)
		return say(why, whylen, ASP_ENOCONFIG, "ASP_CONFIG=%s: %s", value, ASP_ERRNO_TEXT(errno));
	if (*fd == -2) {
		*fd = -1;
		return say(why, whylen, ASP_ENOCONFIG, "ASP_CONFIG=%s: expected a regular file, got %s",
			   value, asp__file_type(mode));
	}
	if (absolute(out, outlen, value)) {
		rc = say(why, whylen, ASP_ECONFIG, "%s: cannot resolve directory: %s", value,
			 ASP_ERRNO_TEXT(errno));
		close(*fd);
		*fd = -1;
		return rc;
	}
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
 * Does the directory open as dfd (canonical name dir) keep others from
 * replacing an entry in it? Listed in $ASP_SAFE_DIRS, or ours or root's
 * and writable by its owner only or sticky (a sticky directory, like /tmp,
 * lets others add names but not rename ours). 0 yes; else -1 with the
 * reason in r.
 */
static int dir_reason(char *r, size_t n, int dfd, const char *dir)
{
	char user[USER_MAX];
	struct stat st;

	if (is_safe_dir(dir))
		return 0;
	if (fstat(dfd, &st) < 0)
		return say(r, n, -1, "cannot check its directory %s: %s", dir, ASP_ERRNO_TEXT(errno));
	if (!owner_ok(st.st_uid))
		return say(r, n, -1, "in %s, owned by %s", dir,
			   asp__user_text(user, sizeof(user), st.st_uid));
	if (others_can_write(st.st_mode) && !(st.st_mode & S_ISVTX))
		return say(r, n, -1, "in %s, which group or others can write (mode %04o)", dir,
			   (unsigned int)(st.st_mode & 07777));
	return 0;
}

/*
 * A walk from / down a canonical directory path, one component at a time
 * with O_NOFOLLOW, judging each directory on the descriptor it opened. The
 * first directory that does not protect its entries is kept (bad, reason).
 */
typedef struct walk {
	int fd;              /* the directory reached */
	char dir[PATH_MAX];  /* its canonical name */
	const char *rest;    /* what is left of the path */
	int bad;             /* a directory on the way does not protect its entries */
	char bad_dir[PATH_MAX];
	char reason[REASON_MAX];
} walk;

static void walk_judge(walk *w)
{
	if (!w->bad && dir_reason(w->reason, sizeof(w->reason), w->fd, w->dir)) {
		w->bad = 1;
		snprintf(w->bad_dir, sizeof(w->bad_dir), "%s", w->dir);
	}
}

/* At /, judged. -1 with errno on failure. */
static int walk_start(walk *w, const char *path)
{
	memset(w, 0, sizeof(*w));
	if ((w->fd = open("/", WALK_FLAGS)) < 0)
		return -1;
	strcpy(w->dir, "/");
	w->rest = path;
	while (*w->rest == '/')
		w->rest++;
	walk_judge(w);
	return 0;
}

/* One level down, judged: 1; at the end of the path: 0; -1 with errno (w->dir names the step). */
static int walk_next(walk *w)
{
	const char *end;
	size_t len, have = strlen(w->dir);
	char name[NAME_MAX + 1];
	int next;

	if (!*w->rest)
		return 0;
	end = strchr(w->rest, '/');
	len = end ? (size_t)(end - w->rest) : strlen(w->rest);
	if (len > NAME_MAX || have + len + 2 > sizeof(w->dir)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(name, w->rest, len);
	name[len] = '\0';
	snprintf(w->dir + have, sizeof(w->dir) - have, "%s%s", have > 1 ? "/" : "", name);
	w->rest += len;
	while (*w->rest == '/')
		w->rest++;
	if ((next = openat(w->fd, name, WALK_FLAGS)) < 0)
		return -1;
	close(w->fd);
	w->fd = next;
	walk_judge(w);
	return 1;
}

static void walk_end(walk *w)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
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

/* The regular file fd: ours or root's and writable by its owner only? 0 yes; else -1 with the reason. */
static int file_reason(char *r, size_t n, const struct stat *st)
{
	char user[USER_MAX];

	asp__user_text(user, sizeof(user), st->st_uid);
	if (!owner_ok(st->st_uid))
		return say(r, n, -1, "owned by %s", user);
	if (others_can_write(st->st_mode))
		return say(r, n, -1, "owned by %s and writable by group or others (mode %04o)", user,
			   (unsigned int)(st->st_mode & 07777));
	return 0;
}

/*
 * The file fd is open on is where a symlink led: is it trusted, and so is
 * every directory above it? Its name comes from /proc/self/fd; a walk to
 * that name without following symlinks must reach the same file, so that
 * the directories judged are the ones holding what we read.
 */
static int target_reason(char *r, size_t n, int fd, const struct stat *st)
{
	char link[64], target[PATH_MAX], dir[PATH_MAX], sub[REASON_MAX];
	const char *base;
	struct stat there;
	ssize_t len;
	walk w;
	int rc;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	if ((len = readlink(link, target, sizeof(target) - 1)) < 0 || len == 0 || target[0] != '/')
		return say(r, n, -1, "a symbolic link whose target cannot be named (%s)",
			   len < 0 ? ASP_ERRNO_TEXT(errno) : "no /proc");
	target[len] = '\0';
	if (file_reason(sub, sizeof(sub), st))
		return say(r, n, -1, "a symbolic link to %s, %s", target, sub);
	memcpy(dir, target, sizeof(dir));
	to_parent(dir);
	base = target + strlen(dir) + (strcmp(dir, "/") ? 1 : 0);
	if (walk_start(&w, dir) < 0)
		return say(r, n, -1, "a symbolic link to %s, which cannot be checked: %s", target,
			   ASP_ERRNO_TEXT(errno));
	while ((rc = walk_next(&w)) == 1)
		;
	if (rc < 0)
		say(r, n, -1, "a symbolic link to %s, which cannot be checked: %s: %s", target, w.dir,
		    ASP_ERRNO_TEXT(errno));
	else if (w.bad)
		say(r, n, -1, "a symbolic link to %s, owned by %s, %s", target,
		    asp__user_text(sub, sizeof(sub), st->st_uid), w.reason);
	else if (fstatat(w.fd, base, &there, AT_SYMLINK_NOFOLLOW) < 0 || there.st_dev != st->st_dev ||
		 there.st_ino != st->st_ino)
		rc = say(r, n, -1, "a symbolic link to %s, which changed while it was checked",
			 target);
	walk_end(&w);
	return rc < 0 || w.bad ? -1 : 0;
}

/*
 * The refusal: what is wrong, then how to trust it. The remedy comes
 * before the rule, so a long path cuts the rule.
 */
static int refuse(char *why, size_t whylen, const char *candidate, const char *reason,
		  const char *remedy_dir)
{
	char me[USER_MAX];

	return say(why, whylen, ASP_ECONFIG,
		   "%s: not trusted: %s; to use it, name it explicitly (ASP_CONFIG, asp-exec --config "
		   "or the config_path option) or add %s to ASP_SAFE_DIRS (a discovered .asp.json "
		   "must belong to root or the current user, %s, and only its owner may write it and "
		   "every directory above it)",
		   candidate, reason, remedy_dir, asp__user_text(me, sizeof(me), geteuid()));
}

/* ------------------------------------------------------------ the search */

/* What the walk found: the deepest .asp.json, as lstat saw it, and where. */
typedef struct found {
	int dirfd;             /* its directory, -1 when none yet */
	char dir[PATH_MAX];    /* that directory's canonical name */
	struct stat lst;
	int bad;               /* a directory from / to dir does not protect its entries */
	char bad_dir[PATH_MAX];
	char reason[REASON_MAX];
} found;

/* Note a .asp.json in the walk's directory, if there is one: 0, or -1 with errno. */
static int probe(found *f, const walk *w)
{
	struct stat lst;

	if (fstatat(w->fd, ASP_CONFIG_NAME, &lst, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
	if (f->dirfd >= 0)
		close(f->dirfd);
	if ((f->dirfd = fcntl(w->fd, F_DUPFD_CLOEXEC, 0)) < 0)
		return -1;
	f->lst = lst;
	memcpy(f->dir, w->dir, sizeof(f->dir));
	f->bad = w->bad;
	if (w->bad) {
		memcpy(f->bad_dir, w->bad_dir, sizeof(f->bad_dir));
		memcpy(f->reason, w->reason, sizeof(f->reason));
	}
	return 0;
}

/*
 * Open and judge the .asp.json f found (named candidate): *fd, or an
 * error. Something named .asp.json that cannot be used (a directory, a
 * dangling symlink) stops the search with ASP_ECONFIG: skipping it would
 * silently pick up a parent directory's file, which may name another
 * sandbox.
 */
static int open_found(int *fd, const found *f, const char *candidate, char *why, size_t whylen)
{
	char reason[REASON_MAX], user[USER_MAX];
	int is_link = S_ISLNK(f->lst.st_mode), safe = is_safe_dir(f->dir);
	mode_t mode = f->lst.st_mode;
	struct stat st;

	if (!is_link && !S_ISREG(mode))
		return say(why, whylen, ASP_ECONFIG, "%s: expected a regular file, got %s", candidate,
			   asp__file_type(mode));
	if (is_link && !safe && !owner_ok(f->lst.st_uid)) {
		say(reason, sizeof(reason), -1, "a symbolic link owned by %s",
		    asp__user_text(user, sizeof(user), f->lst.st_uid));
		return refuse(why, whylen, candidate, reason, f->dir);
	}
	/* Not even opened when it leads to a device (opening one may act): the
	 * descriptor opened next is judged again whatever this saw. */
	if (is_link && fstatat(f->dirfd, ASP_CONFIG_NAME, &st, 0) == 0 && !S_ISREG(st.st_mode))
		return say(why, whylen, ASP_ECONFIG, "%s: expected a regular file, got %s", candidate,
			   asp__file_type(st.st_mode));
	*fd = open_regular(f->dirfd, ASP_CONFIG_NAME, is_link ? 0 : O_NOFOLLOW, &mode);
	if (*fd == -1)
		return say(why, whylen, ASP_ECONFIG, "%s: cannot %s: %s", candidate,
			   is_link ? "follow" : "open", ASP_ERRNO_TEXT(errno));
	if (*fd == -2) {
		*fd = -1;
		return say(why, whylen, ASP_ECONFIG, "%s: expected a regular file, got %s", candidate,
			   asp__file_type(mode));
	}
	if (fstat(*fd, &st) < 0) {
		say(reason, sizeof(reason), -1, "cannot be checked: %s", ASP_ERRNO_TEXT(errno));
		goto refused;
	}
	/* In a listed directory the file (or link) passes; the directories above still count. */
	if (!safe && (is_link ? target_reason(reason, sizeof(reason), *fd, &st) :
		      file_reason(reason, sizeof(reason), &st)))
		goto refused;
	if (!f->bad)
		return 0;
	say(reason, sizeof(reason), -1, "%s %s, %s", is_link ? "a symbolic link owned by" : "owned by",
	    asp__user_text(user, sizeof(user), is_link ? f->lst.st_uid : st.st_uid), f->reason);
	close(*fd);
	*fd = -1;
	return refuse(why, whylen, candidate, reason, f->bad_dir);
refused:
	close(*fd);
	*fd = -1;
	return refuse(why, whylen, candidate, reason, f->dir);
}

static int find_upward(int *fd, char *out, size_t outlen, const char *start, char *why,
		       size_t whylen)
{
	char real[PATH_MAX], candidate[PATH_MAX + sizeof(ASP_CONFIG_NAME) + 1];
	found f;
	walk w;
	int rc;

	if (!realpath(start, real))
		return say(why, whylen, ASP_ENOCONFIG, "cannot search for %s from %s: %s",
			   ASP_CONFIG_NAME, start, ASP_ERRNO_TEXT(errno));
	memset(&f, 0, sizeof(f));
	f.dirfd = -1;
	if (walk_start(&w, real) < 0)
		return say(why, whylen, ASP_ENOCONFIG, "cannot search for %s from %s: /: %s",
			   ASP_CONFIG_NAME, start, ASP_ERRNO_TEXT(errno));
	do {
		if (probe(&f, &w) < 0) {
			rc = say(why, whylen, ASP_ECONFIG, "%s%s%s: cannot check: %s", w.dir,
				 strcmp(w.dir, "/") ? "/" : "", ASP_CONFIG_NAME, ASP_ERRNO_TEXT(errno));
			goto out;
		}
	} while ((rc = walk_next(&w)) == 1);
	if (rc < 0) {
		rc = say(why, whylen, ASP_ENOCONFIG, "cannot search for %s from %s: %s: %s",
			 ASP_CONFIG_NAME, start, w.dir, ASP_ERRNO_TEXT(errno));
		goto out;
	}
	if (f.dirfd < 0) {
		rc = say(why, whylen, ASP_ENOCONFIG,
			 "no %s in %s or any parent directory (set ASP_CONFIG to name one)",
			 ASP_CONFIG_NAME, real);
		goto out;
	}
	snprintf(candidate, sizeof(candidate), "%s/%s", strcmp(f.dir, "/") ? f.dir : "",
		 ASP_CONFIG_NAME);
	if ((rc = open_found(fd, &f, candidate, why, whylen)))
		goto out;
	if ((size_t)snprintf(out, outlen, "%s", candidate) >= outlen) {
		rc = say(why, whylen, ASP_ECONFIG, "%s: path too long", candidate);
		close(*fd);
		*fd = -1;
	}
out:
	walk_end(&w);
	if (f.dirfd >= 0)
		close(f.dirfd);
	return rc;
}

int asp__discover(int *fd, char *out, size_t outlen, const char *start_dir, char *why,
		  size_t whylen)
{
	const char *env = getenv("ASP_CONFIG");

	*fd = -1;
	if (env && *env)
		return from_env(fd, out, outlen, env, why, whylen);
	return find_upward(fd, out, outlen, start_dir ? start_dir : ".", why, whylen);
}
