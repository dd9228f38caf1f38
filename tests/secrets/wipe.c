/*
 * wipe.c - is the private key wiped before its memory is freed?
 * (`make check-wipe`, part of `make check`.)
 *
 * This program replaces free(): while watching, every block freed by
 * anyone in the process -- libasp, libssh2 (whose allocations go through
 * libasp's), OpenSSL, libc -- is searched, before it goes back to malloc,
 * for the key's secret: a piece of its base64 text, and the raw 32-byte
 * ed25519 seed decoded from it. A block that still holds either was freed
 * without being wiped.
 *
 * Runs: the key from a file and from an environment variable (key text),
 * each with a real connection to the sshd fixture (authentication parses
 * and uses the key) and some operations, then asp_close.
 *
 * Not counted: blocks that OpenSSL frees itself (the caller of free() is in
 * libcrypto). libssh2 1.10 hands every key to OpenSSL's PEM decoder first,
 * and OpenSSL 3 frees its decoded copy of an OpenSSH-format key without
 * clearing it; libasp cannot reach that memory. They are reported.
 *
 * Not covered: realloc() moving a block (the old copy is released inside
 * malloc, not through free()); libasp reads the key into one exact-size
 * block and never reallocates it, and moves libssh2's blocks itself. Needs glibc (__libc_free,
 * malloc_usable_size); not for ASan or valgrind builds, which replace free
 * themselves. Last line: "wipe: N passed, M failed".
 */
#include <dlfcn.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "asp.h"
#include "fixture/fixture.h"

extern void __libc_free(void *p);

static atomic_int watching;
static char text_piece[25];
static unsigned char seed[32];
static atomic_long freed_blocks, unwiped_text, unwiped_seed, openssl_residue;

/* Is the caller of free() inside libcrypto (OpenSSL's own buffers)? */
static int caller_is_openssl(void *ret)
{
	Dl_info info;

	return dladdr(ret, &info) && info.dli_fname && strstr(info.dli_fname, "libcrypto");
}

void free(void *p)
{
	if (p && atomic_load(&watching)) {
		size_t n = malloc_usable_size(p);
		int text = memmem(p, n, text_piece, sizeof(text_piece) - 1) != NULL;
		int sd = memmem(p, n, seed, sizeof(seed)) != NULL;

		atomic_fetch_add(&freed_blocks, 1);
		if ((text || sd) && caller_is_openssl(__builtin_return_address(0)))
			atomic_fetch_add(&openssl_residue, 1);
		else if (text)
			atomic_fetch_add(&unwiped_text, 1);
		else if (sd)
			atomic_fetch_add(&unwiped_seed, 1);
	}
	__libc_free(p);
}

/* The test's own copies of the key are wiped too, or they would be found later as residue. */
static void free_secret(void *p)
{
	if (p)
		OPENSSL_cleanse(p, malloc_usable_size(p));
	__libc_free(p);
}

/* The secret parts of an unencrypted OpenSSH ed25519 key file: see ssh-keygen's layout. */
static int load_secret(const char *key_file)
{
	char *text = fx_read_file(key_file, NULL), *b64, *p, *q;
	unsigned char *blob;
	int len, rc = -1;
	size_t i, bl;

	if (!text)
		return -1;
	p = strstr(text, "-----BEGIN OPENSSH PRIVATE KEY-----");
	q = strstr(text, "-----END");
	if (!p || !q) {
		free_secret(text);
		return -1;
	}
	p += 35;
	b64 = malloc((size_t)(q - p) + 1);
	blob = malloc((size_t)(q - p) + 1);
	for (i = 0; p < q; p++)
		if (*p != '\n')
			b64[i++] = *p;
	b64[i] = '\0';
	len = EVP_DecodeBlock(blob, (unsigned char *)b64, (int)i);
	/* The private part ends with: string privkey (64 bytes = seed || public), string comment, padding. */
	for (bl = 0; len > 100 && bl + 4 + 64 <= (size_t)len; bl++) {
		if (blob[bl] == 0 && blob[bl + 1] == 0 && blob[bl + 2] == 0 && blob[bl + 3] == 64) {
			memcpy(seed, blob + bl + 4, 32);
			rc = 0; /* the last 64-byte string is the private key */
		}
	}
	/* A 24-character piece of the base64 that covers the seed: from the 4th line. */
	{
		char *line = text, *save = NULL;
		int l = 0;
		for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			if (strncmp(line, "-----", 5) && ++l == 4 && strlen(line) >= 30) {
				memcpy(text_piece, line + 4, 24);
				text_piece[24] = '\0';
			}
	}
	if (!text_piece[0])
		rc = -1;
	free_secret(b64);
	free_secret(blob);
	free_secret(text);
	return rc;
}

static int passed, failed;

static void check(int ok, const char *what)
{
	if (ok) {
		passed++;
	} else {
		failed++;
		printf("wipe: FAIL: %s\n", what);
	}
}

static void run(fx_sshd *fx, const char *config, const char *what)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_exec_result *r = NULL;
	asp_stat_info st;
	asp_error e = { 0 };
	char msg[700];
	int rc;

	atomic_store(&freed_blocks, 0);
	atomic_store(&unwiped_text, 0);
	atomic_store(&unwiped_seed, 0);
	atomic_store(&openssl_residue, 0);
	atomic_store(&watching, 1);
	o.config_path = config;
	rc = asp_open(&sb, &o, &e);
	if (rc == ASP_OK) {
		rc = asp_exec(&r, sb, "echo hi", NULL, &e);
		asp_exec_result_free(r);
		if (rc == ASP_OK)
			rc = asp_stat(&st, sb, ".", NULL, &e);
	}
	asp_close(sb);
	atomic_store(&watching, 0);
	snprintf(msg, sizeof(msg), "%s: open, exec, stat: %s: %s", what, asp_error_name(rc), e.message);
	check(rc == ASP_OK, msg);
	printf("wipe: %s: %ld blocks freed, %ld with key text, %ld with the key's seed; "
	       "%ld with either freed by OpenSSL itself (not counted)\n", what,
	       atomic_load(&freed_blocks), atomic_load(&unwiped_text), atomic_load(&unwiped_seed),
	       atomic_load(&openssl_residue));
	snprintf(msg, sizeof(msg), "%s: a freed block still held the key's base64 text", what);
	check(atomic_load(&unwiped_text) == 0, msg);
	snprintf(msg, sizeof(msg), "%s: a freed block still held the key's private seed", what);
	check(atomic_load(&unwiped_seed) == 0, msg);
	(void)fx;
}

int main(void)
{
	static fx_sshd fx;
	char cfg[400], *text;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (fx_sshd_start(&fx) || load_secret(fx.client_key)) {
		printf("wipe: setup failed\nwipe: 0 passed, 1 failed\n");
		fx_sshd_stop(&fx);
		return 1;
	}
	/* Control: the search finds the secret where it is. */
	text = fx_read_file(fx.client_key, NULL);
	check(text && strstr(text, text_piece), "control: the text piece is in the key file");
	free_secret(text);

	run(&fx, fx.config, "identity from a file");

	snprintf(cfg, sizeof(cfg), "%s/env.asp.json", fx.dir);
	text = fx_read_file(fx.client_key, NULL);
	setenv("ASP_WIPE_KEY", text ? text : "", 1);
	free_secret(text);
	if (fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = "ASP_WIPE_KEY" }) == 0)
		run(&fx, cfg, "identity from an environment variable");
	else
		check(0, "writing the env config");
	unsetenv("ASP_WIPE_KEY");

	fx_sshd_stop(&fx);
	printf("wipe: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
