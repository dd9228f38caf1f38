/*
 * identity.c - connection.identity: environment variable or file, checked
 * the way OpenSSH checks key files; the key text is wiped when freed.
 *
 * Nothing an environment variable holds is ever put in a message: such a
 * value is often the private key itself (pasted with a leading newline, CRLF
 * line ends or indentation, from a CI secret store), and a value that is not
 * recognised as key text would otherwise be echoed as a "path". Messages name
 * the variable and the reason only; a path is shown only as it is written in
 * the .asp.json.
 */
#include "errtext.h"
#include "identity.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY_MAX (64 * 1024)

/* Where the key comes from, for messages: never the value of a variable. */
typedef struct key_origin {
	const asp_config *cfg;
	const char *var;  /* the environment variable, or NULL for a path in the .asp.json */
	const char *path; /* the expanded path (shown only when var is NULL) */
} key_origin;

/* "~/x" -> $HOME/x; "x" -> <config dir>/x; "/x" -> "/x". */
static char *expand_path(const char *path, const asp_config *cfg)
{
	const char *home;
	char buf[PATH_MAX];

	if (path[0] == '/')
		return asp__strdup(path);
	if (path[0] == '~' && (path[1] == '/' || path[1] == '\0')) {
		if (!(home = asp__home_dir(buf, sizeof(buf))))
			return NULL;
		return asp__sprintf("%s%s", home, path + 1);
	}
	return asp__sprintf("%s/%s", cfg->dir, path);
}

static int is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\v' || ch == '\f';
}

/*
 * Could this value be a path? Never when it holds a control character (a
 * newline: key text), is PATH_MAX bytes or more, or holds "-----" or
 * "PRIVATE KEY" (the armour of every PEM and OpenSSH key) or a PuTTY
 * header. A value that passes may still be key text (a base64 body alone):
 * it is tried as a path, and whatever happens is reported without it.
 */
static int may_be_path(const char *v, size_t len)
{
	size_t i;

	if (len == 0 || len >= PATH_MAX)
		return 0;
	for (i = 0; i < len; i++)
		if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
			return 0;
	return !asp__looks_like_key_text(v, len);
}

/*
 * Key text as libssh2 wants it, in place: CRLF and CR line ends become LF,
 * each line loses its leading and trailing blanks (indentation from YAML or
 * a secret store), blank lines before and after the key go, and the text
 * ends with one newline. Blank lines inside stay (a legacy encrypted PEM key
 * separates its headers with one). The buffer must have room for len + 2
 * bytes. Returns the new length.
 */
static size_t normalise_key_text(char *t, size_t len)
{
	size_t r = 0, w = 0, pending_blank = 0;

	while (r < len) {
		size_t s = r, e;

		while (r < len && t[r] != '\n' && t[r] != '\r')
			r++;
		e = r;
		if (r < len && t[r] == '\r' && r + 1 < len && t[r + 1] == '\n')
			r += 2;
		else if (r < len)
			r++;
		while (s < e && is_blank(t[s]))
			s++;
		while (e > s && is_blank(t[e - 1]))
			e--;
		if (e == s) {
			if (w > 0)
				pending_blank++;
			continue;
		}
		for (; pending_blank > 0; pending_blank--)
			t[w++] = '\n';
		memmove(t + w, t + s, e - s);
		w += e - s;
		t[w++] = '\n';
	}
	/* What the loop left behind the new end held key text too: clear it. */
	if (w < len)
		memset(t + w, 0, len - w);
	t[w] = '\0';
	return w;
}

/* "environment variable X" or "key file P" (as written in the .asp.json). */
static int key_error(const key_origin *o, asp_error *err, const char *reason)
{
	if (o->var)
		return asp__error(err, ASP_ECONFIG, "%s: connection.identity: environment variable %s %s",
				  o->cfg->path, o->var, reason);
	return asp__error(err, ASP_ECONFIG, "%s: connection.identity: key file %s %s", o->cfg->path,
			  o->path, reason);
}

/* Is the normalised text a private key in PEM or OpenSSH armour? 0, or ASP_ECONFIG naming the reason. */
static int check_key_text(const key_origin *o, const char *t, size_t len, asp_error *err)
{
	const char *nl = memchr(t, '\n', len), *last;

	if (nl == t + len - 1 && strstr(t, "\\n"))
		return key_error(o, err,
				 "holds text on one line with \\n where line breaks belong: put real line "
				 "breaks in the value");
	if (strstr(t, "PuTTY-User-Key-File"))
		return key_error(o, err,
				 "holds a PuTTY key (.ppk): libasp reads OpenSSH and PEM keys; convert it with "
				 "\"puttygen KEY.ppk -O private-openssh -o KEY\"");
	if (len < 11 || strncmp(t, "-----BEGIN ", 11) || !nl || nl - t < 16 ||
	    strncmp(nl - 5, "-----", 5) || !memmem(t, (size_t)(nl - t), "PRIVATE KEY", 11))
		return key_error(o, err,
				 o->var ? "holds neither a private key (PEM or OpenSSH text whose first "
					  "line is -----BEGIN ...) nor the path of a readable key file"
					: "does not hold a private key (PEM or OpenSSH text whose first line "
					  "is -----BEGIN ...)");
	/* The last line (the text ends with '\n') must be the END line. */
	for (last = t + len - 1; last > t && last[-1] != '\n'; last--)
		;
	if (strncmp(last, "-----END ", 9) || len - (size_t)(last - t) < 15 ||
	    strncmp(t + len - 6, "-----", 5))
		return key_error(o, err,
				 "holds a private key without its -----END ... line (is it cut short?)");
	return 0;
}

/* Take `text` (a secret buffer of `size` bytes, len + 2 or more) as the key: normalise and check it. */
static int take_key_text(asp_identity *id, const key_origin *o, char *text, size_t len, size_t size,
			 asp_error *err)
{
	id->key = text;
	id->key_size = size;
	id->key_len = normalise_key_text(text, len);
	if (id->key_len == 0)
		return key_error(o, err, "holds only whitespace");
	return check_key_text(o, id->key, id->key_len, err);
}

static int read_key_file(asp_identity *id, const key_origin *o, asp_error *err)
{
	const asp_config *cfg = o->cfg;
	const char *path = o->path;
	struct stat st;
	ssize_t n;
	size_t len = 0, size;
	char *text, reason[160];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0) {
		if (o->var) {
			snprintf(reason, sizeof(reason),
				 "holds neither a private key nor the path of a readable key file "
				 "(as a path: %s)", ASP_ERRNO_TEXT(errno));
			return key_error(o, err, reason);
		}
		return asp__error(err, ASP_ECONFIG, "%s: connection.identity: cannot open key file %s: %s",
				  cfg->path, path, ASP_ERRNO_TEXT(errno));
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return key_error(o, err, o->var ? "names something that is not a regular file"
						: "is not a regular file");
	}
	if (st.st_uid != getuid() && st.st_uid != 0) {
		close(fd);
		snprintf(reason, sizeof(reason), "%s owned by uid %u, not by you",
			 o->var ? "names a key file" : "is", (unsigned)st.st_uid);
		return key_error(o, err, reason);
	}
	if (st.st_mode & 077) {
		close(fd);
		if (o->var)
			snprintf(reason, sizeof(reason),
				 "names a key file whose permissions %04o are too open: it must not be "
				 "accessible by group or others (chmod 600 it)",
				 (unsigned)(st.st_mode & 07777));
		else
			return asp__error(err, ASP_ECONFIG,
					  "%s: connection.identity: permissions %04o for key file %s are too open: "
					  "it must not be accessible by group or others (chmod 600 %s)",
					  cfg->path, (unsigned)(st.st_mode & 07777), path, path);
		return key_error(o, err, reason);
	}
	if (st.st_size > KEY_MAX) {
		close(fd);
		snprintf(reason, sizeof(reason), "%s larger than %d bytes: not a private key",
			 o->var ? "names a key file" : "is", KEY_MAX);
		return key_error(o, err, reason);
	}
	size = (size_t)st.st_size + 2;
	if (!(text = asp__malloc(size))) {
		close(fd);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	while (len < (size_t)st.st_size &&
	       ((n = read(fd, text + len, (size_t)st.st_size - len)) > 0 || (n < 0 && errno == EINTR)))
		if (n > 0)
			len += (size_t)n;
	close(fd);
	text[len] = '\0';
	if (len == 0) {
		asp__free_secret(text, size);
		return key_error(o, err, o->var ? "names an empty key file" : "is empty");
	}
	return take_key_text(id, o, text, len, size, err);
}

/* A set variable's value: key text, or a path (trimmed) to a key file. */
static int from_env(asp_identity *id, const key_origin *base, const char *value, asp_error *err)
{
	key_origin o = *base;
	size_t len = strlen(value), size, s = 0, e;
	char reason[160], home[PATH_MAX], *copy, *path;
	int rc;

	if (len > KEY_MAX) {
		snprintf(reason, sizeof(reason), "holds %zu bytes, more than a private key (at most %d)", len,
			 KEY_MAX);
		return key_error(&o, err, reason);
	}
	/* A copy to work on: whatever the value is, it may be a key, so it is wiped. */
	size = len + 2;
	if (!(copy = asp__malloc(size)))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	memcpy(copy, value, len + 1);
	for (e = len; e > 0 && is_blank(copy[e - 1]); e--)
		;
	while (s < e && is_blank(copy[s]))
		s++;
	if (s == e) {
		asp__free_secret(copy, size);
		return key_error(&o, err, len ? "holds only whitespace" : "is empty");
	}
	copy[e] = '\0';
	if (!may_be_path(copy + s, e - s)) {
		copy[e] = value[e]; /* normalisation wants the whole value back */
		return take_key_text(id, &o, copy, len, size, err);
	}
	if (copy[s] == '~' && (copy[s + 1] == '/' || copy[s + 1] == '\0') &&
	    !asp__home_dir(home, sizeof(home))) {
		asp__free_secret(copy, size);
		return key_error(&o, err, "names a path under ~, but there is no home directory ($HOME)");
	}
	path = expand_path(copy + s, o.cfg);
	if (!path) {
		asp__free_secret(copy, size);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	o.path = path;
	rc = read_key_file(id, &o, err);
	asp__free_secret(path, strlen(path) + 1);
	asp__free_secret(copy, size);
	return rc;
}

int asp__identity_resolve(asp_identity **out, const asp_config *cfg, asp_error *err)
{
	asp_identity *id;
	const char *spec = cfg->identity, *value = NULL;
	key_origin o = { .cfg = cfg };
	char *path = NULL, home[PATH_MAX];
	int rc;

	ASP_ASSERT_ARG(out && cfg && cfg->identity);
	if (!(id = asp__calloc(1, sizeof(*id))))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	if (asp__is_env_name(spec))
		value = getenv(spec);
	if (value) {
		o.var = spec;
		rc = from_env(id, &o, value, err);
		if (!rc && !(id->source = asp__sprintf("environment variable %s", spec)))
			rc = asp__error(err, ASP_ENOMEM, "out of memory");
		goto done;
	}
	if (!(path = expand_path(spec, cfg))) {
		/* Only "~" without a home directory cannot be expanded; anything else is memory. */
		if (spec[0] != '~' || (spec[1] != '/' && spec[1] != '\0') || asp__home_dir(home, sizeof(home)))
			rc = asp__error(err, ASP_ENOMEM, "out of memory");
		else
			rc = asp__error(err, ASP_ECONFIG, "%s: connection.identity: cannot expand \"%s\"",
					cfg->path, spec);
		goto done;
	}
	o.path = path;
	rc = read_key_file(id, &o, err);
	if (rc == ASP_ECONFIG && asp__is_env_name(spec) && access(path, F_OK))
		rc = asp__error(err, ASP_ECONFIG,
				"%s: connection.identity: \"%s\" is neither a set environment "
				"variable nor an existing key file (%s)",
				cfg->path, spec, path);
	if (!rc && !(id->source = asp__sprintf("key file %s", path)))
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
done:
	asp__free(path);
	if (rc) {
		asp__identity_free(id);
		return rc;
	}
	*out = id;
	return 0;
}

/* Does an "openssh-key-v1" blob hold an ssh-rsa public key? The public part is never encrypted. */
static int openssh_key_is_rsa(const char *text)
{
	static const char begin[] = "-----BEGIN OPENSSH PRIVATE KEY-----";
	const char *p = strstr(text, begin), *end;
	unsigned char *blob = NULL;
	size_t len = 0, off, i, size;
	char *b64;
	int rsa = 0;

	if (!p || !(end = strstr(p, "-----END")))
		return 0;
	p += sizeof(begin) - 1;
	/* The size is taken before the loop moves p: all of the copy is wiped. */
	size = (size_t)(end - p) + 1;
	if (!(b64 = asp__malloc(size)))
		return 0;
	for (i = 0; p < end; p++)
		if (!is_blank(*p))
			b64[i++] = *p;
	if (asp__base64_decode(&blob, &len, b64, i) == 0) {
		/* magic, then strings ciphername, kdfname, kdfoptions, uint32 nkeys, string pubkey */
		off = sizeof("openssh-key-v1");
		for (i = 0; i < 3 && off + 4 <= len; i++)
			off += 4 + ((size_t)blob[off] << 24 | (size_t)blob[off + 1] << 16 |
				    (size_t)blob[off + 2] << 8 | blob[off + 3]);
		off += 4 + 4 + 4; /* nkeys, pubkey length, type length */
		if (off + 7 <= len && !memcmp(blob + off, "ssh-rsa", 7))
			rsa = 1;
		asp__free_secret(blob, len);
	}
	asp__free_secret(b64, size);
	return rsa;
}

int asp__identity_is_rsa(const asp_identity *id)
{
	if (!id || !id->key)
		return 0;
	return strstr(id->key, "-----BEGIN RSA PRIVATE KEY-----") != NULL || openssh_key_is_rsa(id->key);
}

void asp__identity_free(asp_identity *id)
{
	if (!id)
		return;
	asp__free_secret(id->key, id->key_size);
	asp__free(id->source);
	asp__free(id);
}
