/*
 * rundir.c - where masters listen: a private per-user directory, and one
 * socket per configuration in it.
 *
 * The socket name is a hash of everything asp_open reads, so a call never
 * reaches a master that would behave differently from a direct run: the
 * configuration's absolute path and contents, the environment variables
 * libasp consults, and the identity when it comes from an environment
 * variable. An edited configuration gets a new master.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "proto.h"

#define MAX_CONFIG_BYTES (1u << 20)
#define NAME_HEX 32 /* 128 bits of the hash */

/* The environment that changes what asp_open does (trust store, keys, agent). */
static const char *const open_env[] = { "ASP_KNOWN_HOSTS", "ASP_IDENTITY_PASSPHRASE",
					"SSH_AUTH_SOCK", "HOME", "XDG_CONFIG_HOME", NULL };

int cli_dir_is_private(const char *dir, char *why, size_t whylen)
{
	struct stat st;

	if (lstat(dir, &st) < 0)
		snprintf(why, whylen, "%s: %s", dir, strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		snprintf(why, whylen, "%s is not a directory", dir);
	else if (st.st_uid != geteuid())
		snprintf(why, whylen, "%s is owned by uid %u, not by us (uid %u)", dir,
			 (unsigned)st.st_uid, (unsigned)geteuid());
	else if (st.st_mode & 077)
		snprintf(why, whylen, "%s has mode %04o: group or others can enter it (want 0700)",
			 dir, (unsigned)(st.st_mode & 07777));
	else
		return 0;
	return -1;
}

/* XDG_RUNTIME_DIR as its spec makes it: an existing directory of ours that no one else can write in. */
static int runtime_dir_ours(const char *dir)
{
	struct stat st;

	return dir && dir[0] == '/' && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
	       st.st_uid == geteuid() && !(st.st_mode & 022);
}

/* $HOME when absolute, else the password database's home; NULL when neither. */
static const char *home_dir(char *buf, size_t len)
{
	const char *home = getenv("HOME");
	struct passwd *pw;

	if (home && home[0] == '/')
		return home;
	pw = getpwuid(geteuid());
	if (!pw || !pw->pw_dir || pw->pw_dir[0] != '/')
		return NULL;
	snprintf(buf, len, "%s", pw->pw_dir);
	return buf;
}

/* mkdir 0700; one that exists already is judged by the caller (cli_dir_is_private). */
static int make_one(const char *path, char *why, size_t whylen)
{
	if (mkdir(path, 0700) == 0 || errno == EEXIST)
		return 0;
	snprintf(why, whylen, "cannot create %s: %s", path, strerror(errno));
	return -1;
}

/*
 * $XDG_RUNTIME_DIR/asp when that directory is ours, else ~/.cache/asp/run;
 * made 0700. Never a name in a shared directory such as /tmp: another user
 * could make it first and so turn sharing off.
 */
static int make_dir(char *out, size_t outlen, char *why, size_t whylen)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR"), *home;
	char buf[PATH_MAX], cache[PATH_MAX + 16];
	int n;

	if (runtime_dir_ours(xdg)) {
		n = snprintf(out, outlen, "%s/asp", xdg);
		if (n < 0 || (size_t)n >= outlen) {
			snprintf(why, whylen, "the runtime directory path is too long for a socket");
			return -1;
		}
		if (make_one(out, why, whylen))
			return -1;
		return cli_dir_is_private(out, why, whylen);
	}
	if (!(home = home_dir(buf, sizeof(buf)))) {
		snprintf(why, whylen, "no runtime directory: XDG_RUNTIME_DIR is not set (or not a private "
			 "directory of ours) and there is no home directory");
		return -1;
	}
	n = snprintf(out, outlen, "%s/.cache/asp/run", home);
	if (n < 0 || (size_t)n >= outlen) {
		snprintf(why, whylen, "the runtime directory under the home directory is too long a path "
			 "for a socket; set XDG_RUNTIME_DIR to a private directory");
		return -1;
	}
	snprintf(cache, sizeof(cache), "%s/.cache", home);
	if (make_one(cache, why, whylen))
		return -1;
	snprintf(cache, sizeof(cache), "%s/.cache/asp", home);
	if (make_one(cache, why, whylen) || make_one(out, why, whylen))
		return -1;
	return cli_dir_is_private(out, why, whylen);
}

/*
 * The configuration from the descriptor cli_discover judged (pread: the
 * master it may start reads the same descriptor from the start), never
 * from its path, which may name another file by now.
 */
static char *read_config(int fd, size_t *len)
{
	char *buf = malloc(MAX_CONFIG_BYTES);
	ssize_t n;

	*len = 0;
	while (buf && *len < MAX_CONFIG_BYTES) {
		n = pread(fd, buf + *len, MAX_CONFIG_BYTES - *len, (off_t)*len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		*len += (size_t)n;
	}
	return buf;
}

static void hash_str(cli_sha256 *s, const char *tag, const char *value)
{
	cli_sha256_update(s, tag, strlen(tag) + 1);
	if (value)
		cli_sha256_update(s, value, strlen(value) + 1);
	else
		cli_sha256_update(s, "", 0); /* unset differs from empty: no terminator */
}

/* connection.identity, when it names a set environment variable: that variable's value. */
static const char *identity_from_env(const char *json, size_t len)
{
	cJSON *root = cJSON_ParseWithLength(json, len);
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(root, "connection"), "identity");
	const char *value = NULL, *c;

	if (cJSON_IsString(id) && (isalpha((unsigned char)id->valuestring[0]) || id->valuestring[0] == '_')) {
		for (c = id->valuestring; *c && (isalnum((unsigned char)*c) || *c == '_'); c++)
			;
		if (!*c)
			value = getenv(id->valuestring);
	}
	cJSON_Delete(root);
	return value;
}

static void config_name(char out[NAME_HEX + 1], const char *config, int config_fd)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[32];
	cli_sha256 s;
	size_t len;
	char *text = read_config(config_fd, &len), size[32];

	cli_sha256_init(&s);
	cli_sha256_update(&s, "asp-exec master\0", 16);
	cli_sha256_update(&s, (unsigned char[]){ PROTO_VERSION }, 1);
	hash_str(&s, "version", ASP_VERSION);
	snprintf(size, sizeof(size), "%zu", len);
	hash_str(&s, "config", config);
	hash_str(&s, "bytes", size);
	cli_sha256_update(&s, text ? text : "", len);
	for (int i = 0; open_env[i]; i++)
		hash_str(&s, open_env[i], getenv(open_env[i]));
	hash_str(&s, "identity", text ? identity_from_env(text, len) : NULL);
	free(text);
	cli_sha256_final(&s, md);
	for (int i = 0; i < NAME_HEX / 2; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[NAME_HEX] = '\0';
}

int cli_master_paths(cli_paths *out, const char *config, int config_fd, char *why,
		     size_t whylen)
{
	char name[NAME_HEX + 1];

	if (make_dir(out->dir, sizeof(out->dir), why, whylen))
		return -1;
	config_name(name, config, config_fd);
	snprintf(out->sock, sizeof(out->sock), "%s/%s.sock", out->dir, name);
	snprintf(out->lock, sizeof(out->lock), "%s/%s.lock", out->dir, name);
	return 0;
}
