/*
 * test_config.c - `.asp.json` parsing, validation, loading and discovery.
 *
 * Messages are compared whole: they are the user interface of a config
 * error, and the JSON path and expectation are what make them useful.
 * Repository files (tests/configs, examples) are found from $ASP_SOURCE_DIR,
 * else the current directory.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pwd.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "config.h"

/* A config with the given connection members and extra top-level members. */
#define CONF(conn, top)                                                              \
	"{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {" conn "}, "  \
	"\"workspace\": \"/w\"" top "}"
#define HU "\"host\": \"h\", \"user\": \"u\""
#define KEY_TEXT                                                                               \
	"connection.identity: looks like key text (not shown); put the key in an environment "  \
	"variable and name that variable here, e.g. \"identity\": \"ASP_IDENTITY\""
/* 288 base64 characters: longer than any file name (255 bytes), so no path. */
#define LONG_B64_64 "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAx"
#define LONG_B64 LONG_B64_64 LONG_B64_64 LONG_B64_64 LONG_B64_64

/* ---------------------------------------------------------------- helpers */

static int parse(const char *json, asp_error *err)
{
	asp_config *cfg = NULL;
	int rc = asp__config_parse(&cfg, json, strlen(json), "t.json", err);

	ck_assert(rc == 0 ? cfg != NULL : cfg == NULL);
	asp__config_free(cfg);
	return rc;
}

static asp_config *parse_ok(const char *json)
{
	asp_error err = { 0 };
	asp_config *cfg = NULL;
	int rc = asp__config_parse(&cfg, json, strlen(json), "t.json", &err);

	ck_assert_msg(rc == 0, "rejected: %s", err.message);
	return cfg;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

static const char *source_dir(void)
{
	const char *d = getenv("ASP_SOURCE_DIR");

	return d && *d ? d : ".";
}

/* ------------------------------------------------------ validation errors */

/* Each input and the whole message it must produce (after "t.json: "). */
static const struct {
	const char *json;
	const char *message;
} bad[] = {
	/* top level */
	{ "[]", "top level: expected object, got array" },
	{ "\"x\"", "top level: expected object, got \"x\"" },
	{ "null", "top level: expected object, got null" },
	{ "{\"transport\": \"ssh\"}",
	  "version: expected \"0\" (the only version libasp supports), got nothing (required field is missing)" },
	{ "{\"version\": 0}", "version: expected \"0\" (the only version libasp supports), got 0" },
	{ "{\"version\": \"1\", \"future\": true}",
	  "version: expected \"0\" (the only version libasp supports), got \"1\"" },
	{ "{\"version\": \"0\"}",
	  "transport: expected \"ssh\" (the only transport in ASP v0), got nothing (required field is missing)" },
	{ "{\"version\": \"0\", \"transport\": \"docker\"}",
	  "transport: expected \"ssh\" (the only transport in ASP v0), got \"docker\"" },
	{ "{\"version\": \"0\", \"transport\": [\"ssh\"]}",
	  "transport: expected \"ssh\" (the only transport in ASP v0), got array" },
	{ "{\"version\": \"0\", \"transport\": \"ssh\", \"workspace\": \"/w\"}",
	  "connection: expected object, got nothing (required field is missing)" },
	{ "{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": \"h\", \"workspace\": \"/w\"}",
	  "connection: expected object, got \"h\"" },
	{ "{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {" HU "}}",
	  "workspace: expected absolute path, got nothing (required field is missing)" },
	{ "{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {" HU "}, \"workspace\": \"w\"}",
	  "workspace: expected absolute path (starting with \"/\"), got \"w\"" },
	{ "{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {" HU "}, \"workspace\": \"\"}",
	  "workspace: expected absolute path (starting with \"/\"), got \"\"" },
	{ "{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {" HU "}, \"workspace\": 1}",
	  "workspace: expected string, got 1" },
	{ "{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {" HU "}, \"workspace\": \"/a\\tb\"}",
	  "workspace: expected path without control characters, got control character 0x09 at byte 2" },
	{ CONF(HU, ", \"workdir\": \"/w\""),
	  "workdir: unknown field (extensions must start with \"x-\")" },
	{ CONF(HU, ", \"workspce\": \"/w\""), "workspce: unknown field (did you mean \"workspace\"?)" },
	{ CONF(HU, ", \"host\": \"h\""), "host: unknown field (it belongs inside \"connection\")" },
	{ CONF(HU, ", \"x-asp-future\": 1"),
	  "x-asp-future: unknown field (x-asp-* is reserved for libasp extensions)" },
	{ CONF(HU, ", \"we ird\": 1"), "[\"we ird\"]: unknown field (extensions must start with \"x-\")" },

	/* connection.host */
	{ CONF("\"user\": \"u\"", ""),
	  "connection.host: expected non-empty string, got nothing (required field is missing)" },
	{ CONF("\"host\": \"\", \"user\": \"u\"", ""), "connection.host: expected non-empty string, got \"\"" },
	{ CONF("\"host\": 127, \"user\": \"u\"", ""), "connection.host: expected string, got 127" },
	{ CONF("\"host\": \"a b\", \"user\": \"u\"", ""),
	  "connection.host: expected host name without whitespace or control characters, got a space at byte 1" },
	{ CONF("\"host\": \"ab\\n\", \"user\": \"u\"", ""),
	  "connection.host: expected host name without whitespace or control characters, "
	  "got control character 0x0a at byte 2" },
	{ CONF("\"host\": \"a\\u007f\", \"user\": \"u\"", ""),
	  "connection.host: expected host name without whitespace or control characters, "
	  "got control character 0x7f at byte 1" },

	/* connection.user: never echoed, it may be a token */
	{ CONF("\"host\": \"h\"", ""),
	  "connection.user: expected non-empty string, got nothing (required field is missing)" },
	{ CONF("\"host\": \"h\", \"user\": \"\"", ""), "connection.user: expected non-empty string, got \"\"" },
	{ CONF("\"host\": \"h\", \"user\": null", ""), "connection.user: expected string, got null" },
	{ CONF("\"host\": \"h\", \"user\": \"secret\\r\"", ""),
	  "connection.user: expected user name without control characters, got control character 0x0d at byte 6" },
	{ CONF("\"host\": \"h\", \"user\": \"s\\u001b\"", ""),
	  "connection.user: expected user name without control characters, got control character 0x1b at byte 1" },

	/* connection.port */
	{ CONF(HU ", \"port\": \"22\"", ""), "connection.port: expected integer 1..65535, got \"22\"" },
	{ CONF(HU ", \"port\": 22.5", ""), "connection.port: expected integer 1..65535, got 22.5" },
	{ CONF(HU ", \"port\": 0", ""), "connection.port: expected integer 1..65535, got 0" },
	{ CONF(HU ", \"port\": -22", ""), "connection.port: expected integer 1..65535, got -22" },
	{ CONF(HU ", \"port\": 65536", ""), "connection.port: expected integer 1..65535, got 65536" },
	{ CONF(HU ", \"port\": 70000", ""), "connection.port: expected integer 1..65535, got 70000" },
	{ CONF(HU ", \"port\": 1e400", ""), "connection.port: expected integer 1..65535, got inf" },
	{ CONF(HU ", \"port\": null", ""), "connection.port: expected integer 1..65535, got null" },
	{ CONF(HU ", \"port\": false", ""), "connection.port: expected integer 1..65535, got false" },
	{ CONF(HU ", \"port\": {}", ""), "connection.port: expected integer 1..65535, got object" },

	/* optional strings */
	{ CONF(HU ", \"identity\": \"\"", ""), "connection.identity: expected non-empty string, got \"\"" },
	{ CONF(HU ", \"identity\": 1", ""), "connection.identity: expected string, got 1" },
	{ CONF(HU ", \"identity\": null", ""), "connection.identity: expected string, got null" },
	{ CONF(HU ", \"host_key\": \"\"", ""), "connection.host_key: expected non-empty string, got \"\"" },
	{ CONF(HU ", \"host_key\": {}", ""), "connection.host_key: expected string, got object" },
	{ CONF(HU ", \"x-asp-proxy-command\": \"\"", ""),
	  "connection.x-asp-proxy-command: expected non-empty string, got \"\"" },
	{ CONF(HU ", \"x-asp-proxy-command\": [\"ssh\"]", ""),
	  "connection.x-asp-proxy-command: expected string, got array" },
	/* Each says what it expected (once "(null)": a NULL passed to %s). */
	{ CONF(HU ", \"identity\": \"id\\u0007x\"", ""),
	  "connection.identity: expected environment variable name or key file path without control "
	  "characters, got control character 0x07 at byte 2" },
	{ CONF(HU ", \"host_key\": \"ssh-ed25519 AAAA\\n\"", ""),
	  "connection.host_key: expected host key without control characters, got control character "
	  "0x0a at byte 16" },
	{ CONF(HU ", \"proxyCommand\": \"nc\\u001b\"", ""),
	  "connection.proxyCommand: expected command without control characters, got control "
	  "character 0x1b at byte 2" },
	{ CONF(HU ", \"x-asp-proxy-command\": \"nc\\t\"", ""),
	  "connection.x-asp-proxy-command: expected command without control characters, got control "
	  "character 0x09 at byte 2" },
	/* Key text pasted as identity: said what it looks like, never shown. */
	{ CONF(HU ", \"identity\": \"-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAABG5v "
	       "-----END OPENSSH PRIVATE KEY-----\"", ""), KEY_TEXT },
	{ CONF(HU ", \"identity\": \"-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXktdjEAAAAABG5v"
	       "\\n-----END OPENSSH PRIVATE KEY-----\\n\"", ""), KEY_TEXT },
	{ CONF(HU ", \"identity\": \"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\"",
	       ""), KEY_TEXT },
	{ CONF(HU ", \"identity\": \"~/.ssh/MIIEowIBAAKCAQEAt4Rw" LONG_B64 "\"", ""), KEY_TEXT },

	/* unknown keys in connection */
	{ CONF(HU ", \"hostkey\": \"k\"", ""), "connection.hostkey: unknown field (did you mean \"host_key\"?)" },
	{ CONF(HU ", \"hostKey\": \"k\"", ""), "connection.hostKey: unknown field (did you mean \"host_key\"?)" },
	{ CONF(HU ", \"host-key\": \"k\"", ""), "connection.host-key: unknown field (did you mean \"host_key\"?)" },
	{ CONF(HU ", \"prot\": 22", ""), "connection.prot: unknown field (did you mean \"port\"?)" },
	{ CONF(HU ", \"identiy\": \"k\"", ""), "connection.identiy: unknown field (did you mean \"identity\"?)" },
	{ CONF(HU ", \"proxy_command\": \"p\"", ""),
	  "connection.proxy_command: unknown field (did you mean \"proxyCommand\"?)" },
	{ CONF(HU ", \"proxyCommand\": \"\"", ""),
	  "connection.proxyCommand: expected non-empty string, got \"\"" },
	{ CONF(HU ", \"proxyCommand\": [\"ssh\"]", ""),
	  "connection.proxyCommand: expected string, got array" },
	{ CONF(HU ", \"proxyCommand\": \"a\", \"x-asp-proxy-command\": \"a\"", ""),
	  "connection: proxyCommand and x-asp-proxy-command are the same setting; give only one "
	  "(proxyCommand is the ASP name)" },
	{ CONF(HU ", \"x-asp-proxy\": \"p\"", ""),
	  "connection.x-asp-proxy: unknown field (x-asp-* is reserved for libasp extensions)" },
	{ CONF(HU ", \"password\": \"p\"", ""),
	  "connection.password: unknown field (extensions must start with \"x-\")" },
	{ CONF(HU ", \"workspace\": \"/w\"", ""),
	  "connection.workspace: unknown field (it belongs at the top level)" },

	/* duplicate keys, at any depth */
	{ CONF(HU, ", \"workspace\": \"/\""), "workspace: expected each key once, got it twice" },
	{ CONF(HU ", \"host\": \"evil\"", ""), "connection.host: expected each key once, got it twice" },
	{ CONF(HU, ", \"x-e\": [1, {\"a\": 1, \"a\": 2}]"), "x-e[1].a: expected each key once, got it twice" },

	/* syntax and encoding: line and column, counted in characters */
	{ "", "expected a JSON object, got an empty file" },
	{ " \n\t\r\n", "expected a JSON object, got an empty file" },
	{ "{\"a\": 1,}", "line 1, column 9: expected valid JSON, got \"}\"" },
	{ "{\n  \"a\": 1,\n  \"b\" 2\n}", "line 3, column 7: expected valid JSON, got \"2\"" },
	{ "{\"a\": 1,", "line 1, column 9: expected valid JSON, got end of file" },
	{ "{\"a\": 1} x", "line 1, column 10: expected end of file after the JSON value, got \"x\"" },
	/* Only the token at the error is shown: what follows may be a secret. */
	{ "{\"host\": \"h\" \"user\": \"tok_SECRET\"}", "line 1, column 14: expected valid JSON, got a string" },
	{ "{\"a\": bad words here}", "line 1, column 7: expected valid JSON, got \"bad\"" },
	{ "{\"é\": 1 2}", "line 1, column 9: expected valid JSON, got \"2\"" },
	{ "{\"a\": 022}", "line 1, column 7: expected a JSON number, got \"022\"" },
	{ "{\"a\": 1.}", "line 1, column 7: expected a JSON number, got \"1.\"" },
	{ "{\"a\": -}", "line 1, column 7: expected valid JSON, got \"-\"" },
	{ "{\"a\": 1e}", "line 1, column 8: expected valid JSON, got \"e\"" },
	{ "{\"a\": -01}", "line 1, column 7: expected a JSON number, got \"-01\"" },
	{ "{\"a\": 1.5e+}", "line 1, column 10: expected valid JSON, got \"e+\"" },
	{ "{\"a\": 1E+2, \"b\": 00}", "line 1, column 18: expected a JSON number, got \"00\"" },
	/* A structural error is reported before a lexical one (the raw newline). */
	{ "{\"a\": \"x\ny\",\n \"b\" 1}", "line 3, column 6: expected valid JSON, got \"1\"" },
	{ "{\"a\": NaN}", "line 1, column 7: expected valid JSON, got \"NaN\"" },
	{ "{\"a\": \"x\ty\"}",
	  "line 1, column 9: expected control characters in strings to be escaped, got raw byte 0x09" },
	{ "{\"a\":\f1}", "line 1, column 6: expected JSON text, got control character 0x0c" },
	{ "{\"a\": \"\xff\"}", "line 1, column 8: expected UTF-8 text, got byte 0xff" },
	{ "{\"a\": \"\xc0\xaf\"}", "line 1, column 8: expected UTF-8 text, got byte 0xc0" },
	{ "{\"a\": \"\xed\xa0\x80\"}", "line 1, column 8: expected UTF-8 text, got byte 0xed" },
	{ "{\"a\": \"x\\u0000y\"}", "line 1, column 9: expected a string without NUL characters, got \\u0000" },
	{ "{\"x-\\u0000\": 1}", "line 1, column 5: expected a string without NUL characters, got \\u0000" },
	{ "{\"a\": \"\\ud800\"}", "line 1, column 8: expected valid JSON, got \"\\\\\"" },
};

START_TEST(test_invalid)
{
	asp_error err = { 0 };
	char want[ASP_ERROR_MESSAGE_MAX];

	snprintf(want, sizeof(want), "t.json: %s", bad[_i].message);
	ck_assert_int_eq(parse(bad[_i].json, &err), ASP_ECONFIG);
	ck_assert_int_eq(err.code, ASP_ECONFIG);
	ck_assert_str_eq(err.message, want);
}
END_TEST

START_TEST(test_user_never_echoed)
{
	asp_error err = { 0 };

	ck_assert_int_eq(parse(CONF("\"host\": \"h\", \"user\": \"tok_SECRET\\n\"", ""), &err),
			 ASP_ECONFIG);
	ck_assert_ptr_null(strstr(err.message, "SECRET"));
}
END_TEST

/*
 * Key text pasted into identity, on one line or several: asp_config_check
 * and asp_open say what it looks like and show none of it (once: "cannot
 * open key file /DIR/-----BEGIN OPENSSH PRIVATE KEY----- b3Bl...").
 */
START_TEST(test_key_text_never_echoed)
{
	static const char *const pasted[] = {
		"-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAABG5vbmUSECRET "
		"-----END OPENSSH PRIVATE KEY-----",
		"-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUSECRET\\n"
		"-----END OPENSSH PRIVATE KEY-----\\n",
		"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUSECRET",
	};
	char dir[] = "/tmp/asp-keytext-XXXXXX", path[64], json[512];

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/asp.json", dir);
	for (size_t i = 0; i < sizeof(pasted) / sizeof(pasted[0]); i++) {
		asp_open_options o = ASP_OPEN_OPTIONS_INIT;
		asp_sandbox *sb = NULL;
		asp_error err = { 0 };

		snprintf(json, sizeof(json), CONF(HU ", \"identity\": \"%s\"", ""), pasted[i]);
		write_file(path, json);
		ck_assert_int_eq(asp_config_check(path, &err), ASP_ECONFIG);
		ck_assert_msg(strstr(err.message, "connection.identity: looks like key text") &&
			      !strstr(err.message, "SECRET") && !strstr(err.message, "b3Bl") &&
			      !strstr(err.message, "BEGIN"), "case %zu: %s", i, err.message);
		o.config_path = path;
		o.flags = ASP_OPEN_LAZY;
		memset(&err, 0, sizeof(err));
		ck_assert_int_eq(asp_open(&sb, &o, &err), ASP_ECONFIG);
		ck_assert_msg(strstr(err.message, "looks like key text") && !strstr(err.message, "SECRET") &&
			      !strstr(err.message, "b3Bl") && !strstr(err.message, "BEGIN"),
			      "case %zu: %s", i, err.message);
	}
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(test_embedded_nul_byte)
{
	static const char text[] = "{\"a\": \"x\0y\"}";
	static const char after_number[] = "{\"a\": 1\0}";
	asp_config *cfg = NULL;
	asp_error err = { 0 };

	/* Raw NUL bytes are rejected inside and outside strings (cJSON skips them as space). */
	ck_assert_int_eq(asp__config_parse(&cfg, text, sizeof(text) - 1, "t.json", &err), ASP_ECONFIG);
	ck_assert_str_eq(err.message, "t.json: line 1, column 9: expected control characters in strings "
			 "to be escaped, got raw byte 0x00");
	ck_assert_int_eq(asp__config_parse(&cfg, after_number, sizeof(after_number) - 1, "t.json", &err),
			 ASP_ECONFIG);
	ck_assert_str_eq(err.message, "t.json: line 1, column 8: expected JSON text, got control character 0x00");
}
END_TEST

START_TEST(test_too_large)
{
	size_t len = 1024 * 1024 + 1;
	char *text = malloc(len);
	asp_config *cfg = NULL;
	asp_error err = { 0 };

	ck_assert_ptr_nonnull(text);
	memset(text, ' ', len);
	ck_assert_int_eq(asp__config_parse(&cfg, text, len, "t.json", &err), ASP_ECONFIG);
	ck_assert_str_eq(err.message, "t.json: expected at most 1048576 bytes (1 MiB), got 1048577 bytes");
	free(text);
}
END_TEST

START_TEST(test_long_values_are_cut)
{
	asp_error err = { 0 };
	char json[2048], value[1001];

	memset(value, 'w', 1000);
	value[1000] = '\0';
	snprintf(json, sizeof(json),
		 "{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {" HU
		 "}, \"workspace\": \"%s\"}", value);
	ck_assert_int_eq(parse(json, &err), ASP_ECONFIG);
	ck_assert_str_eq(err.message, "t.json: workspace: expected absolute path (starting with \"/\"), got "
		"\"wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww...\"");
}
END_TEST

START_TEST(test_bad_arguments)
{
	asp_config *cfg = (asp_config *)1;
	asp_error err = { 0 };

	ck_assert_int_eq(asp__config_parse(NULL, "{}", 2, "t", &err), ASP_EINVAL);
	ck_assert_int_eq(asp__config_parse(&cfg, NULL, 2, "t", &err), ASP_EINVAL);
	ck_assert_ptr_null(cfg);
	ck_assert_int_eq(asp_config_check(NULL, &err), ASP_EINVAL);
	ck_assert_int_eq(asp_config_find(NULL, "/", &err), ASP_EINVAL);
	ck_assert_int_eq(asp__config_load(&cfg, "", &err), ASP_EINVAL);
	asp__config_free(NULL);
}
END_TEST

/* ---------------------------------------------------------- valid configs */

START_TEST(test_defaults)
{
	asp_config *cfg = parse_ok(CONF(HU, ""));

	ck_assert_str_eq(cfg->host, "h");
	ck_assert_str_eq(cfg->user, "u");
	ck_assert_uint_eq(cfg->port, 22);
	ck_assert_ptr_null(cfg->identity);
	ck_assert_ptr_null(cfg->host_key);
	ck_assert_ptr_null(cfg->proxy_command);
	ck_assert_str_eq(cfg->workspace, "/w");
	ck_assert_str_eq(cfg->path, "t.json");
	ck_assert_str_eq(cfg->dir, ".");
	asp__config_free(cfg);
}
END_TEST

START_TEST(test_all_fields)
{
	asp_config *cfg = parse_ok(
		"{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {"
		"\"host\": \"sandbox.example\", \"port\": 2222, \"user\": \"agent\","
		"\"identity\": \"~/.ssh/id_ed25519\", \"host_key\": \"SHA256:abc\","
		"\"x-asp-proxy-command\": \"ssh -W %h:%p bastion\", \"x-note\": 1},"
		"\"workspace\": \"/workspace\", \"x-top\": {\"any\": [null]}}");

	ck_assert_str_eq(cfg->host, "sandbox.example");
	ck_assert_uint_eq(cfg->port, 2222);
	ck_assert_str_eq(cfg->user, "agent");
	ck_assert_str_eq(cfg->identity, "~/.ssh/id_ed25519");
	ck_assert_str_eq(cfg->host_key, "SHA256:abc");
	ck_assert_str_eq(cfg->proxy_command, "ssh -W %h:%p bastion");
	ck_assert_str_eq(cfg->workspace, "/workspace");
	asp__config_free(cfg);
}
END_TEST

/* The ASP RFC's name for the proxy command means exactly what x-asp-proxy-command means. */
START_TEST(test_proxy_command_rfc_name)
{
	asp_config *cfg = parse_ok(CONF(HU ", \"proxyCommand\": \"websocat --binary -E - wss://%h/\"", ""));

	ck_assert_str_eq(cfg->proxy_command, "websocat --binary -E - wss://%h/");
	asp__config_free(cfg);
}
END_TEST

/* Integral values in any notation are integers, as in JSON Schema. */
START_TEST(test_port_notations)
{
	static const struct {
		const char *port;
		unsigned int want;
	} cases[] = { { "1", 1 }, { "65535", 65535 }, { "2222.0", 2222 }, { "2.2e1", 22 },
		      { "220E-1", 22 } };
	char json[256];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		asp_config *cfg;

		snprintf(json, sizeof(json), CONF(HU ", \"port\": %s", ""), cases[i].port);
		cfg = parse_ok(json);
		ck_assert_uint_eq(cfg->port, cases[i].want);
		asp__config_free(cfg);
	}
}
END_TEST

START_TEST(test_strings_kept_exactly)
{
	asp_config *cfg = parse_ok(
		"\xef\xbb\xbf{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {"
		"\"host\": \"sandbox\\u002eexample\", \"user\": \"\xd0\xb0\\u00e9\\ud83d\\ude00\"},"
		"\"workspace\": \"/a b/\\\"c\\\"\"}");

	ck_assert_str_eq(cfg->host, "sandbox.example");
	ck_assert_str_eq(cfg->user, "\xd0\xb0\xc3\xa9\xf0\x9f\x98\x80");
	ck_assert_str_eq(cfg->workspace, "/a b/\"c\"");
	asp__config_free(cfg);
}
END_TEST

START_TEST(test_location)
{
	asp_config *cfg = NULL;
	const char *text = CONF(HU, "");

	ck_assert_int_eq(asp__config_parse(&cfg, text, strlen(text), "/x/y/.asp.json", NULL), 0);
	ck_assert_str_eq(cfg->path, "/x/y/.asp.json");
	ck_assert_str_eq(cfg->dir, "/x/y");
	asp__config_free(cfg);
	ck_assert_int_eq(asp__config_parse(&cfg, text, strlen(text), "/.asp.json", NULL), 0);
	ck_assert_str_eq(cfg->dir, "/");
	asp__config_free(cfg);
	ck_assert_int_eq(asp__config_parse(&cfg, text, strlen(text), NULL, NULL), 0);
	ck_assert_str_eq(cfg->path, "<memory>");
	ck_assert_str_eq(cfg->dir, ".");
	asp__config_free(cfg);
}
END_TEST

START_TEST(test_memory_name_in_errors)
{
	asp_config *cfg = NULL;
	asp_error err = { 0 };

	ck_assert_int_eq(asp__config_parse(&cfg, "[]", 2, NULL, &err), ASP_ECONFIG);
	ck_assert_str_eq(err.message, "<memory>: top level: expected object, got array");
}
END_TEST

/* ------------------------------------------------- files and discovery */

/*
 * One scratch tree per test case, made and removed by the parent process
 * (an unchecked fixture), so it is cleaned up even when a forked test
 * fails. Each test works in its own subdirectory and never puts a
 * .asp.json in the scratch root, so "nothing found" stays testable.
 */
static char g_root[PATH_MAX];

static void make_root(void)
{
	char tmpl[] = "/tmp/asp-config-XXXXXX";

	ck_assert_ptr_nonnull(mkdtemp(tmpl));
	ck_assert_ptr_nonnull(realpath(tmpl, g_root)); /* /tmp may be a symlink */
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void remove_root(void)
{
	if (g_root[0] && nftw(g_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
		fprintf(stderr, "cannot remove %s\n", g_root);
}

/*
 * Tests here chdir and set ASP_CONFIG. Each runs in its own process unless
 * CK_FORK=no (e.g. under valgrind), so put both back after each test.
 */
static char g_cwd[PATH_MAX], *g_env, *g_safe;

static void save_process_state(void)
{
	const char *env = getenv("ASP_CONFIG"), *safe = getenv("ASP_SAFE_DIRS");

	ck_assert_ptr_nonnull(getcwd(g_cwd, sizeof(g_cwd)));
	g_env = env ? strdup(env) : NULL;
	g_safe = safe ? strdup(safe) : NULL;
	unsetenv("ASP_SAFE_DIRS");
}

static void restore_var(const char *name, char **saved)
{
	if (*saved)
		setenv(name, *saved, 1);
	else
		unsetenv(name);
	free(*saved);
	*saved = NULL;
}

static void restore_process_state(void)
{
	if (chdir(g_cwd) != 0)
		fprintf(stderr, "cannot return to %s\n", g_cwd);
	restore_var("ASP_CONFIG", &g_env);
	restore_var("ASP_SAFE_DIRS", &g_safe);
}

/* g_root/<rel>, as a static buffer (a few in rotation). */
static const char *at(const char *rel)
{
	static char bufs[4][PATH_MAX + 64];
	static int next;
	char *b = bufs[next++ % 4];

	snprintf(b, sizeof(bufs[0]), "%s/%s", g_root, rel);
	return b;
}

static void make_dirs(const char *rel)
{
	char cmd[PATH_MAX + 64];

	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", at(rel));
	ck_assert_int_eq(system(cmd), 0);
}

static const char *const good = CONF(HU, "");

START_TEST(test_load_file)
{
	asp_config *cfg = NULL;
	asp_error err = { 0 };
	char want[PATH_MAX + 64];

	make_dirs("load/sub");
	write_file(at("load/sub/my.json"), good);
	ck_assert_int_eq(chdir(at("load")), 0);
	ck_assert_int_eq(asp__config_load(&cfg, "sub/../sub/my.json", &err), 0);
	snprintf(want, sizeof(want), "%s/load/sub/my.json", g_root);
	ck_assert_str_eq(cfg->path, want);
	snprintf(want, sizeof(want), "%s/load/sub", g_root);
	ck_assert_str_eq(cfg->dir, want);
	asp__config_free(cfg);
	ck_assert_int_eq(asp_config_check("sub/my.json", &err), 0);
}
END_TEST

START_TEST(test_load_errors_name_the_file)
{
	asp_config *cfg = (asp_config *)1;
	asp_error err = { 0 };
	char want[PATH_MAX + 128];

	make_dirs("lerr/dir.json");
	ck_assert_int_eq(asp__config_load(&cfg, at("lerr/dir.json"), &err), ASP_ECONFIG);
	ck_assert_ptr_null(cfg);
	snprintf(want, sizeof(want), "%s: expected a regular file, got a directory", at("lerr/dir.json"));
	ck_assert_str_eq(err.message, want);

	ck_assert_int_eq(asp_config_check(at("lerr/missing.json"), &err), ASP_ECONFIG);
	snprintf(want, sizeof(want), "%s: cannot open: %s", at("lerr/missing.json"), strerror(ENOENT));
	ck_assert_str_eq(err.message, want);

	/* A FIFO must be refused, not block waiting for a writer. */
	ck_assert_int_eq(mkfifo(at("lerr/fifo.json"), 0600), 0);
	ck_assert_int_eq(asp_config_check(at("lerr/fifo.json"), &err), ASP_ECONFIG);
	snprintf(want, sizeof(want), "%s: expected a regular file, got a FIFO", at("lerr/fifo.json"));
	ck_assert_str_eq(err.message, want);

	/* Validation messages carry the absolute path. */
	write_file(at("lerr/bad.json"), "[]");
	ck_assert_int_eq(asp_config_check(at("lerr/bad.json"), &err), ASP_ECONFIG);
	snprintf(want, sizeof(want), "%s: top level: expected object, got array", at("lerr/bad.json"));
	ck_assert_str_eq(err.message, want);
}
END_TEST

START_TEST(test_load_too_large)
{
	asp_error err = { 0 };
	char want[PATH_MAX + 128];
	FILE *f;
	int i;

	make_dirs("big");
	ck_assert_ptr_nonnull(f = fopen(at("big/big.json"), "w"));
	for (i = 0; i < 3 * 1024; i++)
		fprintf(f, "%1023s\n", "");
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(asp_config_check(at("big/big.json"), &err), ASP_ECONFIG);
	snprintf(want, sizeof(want), "%s: expected at most 1048576 bytes (1 MiB), got 3145728 bytes",
		 at("big/big.json"));
	ck_assert_str_eq(err.message, want);
}
END_TEST

/*
 * asp_config_find, checking *out is set exactly on success. Tests of
 * discovery unset ASP_CONFIG first: the environment running them may set it.
 */
static char *find(const char *start, asp_error *err, int *rc)
{
	char *out = (char *)1;

	*rc = asp_config_find(&out, start, err);
	ck_assert(*rc == 0 ? out != NULL : out == NULL);
	return out;
}

START_TEST(test_find_nested)
{
	asp_error err = { 0 };
	char want[PATH_MAX + 64];
	char *found;
	int rc;

	unsetenv("ASP_CONFIG");
	make_dirs("nest/a/b/c");
	write_file(at("nest/.asp.json"), good);
	found = find(at("nest/a/b/c"), &err, &rc);
	ck_assert_int_eq(rc, 0);
	snprintf(want, sizeof(want), "%s/nest/.asp.json", g_root);
	ck_assert_str_eq(found, want);
	asp_free(found);

	/* The nearest file wins. */
	write_file(at("nest/a/b/.asp.json"), good);
	found = find(at("nest/a/b/c/../c"), &err, &rc);
	ck_assert_int_eq(rc, 0);
	snprintf(want, sizeof(want), "%s/nest/a/b/.asp.json", g_root);
	ck_assert_str_eq(found, want);
	asp_free(found);

	/* The start directory itself is searched first. */
	found = find(at("nest/a/b"), &err, &rc);
	ck_assert_str_eq(found, want);
	asp_free(found);
}
END_TEST

START_TEST(test_find_from_cwd)
{
	asp_error err = { 0 };
	char want[PATH_MAX + 64];
	char *found;
	int rc;

	unsetenv("ASP_CONFIG");
	make_dirs("cwd/x/y");
	write_file(at("cwd/x/.asp.json"), good);
	ck_assert_int_eq(chdir(at("cwd/x/y")), 0);
	found = find(NULL, &err, &rc);
	ck_assert_int_eq(rc, 0);
	snprintf(want, sizeof(want), "%s/cwd/x/.asp.json", g_root);
	ck_assert_str_eq(found, want);
	asp_free(found);
}
END_TEST

START_TEST(test_find_nothing)
{
	asp_error err = { 0 };
	char want[PATH_MAX + 128];
	struct stat st;
	int rc;

	unsetenv("ASP_CONFIG");
	if (stat("/tmp/.asp.json", &st) == 0 || stat("/.asp.json", &st) == 0) {
		fprintf(stderr, "test_find_nothing: skipped, /tmp/.asp.json or /.asp.json exists\n");
		return;
	}
	make_dirs("none/deep");
	ck_assert_ptr_null(find(at("none/deep"), &err, &rc));
	ck_assert_int_eq(rc, ASP_ENOCONFIG);
	snprintf(want, sizeof(want),
		 "no .asp.json in %s/none/deep or any parent directory (set ASP_CONFIG to name one)", g_root);
	ck_assert_str_eq(err.message, want);

	/* An empty ASP_CONFIG counts as unset. */
	setenv("ASP_CONFIG", "", 1);
	ck_assert_ptr_null(find(at("none/deep"), &err, &rc));
	ck_assert_int_eq(rc, ASP_ENOCONFIG);

	ck_assert_ptr_null(find(at("none/missing"), &err, &rc));
	ck_assert_int_eq(rc, ASP_ENOCONFIG);
	snprintf(want, sizeof(want), "cannot search for .asp.json from %s: %s", at("none/missing"),
		 strerror(ENOENT));
	ck_assert_str_eq(err.message, want);
}
END_TEST

/*
 * Decision: something named .asp.json that is not a usable regular file (a
 * directory, a dangling symlink) stops discovery with ASP_ECONFIG rather
 * than being skipped: skipping would silently use a parent directory's file,
 * which may point at another sandbox.
 */
START_TEST(test_find_unusable_entry_stops)
{
	asp_error err = { 0 };
	char want[PATH_MAX + 128];
	int rc;

	unsetenv("ASP_CONFIG");
	make_dirs("stop/a/.asp.json");
	make_dirs("stop/b");
	write_file(at("stop/.asp.json"), good);

	ck_assert_ptr_null(find(at("stop/a"), &err, &rc));
	ck_assert_int_eq(rc, ASP_ECONFIG);
	snprintf(want, sizeof(want), "%s/stop/a/.asp.json: expected a regular file, got a directory", g_root);
	ck_assert_str_eq(err.message, want);

	ck_assert_int_eq(symlink("nowhere.json", at("stop/b/.asp.json")), 0);
	ck_assert_ptr_null(find(at("stop/b"), &err, &rc));
	ck_assert_int_eq(rc, ASP_ECONFIG);
	snprintf(want, sizeof(want), "%s/stop/b/.asp.json: cannot follow: %s", g_root, strerror(ENOENT));
	ck_assert_str_eq(err.message, want);
}
END_TEST

/* A symlinked .asp.json is found under its own name. */
START_TEST(test_find_symlink)
{
	asp_error err = { 0 };
	char want[PATH_MAX + 64];
	char *found;
	int rc;

	unsetenv("ASP_CONFIG");
	make_dirs("link/real");
	make_dirs("link/work");
	write_file(at("link/real/sandbox.json"), good);
	ck_assert_int_eq(symlink("../real/sandbox.json", at("link/work/.asp.json")), 0);
	found = find(at("link/work"), &err, &rc);
	ck_assert_int_eq(rc, 0);
	snprintf(want, sizeof(want), "%s/link/work/.asp.json", g_root);
	ck_assert_str_eq(found, want);
	ck_assert_int_eq(asp_config_check(found, &err), 0);
	asp_free(found);
}
END_TEST

START_TEST(test_find_env_override)
{
	asp_error err = { 0 };
	char want[PATH_MAX + 64];
	char *found;
	int rc;

	make_dirs("env/tree/sub");
	make_dirs("env/elsewhere");
	write_file(at("env/tree/.asp.json"), good);
	write_file(at("env/elsewhere/other.json"), good);

	/* ASP_CONFIG wins over a file discovery would find. */
	setenv("ASP_CONFIG", at("env/elsewhere/other.json"), 1);
	found = find(at("env/tree/sub"), &err, &rc);
	ck_assert_int_eq(rc, 0);
	snprintf(want, sizeof(want), "%s/env/elsewhere/other.json", g_root);
	ck_assert_str_eq(found, want);
	asp_free(found);

	/* A relative ASP_CONFIG is relative to the current directory, not start_dir. */
	ck_assert_int_eq(chdir(at("env")), 0);
	setenv("ASP_CONFIG", "elsewhere/../elsewhere/other.json", 1);
	found = find(at("env/tree/sub"), &err, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert_str_eq(found, want);
	asp_free(found);
}
END_TEST

START_TEST(test_find_env_missing_target)
{
	asp_error err = { 0 };
	char want[PATH_MAX + 128];
	int rc;

	make_dirs("envbad/tree");
	write_file(at("envbad/tree/.asp.json"), good);

	/* A wrong ASP_CONFIG is an error, never a fallback to discovery. */
	setenv("ASP_CONFIG", at("envbad/nope.json"), 1);
	ck_assert_ptr_null(find(at("envbad/tree"), &err, &rc));
	ck_assert_int_eq(rc, ASP_ENOCONFIG);
	snprintf(want, sizeof(want), "ASP_CONFIG=%s: %s", at("envbad/nope.json"), strerror(ENOENT));
	ck_assert_str_eq(err.message, want);

	setenv("ASP_CONFIG", at("envbad/tree"), 1);
	ck_assert_ptr_null(find(at("envbad/tree"), &err, &rc));
	ck_assert_int_eq(rc, ASP_ENOCONFIG);
	snprintf(want, sizeof(want), "ASP_CONFIG=%s: expected a regular file, got a directory",
		 at("envbad/tree"));
	ck_assert_str_eq(err.message, want);
}
END_TEST

/*
 * Trust. A .asp.json found by discovery is used only when it and its
 * directory (for a symlink: the link, its directory, the file it names and
 * that file's directory) belong to the current user or root and only their
 * owner can write them. Otherwise ASP_ECONFIG names the file, its owner and
 * both ways to trust it; ASP_SAFE_DIRS and an explicit ASP_CONFIG do.
 */

/* A copy of at(rel): at()'s buffers are reused. */
#define AT(buf, rel) snprintf((buf), sizeof(buf), "%s", at(rel))

/* "name (uid N)" as the message shows it. */
static void user_text(char *out, size_t n, uid_t uid)
{
	struct passwd *pw = getpwuid(uid);

	ck_assert_ptr_nonnull(pw);
	snprintf(out, n, "%s (uid %u)", pw->pw_name, (unsigned int)uid);
}

static uid_t uid_of(const char *name)
{
	struct passwd *pw = getpwnam(name);

	ck_assert_msg(pw != NULL, "no user %s (tools/setup-deps.sh creates asp-test)", name);
	return pw->pw_uid;
}

/* Changing owners needs root; the tests run as root (see tests/fixture). */
static int can_chown(const char *test)
{
	if (geteuid() == 0)
		return 1;
	fprintf(stderr, "%s: the parts with files of other users skipped (not root)\n", test);
	return 0;
}

#define assert_has(msg, needle) \
	ck_assert_msg(strstr((msg), (needle)) != NULL, "expected \"%s\" in: %s", (needle), (msg))

/* Discovery from start stops at file (in dir) and refuses it, naming `reason` and the remedies. */
static void assert_untrusted(const char *start, const char *file, const char *dir,
			     const char *reason)
{
	asp_error err = { 0 };
	char head[PATH_MAX + 64], remedy[PATH_MAX + 64];
	int rc;

	ck_assert_ptr_null(find(start, &err, &rc));
	ck_assert_msg(rc == ASP_ECONFIG, "%s: got %d: %s", file, rc, err.message);
	snprintf(head, sizeof(head), "%s: not trusted: ", file);
	ck_assert_msg(!strncmp(err.message, head, strlen(head)), "message: %s", err.message);
	assert_has(err.message, reason);
	assert_has(err.message, "name it explicitly (ASP_CONFIG");
	snprintf(remedy, sizeof(remedy), "add %s to ASP_SAFE_DIRS", dir);
	assert_has(err.message, remedy);
}

static void assert_found(const char *start, const char *want)
{
	asp_error err = { 0 };
	char *found;
	int rc;

	found = find(start, &err, &rc);
	ck_assert_msg(rc == 0, "%s: %s", want, err.message);
	ck_assert_str_eq(found, want);
	asp_free(found);
}

/* Each way to trust an untrusted file: ASP_SAFE_DIRS (exact, listed, "*") and an explicit path. */
static void assert_trust_overrides(const char *start, const char *file, const char *dir,
				   const char *reason)
{
	char list[2 * PATH_MAX];
	asp_error err = { 0 };

	setenv("ASP_SAFE_DIRS", dir, 1);
	assert_found(start, file);
	snprintf(list, sizeof(list), "/nonexistent:%s/:/elsewhere", dir);
	setenv("ASP_SAFE_DIRS", list, 1);
	assert_found(start, file);
	setenv("ASP_SAFE_DIRS", "*", 1);
	assert_found(start, file);
	/* Relative entries and other directories trust nothing. */
	snprintf(list, sizeof(list), "%s:/nonexistent", dir + 1);
	setenv("ASP_SAFE_DIRS", list, 1);
	assert_untrusted(start, file, dir, reason);
	unsetenv("ASP_SAFE_DIRS");

	/* Named explicitly, it is the caller's choice, and it loads. */
	setenv("ASP_CONFIG", file, 1);
	assert_found(start, file);
	unsetenv("ASP_CONFIG");
	ck_assert_msg(asp_config_check(file, &err) == 0, "%s", err.message);
	assert_untrusted(start, file, dir, reason);
}

/* Another user's file in a sticky world-writable directory (like /tmp). */
START_TEST(test_find_foreign_owner)
{
	char dir[PATH_MAX + 64], file[PATH_MAX + 64];
	char reason[128], start[PATH_MAX + 64];

	AT(dir, "owner/shared");
	AT(file, "owner/shared/.asp.json");
	unsetenv("ASP_CONFIG");
	if (!can_chown("test_find_foreign_owner"))
		return;
	make_dirs("owner/shared/sub");
	ck_assert_int_eq(chmod(dir, 01777), 0);
	write_file(at("owner/.asp.json"), good); /* trusted, but never reached */
	write_file(file, good);
	AT(start, "owner/shared/sub");

	/* Control: our own file in a sticky directory is used (others cannot replace it). */
	assert_found(start, file);

	ck_assert_int_eq(chown(file, uid_of("asp-test"), (gid_t)-1), 0);
	user_text(reason, sizeof(reason), uid_of("asp-test"));
	assert_untrusted(start, file, dir, reason);
	assert_trust_overrides(start, file, dir, reason);

	/* The same directory without the sticky bit does not protect even our own file. */
	ck_assert_int_eq(chown(file, 0, (gid_t)-1), 0);
	ck_assert_int_eq(chmod(dir, 0777), 0);
	assert_untrusted(start, file, dir, "which group or others can write (mode 0777)");
}
END_TEST

START_TEST(test_find_writable_file)
{
	static const mode_t modes[] = { 0664, 0646, 0666 };
	char dir[PATH_MAX + 64], file[PATH_MAX + 64];
	char me[128], reason[256];

	AT(dir, "wfile");
	AT(file, "wfile/.asp.json");
	unsetenv("ASP_CONFIG");
	make_dirs("wfile");
	write_file(file, good);
	ck_assert_int_eq(chmod(file, 0644), 0);
	assert_found(dir, file);
	user_text(me, sizeof(me), geteuid());
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		ck_assert_int_eq(chmod(file, modes[i]), 0);
		snprintf(reason, sizeof(reason),
			 "owned by %s and writable by group or others (mode %04o)", me,
			 (unsigned int)modes[i]);
		assert_untrusted(dir, file, dir, reason);
		assert_trust_overrides(dir, file, dir, reason);
	}
}
END_TEST

START_TEST(test_find_writable_dir)
{
	char dir[PATH_MAX + 64], file[PATH_MAX + 64];
	char me[128], other[128], reason[PATH_MAX + 512];

	AT(dir, "wdir/shared");
	AT(file, "wdir/shared/.asp.json");
	unsetenv("ASP_CONFIG");
	make_dirs("wdir/shared");
	write_file(file, good);
	ck_assert_int_eq(chmod(file, 0644), 0);
	user_text(me, sizeof(me), geteuid());

	ck_assert_int_eq(chmod(dir, 0775), 0);
	snprintf(reason, sizeof(reason),
		 "owned by %s, in %s, which group or others can write (mode 0775)", me, dir);
	assert_untrusted(dir, file, dir, reason);
	assert_trust_overrides(dir, file, dir, reason);

	ck_assert_int_eq(chmod(dir, 0755), 0);
	assert_found(dir, file);

	/* A directory of another user: they can rename our file away and put theirs. */
	if (!can_chown("test_find_writable_dir"))
		return;
	ck_assert_int_eq(chown(dir, uid_of("asp-test"), (gid_t)-1), 0);
	user_text(other, sizeof(other), uid_of("asp-test"));
	snprintf(reason, sizeof(reason), "owned by %s, in %s, owned by %s", me, dir, other);
	assert_untrusted(dir, file, dir, reason);
	assert_trust_overrides(dir, file, dir, reason);
}
END_TEST

/*
 * Every directory above the file counts, not only its own: one that others
 * can write (and is not sticky) lets them rename the project away and put
 * theirs in its place. The message names that directory and the remedy
 * lists it; listing it in ASP_SAFE_DIRS passes it (and only it).
 */
START_TEST(test_find_writable_ancestor)
{
	char shared[PATH_MAX + 64], proj[PATH_MAX + 64], file[PATH_MAX + 64], dir[PATH_MAX + 64];
	char me[128], other[128], reason[PATH_MAX + 512];

	AT(shared, "anc/shared");
	AT(proj, "anc/shared/proj/deep");
	AT(file, "anc/shared/proj/.asp.json");
	unsetenv("ASP_CONFIG");
	make_dirs("anc/shared/proj/deep");
	write_file(file, good);
	ck_assert_int_eq(chmod(file, 0644), 0);
	user_text(me, sizeof(me), geteuid());
	assert_found(proj, file);

	ck_assert_int_eq(chmod(shared, 02775), 0);
	snprintf(reason, sizeof(reason),
		 "owned by %s, in %s, which group or others can write (mode 2775)", me, shared);
	assert_untrusted(proj, file, shared, reason);
	/* Listing the file's own directory passes it, not the directory above. */
	AT(dir, "anc/shared/proj");
	setenv("ASP_SAFE_DIRS", dir, 1);
	assert_untrusted(proj, file, shared, reason);
	setenv("ASP_SAFE_DIRS", shared, 1);
	assert_found(proj, file);
	unsetenv("ASP_SAFE_DIRS");

	/* Sticky: others may add names there but not rename ours. */
	ck_assert_int_eq(chmod(shared, 01777), 0);
	assert_found(proj, file);
	ck_assert_int_eq(chmod(shared, 0755), 0);
	assert_found(proj, file);

	/* A directory of another user above it. */
	if (!can_chown("test_find_writable_ancestor"))
		return;
	ck_assert_int_eq(chown(shared, uid_of("asp-test"), (gid_t)-1), 0);
	user_text(other, sizeof(other), uid_of("asp-test"));
	snprintf(reason, sizeof(reason), "owned by %s, in %s, owned by %s", me, shared, other);
	assert_untrusted(proj, file, shared, reason);
	setenv("ASP_SAFE_DIRS", shared, 1);
	assert_found(proj, file);
	unsetenv("ASP_SAFE_DIRS");
	ck_assert_int_eq(chown(shared, 0, (gid_t)-1), 0);
}
END_TEST

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Discovery keeps descriptors while it walks: none survives a call, whatever its outcome. */
START_TEST(test_find_leaves_no_descriptor)
{
	char proj[PATH_MAX + 64], file[PATH_MAX + 64], shared[PATH_MAX + 64];
	asp_error err = { 0 };
	char *text = NULL, *path = NULL;
	int before, i, rc;

	AT(shared, "fds/shared");
	AT(proj, "fds/shared/proj");
	AT(file, "fds/shared/proj/.asp.json");
	unsetenv("ASP_CONFIG");
	make_dirs("fds/shared/proj/empty");
	write_file(file, good);
	ck_assert_int_eq(chmod(file, 0644), 0);
	before = open_fds();
	for (i = 0; i < 20; i++) {
		ck_assert_int_eq(asp_config_read(&text, &path, proj, &err), 0);
		asp_free(text);
		asp_free(path);
		ck_assert_int_eq(chmod(shared, 0777), 0);
		ck_assert_int_eq(asp_config_read(&text, &path, proj, &err), ASP_ECONFIG);
		ck_assert_ptr_null(text);
		ck_assert_int_eq(chmod(shared, 0755), 0);
		ck_assert_ptr_null(find(file, &err, &rc)); /* not a directory */
	}
	ck_assert_int_eq(open_fds(), before);
}
END_TEST

/* A symlinked .asp.json whose target lies below a directory others can write. */
START_TEST(test_find_symlink_target_ancestor)
{
	char work[PATH_MAX + 64], link[PATH_MAX + 64], target[PATH_MAX + 64], top[PATH_MAX + 64];
	char reason[PATH_MAX + 256];

	AT(work, "symanc/work");
	AT(link, "symanc/work/.asp.json");
	AT(target, "symanc/open/inner/sandbox.json");
	AT(top, "symanc/open");
	unsetenv("ASP_CONFIG");
	make_dirs("symanc/work");
	make_dirs("symanc/open/inner");
	write_file(target, good);
	ck_assert_int_eq(chmod(target, 0644), 0);
	ck_assert_int_eq(symlink("../open/inner/sandbox.json", link), 0);
	assert_found(work, link);
	ck_assert_int_eq(chmod(top, 0777), 0);
	snprintf(reason, sizeof(reason), "a symbolic link to %s, owned by ", target);
	assert_untrusted(work, link, work, reason);
	snprintf(reason, sizeof(reason), "in %s, which group or others can write (mode 0777)", top);
	assert_untrusted(work, link, work, reason);
	ck_assert_int_eq(chmod(top, 0755), 0);
	assert_found(work, link);
}
END_TEST

/* A symlinked .asp.json: judged by the link and its directory, and by the file it names and its directory. */
START_TEST(test_find_symlink_to_foreign)
{
	char work[PATH_MAX + 64], link[PATH_MAX + 64];
	char target[PATH_MAX + 64], tdir[PATH_MAX + 64];
	char reason[PATH_MAX + 256], other[128];

	AT(work, "sym/work");
	AT(link, "sym/work/.asp.json");
	AT(target, "sym/foreign/sandbox.json");
	AT(tdir, "sym/foreign");
	unsetenv("ASP_CONFIG");
	make_dirs("sym/work");
	make_dirs("sym/foreign");
	write_file(target, good);
	ck_assert_int_eq(chmod(target, 0644), 0);
	ck_assert_int_eq(symlink("../foreign/sandbox.json", link), 0);
	assert_found(work, link);

	/* The file it points to is writable by others, or sits where others can write. */
	ck_assert_int_eq(chmod(target, 0666), 0);
	snprintf(reason, sizeof(reason), "a symbolic link to %s, owned by ", target);
	assert_untrusted(work, link, work, reason);
	assert_untrusted(work, link, work, "writable by group or others (mode 0666)");
	ck_assert_int_eq(chmod(target, 0644), 0);
	ck_assert_int_eq(chmod(tdir, 0777), 0);
	snprintf(reason, sizeof(reason), "in %s, which group or others can write (mode 0777)", tdir);
	assert_untrusted(work, link, work, reason);
	ck_assert_int_eq(chmod(tdir, 0755), 0);
	assert_found(work, link);

	if (!can_chown("test_find_symlink_to_foreign"))
		return;
	/* It points to another user's file. */
	user_text(other, sizeof(other), uid_of("nobody"));
	ck_assert_int_eq(chown(target, uid_of("nobody"), (gid_t)-1), 0);
	snprintf(reason, sizeof(reason), "a symbolic link to %s, owned by %s", target, other);
	assert_untrusted(work, link, work, reason);
	assert_trust_overrides(work, link, work, reason);
	ck_assert_int_eq(chown(target, 0, (gid_t)-1), 0);
	assert_found(work, link);

	/* The link itself was made by another user. */
	ck_assert_int_eq(lchown(link, uid_of("nobody"), (gid_t)-1), 0);
	snprintf(reason, sizeof(reason), "a symbolic link owned by %s", other);
	assert_untrusted(work, link, work, reason);
	assert_trust_overrides(work, link, work, reason);
}
END_TEST

/* -------------------------------------------------- repository corpora */

/*
 * The expected message of an invalid file X.json is in X.json.expect: the
 * message without its leading "PATH: ", on one line. Returns it in buf, or
 * fails the test if the sidecar is missing or empty.
 */
static void read_expect(const char *json_path, char *buf, size_t size)
{
	char path[PATH_MAX + 300];
	size_t len;
	FILE *f;

	snprintf(path, sizeof(path), "%s.expect", json_path);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: every invalid config needs its expected message in %s (%s)",
		      json_path, path, strerror(errno));
	if (!fgets(buf, (int)size, f))
		buf[0] = '\0';
	fclose(f);
	len = strlen(buf);
	if (len && buf[len - 1] == '\n')
		buf[--len] = '\0';
	ck_assert_msg(len > 0, "%s: empty expected message", path);
}

/*
 * Check every file in dir whose name ends with suffix; returns how many.
 * An invalid one (want_rc != 0) must fail with the message in its sidecar,
 * whole; a sidecar whose config is gone fails too.
 */
static int check_dir(const char *rel, const char *suffix, int want_rc)
{
	char dir[PATH_MAX], path[PATH_MAX + 256];
	size_t sl = strlen(suffix);
	struct dirent *e;
	DIR *d;
	int n = 0;

	snprintf(dir, sizeof(dir), "%s/%s", source_dir(), rel);
	d = opendir(dir);
	ck_assert_msg(d != NULL, "%s: %s (set ASP_SOURCE_DIR to the repository root)", dir,
		      strerror(errno));
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		asp_error err = { 0 };
		char expect[ASP_ERROR_MESSAGE_MAX], want[ASP_ERROR_MESSAGE_MAX + PATH_MAX + 300];
		struct stat st;
		int rc;

		if (len > 7 && !strcmp(e->d_name + len - 7, ".expect")) {
			snprintf(path, sizeof(path), "%s/%.*s", dir, (int)(len - 7), e->d_name);
			ck_assert_msg(want_rc != 0, "%s/%s: a valid config has no expected message", dir,
				      e->d_name);
			ck_assert_msg(stat(path, &st) == 0, "%s/%s: its config %s is gone", dir, e->d_name,
				      path);
			continue;
		}
		if (len <= sl || strcmp(e->d_name + len - sl, suffix))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		rc = asp_config_check(path, &err);
		ck_assert_msg(rc == want_rc, "%s: got %s (%s), want %s", path, asp_error_name(rc),
			      rc ? err.message : "accepted", asp_error_name(want_rc));
		if (want_rc) {
			char real[PATH_MAX];

			read_expect(path, expect, sizeof(expect));
			/* The message names the file by its real path. */
			ck_assert_msg(realpath(path, real) != NULL, "%s: %s", path, strerror(errno));
			snprintf(want, sizeof(want), "%s: %s", real, expect);
			ck_assert_msg(!strcmp(err.message, want), "%s: message\n  got  %s\n  want %s", path,
				      err.message, want);
		}
		n++;
	}
	closedir(d);
	return n;
}

START_TEST(test_corpus_invalid)
{
	ck_assert_int_ge(check_dir("tests/configs/invalid", ".json", ASP_ECONFIG), 25);
	ck_assert_int_ge(check_dir("tests/configs/invalid-parser-only", ".json", ASP_ECONFIG), 3);
}
END_TEST

START_TEST(test_corpus_valid)
{
	ck_assert_int_ge(check_dir("tests/configs/valid", ".json", 0), 3);
	ck_assert_int_ge(check_dir("examples", ".asp.json", 0), 3);
}
END_TEST

Suite *suite_config(void);
Suite *suite_config(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = tcase_create("validate");
	tcase_add_loop_test(tc, test_invalid, 0, (int)(sizeof(bad) / sizeof(bad[0])));
	tcase_add_test(tc, test_user_never_echoed);
	tcase_add_test(tc, test_key_text_never_echoed);
	tcase_add_test(tc, test_embedded_nul_byte);
	tcase_add_test(tc, test_too_large);
	tcase_add_test(tc, test_long_values_are_cut);
	tcase_add_test(tc, test_bad_arguments);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_all_fields);
	tcase_add_test(tc, test_proxy_command_rfc_name);
	tcase_add_test(tc, test_port_notations);
	tcase_add_test(tc, test_strings_kept_exactly);
	tcase_add_test(tc, test_location);
	tcase_add_test(tc, test_memory_name_in_errors);
	suite_add_tcase(s, tc);

	tc = tcase_create("files");
	tcase_add_unchecked_fixture(tc, make_root, remove_root);
	tcase_add_checked_fixture(tc, save_process_state, restore_process_state);
	tcase_add_test(tc, test_load_file);
	tcase_add_test(tc, test_load_errors_name_the_file);
	tcase_add_test(tc, test_load_too_large);
	tcase_add_test(tc, test_find_nested);
	tcase_add_test(tc, test_find_from_cwd);
	tcase_add_test(tc, test_find_nothing);
	tcase_add_test(tc, test_find_unusable_entry_stops);
	tcase_add_test(tc, test_find_symlink);
	tcase_add_test(tc, test_find_env_override);
	tcase_add_test(tc, test_find_env_missing_target);
	tcase_add_test(tc, test_find_foreign_owner);
	tcase_add_test(tc, test_find_writable_file);
	tcase_add_test(tc, test_find_writable_dir);
	tcase_add_test(tc, test_find_writable_ancestor);
	tcase_add_test(tc, test_find_symlink_target_ancestor);
	tcase_add_test(tc, test_find_leaves_no_descriptor);
	tcase_add_test(tc, test_find_symlink_to_foreign);
	suite_add_tcase(s, tc);

	tc = tcase_create("corpus");
	tcase_add_test(tc, test_corpus_invalid);
	tcase_add_test(tc, test_corpus_valid);
	suite_add_tcase(s, tc);
	return s;
}
