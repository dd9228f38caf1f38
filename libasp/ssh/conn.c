/*
 * conn.c - one SSH connection: TCP connect (or x-asp-proxy-command),
 * handshake, host-key check before any credential, authentication,
 * keepalive, idle checks and close. The session helpers it drives (waiting,
 * the error map, libssh2's callbacks) are in session.c.
 */
#include "conn.h"
#include "errtext.h"
#include "ssh.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cancel.h"
#include "chan.h"
#include "kexinit.h"
#include "quote.h"
#include "sftp.h"

void asp__conn_begin_op(asp_conn *c, uint64_t deadline, asp_cancel *cancel)
{
	c->op_deadline = deadline;
	c->op_cancel = cancel;
	c->op_cancel_fd = asp__cancel_fd(cancel);
}

void asp__conn_end_op(asp_conn *c)
{
	asp__conn_begin_op(c, 0, NULL);
}

int asp__conn_commit(asp_conn *c, asp_error *err)
{
	int rc = asp__ssh_op_stopped(c, err);

	if (!rc)
		asp__ssh_op_cancel_swap(c, NULL);
	return rc;
}

/* ------------------------------------------------------------ connect */

static int tcp_connect(asp_conn *c, const asp_config *cfg, uint64_t deadline, int cancel_fd,
		       asp_error *err)
{
	struct addrinfo hints, *res = NULL, *ai;
	char port[16];
	int gai, fd = -1, last_errno = 0, one = 1;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(port, sizeof(port), "%u", cfg->port);
	if ((gai = getaddrinfo(cfg->host, port, &hints, &res)) != 0)
		return asp__error(err, ASP_ECONNECT, "%s: cannot resolve host: %s", c->where,
				  gai_strerror(gai));
	for (ai = res; ai; ai = ai->ai_next) {
		struct pollfd pfd[2];
		int soerr = 0, rc;
		socklen_t sl = sizeof(soerr);

		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			last_errno = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		if (errno != EINPROGRESS) {
			last_errno = errno;
			close(fd);
			fd = -1;
			continue;
		}
		for (;;) {
			uint64_t now = asp__now_ms();
			pfd[0].fd = fd;
			pfd[0].events = POLLOUT;
			pfd[1].fd = cancel_fd;
			pfd[1].events = POLLIN;
			pfd[0].revents = pfd[1].revents = 0;
			if (now >= deadline) {
				rc = 0;
				break;
			}
			rc = poll(pfd, cancel_fd >= 0 ? 2 : 1, (int)(deadline - now));
			if (rc >= 0 || errno != EINTR)
				break;
		}
		if (cancel_fd >= 0 && (pfd[1].revents & POLLIN)) {
			close(fd);
			freeaddrinfo(res);
			return asp__error(err, ASP_ECANCELLED, "%s: connect cancelled", c->where);
		}
		if (rc == 0) {
			close(fd);
			freeaddrinfo(res);
			return asp__error(err, ASP_ETIMEOUT, "%s: TCP connect timed out", c->where);
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
			break;
		last_errno = soerr ? soerr : errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return asp__error(err, ASP_ECONNECT, "%s: cannot connect: %s", c->where,
				  ASP_ERRNO_TEXT(last_errno ? last_errno : ECONNREFUSED));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->sock = fd;
	c->quickack = 1; /* until authenticated: see conn_recv in session.c */
	return 0;
}

static int proxy_connect(asp_conn *c, const asp_config *cfg, asp_error *err)
{
	asp_buf script = { 0 };
	int sv[2], rc;
	pid_t pid;

	rc = asp__proxy_script(&script, cfg->proxy_command, cfg->host, cfg->port, cfg->user);
	if (rc) {
		asp__buf_free(&script);
		return asp__error(err, rc == ASP_EINVAL ? ASP_ECONFIG : rc,
				  "%s: connection.x-asp-proxy-command: unknown %%-escape (use %%h, %%p, %%r or %%%%)",
				  cfg->path);
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		asp__buf_free(&script);
		return asp__error(err, ASP_ECONNECT, "%s: socketpair: %s", c->where, ASP_ERRNO_TEXT(errno));
	}
	pid = fork();
	if (pid == 0) {
		/* The child: the socket is its stdin and stdout; stderr stays ours for diagnostics. */
		dup2(sv[1], 0);
		dup2(sv[1], 1);
		/* Nothing else of the harness's leaks into the proxy (and what it starts). */
		close_range(3, ~0U, 0);
		setpgid(0, 0);
		execl("/bin/sh", "sh", "-c", (const char *)script.data, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	asp__buf_free(&script);
	if (pid < 0) {
		close(sv[0]);
		return asp__error(err, ASP_ECONNECT, "%s: cannot start the proxy command: %s", c->where,
				  ASP_ERRNO_TEXT(errno));
	}
	fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
	c->sock = sv[0];
	c->proxy_pid = pid;
	return 0;
}

static void proxy_reap(asp_conn *c)
{
	if (c->proxy_pid <= 0)
		return;
	kill(-c->proxy_pid, SIGTERM);
	kill(c->proxy_pid, SIGTERM);
	waitpid(c->proxy_pid, NULL, 0);
	c->proxy_pid = 0;
}

/*
 * Run a libssh2 call that may return EAGAIN until it completes or a deadline
 * passes. rc receives the libssh2 result; wrc receives 0, or the ASP_E* code
 * (err filled) when waiting failed (deadline, cancel). The two must be kept
 * apart: ASP_E* and LIBSSH2_ERROR_* values overlap (ASP_ETIMEOUT and
 * LIBSSH2_ERROR_HOSTKEY_INIT are both -10).
 */
#define SSH_LOOP(c, rc, wrc, expr, deadline, cancel_fd, err)                              \
	do {                                                                             \
		(wrc) = 0;                                                               \
		while (((rc) = (expr)) == LIBSSH2_ERROR_EAGAIN) {                        \
			(wrc) = asp__ssh_wait((c), (deadline), (cancel_fd), NULL, 0,     \
					      ASP_WAIT_REPLY, (err));                    \
			if (wrc)                                                         \
				break;                                                   \
		}                                                                        \
	} while (0)

/* "A" when both directions negotiated the same method, else "A (client to server), B (...)". */
static void method_pair(const asp_conn *c, char *out, size_t size, int cs_type, int sc_type)
{
	const char *cs = libssh2_session_methods(c->session, cs_type);
	const char *sc = libssh2_session_methods(c->session, sc_type);

	if (!cs || !sc || !strcmp(cs, sc))
		snprintf(out, size, "%s", cs ? cs : sc ? sc : "");
	else
		snprintf(out, size, "%s (client to server), %s (server to client)", cs, sc);
}

static int verify_host_key(asp_conn *c, const asp_conn_params *p, asp_error *err)
{
	size_t len = 0;
	int type = 0, first_use = 0, rc;
	const char *key = libssh2_session_hostkey(c->session, &len, &type);
	char fp[ASP_FINGERPRINT_MAX], want[ASP_FINGERPRINT_MAX];

	if (!key || !len)
		return asp__error(err, ASP_EHOSTKEY, "%s: the server presented no host key", c->where);
	if ((rc = asp__fingerprint(fp, (const unsigned char *)key, len)) == ASP_ENOMEM)
		return asp__error(err, ASP_ENOMEM, "%s: out of memory checking the host key", c->where);
	if (rc || asp__blob_type(c->host_key_type, sizeof(c->host_key_type),
				 (const unsigned char *)key, len))
		return asp__error(err, ASP_EHOSTKEY, "%s: the server's host key is malformed", c->where);
	snprintf(c->host_key_fingerprint, sizeof(c->host_key_fingerprint), "%s", fp);
	if (p->pin) {
		if (!asp__pin_matches(p->pin, (const unsigned char *)key, len)) {
			if (p->pin->blob)
				asp__fingerprint(want, p->pin->blob, p->pin->blob_len);
			else {
				char *b64 = asp__base64_encode(p->pin->sha256, 32, 0);
				snprintf(want, sizeof(want), "SHA256:%s", b64 ? b64 : "?");
				asp__free(b64);
			}
			return asp__error(err, ASP_EHOSTKEY,
					  "%s: host key does not match connection.host_key in %s "
					  "(expected %s, got %s %s); no credentials were sent",
					  c->where, p->cfg->path, want, c->host_key_type, fp);
		}
		c->trust = ASP_TRUST_PINNED;
		return 0;
	}
	rc = asp__known_hosts_verify(&first_use, p->known_hosts, p->cfg->host, p->cfg->port,
				     (const unsigned char *)key, len, err);
	if (rc)
		return rc;
	c->known_hosts = p->known_hosts;
	c->trust = first_use ? ASP_TRUST_FIRST_USE : ASP_TRUST_KNOWN;
	return 0;
}

int asp__conn_global_init(asp_error *err)
{
	return asp__ssh_global_init(err);
}

static int auth_publickey(asp_conn *c, const asp_conn_params *p, uint64_t deadline, int cancel_fd,
			  asp_error *err)
{
	const asp_config *cfg = p->cfg;
	const char *pass = getenv("ASP_IDENTITY_PASSPHRASE");
	uint64_t tx_before = c->tx_bytes, tx = c->tx_bytes, flight1 = 0;
	int rc, wrc = 0, flights = 0;

	/*
	 * libssh2 asks whether the key is acceptable, then sends the signed
	 * request. The first warm channel's CHANNEL_OPEN follows the signed
	 * request, so its confirmation comes back with USERAUTH_SUCCESS (the
	 * server handles packets in order: by the time it reads the open, the
	 * user is in). To tell the two flights apart, each libssh2 call ends
	 * with its send (one_flight): a call that has sent reads nothing more,
	 * so the answer to the query is read, and the signed request sent, in
	 * a later call.
	 */
	c->one_flight = 1;
	while ((rc = libssh2_userauth_publickey_frommemory(c->session, cfg->user, strlen(cfg->user),
							   NULL, 0, p->identity->key,
							   p->identity->key_len,
							   pass ? pass : NULL)) == LIBSSH2_ERROR_EAGAIN) {
		c->sent_this_call = 0;
		if (c->tx_bytes != tx && !(libssh2_session_block_directions(c->session) &
					   LIBSSH2_SESSION_BLOCK_OUTBOUND)) {
			tx = c->tx_bytes;
			/* From the key query out to the signed request out: a round trip. */
			if (++flights == 1)
				flight1 = asp__now_ms();
			else if (flights == 2)
				asp__ssh_rtt_sample(c, asp__now_ms() - flight1);
			if (flights == 2) {
				asp__chan_warm_start(c);
				c->sent_this_call = 0;
			}
		}
		if ((wrc = asp__ssh_wait(c, deadline, cancel_fd, NULL, 0, ASP_WAIT_REPLY, err)))
			break;
	}
	c->one_flight = c->sent_this_call = 0;
	if (wrc)
		return wrc;
	if (rc == 0) {
		c->auth = ASP_AUTH_PUBLICKEY;
		return 0;
	}
	/*
	 * libssh2 1.10 reports a corrupt OpenSSH-format key as a protocol error
	 * ("key auth magic mismatch"); it parses the key before sending a byte.
	 */
	if (rc == LIBSSH2_ERROR_PROTO && c->tx_bytes == tx_before && !c->alloc_failed)
		rc = LIBSSH2_ERROR_FILE;
	if (rc < 0 && !asp__ssh_is_transport_error(rc) && rc != LIBSSH2_ERROR_ALLOC &&
	    !c->alloc_failed) {
		/* KEYFILE_AUTH_FAILED: an encrypted key without (or with a wrong) passphrase. */
		if (rc == LIBSSH2_ERROR_FILE || rc == LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED
#ifdef LIBSSH2_ERROR_KEYFILE_AUTH_FAILED
		    || rc == LIBSSH2_ERROR_KEYFILE_AUTH_FAILED
#endif
		)
			return asp__error(err, ASP_EAUTH,
					  "%s: cannot use the private key from %s: it could not be "
					  "decoded%s",
					  c->where, p->identity->source,
					  pass ? " (is ASP_IDENTITY_PASSPHRASE right?)"
					       : " (if it has a passphrase, set ASP_IDENTITY_PASSPHRASE)");
#if LIBSSH2_VERSION_NUM < 0x010b00
		if (asp__identity_is_rsa(p->identity))
			return asp__error(err, ASP_EAUTH,
					  "%s: the RSA key from %s was rejected: libssh2 %s cannot sign "
					  "with rsa-sha2-256/512, which OpenSSH 8.8 and later require; "
					  "use an ed25519 or ECDSA key (ssh-keygen -t ed25519)",
					  c->where, p->identity->source, LIBSSH2_VERSION);
#endif
		/* Never the user name: a provider may put an access token there. */
		return asp__error(err, ASP_EAUTH,
				  "%s: the server rejected the key from %s for the user named by "
				  "connection.user in %s",
				  c->where, p->identity->source, cfg->path);
	}
	return asp__ssh_error(c, rc, err, "authenticating");
}

static int auth_agent(asp_conn *c, const asp_conn_params *p, const char *methods, uint64_t deadline,
		      int cancel_fd, asp_error *err)
{
	LIBSSH2_AGENT *agent;
	struct libssh2_agent_publickey *id = NULL, *prev = NULL;
	int rc, wrc = 0, tried = 0;

	if (!getenv("SSH_AUTH_SOCK") || !*getenv("SSH_AUTH_SOCK"))
		return asp__error(err, ASP_EAUTH,
				  "%s: the server wants authentication (%s) but connection.identity "
				  "is not set in %s and no ssh-agent is available (SSH_AUTH_SOCK)",
				  c->where, methods, p->cfg->path);
	if (!(agent = libssh2_agent_init(c->session)))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	if (libssh2_agent_connect(agent) || libssh2_agent_list_identities(agent)) {
		libssh2_agent_free(agent);
		return asp__error(err, ASP_EAUTH, "%s: cannot talk to ssh-agent at %s", c->where,
				  getenv("SSH_AUTH_SOCK"));
	}
	rc = LIBSSH2_ERROR_AUTHENTICATION_FAILED;
	while (libssh2_agent_get_identity(agent, &id, prev) == 0) {
		tried++;
		SSH_LOOP(c, rc, wrc, libssh2_agent_userauth(agent, p->cfg->user, id), deadline, cancel_fd,
			 err);
		if (rc == 0 || wrc || asp__ssh_is_transport_error(rc))
			break;
		prev = id;
	}
	libssh2_agent_disconnect(agent);
	libssh2_agent_free(agent);
	if (wrc)
		return wrc;
	if (rc == 0) {
		c->auth = ASP_AUTH_AGENT;
		return 0;
	}
	if (asp__ssh_is_transport_error(rc))
		return asp__ssh_error(c, rc, err, "authenticating with ssh-agent");
	return asp__error(err, ASP_EAUTH,
			  "%s: the server rejected all %d key(s) from ssh-agent for the user named by "
			  "connection.user in %s",
			  c->where, tried, p->cfg->path);
}

static int authenticate(asp_conn *c, const asp_conn_params *p, uint64_t deadline, int cancel_fd,
			asp_error *err)
{
	const char *user = p->cfg->user;
	char *methods;
	int rc;

	/* With a key, offer it at once: asking for the method list first costs a round trip. */
	if (p->identity)
		return auth_publickey(c, p, deadline, cancel_fd, err);
	/* userauth_list sends "none": a server that takes a token in the user name accepts it. */
	for (;;) {
		methods = libssh2_userauth_list(c->session, user, (unsigned int)strlen(user));
		if (methods || libssh2_userauth_authenticated(c->session))
			break;
		rc = libssh2_session_last_errno(c->session);
		if (rc != LIBSSH2_ERROR_EAGAIN)
			return asp__ssh_error(c, rc, err, "starting authentication");
		if ((rc = asp__ssh_wait(c, deadline, cancel_fd, NULL, 0, ASP_WAIT_REPLY, err)))
			return rc;
	}
	if (!methods) {
		c->auth = ASP_AUTH_NONE;
		return 0;
	}
	return auth_agent(c, p, methods, deadline, cancel_fd, err);
}

/* Whether comma-separated `list` holds `name` (n bytes). */
static int list_has(const char *list, const char *name, size_t n)
{
	for (const char *p = list; *p;) {
		size_t m = strcspn(p, ",");

		if (m == n && !memcmp(p, name, n))
			return 1;
		p += m + (p[m] == ',');
	}
	return 0;
}

/*
 * This libssh2's names for one method type, comma-separated: all of them,
 * or those of `want` (in want's order, each once). libssh2 1.10's
 * method_pref must never see a name it lacks: removing it is a memcpy of
 * overlapping bytes.
 */
static void supported(asp_conn *c, int type, const char *want, char *out, size_t size)
{
	const char **algs = NULL;
	int n = libssh2_session_supported_algs(c->session, type, &algs);
	size_t len = 0;

	out[0] = 0;
	for (int i = 0; !want && i < n; i++)
		if (len + strlen(algs[i]) + 2 <= size)
			len += (size_t)snprintf(out + len, size - len, "%s%s", len ? "," : "", algs[i]);
	for (const char *w = want; w && *w;) {
		size_t wn = strcspn(w, ",");
		int have = 0;

		for (int i = 0; i < n && !have; i++)
			have = strlen(algs[i]) == wn && !memcmp(algs[i], w, wn);
		if (have && !list_has(out, w, wn) && len + wn + 2 <= size)
			len += (size_t)snprintf(out + len, size - len, "%s%.*s", len ? "," : "", (int)wn, w);
		w += wn + (w[wn] == ',');
	}
	if (n > 0)
		libssh2_free(c->session, algs);
}

/*
 * The host key algorithms to ask for: the pinned key's type first, so a
 * server with several host keys shows that one; rsa-sha2-* where libssh2
 * has them (1.11).
 */
static void host_key_preference(asp_conn *c, const asp_pin *pin, char *out, size_t size)
{
	char want[256];

	snprintf(want, sizeof(want), "%s%sssh-ed25519,ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,"
		 "ecdsa-sha2-nistp521,rsa-sha2-512,rsa-sha2-256,ssh-rsa",
		 pin && pin->type[0] ? pin->type : "", pin && pin->type[0] ? "," : "");
	supported(c, LIBSSH2_METHOD_HOSTKEY, want, out, size);
}

static void set_host_key_preference(asp_conn *c, const asp_pin *pin)
{
	char pref[256];

	host_key_preference(c, pin, pref, sizeof(pref));
	if (pref[0])
		libssh2_session_method_pref(c->session, LIBSSH2_METHOD_HOSTKEY, pref);
}

/*
 * The handshake failed: when the server's KEXINIT was seen and one category
 * has nothing in common with this libssh2, say so instead of libssh2's
 * "Unable to exchange encryption keys".
 */
static void explain_negotiation(asp_conn *c, const asp_pin *pin, asp_error *err)
{
	static const int types[ASP_KEXINIT_NCAT] = { LIBSSH2_METHOD_KEX, LIBSSH2_METHOD_HOSTKEY,
						     LIBSSH2_METHOD_CRYPT_CS, LIBSSH2_METHOD_MAC_CS,
						     LIBSSH2_METHOD_COMP_CS };
	char names[ASP_KEXINIT_NCAT][1024], why[ASP_ERROR_MESSAGE_MAX];
	asp_kexinit_client cl = { .version = libssh2_version(0), .v111 = !!libssh2_version(0x010b00) };
	asp_kexinit k;

	if (!err || !c->kex_capture ||
	    asp__kexinit_parse(c->kex_capture, c->kex_capture_len, &k) != ASP_KEXINIT_OK)
		return;
	for (int i = 0; i < ASP_KEXINIT_NCAT; i++) {
		if (i == ASP_KEXINIT_HOSTKEY)
			host_key_preference(c, pin, names[i], sizeof(names[i]));
		else
			supported(c, types[i], NULL, names[i], sizeof(names[i]));
		cl.names[i] = names[i][0] ? names[i] : NULL;
	}
	if (asp__kexinit_diagnose(&k, &cl, why, sizeof(why)) >= 0)
		asp__error(err, ASP_ECONNECT, "%s: SSH handshake failed: %s", c->where, why);
}

static void free_kex_capture(asp_conn *c)
{
	asp__free(c->kex_capture);
	c->kex_capture = NULL;
	c->kex_capture_cap = 0;
}

int asp__conn_open(asp_conn **out, const asp_conn_params *p, int cancel_fd, uint64_t op_deadline,
		   asp_error *err)
{
	const asp_config *cfg = p->cfg;
	uint64_t t0 = asp__now_ms(), deadline = t0 + p->connect_timeout_ms;
	asp_conn *c;
	int rc, wrc;

	if ((rc = asp__ssh_global_init(err)))
		return rc;
	if (!(c = asp__calloc(1, sizeof(*c))))
		return asp__error(err, ASP_ENOMEM, "out of memory");
	c->sock = -1;
	c->op_cancel_fd = -1;
	if (op_deadline && op_deadline < deadline)
		deadline = op_deadline;
	c->io_timeout_ms = p->connect_timeout_ms; /* handshake silence is bounded by the connect deadline */
	c->keepalive_s = p->keepalive_s;
	c->files_want = p->file_transport;
	c->no_sftp = p->no_sftp;
	c->params = p;
	if (p->file_transport == ASP_FILES_EXEC)
		c->file_transport = ASP_FILES_EXEC; /* decided already: SFTP is never opened */
	if (!(c->where = strchr(cfg->host, ':') ? asp__sprintf("[%s]:%u", cfg->host, cfg->port)
						 : asp__sprintf("%s:%u", cfg->host, cfg->port))) {
		asp__free(c);
		return asp__error(err, ASP_ENOMEM, "out of memory");
	}
	rc = cfg->proxy_command ? proxy_connect(c, cfg, err) : tcp_connect(c, cfg, deadline, cancel_fd, err);
	if (rc)
		goto fail;
	if (!(c->session = asp__ssh_session_new(c))) {
		rc = asp__error(err, ASP_ENOMEM, "out of memory creating an SSH session");
		goto fail;
	}
	libssh2_session_set_blocking(c->session, 0);
	set_host_key_preference(c, p->pin);
	c->last_rx_ms = asp__now_ms();
	SSH_LOOP(c, rc, wrc, libssh2_session_handshake(c->session, c->sock), deadline, cancel_fd, err);
	if (wrc == ASP_ETIMEOUT) {
		rc = asp__error(err, ASP_ETIMEOUT, "%s: the SSH handshake did not complete within %u ms",
				c->where, p->connect_timeout_ms);
		goto fail;
	}
	if (wrc) {
		rc = wrc;
		goto fail;
	}
	if (rc) {
		rc = asp__ssh_error(c, rc, err, "SSH handshake failed");
		if (rc != ASP_ENOMEM)
			rc = ASP_ECONNECT;
		if (err)
			err->code = rc;
		if (rc == ASP_ECONNECT)
			explain_negotiation(c, p->pin, err);
		goto fail;
	}
	free_kex_capture(c);
	if ((rc = verify_host_key(c, p, err)))
		goto fail;
	if ((rc = authenticate(c, p, deadline, cancel_fd, err)))
		goto fail;
	c->quickack = 0;
	c->io_timeout_ms = p->io_timeout_ms;
	libssh2_keepalive_config(c->session, 1, (unsigned int)(asp__ssh_keepalive_ms(c) / 1000));
	c->last_used_ms = asp__now_ms();
	asp__log(p->log, ASP_LOG_INFO, "connected to %s in %llu ms: host key %s %s (%s), auth %s", c->where,
		 (unsigned long long)(c->last_used_ms - t0), c->host_key_type, c->host_key_fingerprint,
		 asp__log_trust_name(c->trust), asp__log_auth_name(c->auth));
	*out = c;
	return 0;
fail:
	if (rc == ASP_ECONNLOST) {
		/* The server hung up during connect: for the caller that is a connect failure. */
		rc = ASP_ECONNECT;
		if (err)
			err->code = rc;
	}
	c->dead = 1;
	asp__log(p->log, ASP_LOG_WARN, "connect to %s failed after %llu ms: %s", c->where,
		 (unsigned long long)(asp__now_ms() - t0), err ? err->message : asp_strerror(rc));
	asp__conn_close(c);
	return rc;
}

void asp__conn_close(asp_conn *c)
{
	if (!c)
		return;
	asp__log(c->params ? c->params->log : NULL, ASP_LOG_INFO, "closing connection to %s%s", c->where,
		 c->dead ? " (it failed)" : "");
	if (c->session) {
		if (!c->dead) {
			/* Bounded: libssh2 can spin on EAGAIN over a bad link (issue 344). */
			uint64_t deadline = asp__now_ms() + 500;
			int rc;
			c->io_timeout_ms = 500;
			while ((rc = libssh2_session_disconnect(c->session, "bye")) == LIBSSH2_ERROR_EAGAIN)
				if (asp__ssh_wait(c, deadline, -1, NULL, 0, ASP_WAIT_REPLY, NULL))
					break;
		}
		/*
		 * A non-blocking session_free returns EAGAIN while a channel still
		 * wants to send its close; with the socket shut down those sends fail
		 * at once and it frees everything (channels, SFTP channel included).
		 */
		if (c->sock >= 0)
			shutdown(c->sock, SHUT_RDWR);
		asp__ssh_session_free(c);
	}
	if (c->sock >= 0)
		close(c->sock);
	proxy_reap(c);
	free_kex_capture(c);
	asp__sftp_free_state(c);
	asp__free(c->where);
	asp__free(c);
}

int asp__conn_dead(const asp_conn *c)
{
	return c->dead;
}

int asp__conn_check_idle(asp_conn *c)
{
	struct pollfd pfd = { c->sock, POLLIN | POLLRDHUP, 0 };
	char b;
	ssize_t n;

	if (c->dead)
		return 0;
	if (poll(&pfd, 1, 0) <= 0)
		return 1;
	if (pfd.revents & (POLLERR | POLLNVAL | POLLRDHUP)) {
		c->dead = 1;
		return 0;
	}
	/*
	 * Something arrived while idle: a server keepalive or a DISCONNECT. Let
	 * libssh2 process it when it can (a zero-byte read on the SFTP channel
	 * runs the transport without taking any SFTP data), so that probes are
	 * answered and a close is seen; then look at what is left.
	 */
	if (c->sftp.chan) {
		atomic_fetch_add(&c->uses, 1);
		n = libssh2_channel_read(c->sftp.chan, &b, 0);
		/* A server's ChannelTimeout closes the SFTP channel but keeps the TCP stream. */
		if ((n < 0 && n != LIBSSH2_ERROR_EAGAIN) || libssh2_channel_eof(c->sftp.chan)) {
			c->dead = 1;
			return 0;
		}
	}
	n = recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
		c->dead = 1;
		return 0;
	}
	/*
	 * Unprocessed bytes alone are no sign of trouble (OpenSSH sends a
	 * hostkeys-00@openssh.com request after auth; a server may probe): the
	 * next operation's reads take them in. A FIN behind them shows as
	 * POLLRDHUP above.
	 */
	return 1;
}

int asp__conn_keepalive(asp_conn *c)
{
	int next, rc;

	if (c->dead)
		return ASP_ECONNLOST;
	/*
	 * No reply wanted: nobody reads an idle connection, and unread replies
	 * would hide a closed stream from asp__conn_check_idle's peek.
	 */
	libssh2_keepalive_config(c->session, 0, (unsigned int)(asp__ssh_keepalive_ms(c) / 1000));
	atomic_fetch_add(&c->uses, 1);
	rc = libssh2_keepalive_send(c->session, &next);
	if (rc && rc != LIBSSH2_ERROR_EAGAIN) {
		c->dead = 1;
		return ASP_ECONNLOST;
	}
	return 0;
}

void asp__conn_taken(asp_conn *c)
{
	atomic_fetch_add(&c->uses, 1);
}

unsigned int asp__conn_procs_room(const asp_conn *c)
{
	return c->procs_room;
}

void asp__conn_set_procs_room(asp_conn *c, unsigned int n)
{
	c->procs_room = n;
}

uint64_t asp__conn_last_used(const asp_conn *c)
{
	return c->last_used_ms;
}

void asp__conn_touch(asp_conn *c)
{
	c->last_used_ms = asp__now_ms();
}

unsigned int asp__conn_routes_take(asp_conn *c)
{
	unsigned int r = c->routes;

	c->routes = 0;
	return r;
}

void asp__conn_route_mark(asp_conn *c, unsigned int route)
{
	c->routes |= route;
}

void asp__conn_info(const asp_conn *c, asp_sandbox_info *out)
{
	const char *kex = libssh2_session_methods(c->session, LIBSSH2_METHOD_KEX);
	const char *banner = libssh2_session_banner_get(c->session);

	memset(out, 0, sizeof(*out));
	out->version = ASP_SANDBOX_INFO_VERSION;
	out->trust = c->trust;
	out->auth = c->auth;
	out->file_transport = c->file_transport;
	snprintf(out->host_key_type, sizeof(out->host_key_type), "%s", c->host_key_type);
	snprintf(out->host_key_fingerprint, sizeof(out->host_key_fingerprint), "%s",
		 c->host_key_fingerprint);
	snprintf(out->known_hosts, sizeof(out->known_hosts), "%s", c->known_hosts ? c->known_hosts : "");
	snprintf(out->kex, sizeof(out->kex), "%s", kex ? kex : "");
	method_pair(c, out->cipher, sizeof(out->cipher), LIBSSH2_METHOD_CRYPT_CS, LIBSSH2_METHOD_CRYPT_SC);
	method_pair(c, out->mac, sizeof(out->mac), LIBSSH2_METHOD_MAC_CS, LIBSSH2_METHOD_MAC_SC);
	/* The server's text, like any other: escaped (a cut one ends in "..."). */
	asp__show_text(out->server_banner, sizeof(out->server_banner), banner ? banner : "",
		       banner ? strlen(banner) : 0);
}
