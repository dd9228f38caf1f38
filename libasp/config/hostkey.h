/*
 * hostkey.h - the trust-on-first-use store (OpenSSH known_hosts format).
 * Parsing does no I/O; asp__known_hosts_verify is the only function here
 * that touches files. Pins and fingerprints are in pin.h.
 */
#ifndef ASP_HOSTKEY_H
#define ASP_HOSTKEY_H

#include <stddef.h>

#include "common.h"
#include "pin.h"

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
 * Malformed lines are skipped. A test hook (common.h): asp__known_hosts_verify
 * is what the library uses.
 */
#ifdef ASP_TEST_HOOKS
asp_kh_status asp__known_hosts_check(const char *text, size_t len, const char *host,
				     unsigned int port, const unsigned char *blob, size_t blob_len);
#endif

/* The known_hosts path: explicit, else $ASP_KNOWN_HOSTS, else the XDG default. */
int asp__known_hosts_path(char **out, const char *explicit_path, asp_error *err);

#ifdef ASP_TEST_HOOKS
/* Tests: how long a first use waits for the store's lock; 0 restores the default (5 s). */
void asp__known_hosts_lock_wait(long ms);
#endif

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
