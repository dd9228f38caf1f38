/*
 * json.c - the --json result: one object on one line,
 *   {"exit_code":0,"signal":null,"timed_out":false,"cancelled":false,
 *    "stdout":"...","stdout_encoding":"utf-8","stderr":"...",
 *    "stderr_encoding":"base64","duration_ms":12}
 * A stream is a JSON string when it is valid UTF-8 without NUL bytes,
 * else its bytes in base64 ("<stream>_encoding" says which).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h" /* asp__base64_encode */

/* Length of the UTF-8 sequence at p (at most n bytes), 0 when invalid. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	unsigned int c = p[0], min;
	size_t len, i;

	if (c >= 0x01 && c < 0x80)
		return 1;
	if (c >= 0xc2 && c < 0xe0)
		len = 2, min = 0x80, c &= 0x1f;
	else if (c >= 0xe0 && c < 0xf0)
		len = 3, min = 0x800, c &= 0x0f;
	else if (c >= 0xf0 && c < 0xf5)
		len = 4, min = 0x10000, c &= 0x07;
	else
		return 0; /* NUL, a continuation byte, or never valid */
	if (len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0; /* overlong, out of range, or a surrogate */
	return len;
}

static int is_text(const unsigned char *p, size_t n)
{
	size_t k;

	for (; n; p += k, n -= k)
		if (!(k = utf8_seq(p, n)))
			return 0;
	return 1;
}

static int add_stream(cJSON *obj, const char *name, const asp_exec_result *r, asp_stream stream)
{
	size_t len;
	const unsigned char *data = asp_exec_result_output(r, stream, &len);

	return cli_json_add_bytes(obj, name, data, len);
}

int cli_json_add_bytes(struct cJSON *obj, const char *name, const unsigned char *data, size_t len)
{
	char key[64];
	char *text;
	int text_ok = is_text(data, len), ok;

	snprintf(key, sizeof(key), "%s_encoding", name);
	if (text_ok)
		ok = cJSON_AddStringToObject(obj, name, len ? (const char *)data : "") != NULL;
	else {
		if (!(text = asp__base64_encode(data, len, 1)))
			return -1;
		ok = cJSON_AddStringToObject(obj, name, text) != NULL;
		asp_free(text);
	}
	if (!ok || !cJSON_AddStringToObject(obj, key, text_ok ? "utf-8" : "base64"))
		return -1;
	return 0;
}

static int add_number_or_null(cJSON *obj, const char *name, int value, int is_null)
{
	return (is_null ? cJSON_AddNullToObject(obj, name)
			: cJSON_AddNumberToObject(obj, name, value)) ? 0 : -1;
}

char *cli_json_result(const asp_exec_result *r)
{
	cJSON *obj = cJSON_CreateObject();
	int sig = asp_exec_result_signal(r);
	char *text = NULL, *line = NULL;
	size_t n;

	if (obj && !add_number_or_null(obj, "exit_code", asp_exec_result_exit_code(r), sig != 0) &&
	    !add_number_or_null(obj, "signal", sig, sig == 0) &&
	    cJSON_AddBoolToObject(obj, "timed_out", asp_exec_result_timed_out(r)) &&
	    cJSON_AddBoolToObject(obj, "cancelled", asp_exec_result_cancelled(r)) &&
	    !add_stream(obj, "stdout", r, ASP_STDOUT) && !add_stream(obj, "stderr", r, ASP_STDERR) &&
	    cJSON_AddNumberToObject(obj, "duration_ms", (double)asp_exec_result_duration_ms(r)))
		text = cJSON_PrintUnformatted(obj);
	cJSON_Delete(obj);
	if (!text)
		return NULL;
	n = strlen(text);
	if ((line = malloc(n + 2))) {
		memcpy(line, text, n);
		memcpy(line + n, "\n", 2);
	}
	cJSON_free(text);
	return line;
}
