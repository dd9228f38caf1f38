/*
 * test_faults.c - libasp under real network faults: a black-holed link
 * (every call, connect and a running command return within a bound, a
 * cancel during a hanging handshake is a cancel, and the handle recovers),
 * a server silent during authentication (a timeout, not EAUTH), a reset in
 * the middle of a 64 MiB atomic write (the target is old or new, never a
 * mix, and no temp file survives the next write), a reset while idle
 * (transparent reconnect), quiet-but-healthy connections that must not be
 * taken for dead, and an egress-blocked sandbox in a network namespace
 * (everything works over SSH ingress while outbound connections from inside
 * are really dropped, shown against a control probe that does connect).
 *
 * Faults come from tests/fixture/proxy.c (a TCP proxy on 127.0.0.1) and
 * tests/fixture/netns.c (sshd in its own namespace). No traffic leaves
 * 127.0.0.0/8 or the test's own veth pair.
 */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "asp.h"
#include "ssh.h"
#include "fixture/fixture.h"
#include "helpers.h"
#include "fixture/netns.h"
#include "fixture/proxy.h"
#include "tiers.h"

/* "Returns at all": generous, not a benchmark. */
#define NO_HANG_MS (15000 * fx_slowdown())
#define BIG_LEN (64u * 1024 * 1024)
#define CUT_AT (20u * 1024 * 1024)

/* ---------------------------------------------------------------- helpers */


/* A failure a dead link may cause: the documented connection errors. */
static int is_link_error(int rc)
{
	return rc == ASP_ETIMEOUT || rc == ASP_ECONNLOST || rc == ASP_ECONNECT;
}

/* Temp files of atomic writes to `name` left in dir: ".NAME.asp-*.tmp". */
static int count_temps(const char *dir, const char *name)
{
	char prefix[256];
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	ck_assert_msg(d != NULL, "opendir %s: %s", dir, strerror(errno));
	snprintf(prefix, sizeof(prefix), ".%s.asp-", name);
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);

		if (!strncmp(e->d_name, prefix, strlen(prefix)) && l > 4 &&
		    !strcmp(e->d_name + l - 4, ".tmp"))
			n++;
	}
	closedir(d);
	return n;
}

static int count_all_temps(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	ck_assert_msg(d != NULL, "opendir %s: %s", dir, strerror(errno));
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);

		if (e->d_name[0] == '.' && strstr(e->d_name, ".asp-") && l > 4 &&
		    !strcmp(e->d_name + l - 4, ".tmp"))
			n++;
	}
	closedir(d);
	return n;
}

/* ------------------------------------------------------------ proxied env */

typedef struct env {
	fx_sshd fx;
	fx_proxy px;
	char cfg[320];
	asp_sandbox *sb;
} env;

static env E;

static void env_setup(void)
{
	memset(&E, 0, sizeof(E));
	E.px.ctl = -1;
}

static void env_teardown(void)
{
	asp_close(E.sb);
	E.sb = NULL;
	fx_proxy_stop(&E.px);
	fx_sshd_stop(&E.fx);
}

/* sshd (with extra config), a proxy in front of it, and a config pointing at the proxy. */
static void env_start(const char *extra_sshd)
{
	ck_assert_int_eq(fx_sshd_start_with(&E.fx, extra_sshd), 0);
	ck_assert_int_eq(fx_proxy_start(&E.px, E.fx.port), 0);
	snprintf(E.cfg, sizeof(E.cfg), "%s/proxy.asp.json", E.fx.dir);
	ck_assert_int_eq(fx_write_config(&E.fx, E.cfg, &(fx_config_opts){ .port = E.px.port }), 0);
}

static int env_open(asp_sandbox **sb, unsigned int io_ms, unsigned int ka_s, unsigned int connect_ms,
		    unsigned int flags, asp_error *err)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;

	o.config_path = E.cfg;
	o.io_timeout_ms = io_ms;
	o.keepalive_s = ka_s;
	o.connect_timeout_ms = connect_ms;
	o.flags = flags;
	return asp_open(sb, &o, err);
}

static void set_mode(fx_proxy_mode mode, uint64_t n)
{
	ck_assert_int_eq(fx_proxy_set_mode(&E.px, mode, n), 0);
}

static fx_proxy_stats proxy_stats(void)
{
	fx_proxy_stats st;

	ck_assert_int_eq(fx_proxy_stats_get(&E.px, &st), 0);
	return st;
}

static void expect_read(asp_sandbox *sb, const char *path, const char *want)
{
	asp_error err = { 0 };
	unsigned char *data = NULL;
	size_t len = 0;
	int rc = asp_read(&data, &len, sb, path, 0, ASP_READ_ALL, NULL, &err);

	ASSERT_OK(rc, err, "asp_read");
	ck_assert_uint_eq(len, strlen(want));
	ck_assert(memcmp(data, want, len) == 0);
	asp_free(data);
}

static void expect_exec(asp_sandbox *sb, const char *cmd, const char *want_stdout)
{
	asp_error err = { 0 };
	asp_exec_result *r = NULL;
	const unsigned char *out;
	size_t len;
	int rc = asp_exec(&r, sb, cmd, NULL, &err);

	ASSERT_OK(rc, err, "asp_exec");
	ck_assert_int_eq(asp_exec_result_exit_code(r), 0);
	out = asp_exec_result_output(r, ASP_STDOUT, &len);
	ck_assert_msg(len == strlen(want_stdout) && memcmp(out, want_stdout, len) == 0,
		      "exec %s: stdout %.*s", cmd, (int)len, (const char *)out);
	asp_exec_result_free(r);
}

static void write_text(asp_sandbox *sb, const char *path, const char *text)
{
	asp_error err = { 0 };
	int rc = asp_write(sb, path, text, strlen(text), NULL, &err);

	ASSERT_OK(rc, err, "asp_write");
}

/* Every call on a dead link fails with a connection error, within the bound. */
#define EXPECT_LINK_ERROR(what, call)                                                            \
	do {                                                                                     \
		asp_error e_ = { 0 };                                                            \
		long long t0_ = fx_now_ms(), dt_;                                                  \
		int rc_ = (call);                                                                \
		dt_ = fx_now_ms() - t0_;                                                           \
		fprintf(stderr, "faults: blackhole %-6s -> %s after %lld ms (%s)\n", what,       \
			asp_error_name(rc_), dt_, e_.message);                                   \
		ck_assert_msg(is_link_error(rc_), "%s on a black-holed link: %s (%s)", what,    \
			      asp_error_name(rc_), e_.message);                                  \
		ck_assert_int_eq(e_.code, rc_);                                                  \
		ck_assert_msg(dt_ < NO_HANG_MS, "%s took %lld ms on a black-holed link", what,   \
			      dt_);                                                              \
	} while (0)

/* ---------------------------------------------------------------- blackhole */

START_TEST(test_blackhole_ops_fail_fast_then_recover)
{
	asp_error err = { 0 };
	asp_stat_info st;
	asp_exec_result *r = NULL;
	asp_list *l = NULL;
	unsigned char *data = NULL;
	size_t len = 0;
	int rc;

	env_start(NULL);
	rc = env_open(&E.sb, 1500, 1, 1500, 0, &err);
	ASSERT_OK(rc, err, "env_open");
	write_text(E.sb, "bh.txt", "before\n");
	expect_read(E.sb, "bh.txt", "before\n");

	set_mode(FX_PROXY_BLACKHOLE, 0);
	EXPECT_LINK_ERROR("read", asp_read(&data, &len, E.sb, "bh.txt", 0, ASP_READ_ALL, NULL, &e_));
	EXPECT_LINK_ERROR("stat", asp_stat(&st, E.sb, "bh.txt", NULL, &e_));
	EXPECT_LINK_ERROR("write", asp_write(E.sb, "bh.txt", "during\n", 7, NULL, &e_));
	EXPECT_LINK_ERROR("exec", asp_exec(&r, E.sb, "echo hi", NULL, &e_));
	EXPECT_LINK_ERROR("list", asp_list_dir(&l, E.sb, ".", NULL, &e_));
	EXPECT_LINK_ERROR("mkdir", asp_mkdir(E.sb, "newdir", 0755, 0, NULL, &e_));

	/* The link heals: the same handle works again. */
	set_mode(FX_PROXY_PASS, 0);
	expect_read(E.sb, "bh.txt", "before\n");
	rc = asp_stat(&st, E.sb, "bh.txt", NULL, &err);
	ASSERT_OK(rc, err, "asp_stat");
	ck_assert_uint_eq(st.size, 7);
	write_text(E.sb, "bh.txt", "after\n");
	expect_read(E.sb, "bh.txt", "after\n");
	expect_exec(E.sb, "echo hi", "hi\n");
}
END_TEST

typedef struct bh_cb {
	int switched;
	int failed;
} bh_cb;

/* Black-hole the link as soon as the command shows it is running. */
static int blackhole_when_started(asp_stream stream, const unsigned char *d, size_t n, void *ud)
{
	bh_cb *s = ud;

	if (!s->switched && stream == ASP_STDOUT && memmem(d, n, "started", 7)) {
		s->switched = 1;
		s->failed = fx_proxy_set_mode(&E.px, FX_PROXY_BLACKHOLE, 0) != 0;
	}
	return 0;
}

START_TEST(test_blackhole_running_command_detected_by_keepalive)
{
	asp_error err = { 0 };
	asp_exec_options eo = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	bh_cb s = { 0, 0 };
	long long t0, dt;
	int rc;

	env_start(NULL);
	rc = env_open(&E.sb, 1500, 1, 1500, 0, &err);
	ASSERT_OK(rc, err, "env_open");
	/* No timeout: only the keepalive can tell a dead link from a quiet command. */
	eo.on_output = blackhole_when_started;
	eo.userdata = &s;
	t0 = fx_now_ms();
	rc = asp_exec(&r, E.sb, "echo started; sleep 30; echo done", &eo, &err);
	dt = fx_now_ms() - t0;
	fprintf(stderr, "faults: blackhole during sleep 30 -> %s after %lld ms (%s)\n",
		asp_error_name(rc), dt, err.message);
	ck_assert_msg(s.switched && !s.failed, "the command never started or the proxy failed");
	ck_assert_msg(rc == ASP_ECONNLOST, "exec on a link that died under it: %s (%s)",
		      asp_error_name(rc), err.message);
	/* The message keeps its cause once, not a garbled copy of itself. */
	{
		const char *first = strstr(err.message, "not replayed");
		ck_assert_msg(!first || !strstr(first + 1, "not replayed"),
			      "ECONNLOST message repeats itself: %s", err.message);
	}
	ck_assert_msg(dt < NO_HANG_MS, "exec took %lld ms to notice the dead link", dt);
	ck_assert(r == NULL);

	set_mode(FX_PROXY_PASS, 0);
	expect_exec(E.sb, "echo ok", "ok\n");
}
END_TEST

START_TEST(test_blackhole_connect_fails_fast)
{
	asp_error err = { 0 };
	asp_sandbox *sb = NULL;
	unsigned char *data = NULL;
	size_t len = 0;
	int rc;

	env_start(NULL);
	set_mode(FX_PROXY_BLACKHOLE, 0);
	/* asp_open connects: the TCP connect succeeds (the proxy accepts), the handshake hangs. */
	EXPECT_LINK_ERROR("open", env_open(&sb, 1500, 1, 1500, 0, &e_));
	ck_assert(sb == NULL);
	rc = env_open(&E.sb, 1500, 1, 1500, ASP_OPEN_LAZY, &err);
	ASSERT_OK(rc, err, "env_open");
	EXPECT_LINK_ERROR("read", asp_read(&data, &len, E.sb, "x", 0, ASP_READ_ALL, NULL, &e_));

	set_mode(FX_PROXY_PASS, 0);
	write_text(E.sb, "x", "x\n");
	expect_read(E.sb, "x", "x\n");
}
END_TEST

static void *trigger_later(void *arg)
{
	fx_sleep_ms(300);
	asp_cancel_trigger(arg);
	return NULL;
}

/* A cancel during a hanging handshake is a cancel, not a connect failure. */
START_TEST(test_cancel_during_blackholed_connect)
{
	asp_error err = { 0 };
	asp_exec_options eo = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_cancel *cancel = NULL;
	pthread_t th;
	long long t0, dt;
	int rc;

	env_start(NULL);
	rc = env_open(&E.sb, 1500, 1, 10000, ASP_OPEN_LAZY, &err);
	ASSERT_OK(rc, err, "env_open");
	set_mode(FX_PROXY_BLACKHOLE, 0);
	ck_assert_int_eq(asp_cancel_new(&cancel, &err), 0);
	eo.call.cancel = cancel;
	ck_assert_int_eq(pthread_create(&th, NULL, trigger_later, cancel), 0);
	t0 = fx_now_ms();
	rc = asp_exec(&r, E.sb, "echo hi", &eo, &err);
	dt = fx_now_ms() - t0;
	pthread_join(th, NULL);
	fprintf(stderr, "faults: cancel during handshake -> %s after %lld ms (%s)\n",
		asp_error_name(rc), dt, err.message);
	ck_assert_msg(rc == ASP_ECANCELLED, "cancelled during the SSH handshake: got %s (%s)",
		      asp_error_name(rc), err.message);
	ck_assert_msg(dt < 5000, "cancel took %lld ms", dt);
	asp_cancel_free(cancel);
}
END_TEST

/* Cancel once the proxy holds a second connection: the call is waiting mid key exchange. */
static void *trigger_when_held(void *arg)
{
	fx_proxy_stats st = { 0 };

	for (int i = 0; i < 6000; i++) {
		if (fx_proxy_stats_get(&E.px, &st) == 0 && st.held >= 2)
			break;
		fx_sleep_ms(10);
	}
	asp_cancel_trigger(arg);
	return NULL;
}

/*
 * A handshake given up in the middle of the key exchange leaves nothing of
 * libssh2 behind. libssh2 1.10 frees its curve25519 key pair when the
 * exchange ends, not with the session; libasp wipes and frees whatever the
 * session still held. The proxy holds every connection once the client has
 * sent its KEXINIT and its key-exchange init, so the client is waiting for
 * the server's reply when it gives up: first at the connect timeout, then on
 * a cancel sent once the proxy holds the connection.
 */
START_TEST(test_connect_given_up_mid_key_exchange_leaves_nothing)
{
	unsigned long live0 = asp__ssh_allocs_live(), reclaimed0 = asp__ssh_allocs_reclaimed();
	asp_exec_options eo = ASP_EXEC_OPTIONS_INIT;
	asp_exec_result *r = NULL;
	asp_cancel *cancel = NULL;
	asp_error err = { 0 };
	asp_sandbox *sb = NULL;
	fx_proxy_stats st;
	pthread_t th;
	int rc;

	env_start(NULL);
	set_mode(FX_PROXY_HOLD_AFTER_PACKETS, 2);
	rc = env_open(&sb, 1500, 15, 700, 0, &err);
	ck_assert_msg(rc == ASP_ETIMEOUT && sb == NULL, "open with the key exchange held: %s (%s)",
		      asp_error_name(rc), err.message);
	st = proxy_stats();
	ck_assert_msg(st.held >= 1, "no connection reached the key exchange (held %llu)",
		      (unsigned long long)st.held);
	ck_assert_msg(asp__ssh_allocs_live() == live0, "after a connect timeout mid key exchange, "
		      "%lu libssh2 allocations are left (before the open: %lu)", asp__ssh_allocs_live(),
		      live0);

	rc = env_open(&E.sb, 1500, 15, 10000, ASP_OPEN_LAZY, &err);
	ASSERT_OK(rc, err, "env_open");
	ck_assert_int_eq(asp_cancel_new(&cancel, &err), 0);
	eo.call.cancel = cancel;
	ck_assert_int_eq(pthread_create(&th, NULL, trigger_when_held, cancel), 0);
	rc = asp_exec(&r, E.sb, "echo hi", &eo, &err);
	pthread_join(th, NULL);
	asp_cancel_free(cancel);
	ck_assert_msg(rc == ASP_ECANCELLED, "cancelled mid key exchange: %s (%s)", asp_error_name(rc),
		      err.message);
	st = proxy_stats();
	ck_assert_msg(st.held >= 2, "the cancelled connect never reached the key exchange");
	asp_close(E.sb);
	E.sb = NULL;
	ck_assert_msg(asp__ssh_allocs_live() == live0, "after a cancel mid key exchange, %lu libssh2 "
		      "allocations are left (before: %lu)", asp__ssh_allocs_live(), live0);
	fprintf(stderr, "faults: libssh2 left %lu allocations behind in 2 sessions given up mid key "
		"exchange; all reclaimed\n", asp__ssh_allocs_reclaimed() - reclaimed0);
}
END_TEST

/*
 * A server that goes quiet during authentication is a timeout, not a
 * rejected key. Here sshd takes 2 s to look the key up (longer than
 * connect_timeout): AuthorizedKeysFile is off and an AuthorizedKeysCommand
 * sleeps, then authorises the offered key (%t %k).
 */
START_TEST(test_silent_server_during_auth_is_not_eauth)
{
	asp_error err = { 0 };
	asp_sandbox *sb = NULL;
	long long t0, dt;
	int rc;

	env_start("AuthorizedKeysFile none\n"
		  "AuthorizedKeysCommand /bin/sh -c \"sleep 2; echo %t %k\"\n"
		  "AuthorizedKeysCommandUser nobody\n");
	t0 = fx_now_ms();
	rc = env_open(&sb, 1500, 1, 1500, 0, &err);
	dt = fx_now_ms() - t0;
	fprintf(stderr, "faults: server silent during auth -> %s after %lld ms (%s)\n",
		asp_error_name(rc), dt, err.message);
	ck_assert_msg(rc == ASP_ETIMEOUT || rc == ASP_ECONNECT,
		      "server silent during auth: got %s (%s)", asp_error_name(rc), err.message);
	ck_assert_msg(dt < NO_HANG_MS, "open took %lld ms", dt);
	ck_assert(sb == NULL);
	/* Control: the same server does accept the key when given the time. */
	t0 = fx_now_ms();
	rc = env_open(&E.sb, 30000, 15, 30000, 0, &err);
	ASSERT_OK(rc, err, "env_open");
	fprintf(stderr, "faults: patient open with the slow key lookup took %lld ms\n", fx_now_ms() - t0);
}
END_TEST

typedef struct hole_after {
	uint64_t bytes;
	int done, failed;
} hole_after;

/* Black-hole the link once `bytes` more have gone client -> server. */
static void *blackhole_after_bytes(void *arg)
{
	hole_after *h = arg;
	fx_proxy_stats st;
	uint64_t start;
	long long deadline = fx_now_ms() + 20000;

	if (fx_proxy_stats_get(&E.px, &st) < 0) {
		h->failed = 1;
		return NULL;
	}
	start = st.c2s_bytes;
	while (fx_now_ms() < deadline) {
		if (fx_proxy_stats_get(&E.px, &st) < 0) {
			h->failed = 1;
			return NULL;
		}
		if (st.c2s_bytes - start >= h->bytes) {
			h->failed = fx_proxy_set_mode(&E.px, FX_PROXY_BLACKHOLE, 0) != 0;
			h->done = 1;
			return NULL;
		}
		fx_sleep_ms(2);
	}
	return NULL;
}

/* The link stalls while libasp is sending: the write gives up in time, the target is intact. */
START_TEST(test_blackhole_mid_atomic_write)
{
	asp_error err = { 0 };
	unsigned char *big = random_bytes(BIG_LEN, 3);
	char path[400], *text;
	hole_after h = { 8u * 1024 * 1024, 0, 0 };
	pthread_t th;
	long long t0, dt;
	int rc;

	env_start(NULL);
	rc = env_open(&E.sb, 1500, 1, 1500, 0, &err);
	ASSERT_OK(rc, err, "env_open");
	write_text(E.sb, "target.txt", "old content\n");
	ck_assert_int_eq(pthread_create(&th, NULL, blackhole_after_bytes, &h), 0);
	t0 = fx_now_ms();
	rc = asp_write(E.sb, "target.txt", big, BIG_LEN, NULL, &err);
	dt = fx_now_ms() - t0;
	pthread_join(th, NULL);
	fprintf(stderr, "faults: blackhole after 8 MiB of a 64 MiB write -> %s after %lld ms (%s)\n",
		asp_error_name(rc), dt, err.message);
	ck_assert_msg(h.done && !h.failed, "the proxy was not switched mid-write");
	ck_assert_msg(is_link_error(rc), "write on a link that stalled: %s (%s)", asp_error_name(rc),
		      err.message);
	ck_assert_msg(dt < NO_HANG_MS, "the write took %lld ms to give up", dt);
	snprintf(path, sizeof(path), "%s/target.txt", E.fx.workspace);
	text = fx_read_file(path, NULL);
	ck_assert(text != NULL);
	ck_assert_str_eq(text, "old content\n");
	free(text);

	set_mode(FX_PROXY_PASS, 0);
	write_text(E.sb, "target.txt", "new content\n");
	expect_read(E.sb, "target.txt", "new content\n");
	ck_assert_int_eq(count_all_temps(E.fx.workspace), 0);
	free(big);
}
END_TEST

/* ---------------------------------------------------------------- resets */

START_TEST(test_reset_while_idle_reconnects)
{
	asp_error err = { 0 };
	asp_stat_info st;
	fx_proxy_stats s0, s1;
	int rc;

	env_start(NULL);
	rc = env_open(&E.sb, 5000, 15, 5000, 0, &err);
	ASSERT_OK(rc, err, "env_open");
	write_text(E.sb, "idle.txt", "one\n");
	expect_read(E.sb, "idle.txt", "one\n");
	s0 = proxy_stats();
	ck_assert_uint_eq(s0.open, 1);

	/* Each kind of call after an RST on its idle connection just works. */
	ck_assert_int_eq(fx_proxy_cut(&E.px), 0);
	expect_read(E.sb, "idle.txt", "one\n");
	ck_assert_int_eq(fx_proxy_cut(&E.px), 0);
	expect_exec(E.sb, "cat idle.txt", "one\n");
	ck_assert_int_eq(fx_proxy_cut(&E.px), 0);
	write_text(E.sb, "idle.txt", "two\n");
	ck_assert_int_eq(fx_proxy_cut(&E.px), 0);
	rc = asp_stat(&st, E.sb, "idle.txt", NULL, &err);
	ASSERT_OK(rc, err, "asp_stat");
	ck_assert_uint_eq(st.size, 4);
	ck_assert_int_eq(fx_proxy_cut(&E.px), 0);
	rc = asp_rename(E.sb, "idle.txt", "idle2.txt", NULL, &err);
	ASSERT_OK(rc, err, "asp_rename");
	expect_read(E.sb, "idle2.txt", "two\n");

	s1 = proxy_stats();
	ck_assert_uint_eq(s1.cut, s0.cut + 5);
	ck_assert_msg(s1.accepted >= s0.accepted + 5, "accepted %llu -> %llu: no reconnects?",
		      (unsigned long long)s0.accepted, (unsigned long long)s1.accepted);
}
END_TEST

/*
 * A healthy link that was merely quiet is not a dead one: a pooled
 * connection idle for longer than io_timeout_ms (and not pinged yet: the
 * keepalive is 15 s) serves the next call, without a reconnect.
 */
START_TEST(test_idle_longer_than_io_timeout_is_not_silence)
{
	asp_error err = { 0 };
	fx_proxy_stats s0, s1;
	long long t0, dt;
	int rc;

	env_start(NULL);
	rc = env_open(&E.sb, 1000, 15, 5000, 0, &err);
	ASSERT_OK(rc, err, "env_open");
	rc = asp_mkdir(E.sb, "a", 0755, 0, NULL, &err);
	ASSERT_OK(rc, err, "asp_mkdir");
	s0 = proxy_stats();
	fx_sleep_ms(1600);
	/* Not idempotent: a failure here would not be hidden by a retry. */
	t0 = fx_now_ms();
	rc = asp_mkdir(E.sb, "b", 0755, 0, NULL, &err);
	dt = fx_now_ms() - t0;
	ck_assert_msg(rc == ASP_OK, "after %lld ms idle: mkdir -> %s after %lld ms (%s)", 1600LL,
		      asp_error_name(rc), dt, err.message);
	fx_sleep_ms(1600);
	expect_read(E.sb, "/dev/null", "");
	s1 = proxy_stats();
	ck_assert_msg(s1.accepted == s0.accepted, "a quiet connection was replaced (%llu -> %llu)",
		      (unsigned long long)s0.accepted, (unsigned long long)s1.accepted);
}
END_TEST

/* A helper command (rm -rf for a recursive remove) returns when it ends, not after io_timeout_ms. */
START_TEST(test_recursive_remove_does_not_wait_for_io_timeout)
{
	asp_error err = { 0 };
	long long t0, dt;
	int rc;

	env_start(NULL);
	rc = env_open(&E.sb, 10000, 15, 5000, 0, &err);
	ASSERT_OK(rc, err, "env_open");
	rc = asp_mkdir(E.sb, "t/u/v", 0755, ASP_MKDIR_PARENTS, NULL, &err);
	ASSERT_OK(rc, err, "asp_mkdir");
	write_text(E.sb, "t/u/v/f.txt", "x\n");
	t0 = fx_now_ms();
	rc = asp_remove(E.sb, "t", ASP_REMOVE_RECURSIVE, NULL, &err);
	dt = fx_now_ms() - t0;
	fprintf(stderr, "faults: recursive remove -> %s after %lld ms\n", asp_error_name(rc), dt);
	ASSERT_OK(rc, err, "asp_remove");
	ck_assert_msg(dt < 5000, "recursive remove took %lld ms (io_timeout_ms is 10000)", dt);
	rc = asp_mkdir(E.sb, "t", 0755, 0, NULL, &err);
	ASSERT_OK(rc, err, "asp_mkdir");
}
END_TEST

typedef struct watcher {
	const char *path;
	char old_sha[65], new_sha[65];
	atomic_int stop;
	long reads, torn, missing;
	char torn_sha[65];
} watcher;

/* Read the target over and over while it is being replaced: always old or new. */
static void *watch_target(void *arg)
{
	watcher *w = arg;

	while (!atomic_load(&w->stop)) {
		size_t len = 0;
		char *text = fx_read_file(w->path, &len);
		char sha[65];

		if (!text) {
			w->missing++;
			continue;
		}
		sha256_hex(text, len, sha);
		free(text);
		w->reads++;
		if (strcmp(sha, w->old_sha) && strcmp(sha, w->new_sha)) {
			w->torn++;
			memcpy(w->torn_sha, sha, sizeof(sha));
		}
		fx_sleep_ms(5);
	}
	return NULL;
}

START_TEST(test_cut_mid_atomic_write)
{
	asp_error err = { 0 };
	unsigned char *old = random_bytes(1u << 20, 1), *big = random_bytes(BIG_LEN, 2);
	char path[400];
	watcher w;
	pthread_t th;
	fx_proxy_stats s0, s1;
	size_t len;
	char *text, sha[65];
	long long t0, dt;
	int rc, temps;

	env_start(NULL);
	{
		/* One connection: the cut takes the write's own, which leaves its temp file
		 * behind (test_bulk.c cuts a write spread over several connections). */
		asp_open_options o = ASP_OPEN_OPTIONS_INIT;

		o.config_path = E.cfg;
		o.io_timeout_ms = 10000;
		o.keepalive_s = 15;
		o.connect_timeout_ms = 5000;
		o.max_connections = 1;
		rc = asp_open(&E.sb, &o, &err);
	}
	ASSERT_OK(rc, err, "asp_open");
	snprintf(path, sizeof(path), "%s/big.bin", E.fx.workspace);
	memset(&w, 0, sizeof(w));
	w.path = path;
	sha256_hex(old, 1u << 20, w.old_sha);
	sha256_hex(big, BIG_LEN, w.new_sha);

	rc = asp_write(E.sb, "big.bin", old, 1u << 20, NULL, &err);
	ASSERT_OK(rc, err, "asp_write");
	text = fx_read_file(path, &len);
	ck_assert(text != NULL);
	sha256_hex(text, len, sha);
	free(text);
	ck_assert_str_eq(sha, w.old_sha);

	/* Every connection, the retry's too, is reset after 20 MiB from the client. */
	set_mode(FX_PROXY_CUT_AFTER_BYTES, CUT_AT);
	s0 = proxy_stats();
	atomic_init(&w.stop, 0);
	ck_assert_int_eq(pthread_create(&th, NULL, watch_target, &w), 0);
	t0 = fx_now_ms();
	rc = asp_write(E.sb, "big.bin", big, BIG_LEN, NULL, &err);
	dt = fx_now_ms() - t0;
	atomic_store(&w.stop, 1);
	pthread_join(th, NULL);
	s1 = proxy_stats();
	fprintf(stderr, "faults: 64 MiB write cut at 20 MiB -> %s after %lld ms, %llu cuts (%s); "
		"watcher: %ld reads, %ld torn, %ld missing\n", asp_error_name(rc), dt,
		(unsigned long long)(s1.cut - s0.cut), err.message, w.reads, w.torn, w.missing);
	ck_assert_msg(rc == ASP_ECONNLOST || rc == ASP_ETIMEOUT, "cut write: %s (%s)",
		      asp_error_name(rc), err.message);
	ck_assert_msg(s1.cut - s0.cut >= 2, "the write was not retried on a fresh connection");
	ck_assert_msg(w.torn == 0, "a reader saw neither the old nor the new content (%s)", w.torn_sha);
	ck_assert_msg(w.missing == 0, "a reader found no file");
	ck_assert(w.reads > 0);

	/* The target holds exactly the old content. */
	text = fx_read_file(path, &len);
	ck_assert(text != NULL);
	sha256_hex(text, len, sha);
	free(text);
	ck_assert_str_eq(sha, w.old_sha);
	/* The lost connection left its temp file behind (what the next write must clean). */
	temps = count_temps(E.fx.workspace, "big.bin");
	fprintf(stderr, "faults: %d temp file(s) after the cut write\n", temps);
	ck_assert_int_ge(temps, 1);

	/* The link is fine again: the next write on the handle removes the orphans. */
	set_mode(FX_PROXY_PASS, 0);
	write_text(E.sb, "small.txt", "small\n");
	ck_assert_int_eq(count_temps(E.fx.workspace, "big.bin"), 0);
	ck_assert_int_eq(count_all_temps(E.fx.workspace), 0);

	/* And the big write itself goes through, replacing the target whole. */
	rc = asp_write(E.sb, "big.bin", big, BIG_LEN, NULL, &err);
	ASSERT_OK(rc, err, "asp_write");
	text = fx_read_file(path, &len);
	ck_assert(text != NULL);
	ck_assert_uint_eq(len, BIG_LEN);
	sha256_hex(text, len, sha);
	free(text);
	ck_assert_str_eq(sha, w.new_sha);
	ck_assert_int_eq(count_all_temps(E.fx.workspace), 0);
	free(old);
	free(big);
}
END_TEST

/* ---------------------------------------------------------------- netns */

static fx_netns NS;
static int ns_skip;
static char ns_why[256];

static void ns_setup(void)
{
	memset(&NS, 0, sizeof(NS));
	NS.guard_fd = -1;
	ns_skip = !fx_netns_available(ns_why, sizeof(ns_why));
	if (ns_skip) {
		fprintf(stderr, "faults: SKIP egress-blocked sandbox tests: %s\n", ns_why);
		return;
	}
	ck_assert_msg(fx_netns_start(&NS) == 0, "cannot set up the network namespace fixture");
}

static void ns_teardown(void)
{
	fx_netns_stop(&NS);
}

static int ns_open(asp_sandbox **sb, asp_error *err)
{
	asp_open_options o = ASP_OPEN_OPTIONS_INIT;

	o.config_path = NS.config;
	o.connect_timeout_ms = 5000;
	o.io_timeout_ms = 10000;
	return asp_open(sb, &o, err);
}

START_TEST(test_netns_everything_works_without_egress)
{
	asp_error err = { 0 };
	asp_sandbox *sb = NULL;
	asp_write_options wo = ASP_WRITE_OPTIONS_INIT;
	asp_stat_info st;
	asp_list *l = NULL;
	struct stat nsst;
	char path[400], want[64], *text;
	int rc;

	if (ns_skip)
		return;
	rc = ns_open(&sb, &err);
	ASSERT_OK(rc, err, "ns_open");

	wo.flags |= ASP_WRITE_PARENTS;
	rc = asp_write(sb, "dir/a.txt", "hello\n", 6, &wo, &err);
	ASSERT_OK(rc, err, "asp_write");
	expect_read(sb, "dir/a.txt", "hello\n");
	rc = asp_stat(&st, sb, "dir/a.txt", NULL, &err);
	ASSERT_OK(rc, err, "asp_stat");
	ck_assert_uint_eq(st.size, 6);
	ck_assert_uint_eq(st.type, ASP_TYPE_FILE);
	rc = asp_mkdir(sb, "d2", 0755, 0, NULL, &err);
	ASSERT_OK(rc, err, "asp_mkdir");
	rc = asp_mkdir(sb, "t/u/v", 0755, ASP_MKDIR_PARENTS, NULL, &err);
	ASSERT_OK(rc, err, "asp_mkdir");
	write_text(sb, "t/u/v/f.txt", "deep\n");
	rc = asp_list_dir(&l, sb, ".", NULL, &err);
	ASSERT_OK(rc, err, "asp_list_dir");
	ck_assert_uint_eq(asp_list_count(l), 3);
	ck_assert_str_eq(asp_list_name(l, 0), "d2");
	ck_assert_str_eq(asp_list_name(l, 1), "dir");
	ck_assert_str_eq(asp_list_name(l, 2), "t");
	asp_list_free(l);
	rc = asp_rename(sb, "dir/a.txt", "d2/b.txt", NULL, &err);
	ASSERT_OK(rc, err, "asp_rename");
	ck_assert_int_eq(asp_stat(&st, sb, "dir/a.txt", NULL, &err), ASP_ENOENT);
	expect_read(sb, "d2/b.txt", "hello\n");
	expect_exec(sb, "cat d2/b.txt && id -un", "hello\nasp-test\n");

	/* The commands really run inside the namespace. */
	snprintf(path, sizeof(path), "/run/netns/%s", NS.name);
	ck_assert_int_eq(stat(path, &nsst), 0);
	snprintf(want, sizeof(want), "net:[%llu]\n", (unsigned long long)nsst.st_ino);
	expect_exec(sb, "readlink /proc/self/ns/net", want);

	rc = asp_remove(sb, "d2/b.txt", 0, NULL, &err);
	ASSERT_OK(rc, err, "asp_remove");
	rc = asp_remove(sb, "d2", 0, NULL, &err);
	ASSERT_OK(rc, err, "asp_remove");
	rc = asp_remove(sb, "t", ASP_REMOVE_RECURSIVE, NULL, &err);
	ASSERT_OK(rc, err, "asp_remove");
	rc = asp_remove(sb, "dir", 0, NULL, &err);
	ASSERT_OK(rc, err, "asp_remove");
	rc = asp_list_dir(&l, sb, ".", NULL, &err);
	ASSERT_OK(rc, err, "asp_list_dir");
	ck_assert_uint_eq(asp_list_count(l), 0);
	asp_list_free(l);

	/* Cross-check on the local disk (the workspace is a local directory). */
	snprintf(path, sizeof(path), "%s/t", NS.sshd.workspace);
	ck_assert_int_eq(access(path, F_OK), -1);
	write_text(sb, "final.txt", "ok\n");
	snprintf(path, sizeof(path), "%s/final.txt", NS.sshd.workspace);
	text = fx_read_file(path, NULL);
	ck_assert(text != NULL);
	ck_assert_str_eq(text, "ok\n");
	free(text);
	asp_close(sb);
}
END_TEST

/* Our own listener on the host side of the test's veth. */
static int host_listener(int *port)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;

	ck_assert(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	ck_assert_int_eq(inet_pton(AF_INET, NS.host_addr, &sa.sin_addr), 1);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 8), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

/* Accept what reached the listener (waiting up to ms); returns connections, reads "hi\n". */
static int drain_listener(int lfd, int ms, int *said_hi)
{
	struct pollfd pfd = { lfd, POLLIN, 0 };
	int n = 0;

	*said_hi = 0;
	while (poll(&pfd, 1, ms) == 1) {
		char buf[16] = { 0 };
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		ssize_t got;

		if (c < 0)
			break;
		n++;
		{
			struct pollfd cp = { c, POLLIN, 0 };
			if (poll(&cp, 1, 2000) == 1 && (got = read(c, buf, sizeof(buf) - 1)) > 0 &&
			    !strcmp(buf, "hi\n"))
				*said_hi = 1;
		}
		close(c);
		ms = 200;
	}
	return n;
}

/* Run the probe through libasp; returns its exit code (0: it connected). */
static int sandbox_probe(asp_sandbox *sb, int port)
{
	asp_error err = { 0 };
	asp_exec_result *r = NULL;
	char cmd[256];
	size_t len;
	const unsigned char *e;
	int rc, code;

	snprintf(cmd, sizeof(cmd), "timeout 3 bash -c 'echo hi > /dev/tcp/%s/%d'", NS.host_addr, port);
	rc = asp_exec(&r, sb, cmd, NULL, &err);
	ASSERT_OK(rc, err, "asp_exec");
	code = asp_exec_result_exit_code(r);
	e = asp_exec_result_output(r, ASP_STDERR, &len);
	fprintf(stderr, "faults: sandbox probe to %s:%d -> exit %d %.*s", NS.host_addr, port, code,
		(int)len, (const char *)e);
	if (!len || e[len - 1] != '\n')
		fputc('\n', stderr);
	asp_exec_result_free(r);
	return code;
}

START_TEST(test_netns_egress_is_blocked)
{
	asp_error err = { 0 };
	asp_sandbox *sb = NULL;
	int lfd, port, hi, rc, n;

	if (ns_skip)
		return;
	rc = ns_open(&sb, &err);
	ASSERT_OK(rc, err, "ns_open");
	lfd = host_listener(&port);

	/* Blocked: the probe fails and nothing reaches our listener. */
	ck_assert_int_ne(sandbox_probe(sb, port), 0);
	n = drain_listener(lfd, 500, &hi);
	ck_assert_msg(n == 0, "%d connection(s) from the sandbox reached the host", n);
	/* Also as root via ip netns exec: the rule is for the namespace, not the user. */
	ck_assert_int_ne(fx_netns_run(&NS, "timeout 3 bash -c 'echo hi > /dev/tcp/%s/%d' 2>/dev/null",
				      NS.host_addr, port), 0);
	ck_assert_int_eq(drain_listener(lfd, 500, &hi), 0);

	/* Control: without the drop table the very same probe connects. */
	ck_assert_int_eq(fx_netns_set_egress(&NS, 1), 0);
	ck_assert_int_eq(sandbox_probe(sb, port), 0);
	n = drain_listener(lfd, 2000, &hi);
	ck_assert_msg(n == 1 && hi, "control probe: %d connection(s), said hi: %d", n, hi);
	ck_assert_int_eq(fx_netns_run(&NS, "timeout 3 bash -c 'echo hi > /dev/tcp/%s/%d'",
				      NS.host_addr, port), 0);
	n = drain_listener(lfd, 2000, &hi);
	ck_assert_msg(n == 1 && hi, "control probe (root): %d connection(s), said hi: %d", n, hi);

	/* Blocked again; SSH (established) keeps working throughout. */
	ck_assert_int_eq(fx_netns_set_egress(&NS, 0), 0);
	ck_assert_int_ne(sandbox_probe(sb, port), 0);
	ck_assert_int_eq(drain_listener(lfd, 500, &hi), 0);
	expect_exec(sb, "echo still here", "still here\n");
	close(lfd);
	asp_close(sb);
}
END_TEST

/* Teardown removes everything, also when the test process dies without it. */
START_TEST(test_netns_cleanup)
{
	fx_netns other;
	pid_t pid;
	int status, fds[2];
	ssize_t n;
	long long deadline;

	if (ns_skip)
		return;
	/* The fixture's own namespace is up; stop it and look. */
	ck_assert(fx_netns_exists(&NS));
	fx_netns_stop(&NS);
	ck_assert(!fx_netns_exists(&NS));

	/* A test child that dies (as a failed ck_assert would) without any teardown. */
	ck_assert_int_eq(pipe(fds), 0);
	fflush(NULL);
	pid = fork();
	ck_assert(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		if (fx_netns_start(&other) != 0)
			_exit(2);
		n = write(fds[1], &other, sizeof(other));
		_exit(n == (ssize_t)sizeof(other) ? 1 : 3);
	}
	close(fds[1]);
	memset(&other, 0, sizeof(other));
	n = read(fds[0], &other, sizeof(other));
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(n == (ssize_t)sizeof(other) && WIFEXITED(status) && WEXITSTATUS(status) == 1,
		      "child failed to start the fixture");
	ck_assert(other.x != 0);
	deadline = fx_now_ms() + 10000;
	while (fx_netns_exists(&other) && fx_now_ms() < deadline)
		fx_sleep_ms(50);
	ck_assert_msg(!fx_netns_exists(&other), "%s / %s left behind by a dead test", other.name,
		      other.veth_host);
	/* Its sshd is gone too (it died with its parent; the guard killed the namespace's processes). */
	deadline = fx_now_ms() + 5000;
	while (other.sshd.pid > 0 && kill(other.sshd.pid, 0) == 0 && fx_now_ms() < deadline)
		fx_sleep_ms(50);
	ck_assert_msg(other.sshd.pid <= 0 || kill(other.sshd.pid, 0) < 0, "sshd %d survived",
		      (int)other.sshd.pid);
	/* And the fixture dir with its keys (the child's atexit never ran). */
	ck_assert_msg(other.sshd.dir[0] && access(other.sshd.dir, F_OK) < 0, "%s left behind",
		      other.sshd.dir);
}
END_TEST

Suite *suite_faults(void)
{
	TCase *slow_tc, *slow_tn;
	Suite *s = suite_create("faults");
	TCase *tc = tcase_create("proxy");
	TCase *tn = tcase_create("netns");

	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, env_setup, env_teardown);
	tcase_add_test(tc, test_blackhole_running_command_detected_by_keepalive);
	tcase_add_test(tc, test_blackhole_connect_fails_fast);
	tcase_add_test(tc, test_cancel_during_blackholed_connect);
	tcase_add_test(tc, test_connect_given_up_mid_key_exchange_leaves_nothing);
	tcase_add_test(tc, test_idle_longer_than_io_timeout_is_not_silence);
	tcase_add_test(tc, test_recursive_remove_does_not_wait_for_io_timeout);
	tcase_add_test(tc, test_reset_while_idle_reconnects);
	suite_add_tcase(s, tc);

	tcase_set_timeout(tn, 120);
	tcase_add_checked_fixture(tn, ns_setup, ns_teardown);
	tcase_add_test(tn, test_netns_everything_works_without_egress);
	tcase_add_test(tn, test_netns_cleanup);
	suite_add_tcase(s, tn);
	slow_tc = slow_case(s, "proxy-slow", FIXTURE_CHECKED, env_setup, env_teardown, 120);
	tcase_add_test(slow_tc, test_blackhole_ops_fail_fast_then_recover);
	tcase_add_test(slow_tc, test_blackhole_mid_atomic_write);
	tcase_add_test(slow_tc, test_silent_server_during_auth_is_not_eauth);
	tcase_add_test(slow_tc, test_cut_mid_atomic_write);

	slow_tn = slow_case(s, "netns-slow", FIXTURE_CHECKED, ns_setup, ns_teardown, 120);
	tcase_add_test(slow_tn, test_netns_egress_is_blocked);
	return s;
}
