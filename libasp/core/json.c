/*
 * json.c - the strict JSON reader under config.c: `.asp.json` text to a
 * cJSON tree, and the message helpers the config checks share.
 *
 * The text gets checks of our own around cJSON: size and UTF-8 before it,
 * and a lexical pass after it, because cJSON is lenient where JSON is not
 * (leading zeros, raw control characters in strings, \f as whitespace) and
 * silently truncates strings at an escaped NUL. Either would let a value be
 * read differently here than by any other tool, including the JSON Schema.
 * Duplicate keys are refused too. Syntax errors name a line and column.
 */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Report "<file>: <where>: <message>" as ASP_ECONFIG. */
int asp__json_fail(const asp_json_ctx *c, const char *where, const char *fmt, ...) ASP_PRINTF(3, 4);

int asp__json_fail(const asp_json_ctx *c, const char *where, const char *fmt, ...)
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

int asp__json_out_of_memory(const asp_json_ctx *c)
{
	return asp__error(c->err, ASP_ENOMEM, "%s: out of memory", c->file);
}

/* ------------------------------------------------------------ showing values */

/*
 * Write s[0..len) into buf as a JSON string literal, cut at ASP_JSON_SHOW_MAX bytes
 * (never inside a UTF-8 sequence) with "..." marking the cut.
 */
static void quote(char *buf, size_t size, const char *s, size_t len)
{
	size_t o = 0, i, n = len > ASP_JSON_SHOW_MAX ? ASP_JSON_SHOW_MAX : len;

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
const char *asp__json_show(char *buf, size_t size, const cJSON *v)
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

	if (!*key || strlen(key) > ASP_JSON_SHOW_MAX)
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
	char q[ASP_JSON_QUOTE_MAX];

	if (is_plain_key(key)) {
		snprintf(buf + len, size - len, "%s%s", len ? "." : "", key);
	} else {
		quote(q, sizeof(q), key, strlen(key));
		snprintf(buf + len, size - len, "[%s]", q);
	}
}

/* The JSON path of key in parent (NULL: the top level). */
const char *asp__json_key_path(char *buf, size_t size, const char *parent, const char *key)
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

static int fail_at(const asp_json_ctx *c, const char *text, size_t off, const char *fmt, ...)
	ASP_PRINTF(4, 5);

static int fail_at(const asp_json_ctx *c, const char *text, size_t off, const char *fmt, ...)
{
	char where[ASP_JSON_WHERE_MAX], msg[ASP_ERROR_MESSAGE_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return asp__json_fail(c, position(where, sizeof(where), text, off), "%s", msg);
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
static int check_escape(const asp_json_ctx *c, const char *text, size_t len, size_t i)
{
	if (i + 6 <= len && !memcmp(text + i, "\\u0000", 6))
		return fail_at(c, text, i, "expected a string without NUL characters, got \\u0000");
	return 2;
}

/*
 * Size, emptiness and UTF-8, checked before cJSON sees the text. Valid
 * UTF-8 also keeps cJSON's BOM check from reading past a short buffer.
 */
static int check_encoding(const asp_json_ctx *c, const char *text, size_t len)
{
	size_t i = skip_bom(text, len), bad;

	if (len > ASP_CONFIG_MAX_BYTES)
		return asp__json_fail(c, NULL, "expected at most %d bytes (1 MiB), got %zu bytes",
				      ASP_CONFIG_MAX_BYTES, len);
	while (i < len && is_json_space(text[i]))
		i++;
	if (i == len)
		return asp__json_fail(c, NULL, "expected a JSON object, got an empty file");
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
static int check_lexical(const asp_json_ctx *c, const char *text, size_t len)
{
	size_t i;
	char q[ASP_JSON_QUOTE_MAX];
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
		while (n < len && n < ASP_JSON_SHOW_MAX && is_word_char(text[n]))
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
static int syntax_error(const asp_json_ctx *c, const char *text, size_t len, size_t off)
{
	char q[ASP_JSON_QUOTE_MAX];
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
static int parse_json(cJSON **out, const asp_json_ctx *c, const char *text, size_t len)
{
	const char *end = NULL;
	char q[ASP_JSON_QUOTE_MAX];
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
static int check_duplicates(const asp_json_ctx *c, const cJSON *obj, const char *path)
{
	const cJSON **keys, *v;
	char where[ASP_JSON_WHERE_MAX];
	size_t n = 0, i;
	int rc = 0;

	cJSON_ArrayForEach(v, obj)
		n++;
	if (n < 2)
		return 0;
	if (!(keys = asp__calloc(n, sizeof(*keys))))
		return asp__json_out_of_memory(c);
	n = 0;
	cJSON_ArrayForEach(v, obj)
		keys[n++] = v;
	qsort(keys, n, sizeof(*keys), compare_keys);
	for (i = 1; i < n && !rc; i++)
		if (!strcmp(keys[i - 1]->string, keys[i]->string))
			rc = asp__json_fail(c, asp__json_key_path(where, sizeof(where), path, keys[i]->string),
					    "expected each key once, got it twice");
	asp__free(keys);
	return rc;
}

/*
 * Check every object in the tree, extensions included. path holds the JSON
 * path of v and is extended in place, so deep nesting costs no stack for
 * paths.
 */
int asp__json_check_duplicates(const asp_json_ctx *c, const cJSON *v, char *path, size_t size)
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
			rc = asp__json_check_duplicates(c, child, path, size);
			path[len] = '\0';
			if (rc)
				return rc;
		}
		i++;
	}
	return 0;
}

int asp__json_read(cJSON **out, const asp_json_ctx *c, const char *text, size_t len)
{
	int rc;

	*out = NULL;
	if ((rc = check_encoding(c, text, len)) || (rc = parse_json(out, c, text, len)))
		return rc;
	if ((rc = check_lexical(c, text, len))) {
		cJSON_Delete(*out);
		*out = NULL;
		return rc;
	}
	return 0;
}
