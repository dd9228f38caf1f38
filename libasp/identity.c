/*
 * identity.c - connection.identity: environment variable or file, checked
 * the way OpenSSH checks key files; the key text is wiped when freed.
 */
#include "identity.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY_MAX (64 * 1024)

static const char *home_dir(void)
{
	const char *home = getenv("HOME");
	struct passwd *pw;

	if (home && *home)
		return home;
	pw = getpwuid(getuid());
	return pw ? pw->pw_dir : NULL;
}

/* "~/x" -> $HOME/x; "x" -> <config dir>/x; "/x" -> "/x". */
static char *expand_path(const char *path, const asp_config *cfg)
{
	const char *home;

	if (path[0] == '/')
		return asp__strdup(path);
	if (path[0] == '~' && (path[1] == '/' || path[1] == '\0')) {
		if (!(home = home_dir()))
			return NULL;
		return asp__sprintf("%s%s", home, path + 1);
	}
	return asp__sprintf("%s/%s", cfg->dir, path);
}

static int read_key_file(asp_identity *id, const char *path, const asp_config *cfg,
			 asp_error *err)
{
	struct stat st;
	ssize_t n;
	size_t len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0)
		return asp__error(err, ASP_ECONFIG, "%s: connection.identity: cannot open key file %s: %s",
				  cfg->path, path, strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return asp__error(err, ASP_ECONFIG, "%s: connection.identity: %s is not a regular file",
				  cfg->path, path);
	}
	if (st.st_uid != getuid() && st.st_uid != 0) {
		close(fd);
		return asp__error(err, ASP_ECONFIG,
				  "%s: connection.identity: key file %s is owned by uid %u, not by you",
				  cfg->path, path, (unsigned)st.st_uid);
	}
	if (st.st_mode & 077) {
		close(fd);
		return asp__error(err, ASP_ECONFIG,
				  "%s: connection.identity: permissions %04o for key file %s are too open: "
				  "it must not be accessible by group or others (chmod 600 %s)",
				  cfg->path, (unsigned)(st.st_mode & 07777), path, path);
	}
	if (st.st_size > KEY_MAX) {
		close(fd);
		return asp__error(err, ASP_ECONFIG, "%s: connection.identity: key file %s is larger than %d bytes",
				  cfg->path, path, KEY_MAX);
	}
	if (!(id->key = asp__malloc((size_t)st.st_size + 1))) {
		close(fd);
		return asp__error(err, ASP_ENOMEM, "out of memory reading %s", path);
	}
	while (len < (size_t)st.st_size &&
	       ((n = read(fd, id->key + len, (size_t)st.st_size - len)) > 0 || (n < 0 && errno == EINTR)))
		if (n > 0)
			len += (size_t)n;
	close(fd);
	id->key[len] = '\0';
	id->key_len = len;
	if (len == 0)
		return asp__error(err, ASP_ECONFIG, "%s: connection.identity: key file %s is empty",
				  cfg->path, path);
	if (!(id->source = asp__sprintf("key file %s", path)))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	return 0;
}

static int from_env_text(asp_identity *id, const char *name, const char *value, asp_error *err)
{
	id->key_len = strlen(value);
	if (!(id->key = asp__strdup(value)) ||
	    !(id->source = asp__sprintf("environment variable %s", name)))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	return 0;
}

int asp__identity_resolve(asp_identity **out, const asp_config *cfg, asp_error *err)
{
	asp_identity *id;
	const char *spec = cfg->identity, *value = NULL;
	char *path = NULL;
	int rc;

	ASP_ASSERT_ARG(out && cfg && cfg->identity);
	if (!(id = asp__calloc(1, sizeof(*id))))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	if (asp__is_env_name(spec))
		value = getenv(spec);
	if (value && !strncmp(value, "-----BEGIN", 10)) {
		rc = from_env_text(id, spec, value, err);
	} else {
		if (value && !*value) {
			rc = asp__error(err, ASP_ECONFIG,
					"%s: connection.identity: environment variable %s is empty",
					cfg->path, spec);
			goto done;
		}
		if (!(path = expand_path(value ? value : spec, cfg))) {
			const char *v = value ? value : spec;
			/* Only "~" without a home directory cannot be expanded; anything else is memory. */
			if (v[0] != '~' || (v[1] != '/' && v[1] != '\0') || home_dir())
				rc = asp__error(err, ASP_ENOMEM, "out of memory");
			else
				rc = asp__error(err, ASP_ECONFIG, "%s: connection.identity: cannot expand \"%s\"",
						cfg->path, v);
			goto done;
		}
		rc = read_key_file(id, path, cfg, err);
		if (rc == ASP_ECONFIG && !value && asp__is_env_name(spec) && access(path, F_OK))
			rc = asp__error(err, ASP_ECONFIG,
					"%s: connection.identity: \"%s\" is neither a set environment "
					"variable nor an existing key file (%s)",
					cfg->path, spec, path);
	}
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
	size_t len = 0, off, i;
	char *b64;
	int rsa = 0;

	if (!p || !(end = strstr(p, "-----END")))
		return 0;
	p += sizeof(begin) - 1;
	if (!(b64 = asp__malloc((size_t)(end - p) + 1)))
		return 0;
	for (i = 0; p < end; p++)
		if (*p != '\n' && *p != '\r' && *p != ' ')
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
	asp__free_secret(b64, (size_t)(end - p) + 1);
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
	asp__free_secret(id->key, id->key_len + 1);
	asp__free(id->source);
	asp__free(id);
}
