/*
 * fuzz_hostkey.c - pin parsing and known_hosts lookups on arbitrary text.
 * The first byte picks the port; the rest is the pin text and, after a
 * NUL, known_hosts text checked against a fixed ed25519 key blob.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostkey.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ssh-ed25519 blob: string "ssh-ed25519", string 32 bytes of key. */
static const unsigned char blob[51] = {
	0, 0, 0, 11, 's', 's', 'h', '-', 'e', 'd', '2', '5', '5', '1', '9', 0, 0, 0, 32,
	1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
	17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul;
	unsigned int port;
	char *pin_text;
	asp_pin pin;
	asp_error err;
	char fp[ASP_FINGERPRINT_MAX], type[32];
	int st;

	if (size < 1)
		return 0;
	port = data[0] ? data[0] : 22;
	data++;
	size--;
	nul = memchr(data, 0, size);
	if (!(pin_text = malloc(nul ? (size_t)(nul - data) + 1 : size + 1)))
		return 0;
	memcpy(pin_text, data, nul ? (size_t)(nul - data) : size);
	pin_text[nul ? (size_t)(nul - data) : size] = '\0';
	if (asp__pin_parse(&pin, pin_text, &err) == 0) {
		(void)asp__pin_matches(&pin, blob, sizeof(blob));
		if (pin.blob && asp__fingerprint(fp, pin.blob, pin.blob_len))
			__builtin_trap();
		asp__pin_clear(&pin);
	}
	free(pin_text);
	if (nul) {
		size_t rest = size - (size_t)(nul + 1 - data);
		st = asp__known_hosts_check((const char *)nul + 1, rest, "127.0.0.1", port, blob, sizeof(blob));
		if (st < ASP_KH_NOTFOUND || st > ASP_KH_REVOKED)
			__builtin_trap();
		(void)asp__blob_type(type, sizeof(type), nul + 1, rest);
	}
	return 0;
}
