/*
 * keys.c - the sandbox's two ed25519 key pairs, made by ssh-keygen (run
 * with an argv, no shell): the host key (sshd in the container reads it
 * through a read-only mount) and the client key (stays on the host, 0600,
 * in the 0700 state directory; never mounted into the sandbox).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asf.h"

int key_generate(const char *path, const char *comment, asf_err *e)
{
	char *argv[] = { "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", (char *)comment,
			 "-f", (char *)path, NULL };
	char pub[4200];
	asf_out o;

	str_fmt(pub, sizeof(pub), "%s.pub", path);
	unlink(path);
	unlink(pub);
	if (asf_run(&o, argv, 30, e))
		return -1;
	if (o.status != 0) {
		asf_fail(e, "ssh-keygen failed for %s (exit %d): %s", path, o.status, o.err);
		out_free(&o);
		return -1;
	}
	out_free(&o);
	if (chmod(path, 0600))
		return asf_fail(e, "chmod %s: %s", path, strerror(errno));
	return 0;
}

int key_public_line(char *out, size_t outlen, const char *pub_path, asf_err *e)
{
	char *text = read_file(pub_path, ASF_SMALL_MAX, NULL, e), *sp;

	if (!text)
		return -1;
	/* "type base64 comment": keep the first two fields. */
	sp = strchr(text, ' ');
	if (sp)
		sp = strchr(sp + 1, ' ');
	if (sp)
		*sp = '\0';
	text[strcspn(text, "\r\n")] = '\0';
	if (strncmp(text, "ssh-ed25519 ", 12) || strlen(text) >= outlen) {
		free(text);
		return asf_fail(e, "%s: not an ed25519 public key", pub_path);
	}
	str_fmt(out, outlen, "%s", text);
	free(text);
	return 0;
}

int key_fingerprint(char *out, size_t outlen, const char *pub_path, asf_err *e)
{
	char *argv[] = { "ssh-keygen", "-l", "-E", "sha256", "-f", (char *)pub_path, NULL };
	char fpr[128];
	asf_out o;

	if (asf_run(&o, argv, 30, e))
		return -1;
	/* "256 SHA256:xxxx comment (ED25519)" */
	if (o.status != 0 || sscanf(o.out, "%*d %127s", fpr) != 1 || strncmp(fpr, "SHA256:", 7)) {
		asf_fail(e, "ssh-keygen -l %s failed: %s", pub_path, o.err);
		out_free(&o);
		return -1;
	}
	out_free(&o);
	str_fmt(out, outlen, "%s", fpr);
	return 0;
}
