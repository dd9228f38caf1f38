/*
 * json.h - the strict JSON reader under config.c: text to a cJSON tree
 * that means what JSON means, and the message helpers its checks and the
 * config validation share. No I/O.
 */
#ifndef ASP_JSON_H
#define ASP_JSON_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "common.h"

#define ASP_CONFIG_MAX_BYTES (1024 * 1024)
#define ASP_JSON_SHOW_MAX 48 /* bytes of a value or key quoted in a message */
#define ASP_JSON_QUOTE_MAX (ASP_JSON_SHOW_MAX * 6 + 8) /* SHOW_MAX bytes quoted, escaped and cut */
#define ASP_JSON_WHERE_MAX (ASP_JSON_QUOTE_MAX + 64) /* a JSON path or "line L, column C" */

/* What every check needs to report an error. */
typedef struct asp_json_ctx {
	const char *file;
	asp_error *err;
} asp_json_ctx;

/* Report "<file>: <where>: <message>" (where may be NULL) as ASP_ECONFIG. */
int asp__json_fail(const asp_json_ctx *c, const char *where, const char *fmt, ...)
	ASP_PRINTF(3, 4);
/* "<file>: out of memory" as ASP_ENOMEM. */
int asp__json_out_of_memory(const asp_json_ctx *c);

/* A JSON value for the "got ..." part of a message: scalars as JSON (cut), containers by type. */
const char *asp__json_show(char *buf, size_t size, const cJSON *v);
/* The JSON path of key in parent (NULL: the top level): connection.port, x["odd key"]. */
const char *asp__json_key_path(char *buf, size_t size, const char *parent, const char *key);

/*
 * Read len bytes of text (at most ASP_CONFIG_MAX_BYTES, UTF-8, one JSON
 * value and nothing after it, nothing cJSON accepts that JSON does not)
 * into *out (cJSON_Delete). Errors name a line and column: ASP_ECONFIG.
 */
int asp__json_read(cJSON **out, const asp_json_ctx *c, const char *text, size_t len);

/*
 * Fail on a key that appears twice in any object of the tree under v.
 * path (size bytes, "" for the root) holds v's JSON path and is used as
 * scratch.
 */
int asp__json_check_duplicates(const asp_json_ctx *c, const cJSON *v, char *path, size_t size);

#endif
