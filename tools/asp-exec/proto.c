/*
 * proto.c - the master's wire format (see proto.h) and the request type.
 * Encoding and decoding do no I/O.
 */
#include "proto.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FLAG_JSON 1u
#define FLAG_MKDIRS 2u
#define FLAG_CWD 4u
#define FLAG_PATH 8u
#define FLAG_QUIET 16u
#define HEADER_LEN 12

/* ------------------------------------------------------------ requests */

cli_request *cli_request_new(void)
{
	cli_request *req = calloc(1, sizeof(*req));

	if (req && (!(req->env = calloc(1, sizeof(char *))) || !(req->args = calloc(1, sizeof(char *))))) {
		cli_request_free(req);
		return NULL;
	}
	return req;
}

static size_t list_len(char *const *list)
{
	size_t n = 0;

	while (list && list[n])
		n++;
	return n;
}

int cli_list_add(char ***list, const char *s)
{
	size_t n = list_len(*list);
	char **grown = realloc(*list, (n + 2) * sizeof(char *));

	if (!grown)
		return -1;
	*list = grown;
	grown[n + 1] = NULL;
	return (grown[n] = strdup(s)) ? 0 : -1;
}

static void list_free(char **list)
{
	for (size_t i = 0; list && list[i]; i++)
		free(list[i]);
	free(list);
}

void cli_request_free(cli_request *req)
{
	if (!req)
		return;
	list_free(req->env);
	list_free(req->args);
	free(req->cwd);
	free(req->path);
	free(req);
}

/* ------------------------------------------------------------ encoding */

typedef struct writer {
	unsigned char *p;
	size_t len, cap;
	int failed;
} writer;

static void put(writer *w, const void *data, size_t n)
{
	if (w->failed)
		return;
	if (w->len + n > w->cap) {
		size_t cap = (w->len + n) * 2;
		unsigned char *p = realloc(w->p, cap);

		if (!p) {
			w->failed = 1;
			return;
		}
		w->p = p;
		w->cap = cap;
	}
	memcpy(w->p + w->len, data, n);
	w->len += n;
}

static void put_u32(writer *w, uint32_t v)
{
	unsigned char b[4] = { (unsigned char)(v >> 24), (unsigned char)(v >> 16),
			       (unsigned char)(v >> 8), (unsigned char)v };

	put(w, b, 4);
}

static void put_str(writer *w, const char *s)
{
	size_t n = strlen(s);

	put_u32(w, (uint32_t)n);
	put(w, s, n);
}

static void put_list(writer *w, char *const *list)
{
	size_t n = list_len(list);

	put_u32(w, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		put_str(w, list[i]);
}

unsigned char *proto_encode(const cli_request *req, size_t *len)
{
	writer w = { 0 };
	unsigned char head[4] = { PROTO_VERSION, (unsigned char)req->mode, 0, 0 };

	head[2] = (unsigned char)((req->json ? FLAG_JSON : 0) | (req->mkdirs ? FLAG_MKDIRS : 0) |
				  (req->cwd ? FLAG_CWD : 0) | (req->path ? FLAG_PATH : 0) |
				  (req->quiet ? FLAG_QUIET : 0));
	put_u32(&w, 0); /* the length, filled in below */
	put(&w, "ASPX", 4);
	put(&w, head, 4);
	put_u32(&w, req->timeout_ms);
	if (req->cwd)
		put_str(&w, req->cwd);
	if (req->path)
		put_str(&w, req->path);
	put_list(&w, req->env);
	put_list(&w, req->args);
	if (w.failed || w.len - 4 > PROTO_MAX_PAYLOAD) {
		free(w.p);
		return NULL;
	}
	w.p[0] = (unsigned char)((w.len - 4) >> 24);
	w.p[1] = (unsigned char)((w.len - 4) >> 16);
	w.p[2] = (unsigned char)((w.len - 4) >> 8);
	w.p[3] = (unsigned char)(w.len - 4);
	*len = w.len;
	return w.p;
}

/* ------------------------------------------------------------ decoding */

typedef struct reader {
	const unsigned char *p;
	size_t left;
} reader;

static int get_u32(reader *r, uint32_t *v)
{
	if (r->left < 4)
		return -1;
	*v = (uint32_t)r->p[0] << 24 | (uint32_t)r->p[1] << 16 | (uint32_t)r->p[2] << 8 | r->p[3];
	r->p += 4;
	r->left -= 4;
	return 0;
}

/* A string without NUL bytes, malloc'd. */
static char *get_str(reader *r)
{
	uint32_t n;
	char *s;

	if (get_u32(r, &n) || n > r->left || memchr(r->p, '\0', n) || !(s = malloc((size_t)n + 1)))
		return NULL;
	memcpy(s, r->p, n);
	s[n] = '\0';
	r->p += n;
	r->left -= n;
	return s;
}

static int get_list(reader *r, char ***list)
{
	uint32_t n;
	char **grown;

	/* Each string takes at least its 4-byte length: a bigger count is a lie. */
	if (get_u32(r, &n) || n > PROTO_MAX_LIST || n > r->left / 4 ||
	    !(grown = realloc(*list, (n + 1) * sizeof(char *))))
		return -1;
	*list = grown;
	memset(*list, 0, (n + 1) * sizeof(char *));
	for (uint32_t i = 0; i < n; i++)
		if (!((*list)[i] = get_str(r)))
			return -1;
	return 0;
}

cli_request *proto_decode(const unsigned char *p, size_t len)
{
	reader r;
	cli_request *req;
	uint32_t timeout;
	int mode, flags;

	if (len < HEADER_LEN || memcmp(p, "ASPX", 4) || p[4] != PROTO_VERSION)
		return NULL;
	mode = p[5];
	flags = p[6];
	if (mode < CLI_EXEC || mode > CLI_BG || !(req = cli_request_new()))
		return NULL;
	r.p = p + 8;
	r.left = len - 8;
	if (get_u32(&r, &timeout) || ((flags & FLAG_CWD) && !(req->cwd = get_str(&r))) ||
	    ((flags & FLAG_PATH) && !(req->path = get_str(&r))) || get_list(&r, &req->env) ||
	    get_list(&r, &req->args) || r.left) {
		cli_request_free(req);
		return NULL;
	}
	req->mode = mode;
	req->json = !!(flags & FLAG_JSON);
	req->mkdirs = !!(flags & FLAG_MKDIRS);
	req->quiet = !!(flags & FLAG_QUIET);
	req->timeout_ms = timeout;
	return req;
}

/* ------------------------------------------------------------ I/O */

int proto_send_request(int sock, const cli_request *req, const int fds[3])
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(3 * sizeof(int))];
	} ctl;
	struct msghdr m = { 0 };
	struct iovec iov;
	struct cmsghdr *c;
	size_t len, off;
	unsigned char *frame = proto_encode(req, &len);
	ssize_t n;

	if (!frame)
		return -1;
	memset(&ctl, 0, sizeof(ctl));
	iov.iov_base = frame;
	iov.iov_len = len;
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = ctl.buf;
	m.msg_controllen = sizeof(ctl.buf);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(3 * sizeof(int));
	memcpy(CMSG_DATA(c), fds, 3 * sizeof(int));
	while ((n = sendmsg(sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	/* A large request may go out in parts; the descriptors went with the first. */
	for (off = n > 0 ? (size_t)n : 0; n > 0 && off < len; off += (size_t)n)
		while ((n = send(sock, frame + off, len - off, MSG_NOSIGNAL)) < 0 && errno == EINTR)
			;
	free(frame);
	return n > 0 ? 0 : -1;
}

static int read_exact(int fd, void *buf, size_t len)
{
	unsigned char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The length prefix and the descriptors that came with it. */
static int recv_head(int sock, uint32_t *len, int fds[3])
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(3 * sizeof(int))];
	} ctl;
	unsigned char b[4];
	struct msghdr m = { 0 };
	struct iovec iov = { b, 4 };
	struct cmsghdr *c;
	ssize_t n;
	int got = 0;

	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = ctl.buf;
	m.msg_controllen = sizeof(ctl.buf);
	while ((n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC | MSG_WAITALL)) < 0 && errno == EINTR)
		;
	for (c = n > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			got = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(c), (size_t)(got > 3 ? 3 : got) * sizeof(int));
		}
	}
	if (n != 4 || got != 3 || (m.msg_flags & MSG_CTRUNC)) {
		for (int i = 0; i < (got > 3 ? 3 : got); i++)
			close(fds[i]);
		return -1;
	}
	*len = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
	return 0;
}

int proto_recv_request(int sock, cli_request **req, int fds[3])
{
	uint32_t len;
	unsigned char *payload = NULL;

	*req = NULL;
	if (recv_head(sock, &len, fds))
		return -1;
	if (len <= PROTO_MAX_PAYLOAD && (payload = malloc(len ? len : 1)) &&
	    !read_exact(sock, payload, len))
		*req = proto_decode(payload, len);
	free(payload);
	if (*req)
		return 0;
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	return -1;
}

int proto_send_frame(int sock, int type, int value)
{
	unsigned char b[4] = { (unsigned char)type, (unsigned char)value, 0, 0 };
	ssize_t n;

	while ((n = send(sock, b, 4, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return n == 4 ? 0 : -1;
}

int proto_recv_frame(int sock, int *type, int *value)
{
	unsigned char b[4];
	ssize_t n;

	while ((n = recv(sock, b, 4, MSG_WAITALL)) < 0 && errno == EINTR)
		;
	if (n == 0)
		return 0;
	if (n != 4)
		return n < 0 ? -1 : 0;
	*type = b[0];
	*value = b[1];
	return 1;
}
