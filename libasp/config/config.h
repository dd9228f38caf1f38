/*
 * config.h - `.asp.json` discovery, parsing and strict validation.
 * The parse step does no I/O, so it is unit-testable and fuzzable.
 */
#ifndef ASP_CONFIG_H
#define ASP_CONFIG_H

#include <stddef.h>

#include "common.h"

typedef struct asp_config {
	char *path;          /* absolute path of the file ("<memory>" when parsed from text) */
	char *dir;           /* directory holding it: relative identity paths resolve here */
	char *host;          /* connection.host */
	unsigned int port;   /* connection.port, default 22 */
	char *user;          /* connection.user */
	char *identity;      /* connection.identity as written, or NULL */
	char *host_key;      /* connection.host_key as written, or NULL (trust on first use) */
	char *proxy_command; /* connection.x-asp-proxy-command, or NULL */
	char *workspace;     /* absolute sandbox path */
} asp_config;

/*
 * Discovery: $ASP_CONFIG, else .asp.json in start_dir (NULL: cwd) then each
 * parent, used only when trusted (asp__discover in discover.h). *out is an
 * absolute path (asp__free). ASP_ENOCONFIG when none; ASP_ECONFIG when the
 * first one found cannot be used or is not trusted. Only a name: a caller
 * that opens it again may read another file than the one judged
 * (asp__config_discover reads the judged one).
 */
int asp__config_find(char **out, const char *start_dir, asp_error *err);

/*
 * Parse and validate `len` bytes of JSON. `path` is used in messages and to
 * fill cfg->path/dir (its directory). Messages look like
 * "/x/.asp.json: connection.port: expected integer 1..65535, got \"22\"".
 * Returns ASP_ECONFIG on any invalid input.
 */
int asp__config_parse(asp_config **out, const char *text, size_t len, const char *path,
		      asp_error *err);

/* Read the file at path (made absolute) and parse it. */
int asp__config_load(asp_config **out, const char *path, asp_error *err);

/*
 * Parse NUL-terminated text: origin (may be NULL) names it in messages and
 * its directory is where relative identity paths resolve. Opens nothing.
 */
int asp__config_load_text(asp_config **out, const char *text, const char *origin, asp_error *err);

/*
 * Discovery (as asp__config_find) and the parse of the very file that was
 * judged: the content is read from discovery's descriptor, never by path.
 */
int asp__config_discover(asp_config **out, const char *start_dir, asp_error *err);

void asp__config_free(asp_config *cfg);

struct asp_pin;
/* Parse cfg->host_key (non-NULL) into *out; ASP_ECONFIG naming file and field. */
int asp__config_pin(struct asp_pin *out, const asp_config *cfg, asp_error *err);

#endif
