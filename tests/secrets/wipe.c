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
 * Runs, each with a real connection to the sshd fixture, then asp_close:
 * the key from a file, from an environment variable (key text), and from a
 * variable whose text needs normalising (leading newline, CRLF); a key the
 * server rejects (not in authorized_keys); and an authorized RSA key, which
 * libssh2 1.10 cannot sign with for OpenSSH 8.8+, so libasp probes the key
 * type (identity.c openssh_key_is_rsa) on the rejected-key path.
 *
 * Cannot pass vacuously: OPENSSL_cleanse() is replaced too, and notes every
 * block that held the secret when it was wiped; free() counts those it then
 * sees. Every run must show at least one wiped block with the key's text
 * and one with its private bytes reaching the hook.
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
#include <pthread.h>
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
static atomic_long seen_text, seen_seed; /* wiped blocks that held the secret, then freed here */

/* Blocks that held the secret when OPENSSL_cleanse was called on them: what each held. */
#define WIPED_MAX 1024
static struct {
	void *p;
	int text, seed;
} wiped[WIPED_MAX];
static pthread_mutex_t wiped_lock = PTHREAD_MUTEX_INITIALIZER;

/* libasp and libssh2 (through libasp's allocator) wipe with OPENSSL_cleanse: note what they wipe. */
void OPENSSL_cleanse(void *p, size_t n)
{
	if (p && n && atomic_load(&watching)) {
		int text = memmem(p, n, text_piece, sizeof(text_piece) - 1) != NULL;
		int sd = memmem(p, n, seed, sizeof(seed)) != NULL;

		if (text || sd) {
			pthread_mutex_lock(&wiped_lock);
			for (int i = 0; i < WIPED_MAX; i++)
				if (!wiped[i].p || wiped[i].p == p) {
					wiped[i].p = p;
					wiped[i].text |= text;
					wiped[i].seed |= sd;
					break;
				}
			pthread_mutex_unlock(&wiped_lock);
		}
	}
	explicit_bzero(p, n);
}

/* Was p noted by OPENSSL_cleanse? Count it and forget it. */
static void note_freed(void *p)
{
	pthread_mutex_lock(&wiped_lock);
	for (int i = 0; i < WIPED_MAX; i++)
		if (wiped[i].p == p) {
			if (wiped[i].text)
				atomic_fetch_add(&seen_text, 1);
			if (wiped[i].seed)
				atomic_fetch_add(&seen_seed, 1);
			wiped[i].p = NULL;
			wiped[i].text = wiped[i].seed = 0;
			break;
		}
	pthread_mutex_unlock(&wiped_lock);
}

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
		note_freed(p);
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

/*
 * The secret parts of an unencrypted OpenSSH key file (ssh-keygen's layout).
 * ed25519: the 32-byte seed (the last 64-byte string is seed || public) and
 * a 24-character piece of the 4th base64 line, which covers it. Other types
 * (RSA): 32 bytes two thirds into the blob and a piece of the base64 line two
 * thirds into the body, both inside the private exponent or primes (the
 * public key comes first and is short).
 */
static int load_secret(const char *key_file, int ed25519)
{
	char *text = fx_read_file(key_file, NULL), *b64, *p, *q;
	unsigned char *blob;
	int len, rc = -1, nlines = 0, want;
	size_t i, bl;

	memset(text_piece, 0, sizeof(text_piece));
	memset(seed, 0, sizeof(seed));
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
	for (i = 0; p < q; p++) {
		if (*p != '\n')
			b64[i++] = *p;
		else
			nlines++;
	}
	b64[i] = '\0';
	len = EVP_DecodeBlock(blob, (unsigned char *)b64, (int)i);
	if (ed25519) {
		/* The private part ends with: string privkey (64 bytes = seed || public), string comment, padding. */
		for (bl = 0; len > 100 && bl + 4 + 64 <= (size_t)len; bl++) {
			if (blob[bl] == 0 && blob[bl + 1] == 0 && blob[bl + 2] == 0 && blob[bl + 3] == 64) {
				memcpy(seed, blob + bl + 4, 32);
				rc = 0; /* the last 64-byte string is the private key */
			}
		}
		want = 4;
	} else if (len > 600) {
		memcpy(seed, blob + (size_t)len * 2 / 3, 32);
		rc = 0;
		want = nlines * 2 / 3;
	} else {
		want = 0;
	}
	{
		char *line = text, *save = NULL;
		int l = 0;
		for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			if (strncmp(line, "-----", 5) && ++l == want && strlen(line) >= 30) {
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

/* Open (expecting `expect`), then exec and stat when it opened, close; check what was freed. */
static void run(const char *config, int expect, const char *what)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb = NULL;
	asp_exec_result *r = NULL;
	asp_stat_info st;
	asp_error e = { 0 };
	char msg[900];
	int rc;

	atomic_store(&freed_blocks, 0);
	atomic_store(&unwiped_text, 0);
	atomic_store(&unwiped_seed, 0);
	atomic_store(&openssl_residue, 0);
	atomic_store(&seen_text, 0);
	atomic_store(&seen_seed, 0);
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
	snprintf(msg, sizeof(msg), "%s: expected %s, got %s: %s", what, asp_error_name(expect),
		 asp_error_name(rc), e.message);
	check(rc == expect, msg);
	printf("wipe: %s: %ld blocks freed, %ld with key text, %ld with the key's private bytes; "
	       "%ld with either freed by OpenSSL itself (not counted); seen wiped and freed: "
	       "%ld with key text, %ld with private bytes\n", what,
	       atomic_load(&freed_blocks), atomic_load(&unwiped_text), atomic_load(&unwiped_seed),
	       atomic_load(&openssl_residue), atomic_load(&seen_text), atomic_load(&seen_seed));
	snprintf(msg, sizeof(msg), "%s: a freed block still held the key's base64 text", what);
	check(atomic_load(&unwiped_text) == 0, msg);
	snprintf(msg, sizeof(msg), "%s: a freed block still held the key's private bytes", what);
	check(atomic_load(&unwiped_seed) == 0, msg);
	/* Not vacuous: the hooks did meet the key's blocks (wiped, then freed). */
	snprintf(msg, sizeof(msg), "%s: the free hook saw no wiped block that had held the key's text", what);
	check(atomic_load(&seen_text) > 0, msg);
	snprintf(msg, sizeof(msg), "%s: the free hook saw no wiped block that had held the private bytes",
		 what);
	check(atomic_load(&seen_seed) > 0, msg);
}

/* `text` with a newline before it and every "\n" as "\r\n"; free_secret it. */
static char *crlf(const char *text)
{
	size_t n = strlen(text), o = 0;
	char *out = malloc(2 * n + 2);

	out[o++] = '\n';
	for (size_t i = 0; i < n; i++) {
		if (text[i] == '\n')
			out[o++] = '\r';
		out[o++] = text[i];
	}
	out[o] = '\0';
	return out;
}

static void env_run(fx_sshd *fx, const char *value, const char *name, const char *what)
{
	char cfg[400];

	snprintf(cfg, sizeof(cfg), "%s/%s.asp.json", fx->dir, name);
	setenv("ASP_WIPE_KEY", value ? value : "", 1);
	if (fx_write_config(fx, cfg, &(fx_config_opts){ .identity = "ASP_WIPE_KEY" }) == 0)
		run(cfg, ASP_OK, what);
	else
		check(0, "writing the env config");
	/* setenv copied the value into the environment: clear that copy before it goes. */
	{
		char *v = getenv("ASP_WIPE_KEY");

		if (v)
			explicit_bzero(v, strlen(v));
	}
	unsetenv("ASP_WIPE_KEY");
}

static int keygen(const char *path, const char *type)
{
	return fx_run("rm -f '%s' '%s.pub' && ssh-keygen -q %s -N '' -C '' -f '%s' </dev/null >/dev/null",
		      path, path, type, path);
}

int main(void)
{
	static fx_sshd fx;
	char cfg[400], key[400], *text, *t2;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (fx_sshd_start(&fx) || load_secret(fx.client_key, 1)) {
		printf("wipe: setup failed\nwipe: 0 passed, 1 failed\n");
		fx_sshd_stop(&fx);
		return 1;
	}
	/* Control: the search finds the secret where it is. */
	text = fx_read_file(fx.client_key, NULL);
	check(text && strstr(text, text_piece), "control: the text piece is in the key file");
	free_secret(text);

	run(fx.config, ASP_OK, "identity from a file");

	text = fx_read_file(fx.client_key, NULL);
	env_run(&fx, text, "env", "identity from an environment variable");
	t2 = crlf(text ? text : "");
	env_run(&fx, t2, "env-crlf", "identity from a variable with a leading newline and CRLF line ends");
	free_secret(t2);
	free_secret(text);

	/* A key the server does not know: rejected, and the key type probed. */
	snprintf(key, sizeof(key), "%s/stranger_ed25519", fx.dir);
	snprintf(cfg, sizeof(cfg), "%s/stranger.asp.json", fx.dir);
	if (keygen(key, "-t ed25519") || load_secret(key, 1) ||
	    fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = key }))
		check(0, "making the stranger key");
	else
		run(cfg, ASP_EAUTH, "a key the server rejects (not in authorized_keys)");

	/* An authorized RSA key: libssh2 1.10 signs with ssh-rsa (SHA-1), which sshd refuses. */
	snprintf(key, sizeof(key), "%s/client_rsa", fx.dir);
	snprintf(cfg, sizeof(cfg), "%s/rsa.asp.json", fx.dir);
	if (keygen(key, "-t rsa -b 2048") || load_secret(key, 0) ||
	    fx_run("cat '%s.pub' >> '%s/authorized_keys'", key, fx.dir) ||
	    fx_write_config(&fx, cfg, &(fx_config_opts){ .identity = key }))
		check(0, "making the RSA key");
	else
		run(cfg, ASP_EAUTH, "an RSA key (rejected; its type is probed)");

	fx_sshd_stop(&fx);
	printf("wipe: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
