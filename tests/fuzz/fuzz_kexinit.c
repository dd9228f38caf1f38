/*
 * fuzz_kexinit.c - whatever a server sends first, asp__kexinit_parse
 * answers OK, MORE or BAD without reading past the bytes, every list it
 * returns lies inside them and is printable, and the sentence
 * asp__kexinit_diagnose writes is terminated, printable and fits.
 * Seeds: real servers' first bytes (tinysshd, OpenSSH) and variants.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kexinit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const asp_kexinit_client client = {
	.names = { "curve25519-sha256,ecdh-sha2-nistp256,diffie-hellman-group14-sha256",
		   "ssh-ed25519,ecdsa-sha2-nistp256,ssh-rsa", "aes128-ctr,aes256-ctr,aes256-cbc",
		   "hmac-sha2-256,hmac-sha2-512,hmac-sha1", "none" },
	.version = "1.10.0",
};

static void inside(const asp_kexinit_list *l, const uint8_t *data, size_t size)
{
	if (!l->names) {
		if (l->len)
			abort();
		return;
	}
	if ((const uint8_t *)l->names < data || l->len > size ||
	    (const uint8_t *)l->names + l->len > data + size)
		abort();
	for (size_t i = 0; i < l->len; i++)
		if ((unsigned char)l->names[i] < 0x20 || (unsigned char)l->names[i] > 0x7e)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy;
	asp_kexinit k;
	char msg[300];
	int rc;

	if (size > ASP_KEXINIT_CAPTURE_MAX)
		return 0;
	/* An exact-size copy, so ASan sees any read past the end. */
	copy = malloc(size ? size : 1);
	if (!copy)
		abort();
	memcpy(copy, data, size);
	rc = asp__kexinit_parse(copy, size, &k);
	if (rc != ASP_KEXINIT_OK && rc != ASP_KEXINIT_MORE && rc != ASP_KEXINIT_BAD)
		abort();
	if (rc == ASP_KEXINIT_OK) {
		inside(&k.banner, copy, size);
		for (int i = 0; i < 8; i++)
			inside(&k.list[i], copy, size);
		memset(msg, 'x', sizeof(msg));
		rc = asp__kexinit_diagnose(&k, &client, msg, sizeof(msg));
		if (rc < -1 || rc >= ASP_KEXINIT_NCAT)
			abort();
		if (rc >= 0) {
			size_t n = strnlen(msg, sizeof(msg));
			if (n == sizeof(msg))
				abort();
			for (size_t i = 0; i < n; i++)
				if ((unsigned char)msg[i] < 0x20 || (unsigned char)msg[i] > 0x7e)
					abort();
		}
	}
	free(copy);
	return 0;
}
