/*
 * pin.c - host-key fingerprints and connection.host_key pins: parsing an
 * OpenSSH public key line or a SHA256 fingerprint, and matching a received
 * key against it (in constant time). No I/O.
 */
#include "ascii.h"
#include "pin.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#define SHA256_LEN 32

/* ------------------------------------------------------------ small helpers */

static int ascii_ncaseeq(const char *a, const char *b, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (asp__ascii_lower(a[i]) != asp__ascii_lower(b[i]))
			return 0;
	return 1;
}

static int sha256(unsigned char md[SHA256_LEN], const unsigned char *data, size_t len)
{
	return EVP_Digest(data, len, md, NULL, EVP_sha256(), NULL) == 1 ? 0 : ASP_ERROR;
}

/* Key type names: the characters OpenSSH uses ("ecdsa-sha2-nistp256", "x@y.com"). */
static int is_type_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_' || c == '.' || c == '@' || c == '+';
}

int asp__key_type_name(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || n >= ASP_KEY_TYPE_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if (!is_type_char(s[i]))
			return 0;
	return 1;
}

/* --------------------------------------------------------------- fingerprints */

int asp__fingerprint(char out[ASP_FINGERPRINT_MAX], const unsigned char *blob, size_t len)
{
	unsigned char md[SHA256_LEN];
	char *b64;
	size_t n;

	if (!out || (!blob && len))
		return ASP_EINVAL;
	if (sha256(md, blob, len))
		return ASP_ERROR;
	if (!(b64 = asp__base64_encode(md, sizeof(md), 0)))
		return ASP_ENOMEM;
	n = strlen(b64);
	memcpy(out, "SHA256:", 7);
	memcpy(out + 7, b64, n + 1);
	asp__free(b64);
	return 0;
}

int asp__blob_type(char *out, size_t outlen, const unsigned char *blob, size_t len)
{
	uint32_t n;
	size_t i;

	if (!out || outlen == 0 || !blob || len < 4)
		return ASP_EINVAL;
	n = (uint32_t)blob[0] << 24 | (uint32_t)blob[1] << 16 | (uint32_t)blob[2] << 8 | blob[3];
	if (n == 0 || n > len - 4 || n >= outlen)
		return ASP_EINVAL;
	for (i = 0; i < n; i++)
		if (blob[4 + i] <= 0x20 || blob[4 + i] >= 0x7f)
			return ASP_EINVAL;
	memcpy(out, blob + 4, n);
	out[n] = '\0';
	return 0;
}

/* ----------------------------------------------------------------------- pins */

#define PIN_EXPECTED \
	"expected an OpenSSH public key line (\"ssh-ed25519 AAAA...\") or a fingerprint (\"SHA256:...\")"

/*
 * A short printable excerpt of user input for messages: the first line,
 * at most 40 characters, non-printable bytes shown as '?'.
 */
static void excerpt(char out[48], const char *s, size_t n)
{
	size_t i, o = 0;

	for (i = 0; i < n && s[i] != '\n' && s[i] != '\r' && o < 40; i++)
		out[o++] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"') ? s[i] : '?';
	if (i < n) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

/* The generic complaint, with an optional detail in parentheses. */
static int pin_expected_error(asp_error *err, const char *s, size_t n, const char *detail)
{
	char ex[48];

	excerpt(ex, s, n);
	return asp__error(err, ASP_ECONFIG, PIN_EXPECTED ", got \"%s\"%s%s%s", ex,
			  detail ? " (" : "", detail ? detail : "", detail ? ")" : "");
}

/* "aa:bb:...:ff", the legacy MD5 form ssh-keygen -E md5 prints without the prefix. */
static int is_md5_hex(const char *s, size_t n)
{
	size_t i;

	if (n != 47)
		return 0;
	for (i = 0; i < n; i++) {
		char c = asp__ascii_lower(s[i]);
		if (i % 3 == 2 ? c != ':' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
	}
	return 1;
}

static int pin_parse_fingerprint(asp_pin *out, const char *s, size_t n, asp_error *err)
{
	unsigned char *md = NULL;
	size_t md_len = 0, b = n - 7;
	int rc;

	if (!(b == 43 || (b == 44 && s[n - 1] == '=')))
		return asp__error(err, ASP_ECONFIG,
				  "a SHA256 fingerprint has 43 base64 characters after \"SHA256:\", "
				  "got %zu", b);
	rc = asp__base64_decode(&md, &md_len, s + 7, b);
	if (rc == ASP_ENOMEM)
		return asp__error(err, rc, "out of memory");
	if (rc || md_len != SHA256_LEN) {
		asp__free(md);
		return asp__error(err, ASP_ECONFIG,
				  "the SHA256 fingerprint is not valid base64 (expected \"SHA256:\" "
				  "and 43 characters of A-Z a-z 0-9 + /)");
	}
	out->is_fingerprint = 1;
	memcpy(out->sha256, md, SHA256_LEN);
	asp__free(md);
	return 0;
}

/* A blob of the given type, decoded from base64, with its type checked. */
static int pin_parse_key(asp_pin *out, const char *line, size_t line_len, size_t type_len,
			 const char *b64, size_t b64_len, asp_error *err)
{
	const char *type = line;
	unsigned char *blob = NULL;
	size_t len = 0;
	char inner[ASP_KEY_TYPE_MAX];
	int rc;

	rc = asp__base64_decode(&blob, &len, b64, b64_len);
	if (rc == ASP_ENOMEM)
		return asp__error(err, rc, "out of memory");
	if (rc)
		return pin_expected_error(err, line, line_len, "the key is not valid base64");
	if (asp__blob_type(inner, sizeof(inner), blob, len)) {
		asp__free(blob);
		return pin_expected_error(err, line, line_len,
					  "the key data is not an SSH public key");
	}
	if (strlen(inner) != type_len || memcmp(inner, type, type_len)) {
		asp__free(blob);
		return asp__error(err, ASP_ECONFIG,
				  "the key type \"%.*s\" does not match the type inside the key "
				  "data, \"%s\"", (int)type_len, type, inner);
	}
	if (type_len >= sizeof(out->type)) {
		asp__free(blob);
		return asp__error(err, ASP_ECONFIG,
				  "unsupported key type \"%.*s\"; pin the host's plain public key "
				  "(e.g. ssh-ed25519), not a certificate", (int)type_len, type);
	}
	if (sha256(out->sha256, blob, len)) {
		asp__free(blob);
		return asp__error(err, ASP_ERROR, "SHA-256 failed");
	}
	memcpy(out->type, type, type_len);
	out->type[type_len] = '\0';
	out->blob = blob;
	out->blob_len = len;
	return 0;
}

/* Split "TYPE BASE64 [comment]" and parse it. */
static int pin_parse_line(asp_pin *out, const char *s, size_t n, asp_error *err)
{
	size_t t = 0, k, klen;

	while (t < n && !asp__ascii_blank(s[t]))
		t++;
	k = t;
	while (k < n && asp__ascii_blank(s[k]))
		k++;
	klen = 0;
	while (k + klen < n && !asp__ascii_blank(s[k + klen]))
		klen++;
	if (!asp__key_type_name(s, t) || klen == 0)
		return pin_expected_error(err, s, n, NULL);
	return pin_parse_key(out, s, n, t, s + k, klen, err);
}

int asp__pin_parse(asp_pin *out, const char *text, asp_error *err)
{
	const char *s;
	size_t n;

	ASP_ASSERT_ARG(out);
	memset(out, 0, sizeof(*out));
	ASP_ASSERT_ARG(text);
	s = text;
	n = strlen(text);
	while (n > 0 && (asp__ascii_blank(*s) || *s == '\n' || *s == '\r')) {
		s++;
		n--;
	}
	while (n > 0 && (asp__ascii_blank(s[n - 1]) || s[n - 1] == '\n' || s[n - 1] == '\r'))
		n--;
	/* Never echo a private key back, not even its first characters. */
	if (n >= 10 && !memcmp(s, "-----BEGIN", 10))
		return asp__error(err, ASP_ECONFIG,
				  PIN_EXPECTED " holding the server's public host key, got a PEM "
				  "block (\"-----BEGIN ...\")");
	if (memchr(s, '\n', n) || memchr(s, '\r', n))
		return asp__error(err, ASP_ECONFIG, PIN_EXPECTED ", got several lines");
	if ((n >= 4 && ascii_ncaseeq(s, "MD5:", 4)) || is_md5_hex(s, n))
		return asp__error(err, ASP_ECONFIG,
				  "only SHA256 fingerprints are accepted (\"SHA256:...\", as printed "
				  "by ssh-keygen -lf), got an MD5 fingerprint");
	if (n >= 7 && ascii_ncaseeq(s, "SHA256:", 7))
		return pin_parse_fingerprint(out, s, n, err);
	return pin_parse_line(out, s, n, err);
}

void asp__pin_clear(asp_pin *pin)
{
	if (!pin)
		return;
	asp__free(pin->blob);
	memset(pin, 0, sizeof(*pin));
}

int asp__pin_matches(const asp_pin *pin, const unsigned char *blob, size_t len)
{
	unsigned char md[SHA256_LEN];

	if (!pin || !blob)
		return 0;
	if (!pin->is_fingerprint)
		return pin->blob && len == pin->blob_len && CRYPTO_memcmp(pin->blob, blob, len) == 0;
	if (sha256(md, blob, len))
		return 0;
	return CRYPTO_memcmp(md, pin->sha256, SHA256_LEN) == 0;
}
