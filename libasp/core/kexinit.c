/*
 * kexinit.c - read the server's identification line and SSH_MSG_KEXINIT
 * from the plain bytes it sends first, and say which algorithm category has
 * nothing in common with this libssh2 and how to fix it (see kexinit.h).
 */
#include "kexinit.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define SSH_MSG_KEXINIT 20
#define LINE_MAX_LEN 1024 /* RFC 4253 says 255; be lenient, but bounded */

static uint32_t get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int printable(const unsigned char *p, size_t n, int space_ok)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] < (space_ok ? 0x20 : 0x21) || p[i] > 0x7e)
			return 0;
	return 1;
}

/* The identification line: *body_off is where the binary packet starts. */
static int parse_banner(const unsigned char *buf, size_t len, asp_kexinit *out, size_t *body_off)
{
	size_t pos = 0;

	for (;;) {
		const unsigned char *nl = memchr(buf + pos, '\n', len - pos);
		size_t end, n;

		if (!nl)
			return len - pos > LINE_MAX_LEN ? ASP_KEXINIT_BAD : ASP_KEXINIT_MORE;
		end = (size_t)(nl - buf);
		n = end - pos;
		if (n > LINE_MAX_LEN)
			return ASP_KEXINIT_BAD;
		if (n && buf[end - 1] == '\r')
			n--;
		if (n >= 4 && !memcmp(buf + pos, "SSH-", 4)) {
			if (!((n >= 8 && !memcmp(buf + pos, "SSH-2.0-", 8)) ||
			      (n >= 9 && !memcmp(buf + pos, "SSH-1.99-", 9))) ||
			    !printable(buf + pos, n, 1))
				return ASP_KEXINIT_BAD;
			out->banner.names = (const char *)buf + pos;
			out->banner.len = n;
			*body_off = end + 1;
			return ASP_KEXINIT_OK;
		}
		pos = end + 1;
	}
}

int asp__kexinit_parse(const unsigned char *buf, size_t len, asp_kexinit *out)
{
	size_t off = 0, plen, pad, payload, at;
	const unsigned char *p;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = parse_banner(buf, len, out, &off)) != ASP_KEXINIT_OK)
		return rc;
	if (len - off < 5)
		return ASP_KEXINIT_MORE;
	plen = get_u32(buf + off);
	pad = buf[off + 4];
	/* padding_length counts in packet_length, and at least 4 bytes (RFC 4253 6). */
	if (plen > ASP_KEXINIT_CAPTURE_MAX || plen < 1 + pad + 1 || pad < 4)
		return ASP_KEXINIT_BAD;
	if (len - off - 4 < plen)
		return ASP_KEXINIT_MORE;
	p = buf + off + 5;
	payload = plen - pad - 1;
	if (payload < 17 || p[0] != SSH_MSG_KEXINIT)
		return ASP_KEXINIT_BAD;
	at = 17; /* type and 16-byte cookie */
	for (int i = 0; i < 10; i++) {
		uint32_t n;

		if (payload - at < 4)
			return ASP_KEXINIT_BAD;
		n = get_u32(p + at);
		at += 4;
		if (n > payload - at || !printable(p + at, n, 0))
			return ASP_KEXINIT_BAD;
		if (i < 8) {
			out->list[i].names = (const char *)p + at;
			out->list[i].len = n;
		}
		at += n;
	}
	return ASP_KEXINIT_OK;
}

/* ------------------------------------------------------------ names */

/* The next name of a comma-separated list: [*s, *s + *n); 0 at the end. */
static int next_name(const char **s, const char *end, size_t *n)
{
	const char *c;

	while (*s < end && **s == ',')
		(*s)++;
	if (*s >= end)
		return 0;
	c = memchr(*s, ',', (size_t)(end - *s));
	*n = (size_t)((c ? c : end) - *s);
	return 1;
}

static int has_name(const char *list, size_t len, const char *name, size_t n)
{
	const char *s = list, *end = list + len;
	size_t m;

	for (; next_name(&s, end, &m); s += m)
		if (m == n && !memcmp(s, name, n))
			return 1;
	return 0;
}

static int contains(const asp_kexinit_list *l, const char *needle)
{
	size_t n = strlen(needle);

	for (size_t i = 0; i + n <= l->len; i++)
		if (!memcmp(l->names + i, needle, n))
			return 1;
	return 0;
}

/* Markers in the kex list that are no algorithms (RFC 8308, OpenSSH's strict kex). */
static int pseudo(const char *s, size_t n)
{
	return (n >= 9 && !memcmp(s, "ext-info-", 9)) || (n >= 11 && !memcmp(s, "kex-strict-", 11));
}

/* The first of the client's names the server offers too (client order decides). */
static int first_common(const asp_kexinit_list *server, const char *client, const char **name,
			size_t *n)
{
	const char *s = client, *end = client + strlen(client);
	size_t m;

	for (; next_name(&s, end, &m); s += m)
		if (!pseudo(s, m) && has_name(server->names, server->len, s, m)) {
			*name = s;
			*n = m;
			return 1;
		}
	return 0;
}

static int aead(const char *s, size_t n)
{
	static const char *const names[] = { "aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
					     "chacha20-poly1305@openssh.com" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == n && !memcmp(s, names[i], n))
			return 1;
	return 0;
}

/* ------------------------------------------------------------ output */

typedef struct out_buf {
	char *p;
	size_t size, len;
} out_buf;

static void put(out_buf *o, const char *s, size_t n)
{
	size_t room = o->size - o->len - 1;

	if (n > room)
		n = room;
	memcpy(o->p + o->len, s, n);
	o->len += n;
	o->p[o->len] = 0;
}

static void puts_(out_buf *o, const char *s)
{
	put(o, s, strlen(s));
}

/* "a, b, c" from a comma list, pseudo names left out; at most `budget` bytes of names. */
static void put_list(out_buf *o, const char *list, size_t len, size_t budget)
{
	const char *s = list, *end = list + len;
	size_t n, used = 0, shown = 0, left = 0;

	for (; next_name(&s, end, &n); s += n) {
		if (pseudo(s, n))
			continue;
		if (shown && used + n > budget) {
			left++;
			continue;
		}
		if (shown)
			puts_(o, ", ");
		put(o, s, n);
		used += n + 2;
		shown++;
	}
	if (!shown)
		puts_(o, "nothing");
	if (left) {
		char more[32];
		snprintf(more, sizeof(more), " and %zu more", left);
		puts_(o, more);
	}
}

static const char *const category_name[ASP_KEXINIT_NCAT] = {
	"key exchange method", "host key algorithm", "cipher", "MAC", "compression method"
};

/* The likely fix: a newer libssh2 where one has the server's names, else the server's setting. */
static void put_fix(out_buf *o, int cat, const asp_kexinit_list *srv, const asp_kexinit_client *cl)
{
	switch (cat) {
	case ASP_KEXINIT_KEX:
		puts_(o, "enable curve25519-sha256 or ecdh-sha2-nistp256 on the server "
			 "(sshd_config KexAlgorithms)");
		break;
	case ASP_KEXINIT_HOSTKEY:
		if (!cl->v111 && contains(srv, "rsa-sha2-"))
			puts_(o, "libssh2 >= 1.11 adds rsa-sha2-256/512 (RSA host keys of OpenSSH >= 8.8), or ");
		puts_(o, "give the server an ed25519 or ECDSA host key and offer it (ssh-keygen -t "
			 "ed25519; sshd_config HostKey, HostKeyAlgorithms ssh-ed25519)");
		break;
	case ASP_KEXINIT_CIPHER:
		if (contains(srv, "chacha20-poly1305"))
			puts_(o, "this libssh2 has no chacha20-poly1305; ");
		if (!cl->v111 && contains(srv, "-gcm@openssh.com"))
			puts_(o, "libssh2 >= 1.11 adds AES-GCM, or ");
		puts_(o, "enable aes256-ctr or aes128-ctr on the server (sshd_config Ciphers)");
		break;
	case ASP_KEXINIT_MAC:
		if (!cl->v111 && contains(srv, "-etm@openssh.com"))
			puts_(o, "libssh2 >= 1.11 adds hmac-sha2-256-etm@openssh.com and "
				 "hmac-sha2-512-etm@openssh.com, or ");
		puts_(o, "enable hmac-sha2-256 or hmac-sha2-512 on the server (sshd_config MACs)");
		break;
	default:
		puts_(o, "allow no compression on the server (sshd_config Compression no)");
		break;
	}
}

/* The server list of category `cat` that has no name in common, or NULL; *dir says which. */
static const asp_kexinit_list *no_overlap(const asp_kexinit *k, const asp_kexinit_client *cl, int cat,
					  const char **dir)
{
	static const int first[ASP_KEXINIT_NCAT] = { 0, 1, 2, 4, 6 };
	int two = cat >= ASP_KEXINIT_CIPHER;
	const char *name;
	size_t n;

	*dir = "";
	if (!cl->names[cat])
		return NULL;
	for (int d = 0; d <= two; d++) {
		const asp_kexinit_list *l = &k->list[first[cat] + d];

		/* An AEAD cipher brings its own integrity: the MAC lists do not matter then. */
		if (cat == ASP_KEXINIT_MAC && cl->names[ASP_KEXINIT_CIPHER] &&
		    first_common(&k->list[2 + d], cl->names[ASP_KEXINIT_CIPHER], &name, &n) &&
		    aead(name, n))
			continue;
		if (first_common(l, cl->names[cat], &name, &n))
			continue;
		if (two && (l->len != k->list[first[cat] + !d].len ||
			    memcmp(l->names, k->list[first[cat] + !d].names, l->len)))
			*dir = d ? " (server to client)" : " (client to server)";
		return l;
	}
	return NULL;
}

int asp__kexinit_diagnose(const asp_kexinit *k, const asp_kexinit_client *cl, char *out,
			  size_t outlen)
{
	out_buf o = { out, outlen, 0 };
	const char *dir;

	if (!outlen)
		return -1;
	for (int cat = 0; cat < ASP_KEXINIT_NCAT; cat++) {
		const asp_kexinit_list *srv = no_overlap(k, cl, cat, &dir);

		if (!srv)
			continue;
		out[0] = 0;
		puts_(&o, "no ");
		puts_(&o, category_name[cat]);
		puts_(&o, " in common: the server offers");
		puts_(&o, dir);
		puts_(&o, " ");
		put_list(&o, srv->names, srv->len, 160);
		puts_(&o, "; libssh2 ");
		puts_(&o, cl->version ? cl->version : "");
		puts_(&o, " supports ");
		put_list(&o, cl->names[cat], strlen(cl->names[cat]), 110);
		puts_(&o, "; fix: ");
		put_fix(&o, cat, srv, cl);
		return cat;
	}
	return -1;
}
