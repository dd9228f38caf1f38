/*
 * hostkey.h - host-key pins, fingerprints, and the trust-on-first-use store
 * (OpenSSH known_hosts format). Parsing does no I/O; asp__known_hosts_verify
 * is the only function here that touches files.
 */
#ifndef ASP_HOSTKEY_H
#define ASP_HOSTKEY_H

#include <stddef.h>

#include "common.h"

/* "SHA256:" + unpadded base64 of SHA-256 (43 chars) + NUL fits in 64. */
#define ASP_FINGERPRINT_MAX 64

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

/* The outcome of looking a host up in known_hosts text. */
typedef enum asp_kh_status {
	ASP_KH_NOTFOUND = 0, /* no entry for the host */
	ASP_KH_MATCH = 1,    /* an entry for the host has this key */
	ASP_KH_MISMATCH = 2, /* the host is known with other key(s) only */
	ASP_KH_REVOKED = 3   /* the key is marked @revoked (for any host) */
} asp_kh_status;

/*
 * Look `host`:`port` up in known_hosts `text` (pure). Entries are written
 * as `host` for port 22 and `[host]:port` otherwise; hashed (|1|salt|hash),
 * comma lists, `*`/`?` wildcards and `!` negations are understood;
 * `@cert-authority` lines are skipped; `@revoked` lines match any host.
 * Malformed lines are skipped.
 */
asp_kh_status asp__known_hosts_check(const char *text, size_t len, const char *host,
				     unsigned int port, const unsigned char *blob, size_t blob_len);

/* The known_hosts path: explicit, else $ASP_KNOWN_HOSTS, else the XDG default. */
int asp__known_hosts_path(char **out, const char *explicit_path, asp_error *err);

/*
 * Verify a received key against the store at `path`: on NOTFOUND, append
 * an entry (creating the file 0600 and its directory 0700; read-modify-
 * write under a lock, replaced atomically) and set *first_use = 1.
 * MISMATCH and REVOKED fail closed with ASP_EHOSTKEY, naming the file and
 * showing the expected and received fingerprints.
 */
int asp__known_hosts_verify(int *first_use, const char *path, const char *host,
			    unsigned int port, const unsigned char *blob, size_t blob_len,
			    asp_error *err);

#endif
