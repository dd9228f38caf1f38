/*
 * identity.h - resolving connection.identity to private key text, and key
 * material hygiene (the text is wiped from memory when freed).
 */
#ifndef ASP_IDENTITY_H
#define ASP_IDENTITY_H

#include "common.h"
#include "config.h"

typedef struct asp_identity {
	char *key;         /* private key text (PEM or OpenSSH format) */
	size_t key_len;
	char *source;      /* for messages: "file /path" or "environment variable NAME" */
} asp_identity;

/*
 * Resolve cfg->identity (which must be non-NULL):
 *  - a valid variable name that is set: its value is key text when it
 *    starts with "-----BEGIN", else a path;
 *  - otherwise a path: "~/" expands to $HOME, relative paths resolve
 *    against the directory of the .asp.json.
 * A key file must be a regular file owned by the user (or root) and not
 * readable or writable by group or other, as OpenSSH requires.
 * ASP_ECONFIG on any problem, naming the file and field.
 */
int asp__identity_resolve(asp_identity **out, const asp_config *cfg, asp_error *err);

/* 1 when the key is RSA (PEM "RSA PRIVATE KEY" or an OpenSSH key of type ssh-rsa). */
int asp__identity_is_rsa(const asp_identity *id);

/* Wipe and free. Accepts NULL. */
void asp__identity_free(asp_identity *id);

#endif
