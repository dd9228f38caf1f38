/*
 * test_kexinit.c - reading a server's identification line and KEXINIT
 * from raw bytes (asp__kexinit_parse), and the sentence that names the
 * category with nothing in common and its fix (asp__kexinit_diagnose).
 * The server offers are those of real servers: tinysshd 20230101 and
 * OpenSSH 9.2 restricted in sshd_config.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kexinit.h"

/* libssh2 1.10.0's lists (libssh2_session_supported_algs), as conn.c passes them. */
static const asp_kexinit_client libssh2_110 = {
	.names = {
		"ecdh-sha2-nistp256,ecdh-sha2-nistp384,ecdh-sha2-nistp521,curve25519-sha256,"
		"curve25519-sha256@libssh.org,diffie-hellman-group16-sha512,"
		"diffie-hellman-group18-sha512,diffie-hellman-group-exchange-sha256,"
		"diffie-hellman-group14-sha256,diffie-hellman-group14-sha1,diffie-hellman-group1-sha1,"
		"diffie-hellman-group-exchange-sha1",
		"ssh-ed25519,ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,ecdsa-sha2-nistp521,ssh-rsa",
		"aes128-ctr,aes192-ctr,aes256-ctr,aes256-cbc,rijndael-cbc@lysator.liu.se,aes192-cbc,"
		"aes128-cbc,arcfour,arcfour128,cast128-cbc,3des-cbc,blowfish-cbc",
		"hmac-sha2-256,hmac-sha2-512,hmac-sha1,hmac-sha1-96,hmac-md5,hmac-md5-96,"
		"hmac-ripemd160,hmac-ripemd160@openssh.com",
		"none",
	},
	.version = "1.10.0",
	.v111 = 0,
};

typedef struct offer {
	const char *pre;   /* lines before the identification line, or NULL */
	const char *banner;
	const char *lists[10];
	unsigned char type; /* 0 = 20 */
	unsigned char pad;  /* 0 = 4 */
} offer;

static void put_u32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

/* What the server writes: lines, banner CR LF, one unencrypted packet. */
static size_t wire(const offer *o, unsigned char *buf, size_t cap)
{
	size_t len = (size_t)snprintf((char *)buf, cap, "%s%s\r\n", o->pre ? o->pre : "", o->banner);
	size_t start = len, at;
	unsigned char pad = o->pad ? o->pad : 4;

	at = start + 5;
	buf[at++] = o->type ? o->type : 20;
	memset(buf + at, 0xab, 16); /* cookie */
	at += 16;
	for (int i = 0; i < 10; i++) {
		const char *l = o->lists[i] ? o->lists[i] : "";
		put_u32(buf + at, (uint32_t)strlen(l));
		memcpy(buf + at + 4, l, strlen(l));
		at += 4 + strlen(l);
	}
	buf[at++] = 0; /* first_kex_packet_follows */
	put_u32(buf + at, 0);
	at += 4;
	memset(buf + at, 0, pad);
	at += pad;
	put_u32(buf + start, (uint32_t)(at - start - 4));
	buf[start + 4] = pad;
	ck_assert_uint_lt(at, cap);
	return at;
}

static const offer tinysshd = {
	.banner = "SSH-2.0-tinyssh_20230101-1 sLInAgTW",
	.lists = { "curve25519-sha256,curve25519-sha256@libssh.org,sntrup761x25519-sha512@openssh.com",
		   "ssh-ed25519", "chacha20-poly1305@openssh.com", "chacha20-poly1305@openssh.com",
		   "hmac-sha2-256", "hmac-sha2-256", "none", "none" },
};

/* OpenSSH 9.2 with sshd_config `X` restricted; the rest its defaults (shortened). */
#define OPENSSH_KEX "curve25519-sha256,ecdh-sha2-nistp256,kex-strict-s-v00@openssh.com"
#define OPENSSH_CIPHERS "chacha20-poly1305@openssh.com,aes128-ctr,aes256-ctr,aes256-gcm@openssh.com"
#define OPENSSH_MACS "umac-64-etm@openssh.com,hmac-sha2-256-etm@openssh.com,hmac-sha2-256"

static offer openssh(const char *kex, const char *hostkey, const char *ciphers, const char *macs)
{
	offer o = {
		.banner = "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3",
		.lists = { kex ? kex : OPENSSH_KEX, hostkey ? hostkey : "ssh-ed25519",
			   ciphers ? ciphers : OPENSSH_CIPHERS, ciphers ? ciphers : OPENSSH_CIPHERS,
			   macs ? macs : OPENSSH_MACS, macs ? macs : OPENSSH_MACS, "none,zlib@openssh.com",
			   "none,zlib@openssh.com" },
	};
	return o;
}

static int list_is(const asp_kexinit_list *l, const char *want)
{
	return l->len == strlen(want) && !memcmp(l->names, want, l->len);
}

START_TEST(test_parse_tinysshd)
{
	unsigned char buf[4096];
	size_t n = wire(&tinysshd, buf, sizeof(buf));
	asp_kexinit k;

	ck_assert_int_eq(asp__kexinit_parse(buf, n, &k), ASP_KEXINIT_OK);
	ck_assert(list_is(&k.banner, tinysshd.banner));
	for (int i = 0; i < 8; i++)
		ck_assert_msg(list_is(&k.list[i], tinysshd.lists[i]), "list %d", i);
	/* Bytes behind the packet (the next packet) do not matter. */
	ck_assert_int_eq(asp__kexinit_parse(buf, n + 3, &k), ASP_KEXINIT_OK);
}
END_TEST

START_TEST(test_parse_every_prefix_wants_more)
{
	unsigned char buf[4096];
	offer o = tinysshd;
	asp_kexinit k;
	size_t n;

	o.pre = "Welcome, this is not SSH yet\r\nsecond line\n";
	n = wire(&o, buf, sizeof(buf));
	/* libssh2 reads the banner a byte at a time, then the packet in chunks. */
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(asp__kexinit_parse(buf, i, &k) == ASP_KEXINIT_MORE, "prefix %zu", i);
	ck_assert_int_eq(asp__kexinit_parse(buf, n, &k), ASP_KEXINIT_OK);
	ck_assert(list_is(&k.banner, tinysshd.banner));
	ck_assert(list_is(&k.list[2], "chacha20-poly1305@openssh.com"));
}
END_TEST

START_TEST(test_parse_rejects)
{
	unsigned char buf[4096];
	asp_kexinit k;
	offer o;
	size_t n;

	o = tinysshd;
	o.banner = "SSH-1.5-old";
	n = wire(&o, buf, sizeof(buf));
	ck_assert_int_eq(asp__kexinit_parse(buf, n, &k), ASP_KEXINIT_BAD);

	o = tinysshd;
	o.type = 21; /* NEWKEYS first */
	n = wire(&o, buf, sizeof(buf));
	ck_assert_int_eq(asp__kexinit_parse(buf, n, &k), ASP_KEXINIT_BAD);

	o = tinysshd;
	o.lists[2] = "chacha20\x1b[31m"; /* escape codes never reach a message */
	n = wire(&o, buf, sizeof(buf));
	ck_assert_int_eq(asp__kexinit_parse(buf, n, &k), ASP_KEXINIT_BAD);

	o = tinysshd;
	o.pad = 2; /* padding is at least 4 bytes */
	n = wire(&o, buf, sizeof(buf));
	ck_assert_int_eq(asp__kexinit_parse(buf, n, &k), ASP_KEXINIT_BAD);

	/* A name-list longer than the packet. */
	o = tinysshd;
	n = wire(&o, buf, sizeof(buf));
	put_u32(buf + strlen(o.banner) + 2 + 5 + 17, 3000);
	ck_assert_int_eq(asp__kexinit_parse(buf, n, &k), ASP_KEXINIT_BAD);

	/* A packet longer than anything captured. */
	o = tinysshd;
	n = wire(&o, buf, sizeof(buf));
	put_u32(buf + strlen(o.banner) + 2, ASP_KEXINIT_CAPTURE_MAX + 1);
	ck_assert_int_eq(asp__kexinit_parse(buf, n, &k), ASP_KEXINIT_BAD);

	/* An endless line before the banner. */
	memset(buf, 'x', 2000);
	ck_assert_int_eq(asp__kexinit_parse(buf, 2000, &k), ASP_KEXINIT_BAD);
	ck_assert_int_eq(asp__kexinit_parse(buf, 100, &k), ASP_KEXINIT_MORE);
}
END_TEST

static int diagnose(const offer *o, const asp_kexinit_client *cl, char *out, size_t outlen)
{
	unsigned char buf[4096];
	size_t n = wire(o, buf, sizeof(buf));
	asp_kexinit k;

	ck_assert_int_eq(asp__kexinit_parse(buf, n, &k), ASP_KEXINIT_OK);
	return asp__kexinit_diagnose(&k, cl, out, outlen);
}

#define ck_assert_has(hay, needle) ck_assert_msg(strstr(hay, needle), "no \"%s\" in: %s", needle, hay)

START_TEST(test_diagnose_cipher_chacha_only)
{
	char msg[512];

	ck_assert_int_eq(diagnose(&tinysshd, &libssh2_110, msg, sizeof(msg)), ASP_KEXINIT_CIPHER);
	ck_assert_has(msg, "no cipher in common");
	ck_assert_has(msg, "the server offers chacha20-poly1305@openssh.com;");
	ck_assert_has(msg, "libssh2 1.10.0 supports aes128-ctr, aes192-ctr");
	ck_assert_has(msg, "no chacha20-poly1305");
	ck_assert_has(msg, "enable aes256-ctr or aes128-ctr on the server (sshd_config Ciphers)");
	/* AES-GCM would not help against this server: not suggested. */
	ck_assert_msg(!strstr(msg, "AES-GCM"), "%s", msg);
}
END_TEST

START_TEST(test_diagnose_cipher_gcm_names_the_newer_libssh2)
{
	offer o = openssh(NULL, NULL, "aes256-gcm@openssh.com", NULL);
	asp_kexinit_client newer = libssh2_110;
	char msg[512];

	ck_assert_int_eq(diagnose(&o, &libssh2_110, msg, sizeof(msg)), ASP_KEXINIT_CIPHER);
	ck_assert_has(msg, "libssh2 >= 1.11 adds AES-GCM");
	newer.v111 = 1;
	ck_assert_int_eq(diagnose(&o, &newer, msg, sizeof(msg)), ASP_KEXINIT_CIPHER);
	ck_assert_msg(!strstr(msg, ">= 1.11"), "%s", msg);
	/* Once the client has it, nothing is wrong. */
	newer.names[ASP_KEXINIT_CIPHER] = "aes256-gcm@openssh.com,aes128-ctr";
	ck_assert_int_eq(diagnose(&o, &newer, msg, sizeof(msg)), -1);
}
END_TEST

START_TEST(test_diagnose_kex_hides_markers)
{
	offer o = openssh("sntrup761x25519-sha512@openssh.com,kex-strict-s-v00@openssh.com,ext-info-s",
			  NULL, NULL, NULL);
	char msg[512];

	ck_assert_int_eq(diagnose(&o, &libssh2_110, msg, sizeof(msg)), ASP_KEXINIT_KEX);
	ck_assert_has(msg, "no key exchange method in common: the server offers "
			   "sntrup761x25519-sha512@openssh.com;");
	ck_assert_has(msg, "sshd_config KexAlgorithms");
	ck_assert_msg(!strstr(msg, "kex-strict") && !strstr(msg, "ext-info"), "%s", msg);
	/* libssh2's long list is cut short, with a count of the rest. */
	ck_assert_has(msg, " and ");
}
END_TEST

START_TEST(test_diagnose_mac_etm)
{
	offer o = openssh(NULL, NULL, "aes128-ctr", "hmac-sha2-256-etm@openssh.com,umac-128-etm@openssh.com");
	char msg[512];

	ck_assert_int_eq(diagnose(&o, &libssh2_110, msg, sizeof(msg)), ASP_KEXINIT_MAC);
	ck_assert_has(msg, "no MAC in common: the server offers hmac-sha2-256-etm@openssh.com, "
			   "umac-128-etm@openssh.com;");
	ck_assert_has(msg, "libssh2 >= 1.11 adds hmac-sha2-256-etm@openssh.com");
	ck_assert_has(msg, "sshd_config MACs");
}
END_TEST

START_TEST(test_diagnose_mac_ignored_under_aead)
{
	offer o = openssh(NULL, NULL, "aes256-gcm@openssh.com", "umac-128-etm@openssh.com");
	asp_kexinit_client gcm = libssh2_110;
	char msg[512];

	gcm.names[ASP_KEXINIT_CIPHER] = "aes256-gcm@openssh.com,aes128-ctr";
	ck_assert_int_eq(diagnose(&o, &gcm, msg, sizeof(msg)), -1);
	/* With a plain cipher chosen the MAC matters again. */
	o.lists[2] = o.lists[3] = "aes128-ctr,aes256-gcm@openssh.com";
	gcm.names[ASP_KEXINIT_CIPHER] = "aes128-ctr,aes256-gcm@openssh.com";
	ck_assert_int_eq(diagnose(&o, &gcm, msg, sizeof(msg)), ASP_KEXINIT_MAC);
}
END_TEST

START_TEST(test_diagnose_hostkey_rsa_sha2)
{
	offer o = openssh(NULL, "rsa-sha2-512,rsa-sha2-256", NULL, NULL);
	char msg[512];

	ck_assert_int_eq(diagnose(&o, &libssh2_110, msg, sizeof(msg)), ASP_KEXINIT_HOSTKEY);
	ck_assert_has(msg, "no host key algorithm in common: the server offers rsa-sha2-512, rsa-sha2-256;");
	ck_assert_has(msg, "libssh2 >= 1.11 adds rsa-sha2-256/512");
	ck_assert_has(msg, "ssh-keygen -t ed25519");
}
END_TEST

START_TEST(test_diagnose_one_direction)
{
	offer o = openssh(NULL, NULL, NULL, NULL);
	char msg[512];

	o.lists[3] = "chacha20-poly1305@openssh.com";
	ck_assert_int_eq(diagnose(&o, &libssh2_110, msg, sizeof(msg)), ASP_KEXINIT_CIPHER);
	ck_assert_has(msg, "the server offers (server to client) chacha20-poly1305@openssh.com;");
}
END_TEST

START_TEST(test_diagnose_agreement_and_small_buffers)
{
	offer o = openssh(NULL, NULL, NULL, NULL);
	asp_kexinit_client unknown = { .version = "1.10.0" };
	char msg[16];

	memset(msg, 'x', sizeof(msg));
	ck_assert_int_eq(diagnose(&o, &libssh2_110, msg, sizeof(msg)), -1);
	ck_assert_int_eq(msg[0], 'x'); /* untouched */
	/* Categories the client cannot list are not judged. */
	ck_assert_int_eq(diagnose(&tinysshd, &unknown, msg, sizeof(msg)), -1);
	/* A short buffer gets a cut, terminated sentence. */
	ck_assert_int_eq(diagnose(&tinysshd, &libssh2_110, msg, sizeof(msg)), ASP_KEXINIT_CIPHER);
	ck_assert_uint_eq(strlen(msg), sizeof(msg) - 1);
	ck_assert_int_eq(diagnose(&tinysshd, &libssh2_110, msg, 0), -1);
}
END_TEST

Suite *suite_kexinit(void);

Suite *suite_kexinit(void)
{
	Suite *s = suite_create("kexinit");
	TCase *tc = tcase_create("kexinit");

	tcase_add_test(tc, test_parse_tinysshd);
	tcase_add_test(tc, test_parse_every_prefix_wants_more);
	tcase_add_test(tc, test_parse_rejects);
	tcase_add_test(tc, test_diagnose_cipher_chacha_only);
	tcase_add_test(tc, test_diagnose_cipher_gcm_names_the_newer_libssh2);
	tcase_add_test(tc, test_diagnose_kex_hides_markers);
	tcase_add_test(tc, test_diagnose_mac_etm);
	tcase_add_test(tc, test_diagnose_mac_ignored_under_aead);
	tcase_add_test(tc, test_diagnose_hostkey_rsa_sha2);
	tcase_add_test(tc, test_diagnose_one_direction);
	tcase_add_test(tc, test_diagnose_agreement_and_small_buffers);
	suite_add_tcase(s, tc);
	return s;
}
