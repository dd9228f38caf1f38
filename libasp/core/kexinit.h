/*
 * kexinit.h - the server's first words on the wire, read before any
 * encryption: its identification line and its SSH_MSG_KEXINIT (RFC 4253
 * 4.2, 6, 7.1). When libssh2 cannot agree on an algorithm, the message
 * names what the server offered, what this libssh2 supports, and the fix.
 * Pure functions: no I/O, no allocation.
 */
#ifndef ASP_KEXINIT_H
#define ASP_KEXINIT_H

#include <stddef.h>

/* The bytes captured from the server are bounded: a KEXINIT is far smaller. */
#define ASP_KEXINIT_CAPTURE_MAX (64 * 1024)
#define ASP_KEXINIT_CAPTURE_START 4096 /* first allocation; doubles up to the MAX */

/* The negotiated categories, as asp__kexinit_diagnose names them. */
enum {
	ASP_KEXINIT_KEX = 0,
	ASP_KEXINIT_HOSTKEY,
	ASP_KEXINIT_CIPHER, /* one list each direction on the wire; see asp_kexinit */
	ASP_KEXINIT_MAC,
	ASP_KEXINIT_COMP,
	ASP_KEXINIT_NCAT
};

typedef struct asp_kexinit_list {
	const char *names; /* points into the parsed bytes; not NUL-terminated */
	size_t len;
} asp_kexinit_list;

typedef struct asp_kexinit {
	asp_kexinit_list banner; /* "SSH-2.0-..." without CR LF */
	/* The first eight name-lists in wire order: kex, host key, cipher c->s,
	 * cipher s->c, MAC c->s, MAC s->c, compression c->s, s->c. */
	asp_kexinit_list list[8];
} asp_kexinit;

enum {
	ASP_KEXINIT_OK = 0,   /* banner and KEXINIT complete: *out filled */
	ASP_KEXINIT_MORE = 1, /* so far so good: more bytes are needed */
	ASP_KEXINIT_BAD = -1  /* not an SSH server's start, or a KEXINIT we cannot read */
};

/*
 * Parse what a server sent first: optional lines before the identification
 * line, "SSH-2.0-..." (or "SSH-1.99-"), then the first binary packet, which
 * must be SSH_MSG_KEXINIT (20). Names in the lists must be printable ASCII.
 */
int asp__kexinit_parse(const unsigned char *buf, size_t len, asp_kexinit *out);

/*
 * What this client can do, per category: comma-separated names (NULL = not
 * known, that category is not checked). `v111` is nonzero when the libssh2
 * in use is 1.11 or later; `version` is its version string.
 */
typedef struct asp_kexinit_client {
	const char *names[ASP_KEXINIT_NCAT];
	const char *version;
	int v111;
} asp_kexinit_client;

/*
 * Find the first category (kex, host key, cipher, MAC, compression) where
 * the server's offer and the client's have no name in common and write one
 * sentence into out: the category, the server's offer, the client's list and
 * the likely fix. Returns the category, or -1 (out untouched) when every
 * category has a name in common.
 */
int asp__kexinit_diagnose(const asp_kexinit *k, const asp_kexinit_client *cl, char *out,
			  size_t outlen);

#endif
