/*
 * identity.h - resolving connection.identity to private key text, and key
 * material hygiene (the text is wiped from memory when freed).
 */
#ifndef ASP_IDENTITY_H
#define ASP_IDENTITY_H

#include "common.h"
#include "config.h"

typedef struct asp_identity {
	char *key;         /* private key text (PEM or OpenSSH format), normalised */
	size_t key_len;    /* strlen(key) */
	size_t key_size;   /* the allocation, all of which is wiped */
	char *source;      /* for messages: "key file /path" (as in the .asp.json) or
			      "environment variable NAME"; never a variable's value */
} asp_identity;

/*
 * Resolve cfg->identity (which must be non-NULL):
 *  - a valid variable name that is set: its value is key text when it
 *    holds a control character (a newline), "-----", "PRIVATE KEY" or a
 *    PuTTY header, or is PATH_MAX bytes or longer; else a path (surrounding
 *    whitespace removed);
 *  - otherwise a path: "~/" expands to $HOME, relative paths resolve
 *    against the directory of the .asp.json.
 * Key text, from a variable or a file, is normalised (CRLF and CR to LF,
 * blanks around each line and blank lines around the key removed) and must
 * start with a "-----BEGIN ... PRIVATE KEY-----" line and end with an END
 * line. A key file must be a regular file owned by the user (or root) and
 * not readable or writable by group or other, as OpenSSH requires.
 * ASP_ECONFIG on any problem, naming the file and field, and the variable
 * or the path as written in the .asp.json: never what a variable holds.
 */
int asp__identity_resolve(asp_identity **out, const asp_config *cfg, asp_error *err);

/* 1 when the key is RSA (PEM "RSA PRIVATE KEY" or an OpenSSH key of type ssh-rsa). */
int asp__identity_is_rsa(const asp_identity *id);

/* Wipe and free. Accepts NULL. */
void asp__identity_free(asp_identity *id);

#endif
