/*
 * config.c - `.asp.json` discovery, parsing and strict validation (DESIGN §2).
 *
 * The text gets checks of our own around cJSON: size and UTF-8 before it,
 * and a lexical pass after it, because cJSON is lenient where JSON is not
 * (leading zeros, raw control characters in strings, \f as whitespace) and
 * silently truncates strings at an escaped NUL. Either would let a value be
 * read differently here than by any other tool, including the JSON Schema.
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

#define CONFIG_MAX_BYTES (1024 * 1024)
#define SHOW_MAX 48   /* bytes of a value or key quoted in a message */
#define QUOTE_MAX (SHOW_MAX * 6 + 8) /* SHOW_MAX bytes quoted, escaped and cut */
#define WHERE_MAX (QUOTE_MAX + 64) /* a JSON path or "line L, column C" */

/* What every check needs to report an error. */
struct ctx {
	const char *file;
	asp_error *err;
};

/* Report "<file>: <where>: <message>" as ASP_ECONFIG. */
static int fail(const struct ctx *c, const char *where, const char *fmt, ...) ASP_PRINTF(3, 4);

static int fail(const struct ctx *c, const char *where, const char *fmt, ...)
{
	char msg[ASP_ERROR_MESSAGE_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (where)
		return asp__error(c->err, ASP_ECONFIG, "%s: %s: %s", c->file, where, msg);
	return asp__error(c->err, ASP_ECONFIG, "%s: %s", c->file, msg);
}

static int out_of_memory(const struct ctx *c)
{
	return asp__error(c->err, ASP_ENOMEM, "%s: out of memory", c->file);
}

/* ------------------------------------------------------------ showing values */

/*
 * Write s[0..len) into buf as a JSON string literal, cut at SHOW_MAX bytes
 * (never inside a UTF-8 sequence) with "..." marking the cut.
 */
static void quote(char *buf, size_t size, const char *s, size_t len)
{
	size_t o = 0, i, n = len > SHOW_MAX ? SHOW_MAX : len;

	/* Back off to a character boundary so the message stays valid UTF-8. */
	while (n < len && n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
		n--;
	buf[o++] = '"';
	for (i = 0; i < n && o + 8 < size; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == '"' || ch == '\\')
			o += (size_t)snprintf(buf + o, size - o, "\\%c", ch);
		else if (ch == '\n')
			o += (size_t)snprintf(buf + o, size - o, "\\n");
		else if (ch == '\t')
			o += (size_t)snprintf(buf + o, size - o, "\\t");
		else if (ch < 0x20 || ch == 0x7f)
			o += (size_t)snprintf(buf + o, size - o, "\\u%04x", ch);
		else
			buf[o++] = (char)ch;
	}
	snprintf(buf + o, size - o, "%s\"", i < len ? "..." : "");
}

/* Describe a JSON value for the "got ..." part of a message. */
static const char *show(char *buf, size_t size, const cJSON *v)
{
	if (cJSON_IsString(v))
		quote(buf, size, v->valuestring, strlen(v->valuestring));
	else if (cJSON_IsNumber(v))
		snprintf(buf, size, "%.15g", v->valuedouble);
	else if (cJSON_IsTrue(v))
		snprintf(buf, size, "true");
	else if (cJSON_IsFalse(v))
		snprintf(buf, size, "false");
	else if (cJSON_IsNull(v))
		snprintf(buf, size, "null");
	else if (cJSON_IsArray(v))
		snprintf(buf, size, "array");
	else if (cJSON_IsObject(v))
		snprintf(buf, size, "object");
	else
		snprintf(buf, size, "invalid value");
	return buf;
}

/* 1 when a key can be written bare in a dotted path. */
static int is_plain_key(const char *key)
{
	const char *p;

	if (!*key || strlen(key) > SHOW_MAX)
		return 0;
	for (p = key; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
			return 0;
	return 1;
}

/* Extend the JSON path in buf by ".key", or by ["odd key"] when a bare key would be ambiguous. */
static void append_key(char *buf, size_t size, const char *key)
{
	size_t len = strlen(buf);
	char q[QUOTE_MAX];

	if (is_plain_key(key)) {
		snprintf(buf + len, size - len, "%s%s", len ? "." : "", key);
	} else {
		quote(q, sizeof(q), key, strlen(key));
		snprintf(buf + len, size - len, "[%s]", q);
	}
}

/* The JSON path of key in parent (NULL: the top level). */
static const char *key_path(char *buf, size_t size, const char *parent, const char *key)
{
	snprintf(buf, size, "%s", parent ? parent : "");
	append_key(buf, size, key);
	return buf;
}

/* ------------------------------------------------------------ lexical pass */

/* "line L, column C" of a byte offset; columns count characters, not bytes. */
static const char *position(char *buf, size_t size, const char *text, size_t off)
{
	size_t i, line = 1, col = 1;

	for (i = 0; i < off; i++) {
		if (text[i] == '\n') {
			line++;
			col = 1;
		} else if (((unsigned char)text[i] & 0xC0) != 0x80) {
			col++;
		}
	}
	snprintf(buf, size, "line %zu, column %zu", line, col);
	return buf;
}

static int fail_at(const struct ctx *c, const char *text, size_t off, const char *fmt, ...)
	ASP_PRINTF(4, 5);

static int fail_at(const struct ctx *c, const char *text, size_t off, const char *fmt, ...)
{
	char where[WHERE_MAX], msg[ASP_ERROR_MESSAGE_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return fail(c, position(where, sizeof(where), text, off), "%s", msg);
}

/* Offset of the first byte that is not well-formed UTF-8, or len. */
static size_t utf8_error_at(const unsigned char *s, size_t len)
{
	size_t i = 0, n, k;

	while (i < len) {
		unsigned char lo = 0x80, hi = 0xBF, b = s[i];

		if (b < 0x80) {
			i++;
			continue;
		}
		if (b >= 0xC2 && b <= 0xDF) {
			n = 1;
		} else if (b >= 0xE0 && b <= 0xEF) {
			n = 2;
			lo = b == 0xE0 ? 0xA0 : 0x80;
			hi = b == 0xED ? 0x9F : 0xBF; /* no UTF-16 surrogates */
		} else if (b >= 0xF0 && b <= 0xF4) {
			n = 3;
			lo = b == 0xF0 ? 0x90 : 0x80;
			hi = b == 0xF4 ? 0x8F : 0xBF; /* nothing above U+10FFFF */
		} else {
			return i;
		}
		if (len - i <= n || s[i + 1] < lo || s[i + 1] > hi)
			return i;
		for (k = 2; k <= n; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				return i;
		i += n + 1;
	}
	return len;
}

static int is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

/* 1 when s[0..len) is exactly one number as RFC 8259 writes it. */
static int is_json_number(const char *s, size_t len)
{
	size_t i = 0;

	if (i < len && s[i] == '-')
		i++;
	if (i < len && s[i] == '0')
		i++;
	else if (i < len && is_digit(s[i]))
		while (i < len && is_digit(s[i]))
			i++;
	else
		return 0;
	if (i < len && s[i] == '.') {
		if (++i >= len || !is_digit(s[i]))
			return 0;
		while (i < len && is_digit(s[i]))
			i++;
	}
	if (i < len && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < len && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= len || !is_digit(s[i]))
			return 0;
		while (i < len && is_digit(s[i]))
			i++;
	}
	return i == len;
}

/* Length of the run of characters that may belong to a number token. */
static size_t number_span(const char *s, size_t len)
{
	size_t i = 0;

	while (i < len && s[i] && (is_digit(s[i]) || strchr("+-.eE", s[i])))
		i++;
	return i;
}

static int is_json_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* Offset just past a UTF-8 byte order mark, which RFC 8259 lets parsers skip. */
static size_t skip_bom(const char *text, size_t len)
{
	return len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3) ? 3 : 0;
}

/*
 * Inside a string at a backslash: fail on \u0000, which cJSON would turn
 * into the end of the string. Returns the bytes the escape takes (at least
 * 2) or an error code.
 */
static int check_escape(const struct ctx *c, const char *text, size_t len, size_t i)
{
	if (i + 6 <= len && !memcmp(text + i, "\\u0000", 6))
		return fail_at(c, text, i, "expected a string without NUL characters, got \\u0000");
	return 2;
}

/*
 * Size, emptiness and UTF-8, checked before cJSON sees the text. Valid
 * UTF-8 also keeps cJSON's BOM check from reading past a short buffer.
 */
static int check_encoding(const struct ctx *c, const char *text, size_t len)
{
	size_t i = skip_bom(text, len), bad;

	if (len > CONFIG_MAX_BYTES)
		return fail(c, NULL, "expected at most %d bytes (1 MiB), got %zu bytes",
			    CONFIG_MAX_BYTES, len);
	while (i < len && is_json_space(text[i]))
		i++;
	if (i == len)
		return fail(c, NULL, "expected a JSON object, got an empty file");
	if ((bad = utf8_error_at((const unsigned char *)text, len)) < len)
		return fail_at(c, text, bad, "expected UTF-8 text, got byte 0x%02x",
			       (unsigned char)text[bad]);
	return 0;
}

/*
 * Reject what cJSON accepted but JSON does not. Run after cJSON, so that a
 * structural error (say, an unterminated string) is reported where cJSON
 * found it rather than at a raw newline further on.
 */
static int check_lexical(const struct ctx *c, const char *text, size_t len)
{
	size_t i;
	char q[QUOTE_MAX];
	int in_string = 0, rc;

	for (i = skip_bom(text, len); i < len;) {
		unsigned char ch = (unsigned char)text[i];
		size_t n;

		if (in_string && ch == '\\') {
			if ((rc = check_escape(c, text, len, i)) < 0)
				return rc;
			i += (size_t)rc;
		} else if (in_string && ch < 0x20) {
			return fail_at(c, text, i,
				       "expected control characters in strings to be escaped, got raw byte 0x%02x",
				       ch);
		} else if (ch == '"') {
			in_string = !in_string;
			i++;
		} else if (!in_string && (ch == '-' || is_digit((char)ch))) {
			n = number_span(text + i, len - i);
			if (!is_json_number(text + i, n)) {
				quote(q, sizeof(q), text + i, n);
				return fail_at(c, text, i, "expected a JSON number, got %s", q);
			}
			i += n;
		} else if (!in_string && ch < 0x20 && !is_json_space((char)ch)) {
			return fail_at(c, text, i, "expected JSON text, got control character 0x%02x",
				       ch);
		} else {
			i++;
		}
	}
	return 0;
}

static int is_word_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || is_digit(ch) ||
	       (ch && strchr("+-._", ch));
}

/*
 * Name the token at a syntax error: a word or number, one character, or
 * just "a string". Never more: the text that follows may be the token in
 * connection.user.
 */
static const char *describe_token(char *buf, size_t size, const char *text, size_t len)
{
	size_t n = 1;

	if (text[0] == '"') {
		snprintf(buf, size, "a string");
		return buf;
	}
	if (is_word_char(text[0]))
		while (n < len && n < SHOW_MAX && is_word_char(text[n]))
			n++;
	else
		while (n < len && ((unsigned char)text[n] & 0xC0) == 0x80)
			n++;
	quote(buf, size, text, n);
	return buf;
}

/*
 * cJSON reports where it stopped, which is often the whitespace after the
 * offending token, or the last byte when it ran out of input: step back to
 * the token, and call the input truncated when that token is the last one
 * and cannot end a document.
 */
static int syntax_error(const struct ctx *c, const char *text, size_t len, size_t off)
{
	char q[QUOTE_MAX];
	size_t rest;

	while (off > 0 && (off >= len || is_json_space(text[off])))
		off--;
	for (rest = off + 1; rest < len && is_json_space(text[rest]); rest++)
		;
	if (rest == len && text[off] != '}' && text[off] != ']')
		return fail_at(c, text, len, "expected valid JSON, got end of file");
	return fail_at(c, text, off, "expected valid JSON, got %s",
		       describe_token(q, sizeof(q), text + off, len - off));
}

/* Parse with cJSON, mapping its failure position to a line and column. */
static int parse_json(cJSON **out, const struct ctx *c, const char *text, size_t len)
{
	const char *end = NULL;
	char q[QUOTE_MAX];
	size_t off;

	*out = cJSON_ParseWithLengthOpts(text, len, &end, 0);
	off = end && end >= text && end <= text + len ? (size_t)(end - text) : len;
	if (!*out)
		return syntax_error(c, text, len, off);
	while (off < len && is_json_space(text[off]))
		off++;
	if (off < len) {
		cJSON_Delete(*out);
		*out = NULL;
		return fail_at(c, text, off, "expected end of file after the JSON value, got %s",
			       describe_token(q, sizeof(q), text + off, len - off));
	}
	return 0;
}

/* ------------------------------------------------------------ object keys */

static int compare_keys(const void *a, const void *b)
{
	const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;

	return strcmp(x->string, y->string);
}

/*
 * Duplicate keys are an error: cJSON would use the first, Python's json the
 * last, so two tools could read two different sandboxes from one file.
 * Sorting keeps a huge object of x- keys from costing O(n^2).
 */
static int check_duplicates(const struct ctx *c, const cJSON *obj, const char *path)
{
	const cJSON **keys, *v;
	char where[WHERE_MAX];
	size_t n = 0, i;
	int rc = 0;

	cJSON_ArrayForEach(v, obj)
		n++;
	if (n < 2)
		return 0;
	if (!(keys = asp__calloc(n, sizeof(*keys))))
		return out_of_memory(c);
	n = 0;
	cJSON_ArrayForEach(v, obj)
		keys[n++] = v;
	qsort(keys, n, sizeof(*keys), compare_keys);
	for (i = 1; i < n && !rc; i++)
		if (!strcmp(keys[i - 1]->string, keys[i]->string))
			rc = fail(c, key_path(where, sizeof(where), path, keys[i]->string),
				  "expected each key once, got it twice");
	asp__free(keys);
	return rc;
}

/*
 * Check every object in the tree, extensions included. path holds the JSON
 * path of v and is extended in place, so deep nesting costs no stack for
 * paths.
 */
static int check_duplicates_deep(const struct ctx *c, const cJSON *v, char *path, size_t size)
{
	size_t len = strlen(path), i = 0;
	const cJSON *child;
	int rc;

	if (cJSON_IsObject(v) && (rc = check_duplicates(c, v, len ? path : NULL)))
		return rc;
	cJSON_ArrayForEach(child, v) {
		if (cJSON_IsObject(child) || cJSON_IsArray(child)) {
			if (cJSON_IsObject(v))
				append_key(path, size, child->string);
			else
				snprintf(path + len, size - len, "[%zu]", i);
			rc = check_duplicates_deep(c, child, path, size);
			path[len] = '\0';
			if (rc)
				return rc;
		}
		i++;
	}
	return 0;
}

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
					 "x-asp-proxy-command", NULL };

static const struct level top_level = { NULL, top_keys, conn_keys, "it belongs inside \"connection\"" };
static const struct level conn_level = { "connection", conn_keys, top_keys, "it belongs at the top level" };

/*
 * Keys starting with x- are extensions and ignored, except x-asp-*: that
 * prefix is libasp's own, so a misspelt x-asp-proxy-command fails instead of
 * silently connecting without the proxy.
 */
static int check_unknown_keys(const struct ctx *c, const cJSON *obj, const struct level *lv)
{
	char where[WHERE_MAX];
	const char *hint;
	const cJSON *v;

	cJSON_ArrayForEach(v, obj) {
		const char *key = v->string;

		if (in_list(key, lv->known))
			continue;
		if (!strncmp(key, "x-", 2) && strncmp(key, "x-asp-", 6))
			continue;
		key_path(where, sizeof(where), lv->path, key);
		if (in_list(key, lv->elsewhere))
			return fail(c, where, "unknown field (%s)", lv->elsewhere_hint);
		if ((hint = suggest(key, lv->known)))
			return fail(c, where, "unknown field (did you mean \"%s\"?)", hint);
		if (!strncmp(key, "x-asp-", 6))
			return fail(c, where, "unknown field (x-asp-* is reserved for libasp extensions)");
		return fail(c, where, "unknown field (extensions must start with \"x-\")");
	}
	return 0;
}

/* Check a nested object (connection) has only keys known at its level. */
static int check_object(const struct ctx *c, const cJSON *obj, const struct level *lv)
{
	char got[QUOTE_MAX];

	if (!cJSON_IsObject(obj))
		return fail(c, lv->path, "expected object, got %s", show(got, sizeof(got), obj));
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

static int missing(const struct ctx *c, const char *where, const char *expected)
{
	return fail(c, where, "expected %s, got nothing (required field is missing)", expected);
}

/* Report the first character a string may not contain, by position. */
static int check_chars(const struct ctx *c, const char *where, const char *s, unsigned flags,
		       const char *noun)
{
	const char *forbidden = flags & STR_NO_SPACE ? "whitespace or control characters" :
						       "control characters";
	size_t i;

	for (i = 0; s[i]; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch < 0x20 || ch == 0x7f)
			return fail(c, where, "expected %s without %s, got control character 0x%02x at byte %zu",
				    noun, forbidden, ch, i);
		if (ch == ' ' && (flags & STR_NO_SPACE))
			return fail(c, where, "expected %s without %s, got a space at byte %zu",
				    noun, forbidden, i);
	}
	return 0;
}

/* Validate an optional string field and store a copy in *out. */
static int get_string(char **out, const struct ctx *c, const cJSON *obj, const char *parent,
		      const char *name, unsigned flags, const char *noun)
{
	const cJSON *v = member(obj, name);
	char where[WHERE_MAX], got[QUOTE_MAX];
	int rc;

	if (!v)
		return 0;
	key_path(where, sizeof(where), parent, name);
	if (!cJSON_IsString(v))
		return fail(c, where, "expected string, got %s", show(got, sizeof(got), v));
	if ((flags & STR_NONEMPTY) && !*v->valuestring)
		return fail(c, where, "expected non-empty string, got \"\"");
	if ((flags & STR_ABSOLUTE) && v->valuestring[0] != '/')
		return fail(c, where, "expected absolute path (starting with \"/\"), got %s",
			    show(got, sizeof(got), v));
	if ((rc = check_chars(c, where, v->valuestring, flags, noun)))
		return rc;
	if (!(*out = asp__strdup(v->valuestring)))
		return out_of_memory(c);
	return 0;
}

/* A string field that must be present. */
static int get_required_string(char **out, const struct ctx *c, const cJSON *obj,
			       const char *parent, const char *name, unsigned flags,
			       const char *noun, const char *expected)
{
	char where[WHERE_MAX];

	if (!member(obj, name))
		return missing(c, key_path(where, sizeof(where), parent, name), expected);
	return get_string(out, c, obj, parent, name, flags, noun);
}

/* A required string with one allowed value (version, transport). */
static int check_constant(const struct ctx *c, const cJSON *obj, const char *name,
			  const char *value, const char *why)
{
	const cJSON *v = member(obj, name);
	char got[QUOTE_MAX];

	if (!v)
		return fail(c, name, "expected \"%s\" (%s), got nothing (required field is missing)",
			    value, why);
	if (!cJSON_IsString(v) || strcmp(v->valuestring, value))
		return fail(c, name, "expected \"%s\" (%s), got %s", value, why,
			    show(got, sizeof(got), v));
	return 0;
}

/*
 * Any integral value in range is accepted, 22.0 and 2.2e1 included: that is
 * what JSON Schema's "integer" means, and the schema must agree with us.
 */
static int get_port(unsigned int *out, const struct ctx *c, const cJSON *conn)
{
	const cJSON *v = member(conn, "port");
	char got[QUOTE_MAX];
	double d;

	*out = 22;
	if (!v)
		return 0;
	d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
	if (!isfinite(d) || d != floor(d) || d < 1 || d > 65535)
		return fail(c, "connection.port", "expected integer 1..65535, got %s",
			    show(got, sizeof(got), v));
	*out = (unsigned int)d;
	return 0;
}

static int parse_connection(asp_config *cfg, const struct ctx *c, const cJSON *conn)
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
	if ((rc = get_string(&cfg->identity, c, conn, p, "identity", STR_NONEMPTY, NULL)))
		return rc;
	if ((rc = get_string(&cfg->host_key, c, conn, p, "host_key", STR_NONEMPTY, NULL)))
		return rc;
	return get_string(&cfg->proxy_command, c, conn, p, "x-asp-proxy-command", STR_NONEMPTY,
			  NULL);
}

/*
 * version and transport are checked before unknown keys: a file written for
 * a later version should say so, not complain about the fields it added.
 */
static int parse_root(asp_config *cfg, const struct ctx *c, const cJSON *root)
{
	char got[QUOTE_MAX], path[WHERE_MAX] = "";
	const cJSON *conn;
	int rc;

	if (!cJSON_IsObject(root))
		return fail(c, "top level", "expected object, got %s", show(got, sizeof(got), root));
	if ((rc = check_duplicates_deep(c, root, path, sizeof(path))))
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
static int set_location(asp_config *cfg, const struct ctx *c)
{
	const char *slash = strrchr(c->file, '/');

	cfg->path = asp__strdup(c->file);
	if (!slash)
		cfg->dir = asp__strdup(".");
	else
		cfg->dir = asp__strndup(c->file, slash == c->file ? 1 : (size_t)(slash - c->file));
	return cfg->path && cfg->dir ? 0 : out_of_memory(c);
}

int asp__config_parse(asp_config **out, const char *text, size_t len, const char *path,
		      asp_error *err)
{
	struct ctx c = { path ? path : "<memory>", err };
	asp_config *cfg;
	cJSON *root;
	int rc;

	ASP_ASSERT_ARG(out);
	*out = NULL;
	ASP_ASSERT_ARG(text || !len);
	if (!text)
		text = "";
	if ((rc = check_encoding(&c, text, len)) || (rc = parse_json(&root, &c, text, len)))
		return rc;
	if ((rc = check_lexical(&c, text, len))) {
		cJSON_Delete(root);
		return rc;
	}
	if (!(cfg = asp__calloc(1, sizeof(*cfg)))) {
		cJSON_Delete(root);
		return out_of_memory(&c);
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
	char dir[PATH_MAX], real[PATH_MAX];
	size_t n = slash ? (size_t)(slash - path) : 0;

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (n == 0)
		snprintf(dir, sizeof(dir), "/");
	else if (n < sizeof(dir))
		snprintf(dir, sizeof(dir), "%.*s", (int)n, path);
	else
		return asp__error(err, ASP_ECONFIG, "%s: path too long", path);
	if (!realpath(dir, real))
		return asp__error(err, ASP_ECONFIG, "%s: cannot resolve directory: %s", path,
				  strerror(errno));
	*out = asp__sprintf("%s%s%s", real, strcmp(real, "/") ? "/" : "", base);
	return *out ? 0 : asp__error(err, ASP_ENOMEM, "out of memory");
}

/* Read all of fd, failing once it holds more than the size limit. */
static int read_limited(asp_buf *b, int fd, const char *path, off_t size, asp_error *err)
{
	switch (asp__read_fd(b, fd, CONFIG_MAX_BYTES)) {
	case 0:
		return 0;
	case ASP_ENOMEM:
		return asp__error(err, ASP_ENOMEM, "out of memory");
	case ASP_EIO:
		return asp__error(err, ASP_ECONFIG, "%s: cannot read: %s", path, strerror(errno));
	default:
		return asp__error(err, ASP_ECONFIG, "%s: expected at most %d bytes (1 MiB), got %lld bytes",
				  path, CONFIG_MAX_BYTES,
				  (long long)(size > (off_t)b->len ? size : (off_t)b->len));
	}
}

/*
 * Only a regular file is read. O_NONBLOCK keeps open() from hanging on a
 * FIFO, which is then refused like a directory.
 */
static int read_config_file(asp_buf *b, const char *path, asp_error *err)
{
	struct stat st;
	int fd, rc;

	if ((fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0)
		return asp__error(err, ASP_ECONFIG, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = asp__error(err, ASP_ECONFIG, "%s: cannot stat: %s", path, strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		rc = asp__error(err, ASP_ECONFIG, "%s: expected a regular file, got %s", path,
				asp__file_type(st.st_mode));
	} else {
		rc = read_limited(b, fd, path, st.st_size, err);
	}
	close(fd);
	return rc;
}

int asp__config_load(asp_config **out, const char *path, asp_error *err)
{
	asp_buf text = { 0 };
	char *abs = NULL;
	int rc;

	ASP_ASSERT_ARG(out);
	*out = NULL;
	ASP_ASSERT_ARG(path && *path);
	/* Parsing under the absolute name also makes cfg->dir absolute. */
	if (!(rc = read_config_file(&text, path, err)) && !(rc = absolute_path(&abs, path, err)))
		rc = asp__config_parse(out, text.data ? (const char *)text.data : "", text.len, abs,
				       err);
	asp__free(abs);
	asp__buf_free(&text);
	return rc;
}

/* ------------------------------------------------------------ discovery */

/* The search and the trust rules live in discover.c, which asp-exec's front shares. */
int asp__config_find(char **out, const char *start_dir, asp_error *err)
{
	char path[PATH_MAX], why[ASP_ERROR_MESSAGE_MAX];
	int rc;

	ASP_ASSERT_ARG(out);
	*out = NULL;
	if ((rc = asp__discover(path, sizeof(path), start_dir, why, sizeof(why))))
		return asp__error(err, rc, "%s", why);
	if (!(*out = asp__strdup(path)))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	return 0;
}

/* ------------------------------------------------------------ public API */

int asp_config_find(char **out, const char *start_dir, asp_error *err)
{
	return asp__config_find(out, start_dir, err);
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
