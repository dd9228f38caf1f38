/*
 * test_text.c - what sandbox text becomes in a message (asp__show_text,
 * asp__path_show), and the directory-listing decoder (asp__fs_sftp_list_decode)
 * on crafted SFTP NAME replies that a real OpenSSH server cannot send:
 * names that are empty or hold '/' or NUL, more entries than the cap.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "fs_sftp.h"
#include "sftp.h"

/* ---------------------------------------------------------------- helpers */

/* 1 when s holds no C0 byte, no DEL, no UTF-8-encoded C1, U+2028/9 or bidi control. */
static int clean(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	for (; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			return 0;
		if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
			return 0;
		if (p[0] == 0xe2 && p[1] == 0x80 &&
		    (p[2] == 0x8e || p[2] == 0x8f || (p[2] >= 0xa8 && p[2] <= 0xae)))
			return 0;
		if (p[0] == 0xe2 && p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9)
			return 0;
	}
	return 1;
}

/* 1 when s is valid UTF-8 (so a cut never splits a character). */
static int valid_utf8(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	while (*p) {
		int n = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 :
			(*p & 0xf8) == 0xf0 ? 4 : 0;
		if (!n)
			return 0;
		for (int i = 1; i < n; i++)
			if ((p[i] & 0xc0) != 0x80)
				return 0;
		p += n;
	}
	return 1;
}

static const char *show(const void *d, size_t n)
{
	static char out[1024];

	return asp__show_text(out, sizeof(out), d, n);
}

/* ---------------------------------------------------------------- show_text */

START_TEST(test_show_text_escapes)
{
	static const struct {
		const char *in;
		size_t len;
		const char *want;
	} cases[] = {
		{ "plain text", 10, "plain text" },
		{ "\x1b[31mred\x1b[0m", 12, "\\x1b[31mred\\x1b[0m" },
		{ "a\rb\nc\td", 7, "a\\x0db\\x0ac\\x09d" },
		{ "nul\0in", 6, "nul\\x00in" },
		{ "del\x7f", 4, "del\\x7f" },
		{ "back\\slash", 10, "back\\x5cslash" },
		{ "\xc2\x9b" "31m", 5, "\\xc2\\x9b31m" },          /* C1 CSI, UTF-8 encoded */
		{ "\x9b" "31m", 4, "\\x9b31m" },                   /* C1 CSI, raw byte */
		{ "\xff\xfe", 2, "\\xff\\xfe" },                   /* not UTF-8 */
		{ "\xc0\xaf", 2, "\\xc0\\xaf" },                   /* overlong '/' */
		{ "\xe0\x80\xaf", 3, "\\xe0\\x80\\xaf" },          /* overlong '/' */
		{ "\xed\xa0\x80", 3, "\\xed\\xa0\\x80" },          /* a surrogate */
		{ "\xe2\x82", 2, "\\xe2\\x82" },                   /* truncated */
		{ "\xf4\x90\x80\x80", 4, "\\xf4\\x90\\x80\\x80" }, /* past U+10FFFF */
		{ "x\xe2\x80\xa8y", 5, "x\\xe2\\x80\\xa8y" },      /* U+2028 line separator */
		{ "x\xe2\x80\xa9y", 5, "x\\xe2\\x80\\xa9y" },      /* U+2029 paragraph separator */
		{ "\xe2\x80\xae" "exe.txt", 10, "\\xe2\\x80\\xaeexe.txt" }, /* U+202E RLO */
		{ "\xe2\x81\xa6x", 4, "\\xe2\\x81\\xa6x" },        /* U+2066 LRI */
		{ "\xe2\x80\x8f", 3, "\\xe2\\x80\\x8f" },          /* U+200F RLM */
		{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80" },
		{ "nb\xc2\xa0sp", 6, "nb\xc2\xa0sp" },             /* U+00A0 is printable */
		{ "", 0, "" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[256];
		asp__show_text(out, sizeof(out), cases[i].in, cases[i].len);
		ck_assert_msg(!strcmp(out, cases[i].want), "case %zu: got [%s], want [%s]", i, out,
			      cases[i].want);
		ck_assert_msg(clean(out), "case %zu: raw control text in [%s]", i, out);
	}
}
END_TEST

/* Every byte, every pair of bytes: nothing raw below 0x20, no DEL, no C1, valid UTF-8. */
START_TEST(test_show_text_every_byte_pair)
{
	for (unsigned a = 0; a < 256; a++) {
		for (unsigned b = 0; b < 256; b++) {
			unsigned char in[3] = { (unsigned char)a, (unsigned char)b, 0x80 };
			char out[64];
			asp__show_text(out, sizeof(out), in, sizeof(in));
			ck_assert_msg(clean(out) && valid_utf8(out), "bytes %02x %02x: [%s]", a, b, out);
		}
	}
}
END_TEST

/* A cut keeps within cap, ends in "...", and never splits an escape or a character. */
START_TEST(test_show_text_cut)
{
	char in[300], out[64];
	size_t cap;

	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = i % 3 == 0 ? '\x1b' : i % 3 == 1 ? '\xc3' : '\xa9'; /* ESC, then an e-acute */
	for (cap = 1; cap <= sizeof(out); cap++) {
		memset(out, 'Z', sizeof(out));
		asp__show_text(out, cap, in, sizeof(in));
		ck_assert_msg(strlen(out) < cap, "cap %zu: %zu bytes", cap, strlen(out));
		ck_assert_msg(cap < 4 || strstr(out, "..."), "cap %zu: no cut mark in [%s]", cap, out);
		ck_assert_msg(clean(out) && valid_utf8(out), "cap %zu: [%s]", cap, out);
		/* Whole escapes only: every backslash starts a full \xNN. */
		for (const char *p = out; (p = strchr(p, '\\')); p++)
			ck_assert_msg(p[1] == 'x' && p[2] && p[3], "cap %zu: split escape in [%s]", cap, out);
	}
	out[0] = 'Q';
	asp__show_text(out, 0, in, sizeof(in));
	ck_assert_int_eq(out[0], 'Q'); /* cap 0 writes nothing */
}
END_TEST

/* ---------------------------------------------------------------- path_show */

START_TEST(test_path_show_escapes_and_shortens)
{
	char out[ASP_PATH_SHOW_MAX + 4], path[1200];
	size_t o = 0;

	asp__path_show(out, "/ws/a\x1b]0;title\x07\r\nb");
	ck_assert_str_eq(out, "/ws/a\\x1b]0;title\\x07\\x0d\\x0ab");

	/* Short raw, long shown: 150 ESC bytes show as 600. */
	memcpy(path, "/ws/", 4);
	memset(path + 4, '\x1b', 150);
	path[154] = '\0';
	asp__path_show(out, path);
	ck_assert_msg(strlen(out) <= ASP_PATH_SHOW_MAX && strstr(out, "...") && clean(out), "[%s]", out);
	ck_assert_msg(!strncmp(out, "/ws/\\x1b", 8), "the head is kept: [%s]", out);

	/* Long, with multi-byte characters: the tail starts on a character. */
	o = 0;
	path[o++] = '/';
	while (o < 1000)
		memcpy(path + o, "\xe2\x82\xac", 3), o += 3;
	memcpy(path + o, "/end.txt", 9);
	for (size_t cut = 0; cut < 3; cut++) {
		asp__path_show(out, path + cut);
		ck_assert_msg(strlen(out) <= ASP_PATH_SHOW_MAX, "%zu bytes", strlen(out));
		ck_assert_msg(strstr(out, "...") && clean(out), "[%s]", out);
		ck_assert_msg(strlen(out) > 9 && !strcmp(out + strlen(out) - 8, "/end.txt"), "tail: [%s]", out);
	}
	asp__path_show(out, path);
	ck_assert_msg(valid_utf8(out), "a character was split: [%s]", out);

	/* Plain paths are as before. */
	asp__path_show(out, "/ws/plain/path.txt");
	ck_assert_str_eq(out, "/ws/plain/path.txt");
}
END_TEST

/* ---------------------------------------------------------------- list decoder */

typedef struct body {
	unsigned char d[16384];
	size_t n;
} body;

static void put32(body *b, uint32_t v)
{
	b->d[b->n++] = (unsigned char)(v >> 24);
	b->d[b->n++] = (unsigned char)(v >> 16);
	b->d[b->n++] = (unsigned char)(v >> 8);
	b->d[b->n++] = (unsigned char)v;
}

static void put_entry(body *b, const void *name, size_t nl)
{
	put32(b, (uint32_t)nl);
	memcpy(b->d + b->n, name, nl);
	b->n += nl;
	put32(b, 4);
	memcpy(b->d + b->n, "long", 4);
	b->n += 4;
	put32(b, SSH_FILEXFER_ATTR_SIZE | SSH_FILEXFER_ATTR_PERMISSIONS);
	put32(b, 0);
	put32(b, 42);
	put32(b, 0100644);
}

/* A NAME reply body: count, then the entries (name, length) given. */
static body names(size_t count, const char *const *nm, const size_t *nl)
{
	body b = { .n = 0 };

	put32(&b, (uint32_t)count);
	for (size_t i = 0; i < count; i++)
		put_entry(&b, nm[i], nl[i]);
	return b;
}

static int decode_caps(const body *b, const char *dir, size_t max, uint64_t max_bytes,
		       asp_list_entry **v, size_t *n, asp_error *e)
{
	asp_list_caps caps = { max, max_bytes };
	uint64_t held = 0;
	size_t cap = 0;

	*v = NULL;
	*n = 0;
	return asp__fs_sftp_list_decode(b->d, b->n, dir, &caps, v, n, &cap, &held, e);
}

static int decode(const body *b, const char *dir, size_t max, asp_list_entry **v, size_t *n,
		  asp_error *e)
{
	return decode_caps(b, dir, max, 1u << 20, v, n, e);
}

START_TEST(test_list_decode_ok)
{
	const char *nm[] = { ".", "..", "a", "\x1b[31mred", "caf\xc3\xa9" };
	size_t nl[] = { 1, 2, 1, 8, 5 };
	body b = names(5, nm, nl);
	asp_list_entry *v;
	size_t n;
	asp_error e = { 0 };

	ck_assert_int_eq(decode(&b, "/ws/d", 100, &v, &n, &e), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_str_eq(v[0].name, "a");
	ck_assert_str_eq(v[1].name, "\x1b[31mred"); /* names are data: returned as they are */
	ck_assert_uint_eq(v[1].st.size, 42);
	ck_assert_uint_eq(v[1].st.type, ASP_TYPE_FILE);
	asp__fsops_list_free(v, n);
}
END_TEST

/* Empty, '/' and NUL in a name: ASP_EPROTO naming the directory, the name escaped. */
START_TEST(test_list_decode_rejects_impossible_names)
{
	static const struct {
		const char *name;
		size_t len;
		const char *shown;
	} bad[] = {
		{ "", 0, "\"\"" },
		{ "a/b", 3, "\"a/b\"" },
		{ "/", 1, "\"/\"" },
		{ "../../etc/passwd", 16, "\"../../etc/passwd\"" },
		{ "nul\0\x1b[2J", 8, "\"nul\\x00\\x1b[2J\"" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *nm[] = { "ok", bad[i].name };
		size_t nl[] = { 2, bad[i].len };
		body b = names(2, nm, nl);
		asp_list_entry *v;
		size_t n;
		asp_error e = { 0 };
		int rc = decode(&b, "/ws/dir\x1b[0m", 100, &v, &n, &e);

		ck_assert_msg(rc == ASP_EPROTO && e.code == ASP_EPROTO, "case %zu: %s: %s", i,
			      asp_error_name(rc), e.message);
		ck_assert_msg(strstr(e.message, "list /ws/dir\\x1b[0m:") && strstr(e.message, bad[i].shown) &&
			      strstr(e.message, "impossible entry name"), "case %zu: %s", i, e.message);
		ck_assert_msg(clean(e.message), "case %zu: raw control bytes: %s", i,
			      show(e.message, strlen(e.message)));
		asp__fsops_list_free(v, n);
	}
}
END_TEST

/* max entries pass; one more is ASP_ELIMIT naming the directory, the cap and the remedy. */
START_TEST(test_list_decode_cap)
{
	const char *nm[] = { "a", "b", ".", "c" };
	size_t nl[] = { 1, 1, 1, 1 };
	body b = names(4, nm, nl);
	asp_list_entry *v;
	size_t n;
	asp_error e = { 0 };
	int rc;

	ck_assert_int_eq(decode(&b, "/ws/d", 3, &v, &n, &e), 0); /* "." does not count */
	ck_assert_uint_eq(n, 3);
	asp__fsops_list_free(v, n);
	rc = decode(&b, "/ws/d", 2, &v, &n, &e);
	ck_assert_msg(rc == ASP_ELIMIT, "%s: %s", asp_error_name(rc), e.message);
	ck_assert_uint_eq(n, 2);
	ck_assert_msg(strstr(e.message, "list /ws/d:") && strstr(e.message, "more than 2 entries") &&
		      strstr(e.message, "asp_open_options.max_list_entries") && strstr(e.message, "asp_exec"),
		      "%s", e.message);
	asp__fsops_list_free(v, n);
}
END_TEST

/* Names adding up to max_bytes pass; one byte more is ASP_ELIMIT naming the option. */
START_TEST(test_list_decode_bytes_cap)
{
	const char *nm[] = { "abc", ".", "..", "de" };
	size_t nl[] = { 3, 1, 2, 2 };
	body b = names(4, nm, nl);
	asp_list_entry *v;
	size_t n;
	asp_error e = { 0 };
	int rc;

	ck_assert_int_eq(decode_caps(&b, "/ws/d", 100, 5, &v, &n, &e), 0); /* "." and ".." do not count */
	ck_assert_uint_eq(n, 2);
	asp__fsops_list_free(v, n);
	rc = decode_caps(&b, "/ws/d", 100, 4, &v, &n, &e);
	ck_assert_msg(rc == ASP_ELIMIT, "%s: %s", asp_error_name(rc), e.message);
	ck_assert_msg(strstr(e.message, "list /ws/d:") && strstr(e.message, "more than 4 bytes") &&
		      strstr(e.message, "asp_open_options.max_list_bytes"), "%s", e.message);
	asp__fsops_list_free(v, n);
}
END_TEST

/* A name of 4096 bytes passes; 4097 is ASP_ELIMIT whatever max_bytes says. */
START_TEST(test_list_decode_name_cap)
{
	static char big[4097];
	const char *nm[] = { big };
	size_t nl[] = { 4096 };
	asp_list_entry *v;
	size_t n;
	asp_error e = { 0 };
	body b;
	int rc;

	memset(big, 'x', sizeof(big));
	b = names(1, nm, nl);
	ck_assert_int_eq(decode_caps(&b, "/ws/d", 100, UINT64_MAX, &v, &n, &e), 0);
	ck_assert_uint_eq(n, 1);
	asp__fsops_list_free(v, n);
	nl[0] = 4097;
	b = names(1, nm, nl);
	rc = decode_caps(&b, "/ws/d", 100, UINT64_MAX, &v, &n, &e);
	ck_assert_msg(rc == ASP_ELIMIT, "%s: %s", asp_error_name(rc), e.message);
	ck_assert_msg(strstr(e.message, "list /ws/d:") && strstr(e.message, "4097 bytes") &&
		      strstr(e.message, "4096"), "%s", e.message);
	ck_assert_uint_eq(n, 0);
	asp__fsops_list_free(v, n);
}
END_TEST

/* Truncated bodies are ASP_EPROTO, never a read past the end (ASan checks). */
START_TEST(test_list_decode_truncated)
{
	const char *nm[] = { "a", "bb" };
	size_t nl[] = { 1, 2 };
	body full = names(2, nm, nl);

	for (size_t cut = 0; cut < full.n; cut++) {
		body b = full;
		asp_list_entry *v;
		size_t n;
		asp_error e = { 0 };
		b.n = cut;
		ck_assert_msg(decode(&b, "/ws/d", 100, &v, &n, &e) == ASP_EPROTO, "cut at %zu", cut);
		asp__fsops_list_free(v, n);
	}
}
END_TEST

/* An SFTP STATUS reply's message string is the server's text: escaped in the message. */
START_TEST(test_sftp_status_message_escaped)
{
	static const int codes[] = { SSH_FX_FAILURE, SSH_FX_BAD_MESSAGE, SSH_FX_OP_UNSUPPORTED };
	const char *said = "\x1b]0;owned\x07\x1b[2J\r\nFAKE: line\xc2\x9b\xe2\x80\xae";

	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		body b = { .n = 0 };
		asp_sftp_reply r;
		asp_error e = { 0 };
		int rc;

		put32(&b, (uint32_t)codes[i]);
		put32(&b, (uint32_t)strlen(said));
		memcpy(b.d + b.n, said, strlen(said));
		b.n += strlen(said);
		put32(&b, 0); /* language tag */
		r.type = SSH_FXP_STATUS;
		r.id = 7;
		r.p = b.d;
		r.len = b.n;
		rc = asp__sftp_fail(&r, ASP_EIO, &e, "remove", "/ws/f\x1b[0m");
		ck_assert_msg(rc != ASP_OK && e.code == rc, "code %d: rc %d", codes[i], rc);
		ck_assert_msg(clean(e.message), "code %d: raw control text: %s", codes[i],
			      show(e.message, strlen(e.message)));
		ck_assert_msg(strstr(e.message, "/ws/f\\x1b[0m"), "the path: %s", e.message);
		ck_assert_msg(strstr(e.message, "\\x1b]0;owned\\x07") || codes[i] == SSH_FX_BAD_MESSAGE,
			      "the server's words, escaped: %s", e.message);
	}
}
END_TEST

Suite *suite_text(void)
{
	Suite *s = suite_create("text");
	TCase *tc = tcase_create("text");

	tcase_add_test(tc, test_show_text_escapes);
	tcase_add_test(tc, test_show_text_every_byte_pair);
	tcase_add_test(tc, test_show_text_cut);
	tcase_add_test(tc, test_path_show_escapes_and_shortens);
	tcase_add_test(tc, test_list_decode_ok);
	tcase_add_test(tc, test_list_decode_rejects_impossible_names);
	tcase_add_test(tc, test_list_decode_cap);
	tcase_add_test(tc, test_list_decode_bytes_cap);
	tcase_add_test(tc, test_list_decode_name_cap);
	tcase_add_test(tc, test_list_decode_truncated);
	tcase_add_test(tc, test_sftp_status_message_escaped);
	suite_add_tcase(s, tc);
	return s;
}
