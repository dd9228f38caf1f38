/*
 * test_hostkey.c - fingerprints, pins and the known_hosts store, checked
 * against keys and files made by the real OpenSSH tools (ssh-keygen).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include "hostkey.h"

/* ---------------------------------------------------------------- helpers */

/* A fresh directory per test (checked fixture: runs in the test's process). */
static char g_dir[64];

static void setup(void)
{
	strcpy(g_dir, "/tmp/asp-hostkey-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void)
{
	char cmd[128];

	if (g_dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", g_dir);
	}
}

static char *path_in(const char *fmt, ...) ASP_PRINTF(1, 2);
static char *path_in(const char *fmt, ...)
{
	static char bufs[8][PATH_MAX];
	static int next;
	char rel[PATH_MAX / 2];
	char *out = bufs[next++ % 8];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	snprintf(out, PATH_MAX, "%s/%s", g_dir, rel);
	return out;
}

/* Run a shell command; its exit status. */
static int sh(const char *fmt, ...) ASP_PRINTF(1, 2);
static int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The first line a shell command prints. */
static void sh_line(char *out, size_t n, const char *cmd)
{
	FILE *f = popen(cmd, "r");

	ck_assert_ptr_nonnull(f);
	out[0] = '\0';
	ck_assert_ptr_nonnull(fgets(out, (int)n, f));
	out[strcspn(out, "\n")] = '\0';
	ck_assert_int_eq(pclose(f), 0);
}

static unsigned char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *d;
	long n;

	ck_assert_msg(f != NULL, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	d = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(d);
	ck_assert_int_eq(fread(d, 1, (size_t)n, f), (size_t)n);
	d[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return d;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	size_t n = strlen(text);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, n), (ssize_t)n);
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
}

/* A key made by ssh-keygen: its blob, type, base64 and the .pub path. */
typedef struct key {
	unsigned char *blob;
	size_t len;
	char type[64];
	char b64[2048];
	char pub[PATH_MAX];
	char priv[PATH_MAX];
} key;

static void gen_key(key *k, const char *name, const char *args)
{
	size_t n;
	unsigned char *text;

	memset(k, 0, sizeof(*k));
	snprintf(k->priv, sizeof(k->priv), "%s/%.64s", g_dir, name);
	snprintf(k->pub, sizeof(k->pub), "%s/%.64s.pub", g_dir, name);
	ck_assert_int_eq(sh("ssh-keygen -q %s -N '' -C 'test@%s' -f '%s'", args, name, k->priv), 0);
	text = read_file(k->pub, &n);
	ck_assert_int_eq(sscanf((char *)text, "%63s %2047s", k->type, k->b64), 2);
	free(text);
	ck_assert_int_eq(asp__base64_decode(&k->blob, &k->len, k->b64, strlen(k->b64)), 0);
}

static void key_free(key *k)
{
	asp__free(k->blob);
	k->blob = NULL;
}

/* The SHA256:... field of `ssh-keygen -lf`. */
static void keygen_fingerprint(char out[ASP_FINGERPRINT_MAX], const char *pub)
{
	char cmd[PATH_MAX + 64], line[512], fp[128];

	snprintf(cmd, sizeof(cmd), "ssh-keygen -lf '%s'", pub);
	sh_line(line, sizeof(line), cmd);
	ck_assert_int_eq(sscanf(line, "%*d %127s", fp), 1);
	ck_assert_uint_lt(strlen(fp), ASP_FINGERPRINT_MAX);
	strcpy(out, fp);
}

static asp_kh_status check_text(const char *text, const char *host, unsigned int port,
				const key *k)
{
	return asp__known_hosts_check(text, strlen(text), host, port, k->blob, k->len);
}

/* ------------------------------------------------------------ fingerprints */

START_TEST(test_fingerprint_matches_ssh_keygen)
{
	static const char *const kinds[] = { "-t ed25519", "-t ecdsa -b 256", "-t ecdsa -b 384",
					     "-t ecdsa -b 521", "-t rsa -b 2048" };
	size_t i;

	for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		char want[ASP_FINGERPRINT_MAX], got[ASP_FINGERPRINT_MAX], name[16], type[64];
		key k;

		snprintf(name, sizeof(name), "k%zu", i);
		gen_key(&k, name, kinds[i]);
		keygen_fingerprint(want, k.pub);
		ck_assert_int_eq(asp__fingerprint(got, k.blob, k.len), 0);
		ck_assert_str_eq(got, want);
		ck_assert_uint_eq(strlen(got), 7 + 43);
		ck_assert_int_eq(asp__blob_type(type, sizeof(type), k.blob, k.len), 0);
		ck_assert_str_eq(type, k.type);
		key_free(&k);
	}
}
END_TEST

START_TEST(test_fingerprint_bad_args)
{
	char fp[ASP_FINGERPRINT_MAX];

	ck_assert_int_eq(asp__fingerprint(NULL, (const unsigned char *)"x", 1), ASP_EINVAL);
	ck_assert_int_eq(asp__fingerprint(fp, NULL, 1), ASP_EINVAL);
}
END_TEST

START_TEST(test_blob_type_validates_lengths)
{
	static const unsigned char good[] = { 0, 0, 0, 3, 'a', '-', 'b', 0, 0, 0, 1, 7 };
	static const unsigned char too_long[] = { 0, 0, 0, 5, 'a', 'b', 'c' };
	static const unsigned char huge[] = { 0xff, 0xff, 0xff, 0xff, 'a', 'b' };
	static const unsigned char empty_type[] = { 0, 0, 0, 0, 'a' };
	static const unsigned char short_hdr[] = { 0, 0, 0 };
	static const unsigned char ctrl[] = { 0, 0, 0, 2, 'a', '\n' };
	static const unsigned char nul[] = { 0, 0, 0, 2, 'a', 0 };
	char out[64];

	ck_assert_int_eq(asp__blob_type(out, sizeof(out), good, sizeof(good)), 0);
	ck_assert_str_eq(out, "a-b");
	/* The type and its NUL must fit. */
	ck_assert_int_eq(asp__blob_type(out, 3, good, sizeof(good)), ASP_EINVAL);
	ck_assert_int_eq(asp__blob_type(out, 4, good, sizeof(good)), 0);
	ck_assert_int_eq(asp__blob_type(out, sizeof(out), too_long, sizeof(too_long)), ASP_EINVAL);
	ck_assert_int_eq(asp__blob_type(out, sizeof(out), huge, sizeof(huge)), ASP_EINVAL);
	ck_assert_int_eq(asp__blob_type(out, sizeof(out), empty_type, sizeof(empty_type)),
			 ASP_EINVAL);
	ck_assert_int_eq(asp__blob_type(out, sizeof(out), short_hdr, sizeof(short_hdr)),
			 ASP_EINVAL);
	ck_assert_int_eq(asp__blob_type(out, sizeof(out), ctrl, sizeof(ctrl)), ASP_EINVAL);
	ck_assert_int_eq(asp__blob_type(out, sizeof(out), nul, sizeof(nul)), ASP_EINVAL);
	ck_assert_int_eq(asp__blob_type(out, sizeof(out), NULL, 8), ASP_EINVAL);
	ck_assert_int_eq(asp__blob_type(NULL, 8, good, sizeof(good)), ASP_EINVAL);
}
END_TEST

/* ------------------------------------------------------------------- pins */

START_TEST(test_pin_parse_key_line)
{
	char text[4096], fp[ASP_FINGERPRINT_MAX], pinfp[ASP_FINGERPRINT_MAX];
	unsigned char *pub;
	size_t n;
	asp_error err = { 0 };
	asp_pin pin;
	key k;

	gen_key(&k, "host", "-t ed25519");
	/* The .pub file as it is, comment and newline included. */
	pub = read_file(k.pub, &n);
	ck_assert_int_eq(asp__pin_parse(&pin, (char *)pub, &err), 0);
	ck_assert_int_eq(pin.is_fingerprint, 0);
	ck_assert_str_eq(pin.type, "ssh-ed25519");
	ck_assert_uint_eq(pin.blob_len, k.len);
	ck_assert_mem_eq(pin.blob, k.blob, k.len);
	ck_assert_int_eq(asp__pin_matches(&pin, k.blob, k.len), 1);
	/* sha256 is filled for full keys too (messages show it). */
	keygen_fingerprint(fp, k.pub);
	ck_assert_int_eq(asp__fingerprint(pinfp, pin.blob, pin.blob_len), 0);
	ck_assert_str_eq(pinfp, fp);
	asp__pin_clear(&pin);
	ck_assert_ptr_null(pin.blob);
	asp__pin_clear(&pin);
	asp__pin_clear(NULL);
	free(pub);

	/* No comment; tabs and runs of spaces; surrounding whitespace. */
	snprintf(text, sizeof(text), "ssh-ed25519 %s", k.b64);
	ck_assert_int_eq(asp__pin_parse(&pin, text, &err), 0);
	ck_assert_int_eq(asp__pin_matches(&pin, k.blob, k.len), 1);
	asp__pin_clear(&pin);
	snprintf(text, sizeof(text), "  \tssh-ed25519 \t  %s\t a comment with  spaces \n", k.b64);
	ck_assert_int_eq(asp__pin_parse(&pin, text, &err), 0);
	ck_assert_int_eq(asp__pin_matches(&pin, k.blob, k.len), 1);
	asp__pin_clear(&pin);
	key_free(&k);

	gen_key(&k, "ec", "-t ecdsa -b 384");
	snprintf(text, sizeof(text), "%s %s", k.type, k.b64);
	ck_assert_int_eq(asp__pin_parse(&pin, text, &err), 0);
	ck_assert_str_eq(pin.type, "ecdsa-sha2-nistp384");
	asp__pin_clear(&pin);
	key_free(&k);
}
END_TEST

START_TEST(test_pin_parse_type_disagrees)
{
	char text[4096];
	asp_error err = { 0 };
	asp_pin pin;
	key k;

	gen_key(&k, "host", "-t ed25519");
	snprintf(text, sizeof(text), "ssh-rsa %s", k.b64);
	ck_assert_int_eq(asp__pin_parse(&pin, text, &err), ASP_ECONFIG);
	ck_assert_int_eq(err.code, ASP_ECONFIG);
	ck_assert_ptr_nonnull(strstr(err.message, "\"ssh-rsa\""));
	ck_assert_ptr_nonnull(strstr(err.message, "\"ssh-ed25519\""));
	ck_assert_ptr_null(pin.blob);
	asp__pin_clear(&pin);
	key_free(&k);
}
END_TEST

START_TEST(test_pin_parse_fingerprint)
{
	char fp[ASP_FINGERPRINT_MAX], text[128];
	asp_error err = { 0 };
	asp_pin pin;
	key k, other;

	gen_key(&k, "host", "-t ed25519");
	gen_key(&other, "other", "-t ed25519");
	keygen_fingerprint(fp, k.pub);

	ck_assert_int_eq(asp__pin_parse(&pin, fp, &err), 0);
	ck_assert_int_eq(pin.is_fingerprint, 1);
	ck_assert_str_eq(pin.type, "");
	ck_assert_ptr_null(pin.blob);
	ck_assert_int_eq(asp__pin_matches(&pin, k.blob, k.len), 1);
	ck_assert_int_eq(asp__pin_matches(&pin, other.blob, other.len), 0);
	asp__pin_clear(&pin);

	/* With the '=' padding ssh-keygen leaves off. */
	snprintf(text, sizeof(text), " %s= ", fp);
	ck_assert_int_eq(asp__pin_parse(&pin, text, &err), 0);
	ck_assert_int_eq(asp__pin_matches(&pin, k.blob, k.len), 1);
	asp__pin_clear(&pin);

	/* Too short, too long, bad characters. */
	snprintf(text, sizeof(text), "%.*s", (int)strlen(fp) - 1, fp);
	ck_assert_int_eq(asp__pin_parse(&pin, text, &err), ASP_ECONFIG);
	ck_assert_ptr_nonnull(strstr(err.message, "43"));
	snprintf(text, sizeof(text), "%sAA", fp);
	ck_assert_int_eq(asp__pin_parse(&pin, text, &err), ASP_ECONFIG);
	snprintf(text, sizeof(text), "%s", fp);
	text[10] = '!';
	ck_assert_int_eq(asp__pin_parse(&pin, text, &err), ASP_ECONFIG);
	ck_assert_int_eq(asp__pin_parse(&pin, "SHA256:", &err), ASP_ECONFIG);
	/* ssh-keygen -lf output pasted whole is not a fingerprint. */
	snprintf(text, sizeof(text), "256 %s test (ED25519)", fp);
	ck_assert_int_eq(asp__pin_parse(&pin, text, &err), ASP_ECONFIG);
	key_free(&k);
	key_free(&other);
}
END_TEST

START_TEST(test_pin_parse_rejects_md5)
{
	static const char *const md5[] = {
		"MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48",
		"16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48",
		"md5:16:27:AC:A5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48",
	};
	asp_error err = { 0 };
	asp_pin pin;
	size_t i;

	for (i = 0; i < sizeof(md5) / sizeof(md5[0]); i++) {
		ck_assert_int_eq(asp__pin_parse(&pin, md5[i], &err), ASP_ECONFIG);
		ck_assert_msg(strstr(err.message, "only SHA256 fingerprints are accepted"),
			      "message: %s", err.message);
	}
}
END_TEST

START_TEST(test_pin_parse_garbage)
{
	static const char *const bad[] = { "", "   \n", "garbage", "hello world",
					   "ssh-ed25519", "ssh-ed25519 AAAA!!!!",
					   "ssh-ed25519 aGVsbG8gd29ybGQ=",
					   "{\"not\": \"a key\"}" };
	char long_text[600];
	asp_error err = { 0 };
	asp_pin pin;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(asp__pin_parse(&pin, bad[i], &err), ASP_ECONFIG);
		ck_assert_msg(strstr(err.message, "expected an OpenSSH public key line "
						  "(\"ssh-ed25519 AAAA...\") or a fingerprint "
						  "(\"SHA256:...\"), got \""),
			      "input %zu: %s", i, err.message);
		ck_assert_ptr_null(pin.blob);
	}
	ck_assert_ptr_nonnull(strstr(err.message, "got \"{?not?: ?a key?}\""));
	ck_assert_int_eq(asp__pin_parse(&pin, "hello world", &err), ASP_ECONFIG);
	ck_assert_ptr_nonnull(strstr(err.message, "got \"hello world\""));

	/* Long input is cut short in the message. */
	memset(long_text, 'x', sizeof(long_text) - 1);
	long_text[sizeof(long_text) - 1] = '\0';
	ck_assert_int_eq(asp__pin_parse(&pin, long_text, &err), ASP_ECONFIG);
	ck_assert_ptr_nonnull(strstr(err.message, "xxx...\""));
	ck_assert_uint_lt(strlen(err.message), 200);

	/* Two keys on two lines are not one pin. */
	ck_assert_int_eq(asp__pin_parse(&pin, "ssh-ed25519 AAAA\nssh-rsa AAAA", &err),
			 ASP_ECONFIG);
	ck_assert_int_eq(asp__pin_parse(&pin, NULL, &err), ASP_EINVAL);
	ck_assert_int_eq(asp__pin_parse(NULL, "x", &err), ASP_EINVAL);
}
END_TEST

START_TEST(test_pin_parse_private_key_not_echoed)
{
	char *nl;
	unsigned char *priv;
	size_t n;
	asp_error err = { 0 };
	asp_pin pin;
	key k;

	gen_key(&k, "host", "-t ed25519");
	priv = read_file(k.priv, &n);
	ck_assert_int_eq(asp__pin_parse(&pin, (char *)priv, &err), ASP_ECONFIG);
	ck_assert_ptr_nonnull(strstr(err.message, "PEM"));
	/* Nothing after the BEGIN line appears in the message. */
	nl = strchr((char *)priv, '\n');
	ck_assert_ptr_nonnull(nl);
	nl[21] = '\0';
	ck_assert_ptr_null(strstr(err.message, nl + 1));
	ck_assert_ptr_null(strstr(err.message, "b3BlbnNzaC"));
	free(priv);
	key_free(&k);
}
END_TEST

START_TEST(test_pin_matches)
{
	char text[4096], fp[ASP_FINGERPRINT_MAX];
	asp_error err = { 0 };
	asp_pin full, finger;
	key a, b;

	gen_key(&a, "a", "-t ed25519");
	gen_key(&b, "b", "-t ecdsa -b 256");
	snprintf(text, sizeof(text), "%s %s", a.type, a.b64);
	ck_assert_int_eq(asp__pin_parse(&full, text, &err), 0);
	ck_assert_int_eq(asp__fingerprint(fp, a.blob, a.len), 0);
	ck_assert_int_eq(asp__pin_parse(&finger, fp, &err), 0);

	ck_assert_int_eq(asp__pin_matches(&full, a.blob, a.len), 1);
	ck_assert_int_eq(asp__pin_matches(&full, b.blob, b.len), 0);
	ck_assert_int_eq(asp__pin_matches(&full, a.blob, a.len - 1), 0);
	ck_assert_int_eq(asp__pin_matches(&finger, a.blob, a.len), 1);
	ck_assert_int_eq(asp__pin_matches(&finger, b.blob, b.len), 0);
	ck_assert_int_eq(asp__pin_matches(&finger, a.blob, a.len - 1), 0);
	ck_assert_int_eq(asp__pin_matches(NULL, a.blob, a.len), 0);
	ck_assert_int_eq(asp__pin_matches(&full, NULL, 0), 0);

	asp__pin_clear(&full);
	asp__pin_clear(&finger);
	key_free(&a);
	key_free(&b);
}
END_TEST

/* ------------------------------------------------------- known_hosts check */

START_TEST(test_kh_plain_and_ports)
{
	char text[8192];
	key k, other;

	gen_key(&k, "k", "-t ed25519");
	gen_key(&other, "o", "-t ed25519");

	snprintf(text, sizeof(text), "example.com ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "example.com", 22, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "example.com", 22, &other), ASP_KH_MISMATCH);
	ck_assert_int_eq(check_text(text, "example.org", 22, &k), ASP_KH_NOTFOUND);
	ck_assert_int_eq(check_text(text, "example.co", 22, &k), ASP_KH_NOTFOUND);

	/* A plain entry is port 22 only (libssh2 would also match 2222). */
	snprintf(text, sizeof(text), "127.0.0.1 ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 22, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 2222, &k), ASP_KH_NOTFOUND);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 2222, &other), ASP_KH_NOTFOUND);

	snprintf(text, sizeof(text), "[127.0.0.1]:2222 ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 2222, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 2222, &other), ASP_KH_MISMATCH);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 22, &k), ASP_KH_NOTFOUND);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 22222, &k), ASP_KH_NOTFOUND);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 222, &k), ASP_KH_NOTFOUND);

	/* Comma lists, and a comment after the key. */
	snprintf(text, sizeof(text), "a.example,[127.0.0.1]:2222,b.example ssh-ed25519 %s c@d\n",
		 k.b64);
	ck_assert_int_eq(check_text(text, "a.example", 22, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "b.example", 22, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 2222, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "c.example", 22, &k), ASP_KH_NOTFOUND);

	/* IPv6 is written [::1]:port too. */
	snprintf(text, sizeof(text), "[::1]:2222 ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "::1", 2222, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "::1", 22, &k), ASP_KH_NOTFOUND);

	ck_assert_int_eq(asp__known_hosts_check(NULL, 0, "h", 22, k.blob, k.len), ASP_KH_NOTFOUND);
	key_free(&k);
	key_free(&other);
}
END_TEST

START_TEST(test_kh_hashed_by_ssh_keygen)
{
	char text[8192], *kh = path_in("known_hosts");
	unsigned char *hashed;
	size_t n;
	key k, k2, other;

	gen_key(&k, "k", "-t ed25519");
	gen_key(&k2, "k2", "-t ecdsa -b 256");
	gen_key(&other, "o", "-t ed25519");
	snprintf(text, sizeof(text),
		 "[127.0.0.1]:2222 ssh-ed25519 %s\nExample.com ecdsa-sha2-nistp256 %s\n", k.b64,
		 k2.b64);
	write_file(kh, text, 0600);
	ck_assert_int_eq(sh("ssh-keygen -q -H -f '%s' >/dev/null 2>&1", kh), 0);
	hashed = read_file(kh, &n);
	ck_assert_msg(!strncmp((char *)hashed, "|1|", 3), "not hashed: %s", hashed);
	ck_assert_ptr_null(strstr((char *)hashed, "127.0.0.1"));
	ck_assert_ptr_null(strstr((char *)hashed, "xample"));

	ck_assert_int_eq(asp__known_hosts_check((char *)hashed, n, "127.0.0.1", 2222, k.blob,
						k.len), ASP_KH_MATCH);
	ck_assert_int_eq(asp__known_hosts_check((char *)hashed, n, "127.0.0.1", 2222, other.blob,
						other.len), ASP_KH_MISMATCH);
	ck_assert_int_eq(asp__known_hosts_check((char *)hashed, n, "127.0.0.1", 2223, k.blob,
						k.len), ASP_KH_NOTFOUND);
	ck_assert_int_eq(asp__known_hosts_check((char *)hashed, n, "127.0.0.1", 22, k.blob,
						k.len), ASP_KH_NOTFOUND);
	/* ssh-keygen -H hashes names in lower case, as ssh looks them up. */
	ck_assert_int_eq(asp__known_hosts_check((char *)hashed, n, "Example.com", 22, k2.blob,
						k2.len), ASP_KH_MATCH);
	ck_assert_int_eq(asp__known_hosts_check((char *)hashed, n, "EXAMPLE.COM", 22, k2.blob,
						k2.len), ASP_KH_MATCH);
	ck_assert_int_eq(asp__known_hosts_check((char *)hashed, n, "example.com", 22, other.blob,
						other.len), ASP_KH_MISMATCH);
	free(hashed);

	/* One hashed line alone, to corrupt it. */
	snprintf(text, sizeof(text), "example.com ecdsa-sha2-nistp256 %s\n", k2.b64);
	write_file(kh, text, 0600);
	ck_assert_int_eq(sh("ssh-keygen -q -H -f '%s' >/dev/null 2>&1", kh), 0);
	hashed = read_file(kh, &n);
	ck_assert_int_eq(asp__known_hosts_check((char *)hashed, n, "example.com", 22, k2.blob,
						k2.len), ASP_KH_MATCH);
	/* A corrupted hash matches nothing. */
	hashed[10] = hashed[10] == 'A' ? 'B' : 'A';
	ck_assert_int_eq(asp__known_hosts_check((char *)hashed, n, "example.com", 22, k2.blob,
						k2.len), ASP_KH_NOTFOUND);
	free(hashed);
	key_free(&k);
	key_free(&k2);
	key_free(&other);
}
END_TEST

START_TEST(test_kh_wildcards_negation_case)
{
	char text[8192];
	key k, other;

	gen_key(&k, "k", "-t ed25519");
	gen_key(&other, "o", "-t ed25519");

	snprintf(text, sizeof(text), "*.example.com ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "a.example.com", 22, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "x.y.example.com", 22, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "example.com", 22, &k), ASP_KH_NOTFOUND);
	ck_assert_int_eq(check_text(text, "a.example.com", 2222, &k), ASP_KH_NOTFOUND);

	snprintf(text, sizeof(text), "192.168.1.? ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "192.168.1.5", 22, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "192.168.1.50", 22, &k), ASP_KH_NOTFOUND);

	/* '[' is literal, not an fnmatch bracket expression. */
	snprintf(text, sizeof(text), "[*.example.com]:2222 ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "a.example.com", 2222, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "a.example.com", 2223, &k), ASP_KH_NOTFOUND);
	ck_assert_int_eq(check_text(text, "a.example.com", 22, &k), ASP_KH_NOTFOUND);
	snprintf(text, sizeof(text), "[127.0.0.1]:* ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 4000, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "127.0.0.2", 4000, &k), ASP_KH_NOTFOUND);

	/* A negation excludes the host from its line, whatever else matches... */
	snprintf(text, sizeof(text), "*.example.com,!bad.example.com ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "good.example.com", 22, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "bad.example.com", 22, &k), ASP_KH_NOTFOUND);
	ck_assert_int_eq(check_text(text, "bad.example.com", 22, &other), ASP_KH_NOTFOUND);
	snprintf(text, sizeof(text), "!bad.example.com,*.example.com ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "bad.example.com", 22, &k), ASP_KH_NOTFOUND);
	snprintf(text, sizeof(text), "!*.internal ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "a.internal", 22, &k), ASP_KH_NOTFOUND);
	ck_assert_int_eq(check_text(text, "a.external", 22, &k), ASP_KH_NOTFOUND);
	/* ...but not from other lines. */
	snprintf(text, sizeof(text),
		 "*.example.com,!bad.example.com ssh-ed25519 %s\nbad.example.com ssh-ed25519 %s\n",
		 k.b64, other.b64);
	ck_assert_int_eq(check_text(text, "bad.example.com", 22, &other), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "bad.example.com", 22, &k), ASP_KH_MISMATCH);

	/* Plain names compare case-insensitively, both ways. */
	snprintf(text, sizeof(text), "Example.COM,[Sandbox.Local]:2222 ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "example.com", 22, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "EXAMPLE.com", 22, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "sandbox.LOCAL", 2222, &k), ASP_KH_MATCH);
	snprintf(text, sizeof(text), "*.EXAMPLE.com ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "A.example.COM", 22, &k), ASP_KH_MATCH);
	key_free(&k);
	key_free(&other);
}
END_TEST

START_TEST(test_kh_markers)
{
	char text[8192];
	key k, other;

	gen_key(&k, "k", "-t ed25519");
	gen_key(&other, "o", "-t ed25519");

	/* @revoked applies to every host, and beats a matching entry before or after it. */
	snprintf(text, sizeof(text), "@revoked nowhere.invalid ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 2222, &k), ASP_KH_REVOKED);
	ck_assert_int_eq(check_text(text, "127.0.0.1", 2222, &other), ASP_KH_NOTFOUND);
	snprintf(text, sizeof(text), "[h]:2 ssh-ed25519 %s\n@revoked * ssh-ed25519 %s\n", k.b64,
		 k.b64);
	ck_assert_int_eq(check_text(text, "h", 2, &k), ASP_KH_REVOKED);
	snprintf(text, sizeof(text), "@revoked\t*\tssh-ed25519\t%s\n[h]:2 ssh-ed25519 %s\n", k.b64,
		 k.b64);
	ck_assert_int_eq(check_text(text, "h", 2, &k), ASP_KH_REVOKED);
	/* Another key's revocation does not matter. */
	snprintf(text, sizeof(text), "@revoked * ssh-ed25519 %s\n[h]:2 ssh-ed25519 %s\n",
		 other.b64, k.b64);
	ck_assert_int_eq(check_text(text, "h", 2, &k), ASP_KH_MATCH);
	/* A revoked line is not an entry for the host. */
	ck_assert_int_eq(check_text(text, "h", 3, &k), ASP_KH_NOTFOUND);

	/* @cert-authority lines are ignored: neither match nor mismatch. */
	snprintf(text, sizeof(text), "@cert-authority *.example.com ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "a.example.com", 22, &k), ASP_KH_NOTFOUND);
	ck_assert_int_eq(check_text(text, "a.example.com", 22, &other), ASP_KH_NOTFOUND);
	/* Unknown markers make the line malformed. */
	snprintf(text, sizeof(text), "@trusted a.example.com ssh-ed25519 %s\n", k.b64);
	ck_assert_int_eq(check_text(text, "a.example.com", 22, &k), ASP_KH_NOTFOUND);
	key_free(&k);
	key_free(&other);
}
END_TEST

START_TEST(test_kh_mismatch_and_types)
{
	char text[8192];
	key k, other, ec;

	gen_key(&k, "k", "-t ed25519");
	gen_key(&other, "o", "-t ed25519");
	gen_key(&ec, "e", "-t ecdsa -b 256");

	/* Any entry with this key wins over entries with others. */
	snprintf(text, sizeof(text), "h ssh-ed25519 %s\nh ssh-ed25519 %s\nh %s %s\n", other.b64,
		 k.b64, ec.type, ec.b64);
	ck_assert_int_eq(check_text(text, "h", 22, &k), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "h", 22, &ec), ASP_KH_MATCH);
	/* A host known only with a key of another type is a mismatch, not a new host. */
	snprintf(text, sizeof(text), "h %s %s\n", ec.type, ec.b64);
	ck_assert_int_eq(check_text(text, "h", 22, &k), ASP_KH_MISMATCH);
	key_free(&k);
	key_free(&other);
	key_free(&ec);
}
END_TEST

START_TEST(test_kh_malformed_lines_skipped)
{
	char text[16384];
	key k, other;

	gen_key(&k, "k", "-t ed25519");
	gen_key(&other, "o", "-t ed25519");

	/* Every line names h but none is a usable entry: the host is unknown. */
	snprintf(text, sizeof(text),
		 "\n"
		 "   \t \n"
		 "# h ssh-ed25519 %s\n"
		 "   # h ssh-ed25519 %s\n"
		 "h\n"
		 "h ssh-ed25519\n"
		 "h ssh-ed25519 !!!notbase64!!!\n"
		 "h ssh-ed25519 A\n"
		 "h ssh-rsa %s\n"
		 "h ssh-ed25519 aGVsbG8gd29ybGQ=\n"
		 "h 2048 65537 1234567890123456789\n"
		 "h bad\001type %s\n"
		 "@revoked\n"
		 "@revoked h\n"
		 "@revoked * ssh-ed25519\n"
		 "h,\n",
		 other.b64, other.b64, other.b64, other.b64);
	ck_assert_int_eq(check_text(text, "h", 22, &k), ASP_KH_NOTFOUND);

	/* CRLF endings, leading blanks, no final newline, empty list items. */
	snprintf(text, sizeof(text), "junk line\r\n\r\n  ,h, ssh-ed25519 %s\r\n"
		 "x ssh-ed25519 %s", other.b64, k.b64);
	ck_assert_int_eq(check_text(text, "h", 22, &other), ASP_KH_MATCH);
	ck_assert_int_eq(check_text(text, "x", 22, &k), ASP_KH_MATCH);

	/* A NUL byte inside the text only spoils its own line. */
	{
		char bin[8192];
		int n = snprintf(bin, sizeof(bin), "h ssh-ed25519 %s\nh%cx ssh-ed25519 %s\n",
				 k.b64, 0, other.b64);

		ck_assert_int_eq(asp__known_hosts_check(bin, (size_t)n, "h", 22, k.blob, k.len),
				 ASP_KH_MATCH);
		ck_assert_int_eq(asp__known_hosts_check(bin, (size_t)n, "h", 22, other.blob,
							other.len), ASP_KH_MISMATCH);
	}
	key_free(&k);
	key_free(&other);
}
END_TEST

/* -------------------------------------------------------------- store path */

START_TEST(test_kh_path_resolution)
{
	asp_error err = { 0 };
	struct passwd *pw;
	char want[PATH_MAX];
	char *p = NULL;

	unsetenv("ASP_KNOWN_HOSTS");
	unsetenv("XDG_CONFIG_HOME");
	setenv("HOME", "/home/someone", 1);

	ck_assert_int_eq(asp__known_hosts_path(&p, "/x/explicit", &err), 0);
	ck_assert_str_eq(p, "/x/explicit");
	asp__free(p);
	ck_assert_int_eq(asp__known_hosts_path(&p, "", &err), ASP_EINVAL);

	ck_assert_int_eq(asp__known_hosts_path(&p, NULL, &err), 0);
	ck_assert_str_eq(p, "/home/someone/.config/asp/known_hosts");
	asp__free(p);

	setenv("XDG_CONFIG_HOME", "relative/config", 1);
	ck_assert_int_eq(asp__known_hosts_path(&p, NULL, &err), 0);
	ck_assert_str_eq(p, "/home/someone/.config/asp/known_hosts");
	asp__free(p);

	setenv("XDG_CONFIG_HOME", "/xdg/config", 1);
	ck_assert_int_eq(asp__known_hosts_path(&p, NULL, &err), 0);
	ck_assert_str_eq(p, "/xdg/config/asp/known_hosts");
	asp__free(p);

	setenv("ASP_KNOWN_HOSTS", "", 1);
	ck_assert_int_eq(asp__known_hosts_path(&p, NULL, &err), 0);
	ck_assert_str_eq(p, "/xdg/config/asp/known_hosts");
	asp__free(p);

	setenv("ASP_KNOWN_HOSTS", "/env/known_hosts", 1);
	ck_assert_int_eq(asp__known_hosts_path(&p, NULL, &err), 0);
	ck_assert_str_eq(p, "/env/known_hosts");
	asp__free(p);
	ck_assert_int_eq(asp__known_hosts_path(&p, "/x/explicit", &err), 0);
	ck_assert_str_eq(p, "/x/explicit");
	asp__free(p);

	/* No HOME at all: the password database. */
	unsetenv("ASP_KNOWN_HOSTS");
	unsetenv("XDG_CONFIG_HOME");
	unsetenv("HOME");
	pw = getpwuid(getuid());
	ck_assert_ptr_nonnull(pw);
	snprintf(want, sizeof(want), "%s/.config/asp/known_hosts", pw->pw_dir);
	ck_assert_int_eq(asp__known_hosts_path(&p, NULL, &err), 0);
	ck_assert_str_eq(p, want);
	asp__free(p);
	ck_assert_int_eq(asp__known_hosts_path(NULL, NULL, &err), ASP_EINVAL);
}
END_TEST

/* The one home-directory rule (known_hosts default and "~" in connection.identity). */
START_TEST(test_home_dir_rule)
{
	struct passwd *pw = getpwuid(getuid());
	char buf[PATH_MAX], tiny[2];

	ck_assert_ptr_nonnull(pw);
	setenv("HOME", "/home/someone", 1);
	ck_assert_str_eq(asp__home_dir(buf, sizeof(buf)), "/home/someone");
	/* A relative or empty $HOME is not a home: the password database's entry is. */
	setenv("HOME", "relative/home", 1);
	ck_assert_str_eq(asp__home_dir(buf, sizeof(buf)), pw->pw_dir);
	setenv("HOME", "", 1);
	ck_assert_str_eq(asp__home_dir(buf, sizeof(buf)), pw->pw_dir);
	/* An entry that does not fit the caller's buffer is none. */
	ck_assert_ptr_null(asp__home_dir(tiny, sizeof(tiny)));
}
END_TEST

/* ------------------------------------------------------------------ verify */

static void assert_mode(const char *path, mode_t want)
{
	struct stat st;

	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_msg((st.st_mode & 07777) == want, "%s: mode %04o, want %04o", path,
		      (unsigned int)(st.st_mode & 07777), (unsigned int)want);
}

/* How many entries dir holds; none may contain must_not_contain. */
static int count_entries(const char *dir, const char *must_not_contain)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		ck_assert_msg(!must_not_contain || !strstr(e->d_name, must_not_contain),
			      "left behind: %s", e->d_name);
		n++;
	}
	closedir(d);
	return n;
}

START_TEST(test_verify_first_use_then_match)
{
	char *dir = path_in("cfg/deeper/asp"), *kh = path_in("cfg/deeper/asp/known_hosts");
	char want[8192], cmd[PATH_MAX + 128], line[4096];
	unsigned char *before, *after;
	size_t nb, na;
	asp_error err = { 0 };
	int first = -1;
	key k;

	gen_key(&k, "k", "-t ed25519");
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), 0);
	ck_assert_int_eq(first, 1);
	assert_mode(path_in("cfg"), 0700);
	assert_mode(path_in("cfg/deeper"), 0700);
	assert_mode(dir, 0700);
	assert_mode(kh, 0600);

	/* Exactly one line, as OpenSSH writes it, and OpenSSH finds it. */
	before = read_file(kh, &nb);
	snprintf(want, sizeof(want), "[127.0.0.1]:2222 ssh-ed25519 %s\n", k.b64);
	ck_assert_str_eq((char *)before, want);
	snprintf(cmd, sizeof(cmd), "ssh-keygen -F '[127.0.0.1]:2222' -f '%s' | grep -v '^#'", kh);
	sh_line(line, sizeof(line), cmd);
	ck_assert_ptr_nonnull(strstr(line, k.b64));
	ck_assert_int_ne(sh("ssh-keygen -F 127.0.0.1 -f '%s' >/dev/null", kh), 0);
	/* Only the store and its lock remain: no temporary files. */
	ck_assert_int_eq(count_entries(dir, ".tmp."), 2);

	/* Second time: known, nothing written. */
	first = -1;
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), 0);
	ck_assert_int_eq(first, 0);
	after = read_file(kh, &na);
	ck_assert_uint_eq(na, nb);
	ck_assert_mem_eq(after, before, nb);
	free(before);
	free(after);
	key_free(&k);
}
END_TEST

START_TEST(test_verify_port_22_is_plain)
{
	char *kh = path_in("known_hosts"), want[8192];
	unsigned char *text;
	size_t n;
	asp_error err = { 0 };
	int first = 0;
	key k;

	gen_key(&k, "k", "-t ecdsa -b 256");
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "Sandbox.Example", 22, k.blob, k.len,
						 &err), 0);
	ck_assert_int_eq(first, 1);
	text = read_file(kh, &n);
	snprintf(want, sizeof(want), "sandbox.example ecdsa-sha2-nistp256 %s\n", k.b64);
	ck_assert_str_eq((char *)text, want);
	ck_assert_int_eq(sh("ssh-keygen -F sandbox.example -f '%s' >/dev/null", kh), 0);
	free(text);
	key_free(&k);
}
END_TEST

START_TEST(test_verify_mismatch_fails_closed)
{
	char *kh = path_in("known_hosts"), fa[ASP_FINGERPRINT_MAX], fb[ASP_FINGERPRINT_MAX];
	char fc[ASP_FINGERPRINT_MAX], text[8192];
	unsigned char *before, *after;
	size_t nb, na;
	asp_error err = { 0 };
	int first = 0;
	key a, b, c;

	gen_key(&a, "a", "-t ed25519");
	gen_key(&b, "b", "-t ed25519");
	gen_key(&c, "c", "-t ecdsa -b 256");
	keygen_fingerprint(fa, a.pub);
	keygen_fingerprint(fb, b.pub);
	keygen_fingerprint(fc, c.pub);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, a.blob, a.len,
						 &err), 0);
	before = read_file(kh, &nb);

	first = -1;
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, b.blob, b.len,
						 &err), ASP_EHOSTKEY);
	ck_assert_int_eq(err.code, ASP_EHOSTKEY);
	ck_assert_int_eq(first, 0);
	ck_assert_msg(strstr(err.message, "[127.0.0.1]:2222") && strstr(err.message, kh) &&
		      strstr(err.message, fa) && strstr(err.message, fb) &&
		      strstr(err.message, "remove the old entry"), "message: %s", err.message);
	ck_assert_ptr_nonnull(strstr(err.message, "expected"));
	ck_assert(strstr(err.message, fa) < strstr(err.message, fb));
	after = read_file(kh, &na);
	ck_assert_uint_eq(na, nb);
	ck_assert_mem_eq(after, before, nb);
	free(before);
	free(after);

	/* Two known keys are both shown. */
	snprintf(text, sizeof(text), "h ssh-ed25519 %s\nh %s %s\n", a.b64, c.type, c.b64);
	write_file(kh, text, 0600);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "h", 22, b.blob, b.len, &err),
			 ASP_EHOSTKEY);
	ck_assert_msg(strstr(err.message, fa) && strstr(err.message, fc) &&
		      strstr(err.message, fb), "message: %s", err.message);
	key_free(&a);
	key_free(&b);
	key_free(&c);
}
END_TEST

START_TEST(test_verify_revoked)
{
	char *kh = path_in("known_hosts"), text[8192], fp[ASP_FINGERPRINT_MAX];
	asp_error err = { 0 };
	int first = -1;
	key k;

	gen_key(&k, "k", "-t ed25519");
	keygen_fingerprint(fp, k.pub);
	snprintf(text, sizeof(text), "[127.0.0.1]:2222 ssh-ed25519 %s\n@revoked * ssh-ed25519 %s\n",
		 k.b64, k.b64);
	write_file(kh, text, 0600);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), ASP_EHOSTKEY);
	ck_assert_int_eq(first, 0);
	ck_assert_msg(strstr(err.message, "revoked") && strstr(err.message, kh) &&
		      strstr(err.message, fp), "message: %s", err.message);
	/* Revoked for a host never seen too: it is not recorded. */
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "other", 22, k.blob, k.len, &err),
			 ASP_EHOSTKEY);
	ck_assert_int_eq(first, 0);
	key_free(&k);
}
END_TEST

START_TEST(test_verify_preserves_existing_bytes)
{
	static const char *const olds[] = {
		"# my hosts\r\nexample.com ssh-ed25519 AAAA comment\n\n  \t weird line\nno-newline",
		"# ends with a newline\n\n",
		"\xff\xfe binary-ish \x01 line\n",
	};
	char *kh = path_in("known_hosts"), want[16384];
	unsigned char *after;
	size_t i, n;
	asp_error err = { 0 };
	int first = 0;
	key k;

	gen_key(&k, "k", "-t ed25519");
	for (i = 0; i < sizeof(olds) / sizeof(olds[0]); i++) {
		size_t ol = strlen(olds[i]);

		write_file(kh, olds[i], 0644);
		ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob,
							 k.len, &err), 0);
		ck_assert_int_eq(first, 1);
		snprintf(want, sizeof(want), "%s%s[127.0.0.1]:2222 ssh-ed25519 %s\n", olds[i],
			 olds[i][ol - 1] == '\n' ? "" : "\n", k.b64);
		after = read_file(kh, &n);
		ck_assert_uint_eq(n, strlen(want));
		ck_assert_mem_eq(after, want, n);
		free(after);
		/* The existing file's mode is kept. */
		assert_mode(kh, 0644);
		ck_assert_int_eq(sh("ssh-keygen -F '[127.0.0.1]:2222' -f '%s' >/dev/null", kh), 0);
	}
	key_free(&k);
}
END_TEST

START_TEST(test_verify_refuses_writable_store)
{
	static const mode_t modes[] = { 0620, 0602, 0666 };
	char *kh = path_in("known_hosts"), text[8192];
	unsigned char *after;
	size_t i, n;
	asp_error err = { 0 };
	int first = 0;
	key k;

	gen_key(&k, "k", "-t ed25519");
	snprintf(text, sizeof(text), "[127.0.0.1]:2222 ssh-ed25519 %s\n", k.b64);
	for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		write_file(kh, text, modes[i]);
		/* Even a matching key is not trusted from such a file. */
		ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob,
							 k.len, &err), ASP_ECONFIG);
		ck_assert_msg(strstr(err.message, "writable by group or others") &&
			      strstr(err.message, kh), "message: %s", err.message);
		ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "new", 22, k.blob, k.len,
							 &err), ASP_ECONFIG);
		ck_assert_int_eq(first, 0);
		after = read_file(kh, &n);
		ck_assert_str_eq((char *)after, text);
		free(after);
	}
	key_free(&k);
}
END_TEST

START_TEST(test_verify_store_paths)
{
	char *real = path_in("real_known_hosts"), *link = path_in("link_known_hosts");
	char *blocker = path_in("file"), *under_file = path_in("file/known_hosts");
	unsigned char *text;
	struct stat st;
	size_t n;
	asp_error err = { 0 };
	int first = 0;
	key k;

	gen_key(&k, "k", "-t ed25519");
	/* A symlinked store is followed and stays a symlink. */
	write_file(real, "# real\n", 0600);
	ck_assert_int_eq(symlink(real, link), 0);
	ck_assert_int_eq(asp__known_hosts_verify(&first, link, "h", 2000, k.blob, k.len, &err), 0);
	ck_assert_int_eq(first, 1);
	ck_assert_int_eq(lstat(link, &st), 0);
	ck_assert(S_ISLNK(st.st_mode));
	text = read_file(real, &n);
	ck_assert_ptr_nonnull(strstr((char *)text, "[h]:2000 ssh-ed25519 "));
	free(text);
	ck_assert_int_eq(asp__known_hosts_verify(&first, link, "h", 2000, k.blob, k.len, &err), 0);
	ck_assert_int_eq(first, 0);

	/* A parent that is a file is a clear configuration error. */
	write_file(blocker, "x", 0600);
	ck_assert_int_eq(asp__known_hosts_verify(&first, under_file, "h", 2000, k.blob, k.len,
						 &err), ASP_ECONFIG);
	ck_assert_ptr_nonnull(strcasestr(err.message, "not a directory"));
	/* So is a directory where the file should be. */
	ck_assert_int_eq(asp__known_hosts_verify(&first, g_dir, "h", 2000, k.blob, k.len, &err),
			 ASP_ECONFIG);
	key_free(&k);
}
END_TEST

START_TEST(test_verify_bad_arguments)
{
	static const unsigned char junk[] = { 0, 0, 0, 99, 'x' };
	char *kh = path_in("sub/known_hosts");
	asp_error err = { 0 };
	int first = 0;
	key k;

	gen_key(&k, "k", "-t ed25519");
	/* Host names that would change the meaning of the line are never written. */
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "a,*", 22, k.blob, k.len, &err),
			 ASP_EINVAL);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "a b", 22, k.blob, k.len, &err),
			 ASP_EINVAL);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "|1|x|y", 22, k.blob, k.len, &err),
			 ASP_EINVAL);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "", 22, k.blob, k.len, &err),
			 ASP_EINVAL);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "h", 0, k.blob, k.len, &err),
			 ASP_EINVAL);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "h", 65536, k.blob, k.len, &err),
			 ASP_EINVAL);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "h", 22, NULL, 0, &err), ASP_EINVAL);
	ck_assert_int_eq(asp__known_hosts_verify(NULL, kh, "h", 22, k.blob, k.len, &err),
			 ASP_EINVAL);
	ck_assert_int_eq(asp__known_hosts_verify(&first, NULL, "h", 22, k.blob, k.len, &err),
			 ASP_EINVAL);
	/* A malformed key from the server fails closed. */
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "h", 22, junk, sizeof(junk), &err),
			 ASP_EHOSTKEY);
	ck_assert_int_eq(first, 0);
	/* Nothing was created by any of these. */
	ck_assert_int_eq(access(path_in("sub"), F_OK), -1);
	key_free(&k);
}
END_TEST

START_TEST(test_verify_concurrent_first_use)
{
	enum { N = 8 };
	char *kh = path_in("asp/known_hosts");
	unsigned char *text;
	size_t n;
	pid_t pids[N];
	int go[2], i, status;
	key k;

	gen_key(&k, "k", "-t ed25519");
	ck_assert_int_eq(pipe(go), 0);
	for (i = 0; i < N; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			asp_error err = { 0 };
			char c;
			int first = 0, rc;

			close(go[1]);
			/* Wait for the start signal so that all children race. */
			if (read(go[0], &c, 1) < 0)
				_exit(3);
			rc = asp__known_hosts_verify(&first, kh, "127.0.0.1", 3000u + (unsigned)i,
						     k.blob, k.len, &err);
			if (rc)
				fprintf(stderr, "child %d: %s\n", i, err.message);
			_exit(rc ? 1 : first == 1 ? 0 : 2);
		}
	}
	close(go[0]);
	close(go[1]); /* EOF releases every child at once */
	for (i = 0; i < N; i++) {
		ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "child %d failed with status %d", i, status);
	}

	text = read_file(kh, &n);
	for (i = 0; i < N; i++) {
		char host[64];

		ck_assert_int_eq(asp__known_hosts_check((char *)text, n, "127.0.0.1",
							3000u + (unsigned)i, k.blob, k.len),
				 ASP_KH_MATCH);
		snprintf(host, sizeof(host), "[127.0.0.1]:%d", 3000 + i);
		ck_assert_int_eq(sh("ssh-keygen -F '%s' -f '%s' >/dev/null", host, kh), 0);
	}
	/* Exactly N lines, and no temporary files. */
	for (i = 0, status = 0; (size_t)i < n; i++)
		status += text[i] == '\n';
	ck_assert_int_eq(status, N);
	ck_assert_int_eq(count_entries(path_in("asp"), ".tmp."), 2);
	assert_mode(kh, 0600);
	free(text);
	key_free(&k);
}
END_TEST

/* Changing owners needs root; the tests run as root (see tests/fixture). */
static int running_as_root(const char *test)
{
	if (geteuid() == 0)
		return 1;
	fprintf(stderr, "%s: skipped, needs root to give files to another user\n", test);
	return 0;
}

static uid_t nobody_uid(void)
{
	struct passwd *pw = getpwnam("nobody");

	ck_assert_ptr_nonnull(pw);
	return pw->pw_uid;
}

#define assert_has(msg, needle) \
	ck_assert_msg(strstr((msg), (needle)) != NULL, "expected \"%s\" in: %s", (needle), (msg))

/* A store another user owns is theirs to edit: not trusted, even for a matching key. */
START_TEST(test_verify_refuses_foreign_store)
{
	char *kh = path_in("known_hosts"), *link = path_in("link_known_hosts"), text[8192];
	char owner[128];
	unsigned char *after;
	size_t n;
	asp_error err = { 0 };
	int first = 0;
	key k;

	if (!running_as_root("test_verify_refuses_foreign_store"))
		return;
	gen_key(&k, "k", "-t ed25519");
	snprintf(text, sizeof(text), "[127.0.0.1]:2222 ssh-ed25519 %s\n", k.b64);
	write_file(kh, text, 0644);
	/* Control: ours, it is trusted. */
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), 0);
	ck_assert_int_eq(chown(kh, nobody_uid(), (gid_t)-1), 0);
	snprintf(owner, sizeof(owner), "owned by nobody (uid %u)", (unsigned int)nobody_uid());
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), ASP_ECONFIG);
	assert_has(err.message, kh);
	assert_has(err.message, owner);
	assert_has(err.message, "refusing to trust it");
	/* Nor is a new host recorded in it. */
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "new", 22, k.blob, k.len, &err),
			 ASP_ECONFIG);
	ck_assert_int_eq(first, 0);
	/* Reached through a symlink of ours, it is still theirs. */
	ck_assert_int_eq(symlink(kh, link), 0);
	ck_assert_int_eq(asp__known_hosts_verify(&first, link, "127.0.0.1", 2222, k.blob, k.len,
						 &err), ASP_ECONFIG);
	assert_has(err.message, owner);
	after = read_file(kh, &n);
	ck_assert_str_eq((char *)after, text);
	free(after);
	key_free(&k);
}
END_TEST

/* A symlink planted as the lock file is not followed: nothing is created where it points. */
START_TEST(test_verify_lock_symlink_planted)
{
	char *kh = path_in("known_hosts"), *lock = path_in("known_hosts.lock");
	char *victim = path_in("victim"), *existing = path_in("existing");
	asp_error err = { 0 };
	int first = 0;
	key k;

	gen_key(&k, "k", "-t ed25519");
	ck_assert_int_eq(symlink(victim, lock), 0);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), ASP_ECONFIG);
	assert_has(err.message, lock);
	assert_has(err.message, "is a symbolic link; refusing to follow it");
	ck_assert_int_eq(access(victim, F_OK), -1);
	ck_assert_int_eq(access(kh, F_OK), -1);
	ck_assert_int_eq(first, 0);

	/* Pointing at a file that exists, the same. */
	write_file(existing, "keep\n", 0600);
	ck_assert_int_eq(unlink(lock), 0);
	ck_assert_int_eq(symlink(existing, lock), 0);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), ASP_ECONFIG);
	assert_has(err.message, lock);
	ck_assert_int_eq(access(kh, F_OK), -1);

	/* Control: once it is gone, the first use is recorded. */
	ck_assert_int_eq(unlink(lock), 0);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), 0);
	ck_assert_int_eq(first, 1);
	key_free(&k);
}
END_TEST

/* A lock file another user planted is one they could hold forever: refused. */
START_TEST(test_verify_lock_foreign_owner)
{
	char *kh = path_in("known_hosts"), *lock = path_in("known_hosts.lock"), owner[128];
	asp_error err = { 0 };
	int first = 0;
	key k;

	if (!running_as_root("test_verify_lock_foreign_owner"))
		return;
	gen_key(&k, "k", "-t ed25519");
	write_file(lock, "", 0600);
	ck_assert_int_eq(chown(lock, nobody_uid(), (gid_t)-1), 0);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), ASP_ECONFIG);
	snprintf(owner, sizeof(owner), "owned by nobody (uid %u)", (unsigned int)nobody_uid());
	assert_has(err.message, lock);
	assert_has(err.message, owner);
	ck_assert_int_eq(access(kh, F_OK), -1);
	ck_assert_int_eq(chown(lock, 0, (gid_t)-1), 0);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), 0);
	ck_assert_int_eq(first, 1);
	key_free(&k);
}
END_TEST

/*
 * Another process holds the lock and does not let go: a first use gives
 * up with an error naming the lock file instead of waiting forever.
 */
START_TEST(test_verify_lock_held_gives_up)
{
	char *kh = path_in("known_hosts"), *lock = path_in("known_hosts.lock");
	asp_error err = { 0 };
	int ready[2], hold[2], first = 0, status;
	char c;
	pid_t pid;
	key k;

	gen_key(&k, "k", "-t ed25519");
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(hold), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(lock, O_RDWR | O_CREAT, 0600);

		close(ready[0]);
		close(hold[1]);
		if (fd < 0 || flock(fd, LOCK_EX) || write(ready[1], "L", 1) != 1)
			_exit(1);
		/* Hold it until the parent closes the pipe. */
		while (read(hold[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(ready[1]);
	close(hold[0]);
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	ck_assert_int_eq(kill(pid, 0), 0); /* the holder is alive */

	asp__known_hosts_lock_wait(300); /* not the 5 s a real first use waits */
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), ASP_ETIMEOUT);
	asp__known_hosts_lock_wait(0);
	assert_has(err.message, lock);
	assert_has(err.message, "still held by another process");
	ck_assert_int_eq(first, 0);
	ck_assert_int_eq(access(kh, F_OK), -1);
	ck_assert_int_eq(kill(pid, 0), 0); /* it failed while the lock was still held */

	/* Released, the same call records the key. */
	close(hold[1]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(asp__known_hosts_verify(&first, kh, "127.0.0.1", 2222, k.blob, k.len,
						 &err), 0);
	ck_assert_int_eq(first, 1);
	close(ready[0]);
	key_free(&k);
}
END_TEST

Suite *suite_hostkey(void);
Suite *suite_hostkey(void)
{
	Suite *s = suite_create("hostkey");
	TCase *pure = tcase_create("fingerprint_pin");
	TCase *kh = tcase_create("known_hosts_check");
	TCase *store = tcase_create("known_hosts_store");

	tcase_add_checked_fixture(pure, setup, teardown);
	tcase_set_timeout(pure, 60);
	tcase_add_test(pure, test_fingerprint_matches_ssh_keygen);
	tcase_add_test(pure, test_fingerprint_bad_args);
	tcase_add_test(pure, test_blob_type_validates_lengths);
	tcase_add_test(pure, test_pin_parse_key_line);
	tcase_add_test(pure, test_pin_parse_type_disagrees);
	tcase_add_test(pure, test_pin_parse_fingerprint);
	tcase_add_test(pure, test_pin_parse_rejects_md5);
	tcase_add_test(pure, test_pin_parse_garbage);
	tcase_add_test(pure, test_pin_parse_private_key_not_echoed);
	tcase_add_test(pure, test_pin_matches);
	suite_add_tcase(s, pure);

	tcase_add_checked_fixture(kh, setup, teardown);
	tcase_set_timeout(kh, 30);
	tcase_add_test(kh, test_kh_plain_and_ports);
	tcase_add_test(kh, test_kh_hashed_by_ssh_keygen);
	tcase_add_test(kh, test_kh_wildcards_negation_case);
	tcase_add_test(kh, test_kh_markers);
	tcase_add_test(kh, test_kh_mismatch_and_types);
	tcase_add_test(kh, test_kh_malformed_lines_skipped);
	suite_add_tcase(s, kh);

	tcase_add_checked_fixture(store, setup, teardown);
	tcase_set_timeout(store, 30);
	tcase_add_test(store, test_kh_path_resolution);
	tcase_add_test(store, test_verify_first_use_then_match);
	tcase_add_test(store, test_verify_port_22_is_plain);
	tcase_add_test(store, test_verify_mismatch_fails_closed);
	tcase_add_test(store, test_verify_revoked);
	tcase_add_test(store, test_verify_preserves_existing_bytes);
	tcase_add_test(store, test_verify_refuses_writable_store);
	tcase_add_test(store, test_verify_store_paths);
	tcase_add_test(store, test_verify_bad_arguments);
	tcase_add_test(store, test_verify_concurrent_first_use);
	tcase_add_test(store, test_verify_refuses_foreign_store);
	tcase_add_test(store, test_verify_lock_symlink_planted);
	tcase_add_test(store, test_verify_lock_foreign_owner);
	tcase_add_test(store, test_verify_lock_held_gives_up);
	tcase_add_test(store, test_home_dir_rule);
	suite_add_tcase(s, store);
	return s;
}
