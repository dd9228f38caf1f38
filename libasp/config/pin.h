/*
 * pin.h - host-key fingerprints and connection.host_key pins. No I/O.
 */
#ifndef ASP_PIN_H
#define ASP_PIN_H

#include <stddef.h>

#include "common.h"

/* "SHA256:" + unpadded base64 of SHA-256 (43 chars) + NUL fits in 64. */
#define ASP_FINGERPRINT_MAX 64

/* Key type names ("ssh-ed25519") are shorter than this; OpenSSH caps them well below. */
#define ASP_KEY_TYPE_MAX 64

/* 1 when s[0..n) is a key type name: 1..ASP_KEY_TYPE_MAX-1 of [A-Za-z0-9-_.@+]. */
int asp__key_type_name(const char *s, size_t n);

/* OpenSSH-style fingerprint of a raw public key blob: "SHA256:xxxx". */
int asp__fingerprint(char out[ASP_FINGERPRINT_MAX], const unsigned char *blob, size_t len);

/*
 * The key type named inside a public key blob (its first SSH string), e.g.
 * "ssh-ed25519". ASP_EINVAL when the blob is malformed or the type does not fit.
 */
int asp__blob_type(char *out, size_t outlen, const unsigned char *blob, size_t len);

/* A parsed connection.host_key. */
typedef struct asp_pin {
	int is_fingerprint;        /* 1: only sha256 is known; 0: full key */
	char type[32];             /* key type for a full key, "" for a fingerprint */
	unsigned char *blob;       /* full key blob, or NULL */
	size_t blob_len;
	unsigned char sha256[32];  /* SHA-256 of the blob */
} asp_pin;

/*
 * Parse "ssh-ed25519 AAAA... [comment]" or "SHA256:<base64>". The type in
 * the line must agree with the type inside the blob. ASP_ECONFIG on error
 * with a message saying what is wrong (field name supplied by the caller).
 */
int asp__pin_parse(asp_pin *out, const char *text, asp_error *err);
void asp__pin_clear(asp_pin *pin);

/* 1 when the received blob matches the pin. */
int asp__pin_matches(const asp_pin *pin, const unsigned char *blob, size_t len);

#endif
