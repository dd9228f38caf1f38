/*
 * state.c - where asf-provision keeps what it made: STATE_ROOT/NAME/ (0700)
 * holds state.json, the keys, and the files mounted into the container.
 * STATE_ROOT is --state-dir, else $ASF_STATE_DIR, else
 * /var/lib/asf-provision for root, else $XDG_STATE_HOME/asf-provision
 * (~/.local/state/asf-provision).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "asf.h"

char asf_state_root[4096];

static int mkdir_parents(const char *path, mode_t mode)
{
	char tmp[4096], *p;

	str_fmt(tmp, sizeof(tmp), "%s", path);
	for (p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(tmp, mode) && errno != EEXIST)
		return -1;
	return 0;
}

int state_root_init(const char *override, asf_err *e)
{
	const char *env = getenv("ASF_STATE_DIR"), *xdg = getenv("XDG_STATE_HOME");
	const char *home = getenv("HOME");
	char real[PATH_MAX];
	struct stat st;

	if (override && *override)
		str_fmt(asf_state_root, sizeof(asf_state_root), "%s", override);
	else if (env && *env)
		str_fmt(asf_state_root, sizeof(asf_state_root), "%s", env);
	else if (geteuid() == 0)
		str_fmt(asf_state_root, sizeof(asf_state_root), "/var/lib/asf-provision");
	else if (xdg && *xdg == '/')
		str_fmt(asf_state_root, sizeof(asf_state_root), "%s/asf-provision", xdg);
	else if (home && *home == '/')
		str_fmt(asf_state_root, sizeof(asf_state_root), "%s/.local/state/asf-provision", home);
	else
		return asf_fail(e, "no state directory: set --state-dir, ASF_STATE_DIR or HOME");
	if (strlen(asf_state_root) > 1024)
		return asf_fail(e, "state directory path is longer than 1024 characters");
	if (asf_state_root[0] != '/')
		return asf_fail(e, "state directory must be an absolute path: %s", asf_state_root);
	if (strchr(asf_state_root, ':') || strchr(asf_state_root, ','))
		return asf_fail(e, "state directory must not contain ':' or ',' (podman mount syntax): %s",
				asf_state_root);
	if (mkdir_parents(asf_state_root, 0700))
		return asf_fail(e, "cannot create %s: %s", asf_state_root, strerror(errno));
	/* The real path: the workspace checks in `up` compare real paths, links resolved. */
	if (!realpath(asf_state_root, real))
		return asf_fail(e, "%s: %s", asf_state_root, strerror(errno));
	str_fmt(asf_state_root, sizeof(asf_state_root), "%s", real);
	if (strchr(asf_state_root, ':') || strchr(asf_state_root, ','))
		return asf_fail(e, "state directory must not contain ':' or ',' (podman mount syntax): %s",
				asf_state_root);
	if (lstat(asf_state_root, &st) || !S_ISDIR(st.st_mode))
		return asf_fail(e, "%s is not a directory", asf_state_root);
	if (st.st_uid != geteuid() || (st.st_mode & 022))
		return asf_fail(e, "%s must be owned by you and not writable by group or others "
				   "(it holds private keys)", asf_state_root);
	return 0;
}

void state_dir(char *out, size_t outlen, const char *name)
{
	str_fmt(out, outlen, "%s/%s", asf_state_root, name);
}

int name_valid(const char *name)
{
	size_t i, n = strlen(name);

	/* Podman accepts [a-zA-Z0-9][a-zA-Z0-9_.-]*; we keep it short enough
	 * for interface and path names, and lower-case for DNS-safe hostnames. */
	if (n < 1 || n > 40)
		return 0;
	for (i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      (i > 0 && (c == '-' || c == '_' || c == '.'))))
			return 0;
	}
	return 1;
}

int state_exists(const char *name)
{
	char dir[4200];
	struct stat st;

	state_dir(dir, sizeof(dir), name);
	return stat(dir, &st) == 0;
}

/* What a non-regular file is, for messages. */
static const char *kind_of(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : S_ISLNK(m) ? "a symbolic link" :
	       "not a regular file";
}

int open_regular(int dirfd, const char *path, const char *shown, struct stat *st, asf_err *e)
{
	struct stat sb;
	int fd;

	/* O_NONBLOCK: a FIFO or a device opens at once instead of waiting for a peer. */
	fd = openat(dirfd, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ELOOP)
			return asf_fail(e, "%s is a symbolic link: not followed", shown);
		return asf_fail(e, "%s: %s", shown, strerror(errno));
	}
	if (fstat(fd, &sb)) {
		int saved = errno;
		close(fd);
		return asf_fail(e, "%s: %s", shown, strerror(saved));
	}
	if (!S_ISREG(sb.st_mode)) {
		close(fd);
		return asf_fail(e, "%s is %s, not a regular file: not read", shown, kind_of(sb.st_mode));
	}
	if (st)
		*st = sb;
	return fd;
}

char *read_fd(int fd, const char *shown, size_t max, size_t *len, asf_err *e)
{
	struct stat sb;
	char *buf;
	size_t n = 0;

	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (unsigned long long)sb.st_size > max) {
		asf_fail(e, "%s is larger than %zu bytes: not read", shown, max);
		return NULL;
	}
	if (!(buf = malloc(max + 1))) {
		asf_fail(e, "%s: out of memory", shown);
		return NULL;
	}
	/* One byte more than allowed tells a file that grew past max from one that did not. */
	while (n < max + 1) {
		ssize_t r = read(fd, buf + n, max + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			asf_fail(e, "cannot read %s: %s", shown, strerror(errno));
			free(buf);
			return NULL;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n > max) {
		asf_fail(e, "%s is larger than %zu bytes: not read", shown, max);
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

char *read_file(const char *path, size_t max, size_t *len, asf_err *e)
{
	int fd = open_regular(AT_FDCWD, path, path, NULL, e);
	char *buf;

	if (fd < 0)
		return NULL;
	buf = read_fd(fd, path, max, len, e);
	close(fd);
	return buf;
}

/* A name beside path that nobody can predict: path.tmp-XXXXXXXXXXXX (random hex). */
static int temp_beside(char *out, size_t outlen, const char *path)
{
	unsigned char r[6];

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -1;
	return str_fmt(out, outlen, "%s.tmp-%02x%02x%02x%02x%02x%02x", path, r[0], r[1], r[2], r[3], r[4],
		       r[5]) < 0 ? -1 : 0;
}

int write_file(const char *path, const char *data, size_t len, mode_t mode, struct stat *written,
	       asf_err *e)
{
	char tmp[4200];
	size_t off = 0;
	int fd = -1, tries;

	/*
	 * O_CREAT | O_EXCL on a random name: whatever someone planted beside
	 * path (a file, a hard link, a symbolic link) is never opened; the
	 * rename then replaces path itself, never what a link there points to.
	 */
	for (tries = 0; fd < 0 && tries < 16; tries++) {
		if (temp_beside(tmp, sizeof(tmp), path))
			return asf_fail(e, "cannot make a temporary name beside %s: %s", path, strerror(errno));
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			return asf_fail(e, "cannot create %s: %s", tmp, strerror(errno));
	}
	if (fd < 0)
		return asf_fail(e, "cannot create a temporary file beside %s: %s", path, strerror(EEXIST));
	if (fchmod(fd, mode))
		goto fail;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			goto fail;
		off += (size_t)w;
	}
	if (fsync(fd) || (written && fstat(fd, written)))
		goto fail;
	close(fd);
	if (rename(tmp, path)) {
		int saved = errno;
		unlink(tmp);
		return asf_fail(e, "cannot rename %s to %s: %s", tmp, path, strerror(saved));
	}
	return 0;
fail:
	{
		int saved = errno;
		close(fd);
		unlink(tmp);
		return asf_fail(e, "cannot write %s: %s", tmp, strerror(saved));
	}
}

int mkdir_mode(const char *path, mode_t mode, asf_err *e)
{
	struct stat st;
	int fd;

	if (mkdir(path, mode) && errno != EEXIST)
		return asf_fail(e, "cannot create %s: %s", path, strerror(errno));
	/* Existing or new: a directory of ours, not a link planted in its place. */
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return asf_fail(e, "%s: %s", path, errno == ELOOP || errno == ENOTDIR ?
				"exists and is not a directory (a symbolic link is not followed)" : strerror(errno));
	if (fstat(fd, &st) || st.st_uid != geteuid()) {
		close(fd);
		return asf_fail(e, "%s: exists and belongs to uid %d, not to you", path, (int)st.st_uid);
	}
	if (fchmod(fd, mode)) {
		int saved = errno;
		close(fd);
		return asf_fail(e, "chmod %s: %s", path, strerror(saved));
	}
	close(fd);
	return 0;
}

int chown_dir(const char *path, uid_t uid, gid_t gid, struct stat *before, asf_err *e)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		return asf_fail(e, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) || (uid != (uid_t)-1 && fchown(fd, uid, gid))) {
		int saved = errno;
		close(fd);
		return asf_fail(e, "cannot chown %s to %d:%d: %s", path, (int)uid, (int)gid, strerror(saved));
	}
	close(fd);
	if (before)
		*before = st;
	return 0;
}

cJSON *state_load(const char *name, asf_err *e)
{
	char path[4200], *text;
	cJSON *st;

	str_fmt(path, sizeof(path), "%s/%s/state.json", asf_state_root, name);
	if (access(path, F_OK) && errno == ENOENT) {
		asf_fail(e, "no sandbox named \"%s\" (%s: %s)", name, path, strerror(errno));
		return NULL;
	}
	if (!(text = read_file(path, ASF_STATE_MAX, NULL, e)))
		return NULL;
	st = cJSON_Parse(text);
	free(text);
	if (!st || !cJSON_IsObject(st)) {
		cJSON_Delete(st);
		asf_fail(e, "%s: not valid JSON", path);
		return NULL;
	}
	return st;
}

int state_save(const char *name, const cJSON *st, asf_err *e)
{
	char path[4200], *text = cJSON_Print(st);
	int rc;

	if (!text)
		return asf_fail(e, "out of memory");
	str_fmt(path, sizeof(path), "%s/%s/state.json", asf_state_root, name);
	rc = write_file(path, text, strlen(text), 0600, NULL, e);
	cJSON_free(text);
	return rc;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int state_names(char ***out, size_t *n)
{
	DIR *d = opendir(asf_state_root);
	struct dirent *de;
	char **v = NULL;
	size_t k = 0;

	*out = NULL;
	*n = 0;
	if (!d)
		return errno == ENOENT ? 0 : -1;
	while ((de = readdir(d))) {
		char **nv;
		char sj[4400];
		str_fmt(sj, sizeof(sj), "%s/%s/state.json", asf_state_root, de->d_name);
		if (!name_valid(de->d_name) || access(sj, F_OK))
			continue;
		if (!(nv = realloc(v, (k + 1) * sizeof(*v))) || !(nv[k] = strdup(de->d_name))) {
			strv_free(nv ? nv : v, k);
			closedir(d);
			return -1;
		}
		v = nv;
		k++;
	}
	closedir(d);
	if (k)
		qsort(v, k, sizeof(*v), cmp_str);
	*out = v;
	*n = k;
	return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) && errno != ENOENT ? -1 : 0;
}

int state_remove(const char *name, asf_err *e)
{
	char dir[4200];

	if (!name_valid(name))
		return asf_fail(e, "invalid name");
	state_dir(dir, sizeof(dir), name);
	if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) && errno != ENOENT)
		return asf_fail(e, "cannot remove %s: %s", dir, strerror(errno));
	return 0;
}

const char *js(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

double jn(const cJSON *o, const char *key, double dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

int jb(const cJSON *o, const char *key)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

void iso_time(char *out, size_t outlen)
{
	time_t t = time(NULL);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void print_json(const cJSON *j)
{
	char *text = cJSON_Print(j);

	if (text) {
		printf("%s\n", text);
		cJSON_free(text);
	}
	fflush(stdout);
}
