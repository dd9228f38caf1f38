/*
 * config.c - `.asp.json` validation (DESIGN §2): the fields, their types
 * and shapes, on the tree json.c's strict reader gives; loading the file.
 * (The search for the file and its trust rules are in discover.c.)
 *
 * Every message reads "<file>: <where>: expected <what>, got <what>", where
 * <where> is a JSON path (connection.port) or, for syntax errors, a line and
 * column. Scalars are shown as JSON (`"22"`, `22.5`, `true`, `null`) and
 * containers by type (`object`, `array`). String values are echoed only when
 * their type or shape is wrong; a bad character is reported by position, so
 * that a token in connection.user never reaches a log.
 */
#include "config.h"
#include "discover.h"
#include "errtext.h"
#include "json.h"
#include "pin.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>


/* The value of key `name` (case-sensitive, unlike cJSON_GetObjectItem), or NULL. */
static const cJSON *member(const cJSON *obj, const char *name)
{
	const cJSON *v;

	cJSON_ArrayForEach(v, obj)
		if (!strcmp(v->string, name))
			return v;
	return NULL;
}

static int in_list(const char *s, const char *const *list)
{
	for (; *list; list++)
		if (!strcmp(s, *list))
			return 1;
	return 0;
}

/* Lower case without '-' and '_', so hostKey, host-key and hostkey meet host_key. */
static void normalize(char *buf, size_t size, const char *s)
{
	size_t o = 0;

	for (; *s && o + 1 < size; s++) {
		char ch = *s;

		if (ch == '-' || ch == '_')
			continue;
		buf[o++] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
	}
	buf[o] = '\0';
}

/* Edit distance counting a swap of neighbours as one edit (optimal string alignment). */
static size_t edit_distance(const char *a, const char *b)
{
	size_t d[33][33], la = strlen(a), lb = strlen(b), i, j, best;

	if (la > 32 || lb > 32)
		return SIZE_MAX;
	for (i = 0; i <= la; i++)
		d[i][0] = i;
	for (j = 0; j <= lb; j++)
		d[0][j] = j;
	for (i = 1; i <= la; i++) {
		for (j = 1; j <= lb; j++) {
			best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	}
	return d[la][lb];
}

/* A known key the unknown one was probably meant to be, or NULL. */
static const char *suggest(const char *key, const char *const *known)
{
	char nk[40], nc[40];
	const char *best = NULL;
	size_t best_d = SIZE_MAX, d, lk, lc;

	normalize(nk, sizeof(nk), key);
	lk = strlen(nk);
	for (; *known; known++) {
		normalize(nc, sizeof(nc), *known);
		lc = strlen(nc);
		d = edit_distance(nk, nc);
		/* "proxycommand" for x-asp-proxy-command: a distinctive tail. */
		if (lk >= 5 && lk < lc && !strcmp(nc + lc - lk, nk))
			d = 1;
		if (d <= (lc >= 6 ? 2u : 1u) && d < best_d) {
			best = *known;
			best_d = d;
		}
	}
	return best;
}

/*
 * One level of the file: its known keys, and the other level's keys so that
 * a field in the wrong place gets a hint instead of a bare "unknown".
 */
struct level {
	const char *path;                /* NULL for the top level */
	const char *const *known;
	const char *const *elsewhere;
	const char *elsewhere_hint;
};

static const char *const top_keys[] = { "version", "transport", "connection", "workspace", NULL };
static const char *const conn_keys[] = { "host", "port", "user", "identity", "host_key",
					 "proxyCommand", "x-asp-proxy-command", NULL };

static const struct level top_level = { NULL, top_keys, conn_keys, "it belongs inside \"connection\"" };
static const struct level conn_level = { "connection", conn_keys, top_keys, "it belongs at the top level" };

/*
 * Keys starting with x- are extensions and ignored, except x-asp-*: that
 * prefix is libasp's own, so a misspelt x-asp-proxy-command fails instead of
 * silently connecting without the proxy.
 */
static int check_unknown_keys(const asp_json_ctx *c, const cJSON *obj, const struct level *lv)
{
	char where[ASP_JSON_WHERE_MAX];
	const char *hint;
	const cJSON *v;

	cJSON_ArrayForEach(v, obj) {
		const char *key = v->string;

		if (in_list(key, lv->known))
			continue;
		if (!strncmp(key, "x-", 2) && strncmp(key, "x-asp-", 6))
			continue;
		asp__json_key_path(where, sizeof(where), lv->path, key);
		if (in_list(key, lv->elsewhere))
			return asp__json_fail(c, where, "unknown field (%s)", lv->elsewhere_hint);
		if ((hint = suggest(key, lv->known)))
			return asp__json_fail(c, where, "unknown field (did you mean \"%s\"?)", hint);
		if (!strncmp(key, "x-asp-", 6))
			return asp__json_fail(c, where, "unknown field (x-asp-* is reserved for libasp extensions)");
		return asp__json_fail(c, where, "unknown field (extensions must start with \"x-\")");
	}
	return 0;
}

/* Check a nested object (connection) has only keys known at its level. */
static int check_object(const asp_json_ctx *c, const cJSON *obj, const struct level *lv)
{
	char got[ASP_JSON_QUOTE_MAX];

	if (!cJSON_IsObject(obj))
		return asp__json_fail(c, lv->path, "expected object, got %s", asp__json_show(got, sizeof(got), obj));
	return check_unknown_keys(c, obj, lv);
}

/* ------------------------------------------------------------ field values */

/* What a string field must look like beyond being a string. */
enum {
	STR_NONEMPTY = 1 << 0,
	STR_NO_SPACE = 1 << 1, /* no ASCII space (control characters cover \t \n \r) */
	STR_NO_CTRL = 1 << 2,  /* nothing below 0x20, no DEL */
	STR_ABSOLUTE = 1 << 3  /* starts with '/' */
};

static int missing(const asp_json_ctx *c, const char *where, const char *expected)
{
	return asp__json_fail(c, where, "expected %s, got nothing (required field is missing)", expected);
}

/* Report the first character a string may not contain, by position. */
static int check_chars(const asp_json_ctx *c, const char *where, const char *s, unsigned flags,
		       const char *noun)
{
	/* Every caller names what the field holds; a plain "string" if one forgets. */
	if (!noun)
		noun = "string";
	const char *forbidden = flags & STR_NO_SPACE ? "whitespace or control characters" :
						       "control characters";
	size_t i;

	for (i = 0; s[i]; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch < 0x20 || ch == 0x7f)
			return asp__json_fail(c, where, "expected %s without %s, got control character "
					      "0x%02x at byte %zu",
					      noun, forbidden, ch, i);
		if (ch == ' ' && (flags & STR_NO_SPACE))
			return asp__json_fail(c, where, "expected %s without %s, got a space at byte %zu",
					      noun, forbidden, i);
	}
	return 0;
}

/*
 * Key text pasted where its variable's name or its file belongs: said so
 * before any other check, whose message could quote it, and never shown.
 */
static int check_identity(const asp_json_ctx *c, const cJSON *conn)
{
	const cJSON *v = member(conn, "identity");

	if (!cJSON_IsString(v) || !asp__looks_like_key_text(v->valuestring, strlen(v->valuestring)))
		return 0;
	return asp__json_fail(c, "connection.identity", "looks like key text (not shown); put the key "
			      "in an environment variable and name that variable here, e.g. "
			      "\"identity\": \"ASP_IDENTITY\"");
}

/* Validate an optional string field and store a copy in *out; noun says what it holds. */
static int get_string(char **out, const asp_json_ctx *c, const cJSON *obj, const char *parent,
		      const char *name, unsigned flags, const char *noun)
{
	const cJSON *v = member(obj, name);
	char where[ASP_JSON_WHERE_MAX], got[ASP_JSON_QUOTE_MAX];
	int rc;

	if (!v)
		return 0;
	asp__json_key_path(where, sizeof(where), parent, name);
	if (!cJSON_IsString(v))
		return asp__json_fail(c, where, "expected string, got %s", asp__json_show(got, sizeof(got), v));
	if ((flags & STR_NONEMPTY) && !*v->valuestring)
		return asp__json_fail(c, where, "expected non-empty string, got \"\"");
	if ((flags & STR_ABSOLUTE) && v->valuestring[0] != '/')
		return asp__json_fail(c, where, "expected absolute path (starting with \"/\"), got %s",
				      asp__json_show(got, sizeof(got), v));
	if ((rc = check_chars(c, where, v->valuestring, flags, noun)))
		return rc;
	if (!(*out = asp__strdup(v->valuestring)))
		return asp__json_out_of_memory(c);
	return 0;
}

/* A string field that must be present. */
static int get_required_string(char **out, const asp_json_ctx *c, const cJSON *obj,
			       const char *parent, const char *name, unsigned flags,
			       const char *noun, const char *expected)
{
	char where[ASP_JSON_WHERE_MAX];

	if (!member(obj, name))
		return missing(c, asp__json_key_path(where, sizeof(where), parent, name), expected);
	return get_string(out, c, obj, parent, name, flags, noun);
}

/* A required string with one allowed value (version, transport). */
static int check_constant(const asp_json_ctx *c, const cJSON *obj, const char *name,
			  const char *value, const char *why)
{
	const cJSON *v = member(obj, name);
	char got[ASP_JSON_QUOTE_MAX];

	if (!v)
		return asp__json_fail(c, name, "expected \"%s\" (%s), got nothing (required field is missing)",
				      value, why);
	if (!cJSON_IsString(v) || strcmp(v->valuestring, value))
		return asp__json_fail(c, name, "expected \"%s\" (%s), got %s", value, why,
				      asp__json_show(got, sizeof(got), v));
	return 0;
}

/*
 * Any integral value in range is accepted, 22.0 and 2.2e1 included: that is
 * what JSON Schema's "integer" means, and the schema must agree with us.
 */
static int get_port(unsigned int *out, const asp_json_ctx *c, const cJSON *conn)
{
	const cJSON *v = member(conn, "port");
	char got[ASP_JSON_QUOTE_MAX];
	double d;

	*out = 22;
	if (!v)
		return 0;
	d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
	if (!isfinite(d) || d != floor(d) || d < 1 || d > 65535)
		return asp__json_fail(c, "connection.port", "expected integer 1..65535, got %s",
				      asp__json_show(got, sizeof(got), v));
	*out = (unsigned int)d;
	return 0;
}

static int parse_connection(asp_config *cfg, const asp_json_ctx *c, const cJSON *conn)
{
	const char *p = "connection";
	int rc;

	if ((rc = check_object(c, conn, &conn_level)))
		return rc;
	if ((rc = get_required_string(&cfg->host, c, conn, p, "host", STR_NONEMPTY | STR_NO_SPACE |
				      STR_NO_CTRL, "host name", "non-empty string")))
		return rc;
	if ((rc = get_port(&cfg->port, c, conn)))
		return rc;
	if ((rc = get_required_string(&cfg->user, c, conn, p, "user", STR_NONEMPTY | STR_NO_CTRL,
				      "user name", "non-empty string")))
		return rc;
	if ((rc = check_identity(c, conn)) ||
	    (rc = get_string(&cfg->identity, c, conn, p, "identity", STR_NONEMPTY,
			     "environment variable name or key file path")))
		return rc;
	if ((rc = get_string(&cfg->host_key, c, conn, p, "host_key", STR_NONEMPTY, "host key")))
		return rc;
	/* proxyCommand is the ASP RFC's name for what libasp first called x-asp-proxy-command. */
	if (member(conn, "proxyCommand") && member(conn, "x-asp-proxy-command"))
		return asp__json_fail(c, p, "proxyCommand and x-asp-proxy-command are the same "
				      "setting; give only one (proxyCommand is the ASP name)");
	if ((rc = get_string(&cfg->proxy_command, c, conn, p, "proxyCommand", STR_NONEMPTY,
			     "command")))
		return rc;
	if (cfg->proxy_command)
		return 0;
	return get_string(&cfg->proxy_command, c, conn, p, "x-asp-proxy-command", STR_NONEMPTY,
			  "command");
}

/*
 * version and transport are checked before unknown keys: a file written for
 * a later version should say so, not complain about the fields it added.
 */
static int parse_root(asp_config *cfg, const asp_json_ctx *c, const cJSON *root)
{
	char got[ASP_JSON_QUOTE_MAX], path[ASP_JSON_WHERE_MAX] = "";
	const cJSON *conn;
	int rc;

	if (!cJSON_IsObject(root))
		return asp__json_fail(c, "top level", "expected object, got %s",
				      asp__json_show(got, sizeof(got), root));
	if ((rc = asp__json_check_duplicates(c, root, path, sizeof(path))))
		return rc;
	if ((rc = check_constant(c, root, "version", "0", "the only version libasp supports")))
		return rc;
	if ((rc = check_constant(c, root, "transport", "ssh", "the only transport in ASP v0")))
		return rc;
	if ((rc = check_unknown_keys(c, root, &top_level)))
		return rc;
	if (!(conn = member(root, "connection")))
		return missing(c, "connection", "object");
	if ((rc = parse_connection(cfg, c, conn)))
		return rc;
	return get_required_string(&cfg->workspace, c, root, NULL, "workspace",
				   STR_ABSOLUTE | STR_NO_CTRL, "path", "absolute path");
}

/* cfg->path is the name as given; cfg->dir its directory ("." if none). */
static int set_location(asp_config *cfg, const asp_json_ctx *c)
{
	const char *slash = strrchr(c->file, '/');

	cfg->path = asp__strdup(c->file);
	if (!slash)
		cfg->dir = asp__strdup(".");
	else
		cfg->dir = asp__strndup(c->file, slash == c->file ? 1 : (size_t)(slash - c->file));
	return cfg->path && cfg->dir ? 0 : asp__json_out_of_memory(c);
}

int asp__config_parse(asp_config **out, const char *text, size_t len, const char *path,
		      asp_error *err)
{
	asp_json_ctx c = { path ? path : "<memory>", err };
	asp_config *cfg;
	cJSON *root;
	int rc;

	ASP_ASSERT_ARG(out);
	*out = NULL;
	ASP_ASSERT_ARG(text || !len);
	if (!text)
		text = "";
	if ((rc = asp__json_read(&root, &c, text, len)))
		return rc;
	if (!(cfg = asp__calloc(1, sizeof(*cfg)))) {
		cJSON_Delete(root);
		return asp__json_out_of_memory(&c);
	}
	rc = parse_root(cfg, &c, root);
	cJSON_Delete(root);
	if (!rc)
		rc = set_location(cfg, &c);
	if (rc) {
		asp__config_free(cfg);
		return rc;
	}
	*out = cfg;
	return 0;
}

void asp__config_free(asp_config *cfg)
{
	if (!cfg)
		return;
	asp__free(cfg->path);
	asp__free(cfg->dir);
	asp__free(cfg->host);
	asp__free(cfg->user);
	asp__free(cfg->identity);
	asp__free(cfg->host_key);
	asp__free(cfg->proxy_command);
	asp__free(cfg->workspace);
	asp__free(cfg);
}

/* ------------------------------------------------------------ files */

/*
 * An absolute name for path: the real path of its directory plus its last
 * component. The last component is kept as written, so a symlinked
 * .asp.json is reported under the name the user knows.
 */
static int absolute_path(char **out, const char *path, asp_error *err)
{
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	size_t n = slash ? (size_t)(slash - path) : 0;
	char *dir, *real;
	int e;

	/* realpath's own buffer: two PATH_MAX arrays here were most of a caller thread's stack. */
	if (n >= PATH_MAX)
		return asp__error(err, ASP_ECONFIG, "%s: path too long", path);
	dir = !slash ? asp__strdup(".") : n == 0 ? asp__strdup("/") : asp__sprintf("%.*s", (int)n, path);
	if (!dir)
		return asp__error(err, ASP_ENOMEM, "out of memory");
	real = realpath(dir, NULL);
	e = errno;
	asp__free(dir);
	if (!real)
		return asp__error(err, e == ENOMEM ? ASP_ENOMEM : ASP_ECONFIG, "%s: cannot resolve directory: %s",
				  path, ASP_ERRNO_TEXT(e));
	*out = asp__sprintf("%s%s%s", real, strcmp(real, "/") ? "/" : "", base);
	free(real); /* realpath's memory comes from libc */
	return *out ? 0 : asp__error(err, ASP_ENOMEM, "out of memory");
}

/* Read all of fd, failing once it holds more than the size limit. */
static int read_limited(asp_buf *b, int fd, const char *path, off_t size, asp_error *err)
{
	switch (asp__read_fd(b, fd, ASP_CONFIG_MAX_BYTES)) {
	case 0:
		return 0;
	case ASP_ENOMEM:
		return asp__error(err, ASP_ENOMEM, "out of memory");
	case ASP_EIO:
		return asp__error(err, ASP_ECONFIG, "%s: cannot read: %s", path, ASP_ERRNO_TEXT(errno));
	default:
		return asp__error(err, ASP_ECONFIG, "%s: expected at most %d bytes (1 MiB), got %lld bytes",
				  path, ASP_CONFIG_MAX_BYTES,
				  (long long)(size > (off_t)b->len ? size : (off_t)b->len));
	}
}

/* Read the regular file open as fd (named path in messages). */
static int read_config_fd(asp_buf *b, int fd, const char *path, asp_error *err)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return asp__error(err, ASP_ECONFIG, "%s: cannot stat: %s", path, ASP_ERRNO_TEXT(errno));
	if (!S_ISREG(st.st_mode))
		return asp__error(err, ASP_ECONFIG, "%s: expected a regular file, got %s", path,
				  asp__file_type(st.st_mode));
	return read_limited(b, fd, path, st.st_size, err);
}

/*
 * Only a regular file is read. O_NONBLOCK keeps open() from hanging on a
 * FIFO, which is then refused like a directory.
 */
static int read_config_file(asp_buf *b, const char *path, asp_error *err)
{
	int fd, rc;

	if ((fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)) < 0)
		return asp__error(err, ASP_ECONFIG, "%s: cannot open: %s", path, ASP_ERRNO_TEXT(errno));
	rc = read_config_fd(b, fd, path, err);
	close(fd);
	return rc;
}

/* Parse text read from path (made absolute, so that cfg->dir is absolute too). */
static int parse_named(asp_config **out, const asp_buf *text, const char *path, asp_error *err)
{
	char *abs = NULL;
	int rc;

	if (!(rc = absolute_path(&abs, path, err)))
		rc = asp__config_parse(out, text->data ? (const char *)text->data : "", text->len,
				       abs, err);
	asp__free(abs);
	return rc;
}

int asp__config_load(asp_config **out, const char *path, asp_error *err)
{
	asp_buf text = { 0 };
	int rc;

	ASP_ASSERT_ARG(out);
	*out = NULL;
	ASP_ASSERT_ARG(path && *path);
	if (!(rc = read_config_file(&text, path, err)))
		rc = parse_named(out, &text, path, err);
	asp__buf_free(&text);
	return rc;
}

int asp__config_load_text(asp_config **out, const char *text, const char *origin, asp_error *err)
{
	asp_buf b = { 0 };

	ASP_ASSERT_ARG(out);
	*out = NULL;
	ASP_ASSERT_ARG(text);
	b.data = (unsigned char *)(uintptr_t)text;
	b.len = strlen(text);
	if (b.len > ASP_CONFIG_MAX_BYTES)
		return asp__error(err, ASP_ECONFIG, "%s: expected at most %d bytes (1 MiB), got %zu "
				  "bytes", origin ? origin : "<memory>", ASP_CONFIG_MAX_BYTES, b.len);
	/* An absolute origin is used as it is: the text may outlive its file. */
	if (origin && origin[0] != '/')
		return parse_named(out, &b, origin, err);
	return asp__config_parse(out, text, b.len, origin, err);
}

/* ------------------------------------------------------------ discovery */

/*
 * The search and the trust rules live in discover.c, which asp-exec's
 * front shares; the content comes from the descriptor discovery judged.
 * *path (asp__free) names it.
 */
static int discover_read(asp_buf *text, char **path, const char *start_dir, asp_error *err)
{
	char found[PATH_MAX], why[ASP_ERROR_MESSAGE_MAX];
	int fd, rc;

	*path = NULL;
	if ((rc = asp__discover(&fd, found, sizeof(found), start_dir, why, sizeof(why))))
		return asp__error(err, rc, "%s", why);
	rc = read_config_fd(text, fd, found, err);
	close(fd);
	if (!rc && !(*path = asp__strdup(found)))
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
	if (rc)
		asp__buf_free(text);
	return rc;
}

int asp__config_discover(asp_config **out, const char *start_dir, asp_error *err)
{
	asp_buf text = { 0 };
	char *path = NULL;
	int rc;

	ASP_ASSERT_ARG(out);
	*out = NULL;
	if (!(rc = discover_read(&text, &path, start_dir, err)))
		rc = asp__config_parse(out, text.data ? (const char *)text.data : "", text.len, path,
				       err);
	asp__free(path);
	asp__buf_free(&text);
	return rc;
}

int asp__config_find(char **out, const char *start_dir, asp_error *err)
{
	char path[PATH_MAX], why[ASP_ERROR_MESSAGE_MAX];
	int fd, rc;

	ASP_ASSERT_ARG(out);
	*out = NULL;
	if ((rc = asp__discover(&fd, path, sizeof(path), start_dir, why, sizeof(why))))
		return asp__error(err, rc, "%s", why);
	close(fd);
	if (!(*out = asp__strdup(path)))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	return 0;
}

/* ------------------------------------------------------------ public API */

int asp_config_find(char **out, const char *start_dir, asp_error *err)
{
	return asp__config_find(out, start_dir, err);
}

int asp_config_read(char **text, char **path, const char *start_dir, asp_error *err)
{
	asp_buf b = { 0 };
	char *found = NULL;
	int rc;

	ASP_ASSERT_ARG(text);
	*text = NULL;
	if (path)
		*path = NULL;
	if ((rc = discover_read(&b, &found, start_dir, err)))
		return rc;
	if (memchr(b.data, '\0', b.len)) {
		rc = asp__error(err, ASP_ECONFIG, "%s: expected JSON text, got a NUL byte", found);
	} else if (!(*text = asp__malloc(b.len + 1))) {
		rc = asp__error(err, ASP_ENOMEM, "out of memory");
	} else {
		if (b.len)
			memcpy(*text, b.data, b.len);
		(*text)[b.len] = '\0';
	}
	if (!rc && path)
		*path = found;
	else
		asp__free(found);
	asp__buf_free(&b);
	return rc;
}

int asp__config_pin(asp_pin *out, const asp_config *cfg, asp_error *err)
{
	int rc = asp__pin_parse(out, cfg->host_key, err);

	if (rc == 0)
		return 0;
	asp__error_prefix(err, "%s: connection.host_key", cfg->path);
	if (rc != ASP_ENOMEM)
		rc = ASP_ECONFIG;
	if (err)
		err->code = rc;
	return rc;
}

int asp_config_check(const char *path, asp_error *err)
{
	asp_config *cfg = NULL;
	asp_pin pin;
	int rc;

	ASP_ASSERT_ARG(path);
	rc = asp__config_load(&cfg, path, err);
	if (!rc && cfg->host_key && !(rc = asp__config_pin(&pin, cfg, err)))
		asp__pin_clear(&pin);
	asp__config_free(cfg);
	return rc;
}
