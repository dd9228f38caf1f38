/*
 * hostkey.c - the trust-on-first-use store in OpenSSH known_hosts format:
 * looking a host up, and recording it on first use (pin.c has the
 * fingerprints and connection.host_key pins).
 *
 * The known_hosts parser works on (pointer, length) spans and does no I/O,
 * so it can be unit-tested and fuzzed on arbitrary bytes. Only
 * asp__known_hosts_verify touches the file system.
 */
#include "ascii.h"
#include "errtext.h"
#include "hostkey.h"
#include "discover.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#define SHA1_LEN 20

/* Longest host name we look up or record (NI_MAXHOST - 1). */
#define HOST_MAX 1024
/* "[" host "]:" port NUL */
#define LOOKUP_MAX (HOST_MAX + 10)
/* A store larger than this is not a known_hosts file we wrote. */
#define STORE_MAX ((size_t)64 << 20)
/* How long a first use waits for another process's read-modify-write of the store. */
#define STORE_LOCK_WAIT_MS 5000
/* Tests: how long store_lock waits (hostkey.h; 0 restores the default). */
#ifdef ASP_TEST_HOOKS
static long store_lock_wait_ms = STORE_LOCK_WAIT_MS;

void asp__known_hosts_lock_wait(long ms)
{
	store_lock_wait_ms = ms > 0 ? ms : STORE_LOCK_WAIT_MS;
}
#else
#define store_lock_wait_ms ((long)STORE_LOCK_WAIT_MS)
#endif

/* ------------------------------------------------------- known_hosts parsing */

/* A run of bytes inside the known_hosts text (not NUL-terminated). */
typedef struct span {
	const char *p;
	size_t n;
} span;

/* The next whitespace-separated token of a line; 0 at the end. */
static int next_token(span *tok, span *line)
{
	while (line->n > 0 && asp__ascii_blank(*line->p)) {
		line->p++;
		line->n--;
	}
	tok->p = line->p;
	while (line->n > 0 && !asp__ascii_blank(*line->p)) {
		line->p++;
		line->n--;
	}
	tok->n = (size_t)(line->p - tok->p);
	return tok->n > 0;
}

/*
 * OpenSSH's host pattern match: '*' is any run, '?' any one character, and
 * nothing else is special. fnmatch(3) would read the '[' of "[host]:port"
 * as a bracket expression, so this is done by hand. The name is already
 * lower case; the pattern is folded as OpenSSH does.
 */
static int glob_match(const char *pat, size_t pn, const char *name)
{
	size_t p = 0, s = 0, star_p = (size_t)-1, star_s = 0;
	size_t sn = strlen(name);

	while (s < sn) {
		if (p < pn && pat[p] == '*') {
			star_p = p++;
			star_s = s;
		} else if (p < pn && (pat[p] == '?' || asp__ascii_lower(pat[p]) == name[s])) {
			p++;
			s++;
		} else if (star_p != (size_t)-1) {
			p = star_p + 1;
			s = ++star_s;
		} else {
			return 0;
		}
	}
	while (p < pn && pat[p] == '*')
		p++;
	return p == pn;
}

/* "|1|base64(salt)|base64(HMAC-SHA1(salt, name))", as ssh-keygen -H writes. */
static int hashed_match(const char *pat, size_t pn, const char *name)
{
	const char *bar;
	unsigned char *salt = NULL, *want = NULL, got[EVP_MAX_MD_SIZE];
	size_t salt_len = 0, want_len = 0;
	unsigned int got_len = 0;
	int ok = 0;

	pat += 3;
	pn -= 3;
	if (!(bar = memchr(pat, '|', pn)))
		return 0;
	if (asp__base64_decode(&salt, &salt_len, pat, (size_t)(bar - pat)) ||
	    asp__base64_decode(&want, &want_len, bar + 1, pn - (size_t)(bar - pat) - 1))
		goto done;
	if (salt_len == 0 || salt_len > INT_MAX || want_len != SHA1_LEN)
		goto done;
	if (!HMAC(EVP_sha1(), salt, (int)salt_len, (const unsigned char *)name, strlen(name), got,
		  &got_len) || got_len != SHA1_LEN)
		goto done;
	ok = CRYPTO_memcmp(got, want, SHA1_LEN) == 0;
done:
	asp__free(salt);
	asp__free(want);
	return ok;
}

/*
 * Match a comma-separated host list: 1 when a pattern matches, -1 when a
 * negated pattern ("!pat") matches (which excludes the host from this
 * line whatever else matches), 0 otherwise.
 */
static int hosts_match(span hosts, const char *name)
{
	int positive = 0;

	while (hosts.n > 0) {
		const char *comma = memchr(hosts.p, ',', hosts.n);
		size_t n = comma ? (size_t)(comma - hosts.p) : hosts.n;
		const char *pat = hosts.p;
		int negated = n > 0 && pat[0] == '!';
		int hit;

		hosts.p += comma ? n + 1 : n;
		hosts.n -= comma ? n + 1 : n;
		if (negated) {
			pat++;
			n--;
		}
		if (n >= 3 && !memcmp(pat, "|1|", 3))
			hit = hashed_match(pat, n, name);
		else
			hit = n > 0 && glob_match(pat, n, name);
		if (hit && negated)
			return -1;
		positive |= hit;
	}
	return positive;
}

/* What a scan found; more than the status, for messages. */
typedef struct kh_result {
	asp_kh_status status;
	int n_known;                              /* distinct other keys kept below */
	int more_known;                           /* more than two other keys */
	char known[2][ASP_FINGERPRINT_MAX];       /* fingerprints of the host's other keys */
} kh_result;

/* Decode a line's key and check it is a well-formed blob of the named type. */
static int decode_entry_key(unsigned char **blob, size_t *len, span type, span key)
{
	char inner[ASP_KEY_TYPE_MAX];
	int rc;

	if (!asp__key_type_name(type.p, type.n))
		return ASP_EINVAL;
	if ((rc = asp__base64_decode(blob, len, key.p, key.n)))
		return rc;
	if (asp__blob_type(inner, sizeof(inner), *blob, *len) || strlen(inner) != type.n ||
	    memcmp(inner, type.p, type.n)) {
		asp__free(*blob);
		*blob = NULL;
		return ASP_EINVAL;
	}
	return 0;
}

static void note_other_key(kh_result *r, const unsigned char *blob, size_t len)
{
	char fp[ASP_FINGERPRINT_MAX];
	int i;

	if (asp__fingerprint(fp, blob, len))
		return;
	for (i = 0; i < r->n_known; i++)
		if (!strcmp(r->known[i], fp))
			return;
	if (r->n_known == 2) {
		r->more_known = 1;
		return;
	}
	memcpy(r->known[r->n_known++], fp, sizeof(fp));
}

typedef struct kh_state {
	int revoked, matched, others;
} kh_state;

/* Look at one line. Malformed lines are skipped; only ASP_ENOMEM is an error. */
static int scan_line(kh_state *st, kh_result *r, span line, const char *name,
		     const unsigned char *blob, size_t blob_len)
{
	span marker = { NULL, 0 }, hosts, type, key;
	unsigned char *kb = NULL;
	size_t kl = 0;
	int rc, same;

	if (!next_token(&hosts, &line) || hosts.p[0] == '#')
		return 0;
	if (hosts.p[0] == '@') {
		marker = hosts;
		if (!next_token(&hosts, &line))
			return 0;
	}
	if (!next_token(&type, &line) || !next_token(&key, &line))
		return 0;
	if (marker.n == 15 && !memcmp(marker.p, "@cert-authority", 15))
		return 0;
	if (marker.n && !(marker.n == 8 && !memcmp(marker.p, "@revoked", 8)))
		return 0;
	/* A revoked key is refused for every host, so its host list is not consulted. */
	if (!marker.n && hosts_match(hosts, name) <= 0)
		return 0;
	if ((rc = decode_entry_key(&kb, &kl, type, key)))
		return rc == ASP_ENOMEM ? rc : 0;
	same = kl == blob_len && memcmp(kb, blob, kl) == 0;
	if (marker.n)
		st->revoked |= same;
	else if (same)
		st->matched = 1;
	else {
		st->others++;
		note_other_key(r, kb, kl);
	}
	asp__free(kb);
	return 0;
}

/* "host" for port 22, "[host]:port" otherwise, lower case, as OpenSSH writes it. */
static int lookup_name(char out[LOOKUP_MAX], const char *host, unsigned int port)
{
	size_t i, n = strlen(host);
	char *p = out;

	if (n == 0 || n > HOST_MAX || port == 0 || port > 65535)
		return ASP_EINVAL;
	if (port != 22)
		*p++ = '[';
	for (i = 0; i < n; i++)
		*p++ = asp__ascii_lower(host[i]);
	if (port != 22)
		p += sprintf(p, "]:%u", port);
	*p = '\0';
	return 0;
}

static int kh_scan(kh_result *r, const char *text, size_t len, const char *host, unsigned int port,
		   const unsigned char *blob, size_t blob_len)
{
	char name[LOOKUP_MAX];
	kh_state st = { 0, 0, 0 };
	size_t pos = 0;
	int rc;

	memset(r, 0, sizeof(*r));
	if (!host || !blob || (!text && len) || lookup_name(name, host, port))
		return ASP_EINVAL;
	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		span line = { text + pos, nl ? (size_t)(nl - text - pos) : len - pos };

		pos += line.n + (nl ? 1 : 0);
		if (line.n > 0 && line.p[line.n - 1] == '\r')
			line.n--;
		if ((rc = scan_line(&st, r, line, name, blob, blob_len)))
			return rc;
		if (st.revoked)
			break;
	}
	r->status = st.revoked ? ASP_KH_REVOKED
		    : st.matched ? ASP_KH_MATCH
		    : st.others ? ASP_KH_MISMATCH : ASP_KH_NOTFOUND;
	return 0;
}

/* Tests (the unit tests, the fuzz target): kh_scan on its own. */
#ifdef ASP_TEST_HOOKS
asp_kh_status asp__known_hosts_check(const char *text, size_t len, const char *host,
				     unsigned int port, const unsigned char *blob, size_t blob_len)
{
	kh_result r;

	/* No error channel here: when the scan cannot finish, fail closed. */
	if (kh_scan(&r, text, len, host, port, blob, blob_len))
		return ASP_KH_MISMATCH;
	return r.status;
}
#endif

/* ------------------------------------------------------------- store path */

int asp__known_hosts_path(char **out, const char *explicit_path, asp_error *err)
{
	const char *env, *home;
	char buf[PATH_MAX];

	ASP_ASSERT_ARG(out);
	*out = NULL;
	if (explicit_path) {
		if (!explicit_path[0])
			return asp__error(err, ASP_EINVAL, "the known_hosts path is empty");
		*out = asp__strdup(explicit_path);
	} else if ((env = getenv("ASP_KNOWN_HOSTS")) && env[0]) {
		*out = asp__strdup(env);
	} else if ((env = getenv("XDG_CONFIG_HOME")) && env[0] == '/') {
		/* The XDG spec says relative values are invalid and must be ignored. */
		*out = asp__sprintf("%s/asp/known_hosts", env);
	} else {
		if (!(home = asp__home_dir(buf, sizeof(buf))))
			return asp__error(err, ASP_ECONFIG,
					  "cannot find the known_hosts file: set ASP_KNOWN_HOSTS, "
					  "XDG_CONFIG_HOME or HOME");
		*out = asp__sprintf("%s/.config/asp/known_hosts", home);
	}
	return *out ? 0 : asp__error(err, ASP_ENOMEM, "out of memory");
}

/* ------------------------------------------------------------- store I/O */

/* The store as read: its bytes and, when it exists, its mode. */
typedef struct store {
	asp_buf text;
	int exists;
	mode_t mode;
} store;

static int read_all(asp_buf *b, int fd, const char *path, asp_error *err)
{
	char e[128];

	switch (asp__read_fd(b, fd, STORE_MAX - 1)) {
	case 0:
		return 0;
	case ASP_ENOMEM:
		return asp__error(err, ASP_ENOMEM, "out of memory");
	case ASP_EIO:
		return asp__error(err, ASP_ECONFIG, "cannot read %s: %s", path,
				  asp__errno_text(errno, e, sizeof(e)));
	default:
		return asp__error(err, ASP_ECONFIG, "%s: larger than %zu MiB", path, STORE_MAX >> 20);
	}
}

/* Only the user and root may own what we trust or lock: others could edit or hold it. */
static int owner_ok(uid_t uid)
{
	return uid == geteuid() || uid == 0;
}

/*
 * Read the store; a missing file is an empty store. A store another user
 * owns, or others can write, is refused: anyone who can edit it can make
 * us trust their key.
 */
static int store_read(store *s, const char *path, asp_error *err)
{
	char e[128], owner[320], me[320];
	struct stat st;
	int fd, rc;

	asp__buf_free(&s->text);
	s->exists = 0;
	/* O_NONBLOCK: a FIFO planted at the path must not hang us in open(). */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0)
		return asp__error(err, ASP_ECONFIG, "cannot open known_hosts file %s: %s", path,
				  asp__errno_text(errno, e, sizeof(e)));
	if (fstat(fd, &st)) {
		rc = asp__error(err, ASP_ECONFIG, "cannot stat %s: %s", path,
				asp__errno_text(errno, e, sizeof(e)));
	} else if (!S_ISREG(st.st_mode)) {
		rc = asp__error(err, ASP_ECONFIG, "known_hosts file %s is not a regular file", path);
	} else if (!owner_ok(st.st_uid)) {
		rc = asp__error(err, ASP_ECONFIG,
				"known_hosts file %s is owned by %s, not by the current user %s or "
				"root; refusing to trust it: use a file of your own (ASP_KNOWN_HOSTS) "
				"or chown it", path, asp__user_text(owner, sizeof(owner), st.st_uid),
				asp__user_text(me, sizeof(me), geteuid()));
	} else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		rc = asp__error(err, ASP_ECONFIG,
				"known_hosts file %s is writable by group or others (mode %04o); "
				"refusing to trust it: run chmod go-w on it",
				path, (unsigned int)(st.st_mode & 07777));
	} else {
		s->exists = 1;
		s->mode = st.st_mode & 0777;
		rc = read_all(&s->text, fd, path, err);
	}
	close(fd);
	return rc;
}

/*
 * Write to a symlink's target rather than replacing the link with a file.
 * *out is the path to read, lock and replace.
 */
static int store_target(char **out, const char *path)
{
	struct stat st;
	char *real;

	if (!lstat(path, &st) && S_ISLNK(st.st_mode) && (real = realpath(path, NULL))) {
		*out = asp__strdup(real);
		free(real); /* realpath's memory comes from libc */
	} else {
		*out = asp__strdup(path);
	}
	return *out ? 0 : ASP_ENOMEM;
}

/* mkdir -p of the file's directory; new directories are private (0700). */
static int make_parent_dirs(const char *path, asp_error *err)
{
	char *dir = asp__strdup(path), *p, *slash, e[128];
	struct stat st;
	int rc = 0;

	if (!dir)
		return asp__error(err, ASP_ENOMEM, "out of memory");
	slash = strrchr(dir, '/');
	if (!slash || slash == dir) {
		asp__free(dir);
		return 0;
	}
	*slash = '\0';
	for (p = dir + 1; rc == 0; p++) {
		char c = *p;

		if (c != '/' && c != '\0')
			continue;
		*p = '\0';
		if (stat(dir, &st)) {
			if (mkdir(dir, 0700) && errno != EEXIST)
				rc = asp__error(err, ASP_ECONFIG,
						"cannot create directory %s for the known_hosts "
						"file: %s", dir, asp__errno_text(errno, e, sizeof(e)));
			else
				chmod(dir, 0700); /* exact mode whatever the umask */
		} else if (!S_ISDIR(st.st_mode)) {
			rc = asp__error(err, ASP_ECONFIG,
					"cannot create the known_hosts file %s: %s is not a "
					"directory", path, dir);
		}
		*p = c;
		if (c == '\0')
			break;
	}
	asp__free(dir);
	return rc;
}

static long long monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Open "<path>.lock", creating it without following a link planted there,
 * and accept only a regular file of ours (or root's): a lock file someone
 * else owns is one they can hold forever. -1 with the message in err.
 */
static int lock_open(int *out_fd, const char *lock, asp_error *err)
{
	char e[128], owner[320];
	struct stat st;
	int fd;

	fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd < 0 && errno == ELOOP)
		return asp__error(err, ASP_ECONFIG, "lock file %s is a symbolic link; refusing to "
				  "follow it: remove it", lock);
	if (fd < 0)
		return asp__error(err, ASP_ECONFIG, "cannot open lock file %s: %s", lock,
				  asp__errno_text(errno, e, sizeof(e)));
	if (fstat(fd, &st)) {
		asp__error(err, ASP_ECONFIG, "cannot stat lock file %s: %s", lock,
			   asp__errno_text(errno, e, sizeof(e)));
	} else if (!S_ISREG(st.st_mode)) {
		asp__error(err, ASP_ECONFIG, "lock file %s is not a regular file: remove it", lock);
	} else if (!owner_ok(st.st_uid)) {
		asp__error(err, ASP_ECONFIG, "lock file %s is owned by %s, not by the current user "
			   "or root; refusing to use it: remove it", lock,
			   asp__user_text(owner, sizeof(owner), st.st_uid));
	} else {
		*out_fd = fd;
		return 0;
	}
	close(fd);
	return ASP_ECONFIG;
}

/*
 * An exclusive lock on "<path>.lock", held for the read-modify-write.
 * Waits at most store_lock_wait_ms: a writer holds it for milliseconds,
 * so a longer hold is a stuck or hostile process, not one to wait for.
 */
static int store_lock(int *out_fd, const char *path, asp_error *err)
{
	char *lock = asp__sprintf("%s.lock", path), e[128];
	long long deadline = monotonic_ms() + store_lock_wait_ms;
	long pause_ms = 1;
	int fd = -1, rc;

	if (!lock)
		return asp__error(err, ASP_ENOMEM, "out of memory");
	if ((rc = lock_open(&fd, lock, err))) {
		asp__free(lock);
		return rc;
	}
	while (flock(fd, LOCK_EX | LOCK_NB)) {
		struct timespec ts;

		if (errno == EINTR)
			continue;
		if (errno != EWOULDBLOCK) {
			rc = asp__error(err, ASP_ERROR, "cannot lock %s: %s", lock,
					asp__errno_text(errno, e, sizeof(e)));
			break;
		}
		if (monotonic_ms() >= deadline) {
			rc = asp__error(err, ASP_ETIMEOUT, "known_hosts lock file %s is still held by "
					"another process after %ld ms; giving up (fuser %s shows "
					"which)", lock, store_lock_wait_ms, lock);
			break;
		}
		ts.tv_sec = 0;
		ts.tv_nsec = pause_ms * 1000000L;
		nanosleep(&ts, NULL);
		if (pause_ms < 50)
			pause_ms *= 2;
	}
	asp__free(lock);
	if (rc) {
		close(fd);
		return rc;
	}
	*out_fd = fd;
	return 0;
}

static int write_all(int fd, const unsigned char *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, data, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Make the rename durable. Best effort: some file systems refuse fsync on a directory. */
static void sync_parent_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? asp__strndup(path, slash == path ? 1 : (size_t)(slash - path))
			  : asp__strdup(".");
	int fd;

	if (!dir)
		return;
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		fsync(fd);
		close(fd);
	}
	asp__free(dir);
}

/* Write a new file beside path and rename it over path: readers see old or new, never a mix. */
static int store_replace(const char *path, const asp_buf *content, mode_t mode, asp_error *err)
{
	unsigned char rnd[8];
	char hex[17], e[128], *tmp;
	int fd, rc = 0, i;

	if (asp__random(rnd, sizeof(rnd)))
		return asp__error(err, ASP_ERROR, "no randomness for a temporary file name");
	for (i = 0; i < 8; i++)
		sprintf(hex + 2 * i, "%02x", rnd[i]);
	if (!(tmp = asp__sprintf("%s.tmp.%s", path, hex)))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
	if (fd < 0) {
		rc = asp__error(err, ASP_ECONFIG, "cannot create %s: %s", tmp,
				asp__errno_text(errno, e, sizeof(e)));
		asp__free(tmp);
		return rc;
	}
	if (fchmod(fd, mode) || write_all(fd, content->data, content->len) || fsync(fd))
		rc = asp__error(err, ASP_ERROR, "cannot write %s: %s", tmp,
				asp__errno_text(errno, e, sizeof(e)));
	if (close(fd) && !rc)
		rc = asp__error(err, ASP_ERROR, "cannot write %s: %s", tmp,
				asp__errno_text(errno, e, sizeof(e)));
	if (!rc && rename(tmp, path))
		rc = asp__error(err, ASP_ERROR, "cannot rename %s to %s: %s", tmp, path,
				asp__errno_text(errno, e, sizeof(e)));
	if (rc)
		unlink(tmp);
	else
		sync_parent_dir(path);
	asp__free(tmp);
	return rc;
}

/* ----------------------------------------------------------------- verify */

/*
 * Only characters that cannot change the meaning of a known_hosts line: a
 * host named "a,*" must not become a wildcard entry.
 */
static int host_is_recordable(const char *host)
{
	const char *p;

	for (p = host; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_' ||
		      *p == ':' || *p == '%'))
			return 0;
	return p != host && (size_t)(p - host) <= HOST_MAX;
}

static int outcome_error(const kh_result *r, const char *path, const char *name,
			 const unsigned char *blob, size_t blob_len, asp_error *err)
{
	char got[ASP_FINGERPRINT_MAX];

	if (asp__fingerprint(got, blob, blob_len))
		memcpy(got, "(unknown)", 10);
	if (r->status == ASP_KH_REVOKED)
		return asp__error(err, ASP_EHOSTKEY,
				  "host key %s for %s is marked @revoked in %s; refusing to connect",
				  got, name, path);
	return asp__error(err, ASP_EHOSTKEY,
			  "host key for %s does not match %s (expected %s%s%s%s, got %s); if the "
			  "sandbox was re-created, remove the old entry (ssh-keygen -R '%s' -f %s)",
			  name, path, r->known[0], r->n_known > 1 ? " or " : "",
			  r->n_known > 1 ? r->known[1] : "", r->more_known ? " or others" : "", got,
			  name, path);
}

/* Scan the store text; map the outcome to 0 (known) or an error. *found = 0 when NOTFOUND. */
static int store_check(int *found, const store *s, const char *path, const char *name,
		       const char *host, unsigned int port, const unsigned char *blob,
		       size_t blob_len, asp_error *err)
{
	kh_result r;
	int rc;

	rc = kh_scan(&r, (const char *)s->text.data, s->text.len, host, port, blob, blob_len);
	if (rc == ASP_ENOMEM)
		return asp__error(err, rc, "out of memory");
	if (rc)
		return asp__error(err, ASP_EINVAL, "invalid host or key for known_hosts");
	*found = r.status != ASP_KH_NOTFOUND;
	if (r.status == ASP_KH_MISMATCH || r.status == ASP_KH_REVOKED)
		return outcome_error(&r, path, name, blob, blob_len, err);
	return 0;
}

/* Under the lock: re-read, re-check, and append the entry if still missing. */
static int store_add(int *first_use, const char *path, const char *name, const char *host,
		     unsigned int port, const char *type, const unsigned char *blob,
		     size_t blob_len, asp_error *err)
{
	store s = { { NULL, 0, 0 }, 0, 0 };
	char *b64 = NULL;
	int lock_fd = -1, found = 0, rc;

	if ((rc = make_parent_dirs(path, err)) || (rc = store_lock(&lock_fd, path, err)))
		return rc;
	if ((rc = store_read(&s, path, err)) ||
	    (rc = store_check(&found, &s, path, name, host, port, blob, blob_len, err)) || found)
		goto done;
	if (!(b64 = asp__base64_encode(blob, blob_len, 1))) {
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
		goto done;
	}
	/* Existing bytes are kept as they are; only a missing final newline is added. */
	if ((s.text.len > 0 && s.text.data[s.text.len - 1] != '\n' &&
	     asp__buf_puts(&s.text, "\n")) ||
	    asp__buf_printf(&s.text, "%s %s %s\n", name, type, b64)) {
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
		goto done;
	}
	if (!(rc = store_replace(path, &s.text, s.exists ? s.mode : 0600, err)))
		*first_use = 1;
done:
	asp__free(b64);
	asp__buf_free(&s.text);
	close(lock_fd); /* releases the flock */
	return rc;
}

int asp__known_hosts_verify(int *first_use, const char *path, const char *host,
			    unsigned int port, const unsigned char *blob, size_t blob_len,
			    asp_error *err)
{
	char name[LOOKUP_MAX], type[ASP_KEY_TYPE_MAX], *target = NULL;
	store s = { { NULL, 0, 0 }, 0, 0 };
	int found = 0, rc;

	ASP_ASSERT_ARG(first_use);
	*first_use = 0;
	ASP_ASSERT_ARG(path && path[0]);
	ASP_ASSERT_ARG(host);
	ASP_ASSERT_ARG(blob && blob_len > 0);
	ASP_ASSERT_ARG(port >= 1 && port <= 65535);
	if (!host_is_recordable(host))
		return asp__error(err, ASP_EINVAL,
				  "host name \"%.64s\" cannot be recorded in known_hosts (allowed: "
				  "letters, digits and . - _ : %%)", host);
	if (asp__blob_type(type, sizeof(type), blob, blob_len) ||
	    !asp__key_type_name(type, strlen(type)))
		return asp__error(err, ASP_EHOSTKEY, "the server sent a malformed host key");
	if (lookup_name(name, host, port))
		return asp__error(err, ASP_EINVAL, "invalid host or port");
	if (store_target(&target, path))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	/* The common case, a known key, needs no lock and no write access. */
	rc = store_read(&s, target, err);
	if (!rc)
		rc = store_check(&found, &s, path, name, host, port, blob, blob_len, err);
	if (!rc && !found)
		rc = store_add(first_use, target, name, host, port, type, blob, blob_len, err);
	asp__buf_free(&s.text);
	asp__free(target);
	return rc;
}
