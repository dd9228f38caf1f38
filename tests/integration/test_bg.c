/*
 * test_bg.c - background processes (asp_bg_*) against the real sshd
 * fixture: start, list, read from offsets, the output bound (the oldest
 * dropped and reported), a signal to the whole group (seen alive first,
 * then gone), wait with a timeout, remove; a process outliving asp_close
 * of the handle that started it and found by a fresh one; hostile names
 * stored and listed verbatim with nothing run; the login shells dash,
 * BusyBox sh and zsh running the scripts other than the launcher.
 * A wait ends with the harness that waits (the other scripts run without
 * the watchdog: they end on their own). The slow case: a process outliving
 * a cut TCP connection (the watchdog's poll waited out) and an sshd restart.
 *
 * The fixture's sandbox is this machine, so the test sees the command's
 * processes with /proc. Other suites share the login user, and so its
 * ~/.asp/bg: every check looks at this test's ids only, and each test
 * removes what it started.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "asp.h"
#include "exec.h"
#include "helper.h"
#include "fixture/fixture.h"
#include "fixture/proxy.h"
#include "helpers.h"
#include "tiers.h"

static fx_sshd fx;

static void suite_setup(void)
{
	suite_sshd_start(&fx);
}

static void suite_teardown(void)
{
	fx_sshd_stop(&fx);
}

static char *start(asp_sandbox *sb, const char *cmd, const char *name, uint64_t keep)
{
	asp_bg_options o = ASP_BG_OPTIONS_INIT;
	asp_error e = { 0 };
	char *id = NULL;
	int rc;

	o.name = name;
	o.max_output = keep;
	rc = asp_bg_start(&id, sb, cmd, &o, &e);
	ck_assert_msg(rc == 0, "asp_bg_start: %s: %s", asp_error_name(rc), e.message);
	ck_assert_ptr_nonnull(id);
	return id;
}

static asp_bg_status wait_end(asp_sandbox *sb, const char *id)
{
	asp_call_options c = ASP_CALL_OPTIONS_INIT;
	asp_bg_status st;
	asp_error e = { 0 };
	int rc;

	c.timeout_ms = (unsigned int)(60000 * fx_slowdown());
	rc = asp_bg_wait(&st, sb, id, ASP_BG_FOREVER, &c, &e);
	ck_assert_msg(rc == 0, "asp_bg_wait %s: %s: %s", id, asp_error_name(rc), e.message);
	ck_assert_int_eq(st.state, ASP_BG_EXITED);
	return st;
}

/* Read until the output is complete (the writer may lag the command's end). */
static char *read_all(asp_sandbox *sb, const char *id, uint64_t from, asp_bg_status *st, size_t *len)
{
	unsigned char *out = NULL;
	asp_error e = { 0 };
	long long until = fx_now_ms() + 20000 * fx_slowdown();
	int rc;

	for (;;) {
		rc = asp_bg_read(&out, len, st, sb, id, from, 0, NULL, &e);
		ck_assert_msg(rc == 0, "asp_bg_read %s: %s: %s", id, asp_error_name(rc), e.message);
		if (!st->output_open || fx_now_ms() > until)
			return (char *)out;
		asp_free(out);
		fx_sleep_ms(20);
	}
}

static void bg_remove_ok(asp_sandbox *sb, const char *id)
{
	asp_error e = { 0 };
	int rc = asp_bg_remove(sb, id, NULL, &e);

	ck_assert_msg(rc == 0, "asp_bg_remove %s: %s: %s", id, asp_error_name(rc), e.message);
}

static const asp_bg_entry *find(const asp_bg_list *l, const char *id)
{
	size_t i;

	for (i = 0; i < asp_bg_list_count(l); i++)
		if (!strcmp(asp_bg_list_get(l, i)->id, id))
			return asp_bg_list_get(l, i);
	return NULL;
}

static asp_bg_list *bg_list_ok(asp_sandbox *sb)
{
	asp_bg_list *l = NULL;
	asp_error e = { 0 };
	int rc = asp_bg_list_all(&l, sb, NULL, &e);

	ck_assert_msg(rc == 0, "asp_bg_list_all: %s: %s", asp_error_name(rc), e.message);
	return l;
}

/* A pid the command wrote into the workspace, waited for. */
static pid_t workspace_pid(const char *file, int line)
{
	char path[4200];
	long long until = fx_now_ms() + 20000 * fx_slowdown();

	snprintf(path, sizeof(path), "%s/%s", fx.workspace, file);
	for (;;) {
		FILE *f = fopen(path, "r");
		int pids[4] = { 0 }, n = 0;

		if (f) {
			while (n < 4 && fscanf(f, "%d", &pids[n]) == 1)
				n++;
			fclose(f);
		}
		if (n > line)
			return pids[line];
		ck_assert_msg(fx_now_ms() < until, "the command never wrote %s", file);
		fx_sleep_ms(20);
	}
}

/* ------------------------------------------------------------------ tests */

START_TEST(start_read_list)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_bg_status st;
	const asp_bg_entry *en;
	asp_bg_list *l;
	size_t len;
	char *id, *out;

	id = start(sb, "echo hello; echo err >&2; pwd; echo bye", "greeter", 0);
	/* Its directory is the user's only; the command keeps the login's umask (022 here). */
	ck_assert_int_eq(fx_run("d=~%s/.asp/bg; [ \"$(stat -c %%a $d $d/%s)\" = \"700\n700\" ]", fx.user, id), 0);
	ck_assert_uint_eq(strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-"), strlen(id));
	st = wait_end(sb, id);
	ck_assert_int_eq(st.exit_code, 0);
	ck_assert_int_eq(st.signal, 0);

	{
		char want[4400];
		snprintf(want, sizeof(want), "hello\nerr\n%s\nbye\n", fx.workspace);
		out = read_all(sb, id, 0, &st, &len);
		assert_bytes("the whole output", out, len, want, strlen(want));
		ck_assert_uint_eq(st.offset, 0);
		ck_assert_uint_eq(st.output_start, 0);
		ck_assert_uint_eq(st.output_size, strlen(want));
		asp_free(out);
		/* From an offset, and with a limit. */
		out = read_all(sb, id, 6, &st, &len);
		assert_bytes("from 6", out, len, want + 6, strlen(want) - 6);
		ck_assert_uint_eq(st.offset, 6);
		asp_free(out);
		{
			unsigned char *b = NULL;
			asp_error e = { 0 };
			ck_assert_int_eq(asp_bg_read(&b, &len, &st, sb, id, 2, 3, NULL, &e), 0);
			assert_bytes("3 from 2", b, len, "llo", 3);
			asp_free(b);
			/* Past the end: nothing, at the end. */
			ck_assert_int_eq(asp_bg_read(&b, &len, &st, sb, id, 100000, 0, NULL, &e), 0);
			ck_assert_uint_eq(len, 0);
			ck_assert_uint_eq(st.offset, strlen(want));
			asp_free(b);
		}
	}

	l = bg_list_ok(sb);
	ck_assert_ptr_nonnull(en = find(l, id));
	ck_assert_str_eq(en->name, "greeter");
	ck_assert_str_eq(en->command, "echo hello; echo err >&2; pwd; echo bye");
	ck_assert_int_eq(en->status.state, ASP_BG_EXITED);
	ck_assert_int_eq(en->status.exit_code, 0);
	ck_assert_int_gt(en->pid, 1);
	ck_assert_int_gt(en->start_ms, 1600000000000LL);
	ck_assert_uint_eq(en->status.output_size, 15 + strlen(fx.workspace));
	asp_bg_list_free(l);
	bg_remove_ok(sb, id);
	asp_free(id);
	asp_close(sb);
}
END_TEST

/*
 * Each call is one exec: a script that ends in `exit 0` or `exec` ends
 * without the wrapper's end line, and exec.c then asks the sandbox whether
 * the command still runs (check_cut), a second exec and round trip.
 */
static unsigned long cut_checks(void)
{
	asp_exec_stats s;

	asp__exec_stats(&s);
	return s.cut_checks;
}

#define ONE_EXEC(what, call)                                                                        \
	do {                                                                                        \
		unsigned long before_ = cut_checks();                                                \
		call;                                                                               \
		ck_assert_msg(cut_checks() == before_, "%s asked whether its script still ran: %lu "  \
			      "check(s), each one more exec", what, cut_checks() - before_);          \
	} while (0)

START_TEST(one_exec_per_call)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_bg_status st;
	asp_error e = { 0 };
	asp_bg_list *l = NULL;
	unsigned char *b = NULL;
	size_t len = 0;
	char *id = NULL;
	int rc;

	/* The first call connects: counted from the second. */
	ck_assert_int_eq(asp_bg_list_all(&l, sb, NULL, &e), 0);
	asp_bg_list_free(l);
	ONE_EXEC("asp_bg_start", id = start(sb, "echo one; sleep 300", "one", 0));
	ONE_EXEC("asp_bg_read (no output yet, or some)", rc = asp_bg_read(&b, &len, &st, sb, id, 0, 0, NULL, &e));
	ck_assert_msg(rc == 0, "asp_bg_read: %s", e.message);
	asp_free(b);
	ONE_EXEC("asp_bg_list_all", rc = asp_bg_list_all(&l, sb, NULL, &e));
	ck_assert_int_eq(rc, 0);
	asp_bg_list_free(l);
	ONE_EXEC("asp_bg_wait (timeout)", rc = asp_bg_wait(&st, sb, id, 0, NULL, &e));
	ck_assert_int_eq(rc, ASP_ETIMEOUT);
	ONE_EXEC("asp_bg_signal", rc = asp_bg_signal(sb, id, SIGKILL, NULL, &e));
	ck_assert_msg(rc == 0, "asp_bg_signal: %s", e.message);
	st = wait_end(sb, id);
	ck_assert_int_eq(st.signal, SIGKILL);
	ONE_EXEC("asp_bg_read (ended)", rc = asp_bg_read(&b, &len, &st, sb, id, 0, 0, NULL, &e));
	ck_assert_msg(rc == 0, "asp_bg_read: %s", e.message);
	assert_bytes("output", b, len, "one\n", 4);
	asp_free(b);
	ONE_EXEC("asp_bg_signal (ended)", rc = asp_bg_signal(sb, id, SIGTERM, NULL, &e));
	ck_assert_int_eq(rc, 0);
	ONE_EXEC("asp_bg_remove", rc = asp_bg_remove(sb, id, NULL, &e));
	ck_assert_msg(rc == 0, "asp_bg_remove: %s", e.message);
	/* The failures too: no such id. */
	ONE_EXEC("asp_bg_read (no such id)", rc = asp_bg_read(&b, &len, &st, sb, id, 0, 0, NULL, &e));
	ck_assert_int_eq(rc, ASP_ENOENT);
	ONE_EXEC("asp_bg_signal (no such id)", rc = asp_bg_signal(sb, id, SIGTERM, NULL, &e));
	ck_assert_int_eq(rc, ASP_ENOENT);
	asp_free(id);
	asp_close(sb);
}
END_TEST

/*
 * The bg helper (libasp/exec/helper.c): one bash per connection serves
 * start, read, list, signal and remove as short requests. Counted: every
 * such call goes to it, with no new helper while nothing else ran; a call
 * that is not a bg call (an exec) makes the next start use a new helper
 * (the command must see what a session started now sees); a helper killed
 * in the sandbox is replaced, and the call still answers; the helper ends
 * with its handle.
 */
static asp_helper_stats helper_now(void)
{
	asp_helper_stats h;

	asp__helper_stats(&h);
	return h;
}

/* The helper serving sb's one connection: the process beside this exec's shell whose command says so. */
static pid_t helper_pid(asp_sandbox *sb)
{
	asp_exec_result *r = run(sb, "for f in /proc/[0-9]*; do p=${f#/proc/}; "
				     "{ [ \"$p\" != $$ ] && grep -qs asp-helper \"$f/cmdline\"; } || continue; "
				     "while read -r k v; do "
				     "[ \"$k\" = PPid: ] && [ \"$v\" = \"$PPID\" ] && echo \"$p\"; "
				     "done < \"$f/status\"; done");
	size_t len;
	const char *out = (const char *)asp_exec_result_output(r, ASP_STDOUT, &len);
	pid_t p = (pid_t)atoi(out);

	ck_assert_msg(p > 0 && !strchr(out, ' ') && strchr(out, '\n') == out + len - 1,
		      "not one bg helper beside the exec's shell: \"%s\"", out);
	asp_exec_result_free(r);
	return p;
}

START_TEST(helper_serves_calls)
{
	asp_open_options oo = ASP_OPEN_OPTIONS_INIT;
	asp_sandbox *sb;
	asp_helper_stats h0, h;
	asp_bg_status st;
	asp_error e = { 0 };
	asp_bg_list *l = NULL;
	unsigned char *b = NULL;
	size_t len = 0;
	char *id, *id2;
	pid_t hp;
	int rc;

	test_open_options(&oo);
	oo.config_path = fx.config;
	oo.max_connections = 1; /* one connection: one helper, beside every exec */
	sb = sb_open_opts(&oo);
	ck_assert_int_eq(asp_bg_list_all(&l, sb, NULL, &e), 0);
	asp_bg_list_free(l);
	h0 = helper_now();
	id = start(sb, "echo one; exec sleep 300", "one", 0);
	do {
		asp_free(b);
		rc = asp_bg_read(&b, &len, &st, sb, id, 0, 0, NULL, &e);
		ck_assert_msg(rc == 0, "asp_bg_read: %s", e.message);
	} while (!len);
	assert_bytes("output", b, len, "one\n", 4);
	asp_free(b);
	ck_assert_int_eq(asp_bg_list_all(&l, sb, NULL, &e), 0);
	ck_assert_ptr_nonnull(find(l, id));
	asp_bg_list_free(l);
	ck_assert_int_eq(asp_bg_signal(sb, id, SIGKILL, NULL, &e), 0);
	h = helper_now();
	ck_assert_msg(h.boots == h0.boots && h.calls >= h0.calls + 4 && h.none == h0.none,
		      "start, reads, list and signal: %lu helpers started, %lu calls, %lu without one",
		      h.boots - h0.boots, h.calls - h0.calls, h.none - h0.none);
	st = wait_end(sb, id); /* a wait goes by exec: it may last */
	ck_assert_int_eq(st.signal, SIGKILL);
	bg_remove_ok(sb, id);

	/* An exec ran: the next start gets a new helper, and the calls after it use that one. */
	hp = helper_pid(sb);
	ck_assert_msg(pid_alive(hp), "the helper %d is not running", (int)hp);
	h0 = helper_now();
	id2 = start(sb, "exec sleep 300", "two", 0);
	ck_assert_int_eq(asp_bg_signal(sb, id2, SIGKILL, NULL, &e), 0);
	h = helper_now();
	ck_assert_msg(h.retired == h0.retired + 1 && h.boots == h0.boots + 1,
		      "a start after an exec: %lu helpers retired, %lu started, %lu calls without one",
		      h.retired - h0.retired, h.boots - h0.boots, h.none - h0.none);
	ck_assert_msg(wait_gone(hp, 10000 * fx_slowdown()), "the retired helper %d still runs", (int)hp);
	wait_end(sb, id2);

	/* Killed in the sandbox: the next call starts another and answers. */
	hp = helper_pid(sb);
	ck_assert_msg(pid_alive(hp), "the helper %d is not running", (int)hp);
	ck_assert_int_eq(kill(hp, SIGKILL), 0);
	ck_assert_msg(wait_gone(hp, 10000 * fx_slowdown()), "the helper %d outlived SIGKILL", (int)hp);
	/*
	 * Its requests' stderr file stays behind it until a helper starts: the
	 * next one here, or one of another job (the same sandbox user), so its
	 * being there now is not checked.
	 */
	h0 = helper_now();
	bg_remove_ok(sb, id2);
	check_err(__LINE__, asp_bg_read(&b, &len, &st, sb, id2, 0, 0, NULL, &e), &e, ASP_ENOENT, id2);
	h = helper_now();
	ck_assert_msg(h.boots == h0.boots + 1 && h.calls >= h0.calls + 2, "after the kill: %lu helpers started, "
		      "%lu calls", h.boots - h0.boots, h.calls - h0.calls);
	ck_assert_msg(fx_run("[ ! -e ~%s/.asp/helper-%d.err ]", fx.user, (int)hp) == 0,
		      "the killed helper's helper-%d.err outlived the next helper's start", (int)hp);
	/* The running helper has its file; it ends with its handle, and takes its file along. */
	hp = helper_pid(sb);
	ck_assert_int_eq(fx_run("[ -f ~%s/.asp/helper-%d.err ]", fx.user, (int)hp), 0);
	asp_close(sb);
	ck_assert_msg(wait_gone(hp, 10000 * fx_slowdown()), "the helper %d outlived asp_close", (int)hp);
	ck_assert_int_eq(fx_run("[ ! -e ~%s/.asp/helper-%d.err ]", fx.user, (int)hp), 0);
	asp_free(id);
	asp_free(id2);
}
END_TEST

/*
 * Bytes of every value (NULs too) read back from offsets in the first and
 * the second kept chunk, at the helper's edges (its shell copies the
 * first 16 KiB and skips up to 64 KiB; head and tail beyond), and the
 * same through the exec route (a login shell that is not bash: dash).
 */
START_TEST(binary_output_at_offsets)
{
	static const uint64_t at[][2] = { { 0, 1 }, { 0, 100 }, { 1, 16384 }, { 5, 70000 }, { 16384, 1 },
					  { 65536, 10 }, { 65537, 5 }, { 70000, 100 }, { 99990, 20 },
					  { 150000, 200000 }, { 299990, 100 }, { 0, 1 << 20 } };
	asp_sandbox *sb = sb_open(fx.config);
	unsigned char *src, *b = NULL;
	asp_bg_status st;
	asp_error e = { 0 };
	char cmd[4400], path[4300];
	size_t slen, len, i;
	uint64_t kept;
	char *id, *out;

	asp__helper_test_off(_i);
	src = random_bytes(300000, 29);
	snprintf(path, sizeof(path), "%s/bg-src.bin", fx.workspace);
	put_opts(sb, path, src, 300000, NULL);
	snprintf(cmd, sizeof(cmd), "cat %s", path);
	id = start(sb, cmd, "bytes", 200000); /* chunks of up to 100000: the first dropped, two kept */
	out = read_all(sb, id, 0, &st, &slen);
	ck_assert_uint_eq(st.output_size, 300000);
	kept = st.output_start;
	ck_assert_msg(kept >= 100000 && kept < 200000, "the first byte kept: %llu", (unsigned long long)kept);
	ck_assert_uint_eq(slen, 300000 - kept);
	assert_bytes("all kept", out, slen, src + kept, slen);
	asp_free(out);
	for (i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		uint64_t from = at[i][0] < kept ? kept : at[i][0];
		uint64_t want = at[i][1] < 300000 - from ? at[i][1] : 300000 - from;
		int rc = asp_bg_read(&b, &len, &st, sb, id, at[i][0], at[i][1], NULL, &e);

		ck_assert_msg(rc == 0, "asp_bg_read %llu %llu: %s", (unsigned long long)at[i][0],
			      (unsigned long long)at[i][1], e.message);
		ck_assert_msg(st.offset == from && len == want, "read %llu+%llu: %zu bytes from %llu, want %llu "
			      "from %llu", (unsigned long long)at[i][0], (unsigned long long)at[i][1], len,
			      (unsigned long long)st.offset, (unsigned long long)want, (unsigned long long)from);
		assert_bytes("the bytes", b, len, src + from, want);
		asp_free(b);
		b = NULL;
	}
	bg_remove_ok(sb, id);
	asp_free(id);
	free(src);
	asp_close(sb);
	asp__helper_test_off(0);
}
END_TEST

/*
 * cwd and env reach the command (the helper enters and exports them in the
 * command's subshell, the exec route's wrapper in its shell), nothing of
 * libasp's own does, and a missing cwd fails the start with nothing
 * started; by the helper (_i 0) and by the exec route (_i 1).
 */
START_TEST(cwd_and_env)
{
	const char *env[] = { "A=1", "B=it's $(touch injected)", NULL };
	asp_bg_options o = ASP_BG_OPTIONS_INIT;
	asp_sandbox *sb;
	asp_bg_status st;
	asp_bg_list *l;
	asp_error e = { 0 };
	char want[4400], sub[4200];
	size_t len, n;
	char *id = NULL, *out;

	asp__helper_test_off(_i);
	sb = sb_open(fx.config);
	snprintf(sub, sizeof(sub), "%s/bg-cwd-%d", fx.workspace, _i);
	mkdir_ok(sb, sub, 0755, 0);
	o.cwd = sub + strlen(fx.workspace) + 1;
	o.env = env;
	ck_assert_int_eq(asp_bg_start(&id, sb, "pwd; echo \"$A $B\"; env | grep -c '^_asp\\|^ASP_CALL=\\|^SSH_CLIENT='",
				      &o, &e), 0);
	out = read_all(sb, id, 0, &st, &len);
	snprintf(want, sizeof(want), "%s\n1 it's $(touch injected)\n0\n", sub);
	assert_bytes("pwd, env, and nothing of libasp's", out, len, want, strlen(want));
	asp_free(out);
	bg_remove_ok(sb, id);
	asp_free(id);
	assert_not_injected(fx.workspace, "injected");

	o.cwd = "bg-no-such-dir";
	id = NULL;
	check_err(__LINE__, asp_bg_start(&id, sb, "echo ran > bg-ran-cwd", &o, &e), &e, ASP_ENOENT,
		  "bg-no-such-dir");
	ck_assert_ptr_null(id);
	l = bg_list_ok(sb);
	for (n = 0; n < asp_bg_list_count(l); n++)
		ck_assert_msg(strcmp(asp_bg_list_get(l, n)->command, "echo ran > bg-ran-cwd"),
			      "the start with a missing cwd left %s", asp_bg_list_get(l, n)->id);
	asp_bg_list_free(l);
	remove_ok(sb, sub, 1);
	asp_close(sb);
	asp__helper_test_off(0);
}
END_TEST

START_TEST(exit_code_and_first_output)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_bg_status st;
	char *id = start(sb, "echo started; exit 7", NULL, 0);
	size_t len;
	char *out;

	st = wait_end(sb, id);
	ck_assert_int_eq(st.exit_code, 7);
	out = read_all(sb, id, 0, &st, &len);
	assert_bytes("output", out, len, "started\n", 8);
	asp_free(out);
	bg_remove_ok(sb, id);
	asp_free(id);
	asp_close(sb);
}
END_TEST

/* 512 bytes kept (two chunks of at most 256): the oldest are dropped, and the read says from where. */
START_TEST(output_bound)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_bg_status st;
	char want[8000];
	size_t wlen = 0, len;
	char *id, *out;
	int i;

	for (i = 1; i <= 1000; i++)
		wlen += (size_t)snprintf(want + wlen, sizeof(want) - wlen, "%d\n", i);
	id = start(sb, "i=1; while [ $i -le 1000 ]; do echo $i; i=$((i+1)); done", "bounded", 512);
	wait_end(sb, id);
	out = read_all(sb, id, 0, &st, &len);
	ck_assert_uint_eq(st.output_size, wlen);
	ck_assert_uint_eq(st.offset, st.output_start);
	ck_assert_msg(st.output_start > 0 && wlen - st.output_start <= 512,
		      "kept from %llu of %zu", (unsigned long long)st.output_start, wlen);
	assert_bytes("the kept tail", out, len, want + st.output_start, wlen - st.output_start);
	asp_free(out);
	/* A read from inside the kept bytes starts where asked. */
	out = read_all(sb, id, st.output_start + 5, &st, &len);
	ck_assert_uint_eq(st.offset, st.output_start + 5);
	assert_bytes("from inside", out, len, want + st.output_start + 5, wlen - st.output_start - 5);
	asp_free(out);
	bg_remove_ok(sb, id);
	asp_free(id);
	asp_close(sb);
}
END_TEST

/* The whole group: a background child and a grandchild, seen alive, then gone. */
START_TEST(signal_kills_group)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_bg_status st;
	asp_error e = { 0 };
	pid_t a, b;
	char *id;
	int rc;

	unlink("bg-sig-pids");
	id = start(sb, "sleep 300 & echo $! > bg-sig-pids.t; (sleep 301 & echo $! >> bg-sig-pids.t; wait) & "
		   "sleep 0.1; mv bg-sig-pids.t bg-sig-pids; wait", "sig", 0);
	a = workspace_pid("bg-sig-pids", 0);
	b = workspace_pid("bg-sig-pids", 1);
	ck_assert_msg(pid_alive(a) && pid_alive(b), "the group's processes %d %d are not running", a, b);
	rc = asp_bg_wait(&st, sb, id, 0, NULL, &e);
	ck_assert_int_eq(rc, ASP_ETIMEOUT);
	ck_assert_int_eq(st.state, ASP_BG_RUNNING);
	rc = asp_bg_signal(sb, id, SIGTERM, NULL, &e);
	ck_assert_msg(rc == 0, "asp_bg_signal: %s", e.message);
	ck_assert_msg(wait_gone(a, 20000 * fx_slowdown()), "sleep %d outlived SIGTERM to the group", a);
	ck_assert_msg(wait_gone(b, 20000 * fx_slowdown()), "sleep %d outlived SIGTERM to the group", b);
	st = wait_end(sb, id);
	ck_assert_int_eq(st.signal, SIGTERM);
	ck_assert_int_eq(st.exit_code, -1);
	/* An ended process: no error. */
	ck_assert_int_eq(asp_bg_signal(sb, id, SIGKILL, NULL, &e), 0);
	ck_assert_int_eq(asp_bg_signal(sb, id, 12345, NULL, &e), ASP_EINVAL);
	bg_remove_ok(sb, id);
	asp_free(id);
	fx_run("rm -f '%s/bg-sig-pids'", fx.workspace);
	asp_close(sb);
}
END_TEST

START_TEST(wait_timeout_and_remove)
{
	asp_sandbox *sb = sb_open(fx.config);
	asp_bg_status st;
	asp_error e = { 0 };
	unsigned char *b = NULL;
	asp_bg_list *l;
	size_t len;
	char *id = start(sb, "sleep 300", "waiter", 0);
	int rc;

	rc = asp_bg_wait(&st, sb, id, 100, NULL, &e);
	ck_assert_int_eq(rc, ASP_ETIMEOUT);
	ck_assert_int_eq(st.state, ASP_BG_RUNNING);
	/* Running: not removed. */
	check_err(__LINE__, asp_bg_remove(sb, id, NULL, &e), &e, ASP_EINVAL, "still running");
	ck_assert_int_eq(asp_bg_signal(sb, id, SIGKILL, NULL, &e), 0);
	st = wait_end(sb, id);
	ck_assert_int_eq(st.signal, SIGKILL);
	bg_remove_ok(sb, id);
	check_err(__LINE__, asp_bg_read(&b, &len, &st, sb, id, 0, 0, NULL, &e), &e, ASP_ENOENT, id);
	check_err(__LINE__, asp_bg_remove(sb, id, NULL, &e), &e, ASP_ENOENT, id);
	check_err(__LINE__, asp_bg_wait(&st, sb, id, 0, NULL, &e), &e, ASP_ENOENT, id);
	l = bg_list_ok(sb);
	ck_assert_ptr_null(find(l, id));
	asp_bg_list_free(l);
	asp_free(id);
	asp_close(sb);
}
END_TEST

START_TEST(bad_ids)
{
	asp_sandbox *sb = sb_open(fx.config);
	static const char *const bad[] = { "", "../x", "-rf", "a b", "a'b", "$(id)", "a/b", ".asp" };
	asp_bg_status st;
	asp_error e = { 0 };
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		check_err(__LINE__, asp_bg_wait(&st, sb, bad[i], 0, NULL, &e), &e, ASP_EINVAL, "is not an id");
		check_err(__LINE__, asp_bg_remove(sb, bad[i], NULL, &e), &e, ASP_EINVAL, "is not an id");
		check_err(__LINE__, asp_bg_signal(sb, bad[i], SIGTERM, NULL, &e), &e, ASP_EINVAL, "is not an id");
	}
	check_err(__LINE__, asp_bg_signal(sb, "bg-0000000000000000", SIGTERM, NULL, &e), &e, ASP_ENOENT,
		  "no background process bg-0000000000000000");
	{
		asp_bg_options o = ASP_BG_OPTIONS_INIT;
		char *id = NULL;
		o.max_output = 1;
		check_err(__LINE__, asp_bg_start(&id, sb, "true", &o, &e), &e, ASP_EINVAL, "max_output");
		ck_assert_ptr_null(id);
	}
	asp_close(sb);
}
END_TEST

/* Names are labels: quotes, $(), backquotes, newlines stored and listed as given; nothing runs. */
START_TEST(hostile_names)
{
	static const char *const names[] = {
		"it's", "$(touch bginj1)", "`touch bginj2`", "line1\nline2\n", "\"; touch bginj3; \"",
		"' ; touch bginj4 ; '", "\\x41 %s %n", "-n",
	};
	enum { N = sizeof(names) / sizeof(names[0]) };
	asp_sandbox *sb = sb_open(fx.config);
	char *ids[N];
	const asp_bg_entry *en;
	asp_bg_list *l;
	size_t i;

	for (i = 0; i < N; i++)
		ids[i] = start(sb, "true", names[i], 0);
	l = bg_list_ok(sb);
	for (i = 0; i < N; i++) {
		ck_assert_ptr_nonnull(en = find(l, ids[i]));
		ck_assert_str_eq(en->name, names[i]);
		ck_assert_str_eq(en->command, "true");
	}
	asp_bg_list_free(l);
	for (i = 0; i < N; i++) {
		wait_end(sb, ids[i]);
		bg_remove_ok(sb, ids[i]);
		asp_free(ids[i]);
	}
	assert_not_injected(fx.workspace, "bginj");
	asp_close(sb);
}
END_TEST

/* The handle that started it closes; a fresh one finds it running and stops it. */
START_TEST(survives_close)
{
	asp_sandbox *sb = sb_open(fx.config);
	const asp_bg_entry *en;
	asp_bg_list *l;
	asp_bg_status st;
	pid_t p;
	char *id;

	fx_run("rm -f '%s/bg-close-pid'", fx.workspace);
	id = start(sb, "echo $$ > bg-close-pid; exec sleep 300", "outlives", 0);
	p = workspace_pid("bg-close-pid", 0);
	asp_close(sb);
	ck_assert_msg(pid_alive(p), "the command %d died with the handle", p);
	sb = sb_open(fx.config);
	l = bg_list_ok(sb);
	ck_assert_ptr_nonnull(en = find(l, id));
	ck_assert_int_eq(en->status.state, ASP_BG_RUNNING);
	ck_assert_int_eq(en->pid, p);
	asp_bg_list_free(l);
	ck_assert_int_eq(asp_bg_signal(sb, id, SIGTERM, NULL, NULL), 0);
	ck_assert_msg(wait_gone(p, 20000 * fx_slowdown()), "sleep %d outlived SIGTERM", p);
	st = wait_end(sb, id);
	ck_assert_int_eq(st.signal, SIGTERM);
	bg_remove_ok(sb, id);
	asp_free(id);
	fx_run("rm -f '%s/bg-close-pid'", fx.workspace);
	asp_close(sb);
}
END_TEST

/*
 * The TCP connection that started it is cut (a proxy resets it), and
 * sshd is restarted: the process runs on, past the watchdog's polls
 * (twice a second), and a fresh handle reads what it wrote meanwhile.
 */
START_TEST(survives_cut_and_restart)
{
	char cfg[4200];
	fx_proxy px = { 0 };
	asp_sandbox *sb;
	asp_bg_status st;
	size_t len;
	pid_t p;
	char *id, *out;

	ck_assert_int_eq(fx_proxy_start(&px, fx.port), 0);
	snprintf(cfg, sizeof(cfg), "%s/bg-proxy.asp.json", fx.dir);
	ck_assert_int_eq(fx_write_config(&fx, cfg, &(fx_config_opts){ .port = px.port }), 0);
	fx_run("rm -f '%s/bg-cut-pid'", fx.workspace);
	sb = sb_open(cfg);
	id = start(sb, "echo $$ > bg-cut-pid; echo one; sleep 2; echo two; exec sleep 300", "cut", 0);
	p = workspace_pid("bg-cut-pid", 0);
	ck_assert_int_eq(fx_proxy_cut(&px), 0);
	fx_sleep_ms(1500);
	ck_assert_msg(pid_alive(p), "the command %d died with the cut connection", p);
	asp_close(sb);
	fx_proxy_stop(&px);
	ck_assert_int_eq(fx_sshd_restart(&fx), 0);
	fx_sleep_ms(1500);
	ck_assert_msg(pid_alive(p), "the command %d died with sshd's restart", p);
	sb = sb_open(fx.config);
	out = read_all(sb, id, 0, &st, &len);
	ck_assert_int_eq(st.state, ASP_BG_RUNNING);
	assert_bytes("what it wrote meanwhile", out, len, "one\ntwo\n", 8);
	asp_free(out);
	ck_assert_int_eq(asp_bg_signal(sb, id, SIGKILL, NULL, NULL), 0);
	ck_assert_msg(wait_gone(p, 20000 * fx_slowdown()), "sleep %d outlived SIGKILL", p);
	wait_end(sb, id);
	bg_remove_ok(sb, id);
	asp_free(id);
	fx_run("rm -f '%s/bg-cut-pid'", fx.workspace);
	asp_close(sb);
}
END_TEST

/*
 * The one script that may run as long as its caller asks, a wait, keeps
 * the watchdog: the harness waiting is killed, and the wait's shell in
 * the sandbox (seen running first) ends with the connection.
 */
START_TEST(wait_dies_with_harness)
{
	asp_sandbox *sb = sb_open(fx.config);
	long long until;
	pid_t h, w = 0;
	char *id;
	int st;

	id = start(sb, "exec sleep 300", "waited on", 0);
	h = fork();
	ck_assert_int_ge(h, 0);
	if (!h) {
		asp_sandbox *hs = NULL;
		asp_open_options o = ASP_OPEN_OPTIONS_INIT;
		asp_bg_status bs;

		o.config_path = fx.config;
		if (asp_open(&hs, &o, NULL) == 0)
			asp_bg_wait(&bs, hs, id, ASP_BG_FOREVER, NULL, NULL);
		_exit(3);
	}
	until = fx_now_ms() + 20000 * fx_slowdown();
	while (!(w = find_process_with(id, "sleep 0.25"))) {
		ck_assert_msg(waitpid(h, &st, WNOHANG) == 0, "the waiting harness ended (status %d)", st);
		ck_assert_msg(fx_now_ms() < until, "the wait's shell never appeared in the sandbox");
		fx_sleep_ms(20);
	}
	ck_assert_msg(pid_alive(w), "the wait's shell %d is not running", w);
	ck_assert_int_eq(kill(h, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h, &st, 0), h);
	ck_assert_msg(wait_gone(w, 20000 * fx_slowdown()), "the wait's shell %d outlived its harness", w);
	ck_assert_int_eq(asp_bg_signal(sb, id, SIGKILL, NULL, NULL), 0);
	wait_end(sb, id);
	bg_remove_ok(sb, id);
	asp_free(id);
	asp_close(sb);
}
END_TEST

/*
 * The scripts other than the launcher run in the login shell: dash, BusyBox
 * sh and zsh (the interop suite's users), with the launcher's bash beside.
 */
static const char *const shell_users[] = { "asp-sh-dash", "asp-sh-busybox", "asp-sh-zsh" };

START_TEST(login_shells)
{
	fx_sshd own = { 0 };
	const char *user = shell_users[_i % 3];
	char extra[64], want[64];
	const asp_bg_entry *en;
	asp_bg_status st;
	asp_bg_list *l;
	asp_sandbox *sb;
	size_t len;
	char *id, *out;
	pid_t p;

	/* The helper (bash, whatever the login shell), then the exec route's POSIX scripts in each. */
	asp__helper_test_off(_i >= 3);
	snprintf(extra, sizeof(extra), "AllowUsers %s\n", user);
	ck_assert_int_eq(fx_sshd_start_with(&own, extra), 0);
	snprintf(own.user, sizeof(own.user), "%s", user);
	ck_assert_int_eq(fx_run("chown %s: '%s'", user, own.workspace), 0);
	ck_assert_int_eq(fx_write_config(&own, own.config, NULL), 0);
	sb = sb_open(own.config);
	id = start(sb, "echo \"$0\"; sleep 300 & echo $! > bg-shell-pid; wait", "it's a $(name)", 0);
	{
		char path[4200];
		long long until = fx_now_ms() + 20000 * fx_slowdown();
		snprintf(path, sizeof(path), "%s/bg-shell-pid", own.workspace);
		for (p = 0; p <= 0; fx_sleep_ms(20)) {
			char *t = fx_read_file(path, NULL);
			p = t ? atoi(t) : 0;
			free(t);
			ck_assert_msg(fx_now_ms() < until, "%s: the command never wrote its pid", user);
		}
	}
	ck_assert_msg(pid_alive(p), "%s: sleep %d is not running", user, p);
	l = bg_list_ok(sb);
	ck_assert_ptr_nonnull(en = find(l, id));
	ck_assert_str_eq(en->name, "it's a $(name)");
	ck_assert_int_eq(en->status.state, ASP_BG_RUNNING);
	asp_bg_list_free(l);
	ck_assert_int_eq(asp_bg_signal(sb, id, SIGTERM, NULL, NULL), 0);
	ck_assert_msg(wait_gone(p, 20000 * fx_slowdown()), "%s: sleep %d outlived SIGTERM", user, p);
	st = wait_end(sb, id);
	ck_assert_int_eq(st.signal, SIGTERM);
	out = read_all(sb, id, 0, &st, &len);
	snprintf(want, sizeof(want), "bash\n");
	assert_bytes("its output", out, len, want, strlen(want));
	asp_free(out);
	bg_remove_ok(sb, id);
	asp_free(id);
	asp_close(sb);
	fx_sshd_stop(&own);
	asp__helper_test_off(0);
}
END_TEST

Suite *suite_bg(void)
{
	Suite *s = suite_create("bg");
	TCase *tc = tcase_create("bg");

	tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, start_read_list);
	tcase_add_test(tc, exit_code_and_first_output);
	tcase_add_test(tc, one_exec_per_call);
	tcase_add_test(tc, helper_serves_calls);
	tcase_add_loop_test(tc, binary_output_at_offsets, 0, 2);
	tcase_add_loop_test(tc, cwd_and_env, 0, 2);
	tcase_add_test(tc, output_bound);
	tcase_add_test(tc, signal_kills_group);
	tcase_add_test(tc, wait_timeout_and_remove);
	tcase_add_test(tc, bad_ids);
	tcase_add_test(tc, hostile_names);
	tcase_add_test(tc, survives_close);
	tcase_add_test(tc, wait_dies_with_harness);
	suite_add_tcase(s, tc);
	tc = tcase_create("bg_shells");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, login_shells, 0, 2 * (int)(sizeof(shell_users) / sizeof(shell_users[0])));
	suite_add_tcase(s, tc);
	tc = slow_case(s, "bg_slow", FIXTURE_UNCHECKED, suite_setup, suite_teardown, 120);
	tcase_add_test(tc, survives_cut_and_restart);
	return s;
}
