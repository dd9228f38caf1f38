/*
 * test_quote.c - the shell text quote.c builds, run by a real /bin/sh:
 * the x-asp-proxy-command line (asp__proxy_script) passes host and user
 * through byte for byte, and the cut-channel check (asp__cut_check_script)
 * tells a live process group from a gone one and stops the live one; the
 * file-transport scripts (asp__shfs_*_script) under dash, bash, BusyBox sh
 * and zsh as sh, on hostile names and every byte value, and the decoders
 * of their output.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "quote.h"
#include "shfs.h"

/* Caps on a decoded listing: n entries, room for names of up to 4096 bytes each. */
#define LIST_CAPS(n) (&(asp_list_caps){ (n), (uint64_t)(n) * 4096 })

/* Run script with sh -c; what it writes to fd `which` (1 or 2) goes into out. */
static size_t run_sh(const char *script, int which, char *out, size_t cap)
{
	int p[2];
	pid_t pid;
	size_t got = 0;
	ssize_t n;

	ck_assert_int_eq(pipe(p), 0);
	if ((pid = fork()) == 0) {
		dup2(p[1], which);
		close(p[0]);
		execl("/bin/sh", "sh", "-c", script, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_gt(pid, 0);
	close(p[1]);
	while (got < cap - 1 && (n = read(p[0], out + got, cap - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(p[0]);
	waitpid(pid, NULL, 0);
	return got;
}

/* ------------------------------------------------------------ proxy */

START_TEST(test_proxy_script_quotes_host_and_user)
{
	static const char *host = "h'; echo INJECTED; '";
	static const char *user = "u$(echo INJECTED) `echo INJECTED` * \"q\"\\";
	asp_buf b = { 0 };
	char out[1024], want[1024];

	ck_assert_int_eq(asp__proxy_script(&b, "for a in %h %p %r; do printf '%%s\\n' \"$a\"; done; "
					   "echo 100%%",
					   host, 2222, user), 0);
	run_sh((const char *)b.data, 1, out, sizeof(out));
	snprintf(want, sizeof(want), "%s\n2222\n%s\n100%%\n", host, user);
	ck_assert_str_eq(out, want);
	asp__buf_free(&b);
}
END_TEST

START_TEST(test_proxy_script_escapes)
{
	asp_buf b = { 0 };

	/* %% is one '%'; a '%' at the very end stays. */
	ck_assert_int_eq(asp__proxy_script(&b, "a%%b %", "h", 22, "u"), 0);
	ck_assert_str_eq((const char *)b.data, "a%b %");
	asp__buf_free(&b);
	/* Any other escape is refused, whatever came before it. */
	ck_assert_int_eq(asp__proxy_script(&b, "nc %h %x", "h", 22, "u"), ASP_EINVAL);
	asp__buf_free(&b);
	ck_assert_int_eq(asp__proxy_script(&b, "%n", "h", 22, "u"), ASP_EINVAL);
	asp__buf_free(&b);
}
END_TEST

/* ------------------------------------------------------------ cut check */

START_TEST(test_cut_check_stops_a_live_group)
{
	asp_buf b = { 0 };
	char out[256];
	int status;
	pid_t pid;

	/* A process that leads its own group, as the wrapper's shell does under sshd. */
	if ((pid = fork()) == 0) {
		setpgid(0, 0);
		execl("/bin/sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	ck_assert_int_gt(pid, 0);
	setpgid(pid, pid);
	ck_assert_int_eq(kill(pid, 0), 0); /* alive before the check */
	ck_assert_int_eq(asp__cut_check_script(&b, pid, "asp-call-test", 1000), 0);
	run_sh((const char *)b.data, 2, out, sizeof(out));
	ck_assert_str_eq(out, "running\n");
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status));
	ck_assert_int_eq(WTERMSIG(status), SIGTERM);
	asp__buf_free(&b);
}
END_TEST

START_TEST(test_cut_check_says_gone)
{
	asp_buf b = { 0 };
	char out[256];
	pid_t pid;

	if ((pid = fork()) == 0)
		_exit(0);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid); /* reaped: the pid names nothing now */
	ck_assert_int_eq(asp__cut_check_script(&b, pid, "asp-call-test", 1000), 0);
	run_sh((const char *)b.data, 2, out, sizeof(out));
	ck_assert_str_eq(out, "gone\n");
	asp__buf_free(&b);
}
END_TEST

/* ------------------------------------------------------------ file-transport scripts */

/* The shells the scripts must work in: argv prefix for "-c SCRIPT". */
static const char *const shells[][3] = {
	{ "/bin/sh", "sh", NULL },
	{ "/usr/bin/dash", "dash", NULL },
	{ "/bin/bash", "bash", "--posix" },
	{ "/usr/bin/busybox", "sh", NULL }, /* run as "sh": BusyBox's ash */
	{ "/usr/bin/zsh", "sh", NULL },     /* zsh as sh (sh emulation) */
};
#define NSHELLS (sizeof(shells) / sizeof(shells[0]))

typedef struct sh_out {
	unsigned char *out;
	size_t len;
	int status;
} sh_out;

/* Run script in shell k with stdin from in/inlen; collect stdout (malloc'd) and the exit status. */
static sh_out run_in(size_t k, const char *script, const void *in, size_t inlen)
{
	int po[2], pi[2];
	pid_t pid;
	sh_out r = { NULL, 0, -1 };
	size_t cap = 4096;
	ssize_t n;
	int st;

	ck_assert_int_eq(pipe(po), 0);
	ck_assert_int_eq(pipe(pi), 0);
	if ((pid = fork()) == 0) {
		dup2(po[1], 1);
		dup2(pi[0], 0);
		close(po[0]);
		close(pi[1]);
		if (shells[k][2])
			execl(shells[k][0], shells[k][1], shells[k][2], "-c", script, (char *)NULL);
		else
			execl(shells[k][0], shells[k][1], "-c", script, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_gt(pid, 0);
	close(po[1]);
	close(pi[0]);
	/* Small inputs only (fits the pipe): write, close, then read. */
	ck_assert(inlen < 60000);
	if (inlen)
		ck_assert_int_eq(write(pi[1], in, inlen), (ssize_t)inlen);
	close(pi[1]);
	r.out = malloc(cap);
	while ((n = read(po[0], r.out + r.len, cap - r.len)) > 0) {
		r.len += (size_t)n;
		if (r.len == cap)
			r.out = realloc(r.out, cap *= 2);
	}
	close(po[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return r;
}

/*
 * The kill script in every shell: it kills the group, and a process that
 * left the group and session (setsid) but carries the call's token, and it
 * spares a process that has neither.
 */
static pid_t start_sleeper(int own_session, const char *token)
{
	pid_t pid = fork();

	if (pid == 0) {
		if (own_session)
			setsid();
		else
			setpgid(0, 0);
		if (token)
			setenv("ASP_CALL", token, 1);
		execl("/bin/sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	ck_assert_int_gt(pid, 0);
	if (!own_session)
		setpgid(pid, pid);
	return pid;
}

START_TEST(test_kill_script_reaches_escaped_in_every_shell)
{
	/* With grep (one per pass searches the environments), and without: a PATH of sleep alone. */
	char nogrep[] = "/tmp/asp-nogrep-XXXXXX", sleep_link[64];

	ck_assert_ptr_nonnull(mkdtemp(nogrep));
	snprintf(sleep_link, sizeof(sleep_link), "%s/sleep", nogrep);
	ck_assert_int_eq(symlink("/bin/sleep", sleep_link), 0);
	for (size_t run = 0; run < 2 * NSHELLS; run++) {
		size_t k = run % NSHELLS;
		int with_grep = run < NSHELLS;
		char token[40];
		asp_buf b = { 0 };
		pid_t group, escaped, bystander;
		int st;
		sh_out r;

		if (access(shells[k][0], X_OK) != 0)
			ck_abort_msg("%s is missing: the kill script must be tried in it", shells[k][0]);
		snprintf(token, sizeof(token), "asp-call-unit%02zu%08x", k, (unsigned)getpid());
		group = start_sleeper(0, NULL);
		escaped = start_sleeper(1, token);
		bystander = start_sleeper(1, NULL);
		/* exec has happened once /proc shows sleep's environment with the token */
		for (int i = 0; i < 200; i++) {
			char path[64], env[4096];
			FILE *f;
			size_t n = 0;
			snprintf(path, sizeof(path), "/proc/%d/environ", (int)escaped);
			if ((f = fopen(path, "r"))) {
				n = fread(env, 1, sizeof(env) - 1, f);
				fclose(f);
			}
			env[n] = '\0';
			for (size_t j = 0; j < n; j++)
				if (!env[j])
					env[j] = ' ';
			if (strstr(env, token))
				break;
			usleep(10000);
		}
		ck_assert_int_eq(kill(escaped, 0), 0); /* alive before the script */
		if (!with_grep)
			ck_assert_int_eq(asp__buf_printf(&b, "PATH=%s; ", nogrep), 0);
		ck_assert_int_eq(asp__kill_script(&b, group, token, 1000), 0);
		r = run_in(k, (const char *)b.data, NULL, 0);
		free(r.out);
		ck_assert_msg(r.status == 0, "%s: kill script exit %d", shells[k][0], r.status);
		ck_assert_int_eq(waitpid(group, &st, 0), group);
		ck_assert_msg(WIFSIGNALED(st), "%s: the group survived", shells[k][0]);
		ck_assert_int_eq(waitpid(escaped, &st, 0), escaped);
		ck_assert_msg(WIFSIGNALED(st), "%s%s: the escaped process survived", shells[k][0],
			      with_grep ? "" : " without grep");
		ck_assert_int_eq(waitpid(bystander, &st, WNOHANG), 0); /* untouched */
		kill(bystander, SIGKILL);
		ck_assert_int_eq(waitpid(bystander, &st, 0), bystander);
		asp__buf_free(&b);
	}
	unlink(sleep_link);
	rmdir(nogrep);
}
END_TEST

/*
 * The kill script run from inside the group it kills, as under Dropbear:
 * the command's shell and the kill channel's shell share the group of the
 * server's connection process. Its own TERM to the group must not end it
 * before it sends CONT: a member it stopped would stay stopped for good.
 */
START_TEST(test_kill_script_inside_the_group_in_every_shell)
{
	for (size_t k = 0; k < NSHELLS; k++) {
		asp_buf b = { 0 };
		pid_t member, killer;
		int st;

		if (access(shells[k][0], X_OK) != 0)
			ck_abort_msg("%s is missing: the kill script must be tried in it", shells[k][0]);
		member = start_sleeper(0, NULL);
		ck_assert_int_eq(asp__kill_script(&b, member, "asp-call-test", 1000), 0);
		if ((killer = fork()) == 0) {
			setpgid(0, member);
			if (shells[k][2])
				execl(shells[k][0], shells[k][1], shells[k][2], "-c", (char *)b.data,
				      (char *)NULL);
			else
				execl(shells[k][0], shells[k][1], "-c", (char *)b.data, (char *)NULL);
			_exit(127);
		}
		ck_assert_int_gt(killer, 0);
		setpgid(killer, member);
		ck_assert_int_eq(waitpid(killer, &st, 0), killer);
		/* the script is over: the member is dead by now, or stopped for good */
		ck_assert_int_eq(waitpid(member, &st, WUNTRACED), member);
		if (WIFSTOPPED(st)) {
			kill(member, SIGKILL);
			waitpid(member, &st, 0);
			ck_abort_msg("%s: the kill script left a member of its own group stopped",
				     shells[k][0]);
		}
		ck_assert_msg(WIFSIGNALED(st), "%s: the group member survived", shells[k][0]);
		asp__buf_free(&b);
	}
}
END_TEST

static char shfs_dir[64];

static void shfs_setup(void)
{
	snprintf(shfs_dir, sizeof(shfs_dir), "/tmp/asp-shfs-unit.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(shfs_dir));
}

static void shfs_teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", shfs_dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* shfs_dir/name into a static buffer (one at a time). */
static const char *in_dir(const char *name)
{
	static char b[2][1024];
	static int w;

	w ^= 1;
	snprintf(b[w], sizeof(b[w]), "%s/%s", shfs_dir, name);
	return b[w];
}

static unsigned char *file_bytes(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *d = malloc(1 << 20);
	ck_assert_ptr_nonnull(f);
	*len = fread(d, 1, 1 << 20, f);
	fclose(f);
	return d;
}

/* Names no shell may read as syntax, and every byte value but NUL and '/'. */
static const char *const hostile[] = {
	"plain", "-n", "-rf", "sp ace", "it's", "$(touch INJ1)", "`touch INJ2`", "a;touch INJ3",
	"new\nline", "tab\there", "*", "?", "[a]", "back\\slash", "\"dq\"", "%s%n", "\\0101",
	".hidden", "..x", "\x01\x7f\x80\xff", "trail\n", "\xe2\x80\xae" "bidi",
};
#define NHOSTILE (sizeof(hostile) / sizeof(hostile[0]))

START_TEST(test_shfs_printf_escape_every_byte)
{
	unsigned char all[256];
	asp_buf b = { 0 };
	size_t i;

	for (i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	ck_assert_int_eq(asp__buf_puts(&b, "printf '"), 0);
	ck_assert_int_eq(asp__printf_escape(&b, all, sizeof(all)), 0);
	ck_assert_int_eq(asp__buf_puts(&b, "'"), 0);
	for (i = 0; i < NSHELLS; i++) {
		sh_out r = run_in(i, (const char *)b.data, NULL, 0);
		ck_assert_msg(r.status == 0 && r.len == 256 && !memcmp(r.out, all, 256),
			      "%s %s: printf of all 256 bytes gave %zu bytes (exit %d)", shells[i][0],
			      shells[i][1], r.len, r.status);
		free(r.out);
	}
	asp__buf_free(&b);
}
END_TEST

/*
 * The mode an atomic write leaves, in every shell, with GNU's tools and
 * with BusyBox's (no chmod --reference: the stat fallback): the existing
 * file's, else 0644 less the umask; a mode asked for, exactly, whatever
 * the umask.
 */
START_TEST(test_shfs_write_modes)
{
	static const struct {
		int exists;          /* 0: no file yet; else its mode before */
		unsigned int mode;   /* asked for (0: none) */
		mode_t umask_then;
		unsigned int want;
		int via_stdin;
	} cases[] = {
		{ 0, 0, 002, 0644, 0 },       { 0, 0, 077, 0600, 1 },
		{ 0751, 0, 002, 0751, 0 },    { 04710, 0, 022, 04710, 1 },
		{ 0640, 0600, 022, 0600, 0 }, { 0, 0604, 077, 0604, 0 },
		{ 0, 0755, 077, 0755, 1 },    { 0600, 01777, 0, 01777, 0 },
		{ 0, 0200, 022, 0200, 1 },    { 0644, 0460, 0, 0460, 0 },
	};
	char bb[128], path_env[4500], old_path[4096];
	static const char *const tools[] = { "chmod", "stat", "mv", "rm", "wc", "cat" };

	/* A PATH whose tools are BusyBox's. */
	snprintf(bb, sizeof(bb), "%s/bbtools", shfs_dir);
	ck_assert_int_eq(mkdir(bb, 0755), 0);
	for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++) {
		char link[200];
		snprintf(link, sizeof(link), "%s/%s", bb, tools[i]);
		ck_assert_int_eq(symlink("/usr/bin/busybox", link), 0);
	}
	ck_assert_ptr_nonnull(getenv("PATH"));
	snprintf(old_path, sizeof(old_path), "%s", getenv("PATH"));
	snprintf(path_env, sizeof(path_env), "%s:%s", bb, old_path);
	for (int busybox_tools = 0; busybox_tools < 2; busybox_tools++) {
		ck_assert_int_eq(setenv("PATH", busybox_tools ? path_env : old_path, 1), 0);
		for (size_t k = 0; k < NSHELLS; k++) {
			for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
				char path[200], tmp[220];
				asp_buf w = { 0 };
				struct stat st;
				mode_t was;
				sh_out r;

				snprintf(path, sizeof(path), "%s/mode-%d-%zu-%zu", shfs_dir, busybox_tools, k, i);
				snprintf(tmp, sizeof(tmp), "%s.tmp", path);
				if (cases[i].exists) {
					FILE *f = fopen(path, "w");
					ck_assert_ptr_nonnull(f);
					fclose(f);
					ck_assert_int_eq(chmod(path, (mode_t)cases[i].exists), 0);
				}
				ck_assert_int_eq(asp__shfs_write_script(&w, path, tmp,
									cases[i].via_stdin ? NULL : "data", 4,
									cases[i].mode, 0), 0);
				was = umask(cases[i].umask_then);
				r = run_in(k, (const char *)w.data, "data", cases[i].via_stdin ? 4 : 0);
				umask(was);
				ck_assert_msg(r.status == 0, "%s (%s tools) case %zu: exit %d", shells[k][0],
					      busybox_tools ? "BusyBox" : "GNU", i, r.status);
				ck_assert_int_eq(stat(path, &st), 0);
				ck_assert_msg((st.st_mode & 07777) == cases[i].want,
					      "%s (%s tools) case %zu: mode %o, expected %o", shells[k][0],
					      busybox_tools ? "BusyBox" : "GNU", i, (unsigned)(st.st_mode & 07777),
					      cases[i].want);
				ck_assert_int_eq((int)st.st_size, 4);
				ck_assert(access(tmp, F_OK) != 0);
				free(r.out);
				asp__buf_free(&w);
			}
		}
	}
	ck_assert_int_eq(setenv("PATH", old_path, 1), 0);
}
END_TEST

/* Write (inline and through stdin, atomic and in place), read back in ranges, in every shell. */
START_TEST(test_shfs_write_read_hostile_names)
{
	unsigned char data[300];
	size_t k, i, j, got;

	for (i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 7 + 3);
	for (k = 0; k < NSHELLS; k++) {
		for (i = 0; i < NHOSTILE; i++) {
			char path[1024], tmp[1100];
			asp_buf w = { 0 }, rd = { 0 };
			sh_out r;
			unsigned char *back;
			int via_stdin = (int)(i % 2), in_place = (int)(i % 3 == 0);

			snprintf(path, sizeof(path), "%s/%s", shfs_dir, hostile[i]);
			snprintf(tmp, sizeof(tmp), "%s/.%s.asp-0123456789ab-5.tmp", shfs_dir, hostile[i]);
			ck_assert_int_eq(asp__shfs_write_script(&w, path, in_place ? NULL : tmp,
								via_stdin ? NULL : data, sizeof(data),
								i % 4 == 0 ? 0600 : 0, 0), 0);
			r = run_in(k, (const char *)w.data, data, via_stdin ? sizeof(data) : 0);
			ck_assert_msg(r.status == 0, "%s: write %s: exit %d", shells[k][0], hostile[i], r.status);
			free(r.out);
			back = file_bytes(path, &got);
			ck_assert_msg(got == sizeof(data) && !memcmp(back, data, got), "%s: %s: content differs",
				      shells[k][0], hostile[i]);
			free(back);
			ck_assert(access(tmp, F_OK) != 0);
			if (i % 4 == 0) {
				struct stat st;
				ck_assert_int_eq(stat(path, &st), 0);
				ck_assert_uint_eq(st.st_mode & 07777, 0600);
			}
			/* A range, and the whole with a cap check that passes. */
			ck_assert_int_eq(asp__shfs_read_script(&rd, path, 70000 - 69999, 100, 0), 0);
			r = run_in(k, (const char *)rd.data, NULL, 0);
			ck_assert_msg(r.status == 0 && r.len == 100 && !memcmp(r.out, data + 1, 100),
				      "%s: read range of %s: %zu bytes, exit %d", shells[k][0], hostile[i],
				      r.len, r.status);
			free(r.out);
			asp__buf_free(&rd);
			ck_assert_int_eq(asp__shfs_read_script(&rd, path, 0, sizeof(data) + 1, sizeof(data)), 0);
			r = run_in(k, (const char *)rd.data, NULL, 0);
			ck_assert_msg(r.status == 0 && r.len == sizeof(data), "%s: read %s", shells[k][0], hostile[i]);
			free(r.out);
			asp__buf_free(&rd);
			/* One byte under the size: ELIMIT before any byte. */
			ck_assert_int_eq(asp__shfs_read_script(&rd, path, 0, sizeof(data), sizeof(data) - 1), 0);
			r = run_in(k, (const char *)rd.data, NULL, 0);
			ck_assert_msg(r.status == ASP_SHFS_ELIMIT && r.len == 0, "%s: cap on %s: exit %d",
				      shells[k][0], hostile[i], r.status);
			free(r.out);
			asp__buf_free(&rd);
			asp__buf_free(&w);
		}
		for (j = 1; j <= 3; j++) {
			char probe[16];
			snprintf(probe, sizeof(probe), "INJ%zu", j);
			ck_assert_msg(access(probe, F_OK) != 0 && access(in_dir(probe), F_OK) != 0,
				      "%s: a name was run as a command (%s exists)", shells[k][0], probe);
		}
	}
}
END_TEST

/* The listing: every hostile name back byte for byte, with its type and size, in every shell. */
START_TEST(test_shfs_list_hostile_names)
{
	size_t k, i;
	char cmd[1200];

	for (i = 0; i < NHOSTILE; i++) {
		FILE *f = fopen(in_dir(hostile[i]), "w");
		ck_assert_ptr_nonnull(f);
		fprintf(f, "%zu", i * 1000);
		fclose(f);
	}
	ck_assert_int_eq(mkdir(in_dir("sub dir"), 0700), 0);
	snprintf(cmd, sizeof(cmd), "ln -s nowhere '%s/dangling'", shfs_dir);
	ck_assert_int_eq(system(cmd), 0);
	for (k = 0; k < NSHELLS; k++) {
		asp_buf b = { 0 };
		asp_list_entry *v = NULL;
		size_t n = 0, seen = 0;
		asp_error e = { 0 };
		sh_out r;

		ck_assert_int_eq(asp__shfs_list_script(&b, shfs_dir, 1000), 0);
		r = run_in(k, (const char *)b.data, NULL, 0);
		ck_assert_msg(r.status == 0, "%s: list: exit %d", shells[k][0], r.status);
		ck_assert_msg(asp__shfs_list_decode(r.out, r.len, shfs_dir, LIST_CAPS(1000), &v, &n,
						    &e) == 0,
			      "%s: decode: %s", shells[k][0], e.message);
		ck_assert_uint_eq(n, NHOSTILE + 2);
		for (i = 0; i < n; i++) {
			size_t h;
			if (!strcmp(v[i].name, "sub dir")) {
				ck_assert_uint_eq(v[i].st.type, ASP_TYPE_DIR);
				ck_assert_uint_eq(v[i].st.mode, 0700);
				seen++;
				continue;
			}
			if (!strcmp(v[i].name, "dangling")) {
				ck_assert_uint_eq(v[i].st.type, ASP_TYPE_SYMLINK);
				seen++;
				continue;
			}
			for (h = 0; h < NHOSTILE && strcmp(v[i].name, hostile[h]); h++)
				;
			ck_assert_msg(h < NHOSTILE, "%s: unexpected name in the listing", shells[k][0]);
			ck_assert_uint_eq(v[i].st.type, ASP_TYPE_FILE);
			{
				char sz[32];
				ck_assert_uint_eq(v[i].st.size, (uint64_t)snprintf(sz, sizeof(sz), "%zu", h * 1000));
			}
			seen++;
		}
		ck_assert_uint_eq(seen, NHOSTILE + 2);
		asp__fsops_list_free(v, n);
		/* The cap: more entries than max is ELIMIT in the script, before any name. */
		asp__buf_free(&b);
		free(r.out);
		ck_assert_int_eq(asp__shfs_list_script(&b, shfs_dir, 3), 0);
		r = run_in(k, (const char *)b.data, NULL, 0);
		ck_assert_msg(r.status == ASP_SHFS_ELIMIT && r.len == 0, "%s: list cap: exit %d",
			      shells[k][0], r.status);
		free(r.out);
		asp__buf_free(&b);
	}
}
END_TEST

/*
 * A directory renamed onto an empty one replaces it in one rename(2) (`mv
 * -T`: GNU, BusyBox): the target's name never disappears in between. A
 * shim rmdir first on PATH records any call. A mv without -T (a shim that
 * refuses it) gets the fallback, rmdir then mv, with the same result.
 */
START_TEST(test_shfs_rename_dir_onto_empty_dir)
{
	char shim[128], path_env[4500], old_path[4096], marker[160], script[400];
	FILE *f;

	snprintf(shim, sizeof(shim), "%s/shim", shfs_dir);
	snprintf(marker, sizeof(marker), "%s/rmdir-ran", shfs_dir);
	ck_assert_int_eq(mkdir(shim, 0755), 0);
	snprintf(script, sizeof(script), "%s/rmdir", shim);
	ck_assert_ptr_nonnull(f = fopen(script, "w"));
	fprintf(f, "#!/bin/sh\n: > '%s'\nexec /bin/rmdir \"$@\"\n", marker);
	fclose(f);
	ck_assert_int_eq(chmod(script, 0755), 0);
	ck_assert_ptr_nonnull(getenv("PATH"));
	snprintf(old_path, sizeof(old_path), "%s", getenv("PATH"));
	snprintf(path_env, sizeof(path_env), "%s:%s", shim, old_path);
	ck_assert_int_eq(setenv("PATH", path_env, 1), 0);
	/* 0: GNU mv, 1: BusyBox mv, 2: a mv without -T */
	for (int tool = 0; tool < 3; tool++) {
		snprintf(script, sizeof(script), "%s/mv", shim);
		unlink(script);
		if (tool) {
			ck_assert_ptr_nonnull(f = fopen(script, "w"));
			if (tool == 1)
				fprintf(f, "#!/bin/sh\nexec /usr/bin/busybox mv \"$@\"\n");
			else
				fprintf(f, "#!/bin/sh\nfor x; do [ \"$x\" = -T ] && { echo 'mv: bad option -T' >&2; "
					   "exit 1; }; done\nexec /bin/mv \"$@\"\n");
			fclose(f);
			ck_assert_int_eq(chmod(script, 0755), 0);
		}
		for (size_t k = 0; k < NSHELLS; k++) {
			char a[200], b[200], inner[220], full[200];
			asp_buf w = { 0 };
			sh_out r;

			snprintf(a, sizeof(a), "%s/ra-%d-%zu", shfs_dir, tool, k);
			snprintf(b, sizeof(b), "%s/rb-%d-%zu", shfs_dir, tool, k);
			snprintf(full, sizeof(full), "%s/rf-%d-%zu", shfs_dir, tool, k);
			snprintf(inner, sizeof(inner), "%s/in", a);
			ck_assert_int_eq(mkdir(a, 0755), 0);
			ck_assert_int_eq(mkdir(inner, 0755), 0);
			ck_assert_int_eq(mkdir(b, 0755), 0);
			ck_assert_int_eq(mkdir(full, 0755), 0);
			snprintf(inner, sizeof(inner), "%s/x", full);
			ck_assert_int_eq(mkdir(inner, 0755), 0);
			unlink(marker);

			/* Onto a non-empty directory: ENOTEMPTY, both left as they were. */
			ck_assert_int_eq(asp__shfs_rename_script(&w, a, full), 0);
			r = run_in(k, (const char *)w.data, NULL, 0);
			ck_assert_msg(r.status == ASP_SHFS_ENOTEMPTY, "%s tool %d: exit %d", shells[k][0], tool,
				      r.status);
			free(r.out);
			asp__buf_free(&w);
			ck_assert(access(a, F_OK) == 0 && access(inner, F_OK) == 0);
			unlink(marker);

			/* Onto an empty directory: replaced. */
			ck_assert_int_eq(asp__shfs_rename_script(&w, a, b), 0);
			r = run_in(k, (const char *)w.data, NULL, 0);
			ck_assert_msg(r.status == 0, "%s tool %d: exit %d", shells[k][0], tool, r.status);
			free(r.out);
			asp__buf_free(&w);
			snprintf(inner, sizeof(inner), "%s/in", b);
			ck_assert_msg(access(a, F_OK) != 0 && access(inner, F_OK) == 0, "%s tool %d: not moved",
				      shells[k][0], tool);
			ck_assert_msg((access(marker, F_OK) == 0) == (tool == 2), "%s tool %d: rmdir %s",
				      shells[k][0], tool, tool == 2 ? "not used by the fallback" :
								 "used: the rename was not one rename(2)");
		}
	}
	ck_assert_int_eq(setenv("PATH", old_path, 1), 0);
}
END_TEST

/* stat, mkdir, remove, rename and their exit codes, in every shell. */
START_TEST(test_shfs_metadata_and_codes)
{
	size_t k;

	for (k = 0; k < NSHELLS; k++) {
		char d[256], f[512], g[512], sub[512];
		asp_buf b = { 0 };
		asp_stat_info st;
		size_t used;
		sh_out r;

#define RUN(builder_call, want)                                                               \
	do {                                                                                   \
		asp__buf_free(&b);                                                             \
		ck_assert_int_eq(builder_call, 0);                                             \
		r = run_in(k, (const char *)b.data, NULL, 0);                                  \
		ck_assert_msg(r.status == (want), "%s: %s: exit %d, expected %d", shells[k][0], \
			      #builder_call, r.status, (want));                                \
	} while (0)

		snprintf(d, sizeof(d), "%.64s/d%zu", shfs_dir, k);
		snprintf(f, sizeof(f), "%s/f%zu", d, k);
		snprintf(g, sizeof(g), "%s/-g'%zu", d, k);
		snprintf(sub, sizeof(sub), "%s/a/b/c", d);
		RUN(asp__shfs_mkdir_script(&b, d, 0750, 0), 0);
		free(r.out);
		RUN(asp__shfs_mkdir_script(&b, d, 0750, 0), ASP_SHFS_EEXIST);
		free(r.out);
		RUN(asp__shfs_mkdir_script(&b, sub, 0755, 0), ASP_SHFS_ENOENT);
		free(r.out);
		RUN(asp__shfs_mkdir_script(&b, sub, 0755, 1), 0);
		free(r.out);
		RUN(asp__shfs_stat_script(&b, d, 1), 0);
		ck_assert_int_eq(asp__shfs_stat_decode(r.out, r.len, &st, &used), 0);
		ck_assert_uint_eq(st.type, ASP_TYPE_DIR);
		ck_assert_uint_eq(st.mode, 0750 & ~(unsigned)022);
		free(r.out);
		RUN(asp__shfs_stat_script(&b, f, 0), ASP_SHFS_ENOENT);
		free(r.out);
		RUN(asp__shfs_write_script(&b, f, NULL, "12345", 5, 0, 0), 0);
		free(r.out);
		RUN(asp__shfs_stat_script(&b, f, 0), 0);
		ck_assert_int_eq(asp__shfs_stat_decode(r.out, r.len, &st, &used), 0);
		ck_assert_uint_eq(st.type, ASP_TYPE_FILE);
		ck_assert_uint_eq(st.size, 5);
		ck_assert_uint_eq(r.len, used + 1);
		free(r.out);
		RUN(asp__shfs_read_script(&b, d, 0, 10, 0), ASP_SHFS_EISDIR);
		free(r.out);
		/* Reading nothing is the open alone: a directory passes, a missing file does not. */
		RUN(asp__shfs_read_script(&b, d, 3, 0, 0), 0);
		ck_assert_uint_eq(r.len, 0);
		free(r.out);
		RUN(asp__shfs_read_script(&b, g, 0, 0, 0), ASP_SHFS_ENOENT);
		free(r.out);
		RUN(asp__shfs_read_script(&b, f, 0, 0, 0), 0);
		free(r.out);
		RUN(asp__shfs_remove_script(&b, d), ASP_SHFS_ENOTEMPTY);
		free(r.out);
		RUN(asp__shfs_rename_script(&b, f, g), 0);
		free(r.out);
		ck_assert(access(f, F_OK) != 0 && access(g, F_OK) == 0);
		RUN(asp__shfs_rename_script(&b, f, g), ASP_SHFS_ENOENT);
		free(r.out);
		RUN(asp__shfs_rename_script(&b, g, in_dir("no-dir/x")), ASP_SHFS_NODIR);
		free(r.out);
		/* A file onto a directory: EISDIR, as rename(2); a directory onto an empty one: replaced. */
		RUN(asp__shfs_rename_script(&b, g, sub), ASP_SHFS_EISDIR);
		free(r.out);
		snprintf(f, sizeof(f), "%s/a/b/e", d);
		RUN(asp__shfs_mkdir_script(&b, f, 0755, 0), 0);
		free(r.out);
		RUN(asp__shfs_rename_script(&b, f, sub), 0);
		free(r.out);
		ck_assert(access(f, F_OK) != 0 && access(sub, F_OK) == 0);
		RUN(asp__shfs_remove_script(&b, g), 0);
		free(r.out);
		RUN(asp__shfs_remove_script(&b, g), ASP_SHFS_ENOENT);
		free(r.out);
		RUN(asp__shfs_remove_script(&b, sub), 0);
		free(r.out);
		{
			char *paths[2] = { (char *)g, (char *)d };
			RUN(asp__shfs_forget_script(&b, paths, 2), 0);
			ck_assert_uint_eq(r.len, 2);
			ck_assert(!memcmp(r.out, "yn", 2)); /* g gone; d is a directory rm -f leaves */
			free(r.out);
		}
		asp__buf_free(&b);
#undef RUN
	}
}
END_TEST

/* The decoders alone: records matched to names, gone names dropped, malformed input refused. */
START_TEST(test_shfs_list_decode)
{
	static const char ok[] = "b\0.\0a\0*\0\0" "81a4 3 10 b\n41ed 4096 11 .\n" "a1ff 5 12 a\n";
	static const char *const bad[] = {
		"a\0",                       /* no end of the names */
		"a\0\0" "81a4 3 10 a\nx",    /* trailing bytes */
		"a\0\0" "81a4 3 10 a",       /* record without its newline */
		"a/b\0\0" "81a4 3 10 a/b\n", /* a name with '/' */
		"a\0\0" "81a4 3 1x a\n",     /* not a number: the record is no record, bytes left */
	};
	static const size_t bad_len[] = { 2, 16, 15, 18, 16 };
	asp_list_entry *v = NULL;
	asp_error e = { 0 };
	size_t n = 0, i;
	asp_stat_info st;
	size_t used;

	ck_assert_int_eq(asp__shfs_list_decode((const unsigned char *)ok, sizeof(ok) - 1, "/d",
					       LIST_CAPS(10), &v, &n, &e), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_str_eq(v[0].name, "a");
	ck_assert_uint_eq(v[0].st.type, ASP_TYPE_SYMLINK);
	ck_assert_uint_eq(v[0].st.size, 5);
	ck_assert_str_eq(v[1].name, "b");
	ck_assert_uint_eq(v[1].st.type, ASP_TYPE_FILE);
	ck_assert_uint_eq(v[1].st.mode, 0644);
	ck_assert_uint_eq(v[1].st.mtime, 10);
	asp__fsops_list_free(v, n);
	v = NULL;
	ck_assert_int_eq(asp__shfs_list_decode((const unsigned char *)ok, sizeof(ok) - 1, "/d",
					       LIST_CAPS(1), &v, &n, &e), ASP_ELIMIT);
	ck_assert_ptr_nonnull(strstr(e.message, "more than 1 entries"));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = NULL;
		ck_assert_msg(asp__shfs_list_decode((const unsigned char *)bad[i], bad_len[i], "/d",
						    LIST_CAPS(10), &v, &n, &e) == ASP_EPROTO,
			      "bad listing %zu accepted", i);
	}
	ck_assert_int_eq(asp__shfs_stat_decode((const unsigned char *)"41ed 4096 1700000000", 20, &st,
					       &used), 0);
	ck_assert_uint_eq(used, 20);
	ck_assert_int_eq(asp__shfs_stat_decode((const unsigned char *)"fffffffffffffffffff 1 1", 23, &st,
					       &used), ASP_EPROTO);
	ck_assert_int_eq(asp__shfs_stat_decode((const unsigned char *)" 1 1", 4, &st, &used), ASP_EPROTO);
}
END_TEST

/* The sweep's questions: temp-shaped names with the server's clock; many lstats at once. */
START_TEST(test_shfs_sweep_scripts)
{
	static const char *const temps[] = {
		".a.asp-0123456789ab-5.tmp", ".new\nline.asp-0123456789ab-5.tmp", ".x'y.asp-0123456789ab.tmp",
	};
	size_t k, i;

	for (i = 0; i < 3; i++) {
		FILE *f = fopen(in_dir(temps[i]), "w");
		ck_assert_ptr_nonnull(f);
		fclose(f);
	}
	ck_assert_int_eq(mkdir(in_dir("not-a-temp"), 0700), 0);
	for (k = 0; k < NSHELLS; k++) {
		asp_buf b = { 0 };
		asp_list_entry *v = NULL;
		size_t n = 0, used = 0, at;
		uint64_t now = 0;
		asp_error e = { 0 };
		asp_stat_info st;
		char *paths[3];
		sh_out r;

		ck_assert_int_eq(asp__shfs_temps_script(&b, shfs_dir, 100), 0);
		r = run_in(k, (const char *)b.data, NULL, 0);
		ck_assert_msg(r.status == 0, "%s: temps: exit %d", shells[k][0], r.status);
		for (used = 0; used < r.len && r.out[used] != '\n'; used++)
			now = now * 10 + (uint64_t)(r.out[used] - '0');
		ck_assert_msg(now > 1700000000u, "%s: no clock", shells[k][0]);
		ck_assert_int_eq(asp__shfs_list_decode(r.out + used + 1, r.len - used - 1, shfs_dir,
						       LIST_CAPS(100), &v, &n, &e), 0);
		ck_assert_uint_eq(n, 3);
		for (i = 0; i < 3; i++)
			ck_assert_msg(!strcmp(v[0].name, temps[i]) || !strcmp(v[1].name, temps[i]) ||
				      !strcmp(v[2].name, temps[i]), "%s: temp %zu not listed", shells[k][0], i);
		asp__fsops_list_free(v, n);
		free(r.out);
		asp__buf_free(&b);
		/* More than max: the clock only. */
		ck_assert_int_eq(asp__shfs_temps_script(&b, shfs_dir, 2), 0);
		r = run_in(k, (const char *)b.data, NULL, 0);
		ck_assert_uint_eq(r.len, used + 1);
		free(r.out);
		asp__buf_free(&b);

		paths[0] = (char *)in_dir(temps[1]);
		paths[1] = (char *)"/nonexistent-shfs-path";
		paths[2] = (char *)shfs_dir;
		ck_assert_int_eq(asp__shfs_lstat_many_script(&b, paths, 3), 0);
		r = run_in(k, (const char *)b.data, NULL, 0);
		for (at = 0; at < r.len && r.out[at] != '\n'; at++)
			;
		at++;
		ck_assert_int_eq(asp__shfs_stat_decode(r.out + at, r.len - at, &st, &used), 0);
		ck_assert_uint_eq(st.type, ASP_TYPE_FILE);
		at += used + 1;
		ck_assert_msg(r.len - at >= 2 && !memcmp(r.out + at, "-\n", 2), "%s: lstat of a missing "
			      "path: [%.*s]", shells[k][0], (int)r.len, (const char *)r.out);
		at += 2;
		ck_assert_int_eq(asp__shfs_stat_decode(r.out + at, r.len - at, &st, &used), 0);
		ck_assert_uint_eq(st.type, ASP_TYPE_DIR);
		ck_assert_uint_eq(at + used + 1, r.len);
		free(r.out);
		asp__buf_free(&b);
	}
}
END_TEST

/*
 * The read-only check in every shell: a writable directory, a path below it
 * that does not exist, a hostile name: "rw" (test_rofs.c sees "ro" on a
 * read-only tmpfs through a real sshd).
 */
START_TEST(test_shfs_rofs_script_in_every_shell)
{
	const char *paths[3];
	char deep[512];
	size_t k, i;

	snprintf(deep, sizeof(deep), "%.200s/no/such/'dir\n $(x)/f", shfs_dir);
	paths[0] = shfs_dir;
	paths[1] = deep;
	paths[2] = in_dir("x'y z");
	for (k = 0; k < NSHELLS; k++) {
		for (i = 0; i < 3; i++) {
			asp_buf b = { 0 };
			sh_out r;

			ck_assert_int_eq(asp__shfs_rofs_script(&b, paths[i]), 0);
			r = run_in(k, (const char *)b.data, NULL, 0);
			ck_assert_msg(r.status == 0 && r.len == 3 && !memcmp(r.out, "rw\n", 3),
				      "%s: rofs %zu: exit %d [%.*s]", shells[k][0], i, r.status, (int)r.len,
				      (const char *)r.out);
			free(r.out);
			asp__buf_free(&b);
		}
	}
}
END_TEST

/*
 * The primed shell's loop (ASP_PRIME_BOOT) in every shell: the framed
 * script runs as written (lines that are "." or look like framing, quotes,
 * backslashes, hostile names), its stdin starts right after the "." line,
 * the loop's variables are gone, its exit status is the shell's; stdin that
 * ends before the "." line runs nothing. The same behind the watchdog's
 * start (asp__prime_boot, the whole exec request).
 */
START_TEST(test_prime_frame_in_every_shell)
{
	asp_buf script = { 0 }, want = { 0 }, in = { 0 }, cut = { 0 }, boot = { 0 };
	size_t k, i;

	ck_assert_int_eq(asp__buf_puts(&script, "printf '%s\\n' 'a line\n.\nx\n\\' \"dq\" \\\\\n"), 0);
	ck_assert_int_eq(asp__buf_puts(&want, "a line\n.\nx\n\\\ndq\n\\\n"), 0);
	for (i = 0; i < NHOSTILE; i++) {
		ck_assert_int_eq(asp__buf_puts(&script, "printf '%s|' "), 0);
		ck_assert_int_eq(asp__quote(&script, hostile[i]), 0);
		ck_assert_int_eq(asp__buf_puts(&script, "\n"), 0);
		ck_assert_int_eq(asp__buf_printf(&want, "%s|", hostile[i]), 0);
	}
	ck_assert_int_eq(asp__buf_puts(&script, "echo \"vars:${s-u}${l-u}\"; read -r first; "
				       "echo \"first:$first\"; cat; exit 7"), 0);
	ck_assert_int_eq(asp__buf_puts(&want, "vars:uu\nfirst:stdin line\nthe rest\n"), 0);
	ck_assert_int_eq(asp__prime_frame(&in, (const char *)script.data, script.len), 0);
	ck_assert_int_eq(asp__buf_put(&cut, in.data, in.len - 2), 0); /* all but the "." line */
	ck_assert_int_eq(asp__buf_puts(&in, "stdin line\nthe rest\n"), 0);
	/* The loop alone, and the whole exec request, which starts the watchdog first. */
	ck_assert_int_eq(asp__prime_boot(&boot, "asp-call-0123456789abcdef01234567"), 0);
	ck_assert_int_eq(asp__buf_put(&boot, "", 1), 0);
	for (k = 0; k < 2 * NSHELLS; k++) {
		const char *start = k < NSHELLS ? ASP_PRIME_BOOT : (const char *)boot.data;
		size_t sh = k % NSHELLS;
		sh_out r;

		if (access(shells[sh][0], X_OK))
			continue;
		r = run_in(sh, start, in.data, in.len);
		ck_assert_msg(r.status == 7 && r.len == want.len && !memcmp(r.out, want.data, want.len),
			      "%s (%s): status %d, output %.*s", shells[sh][0], k < NSHELLS ? "loop" : "boot",
			      r.status, (int)r.len, (char *)r.out);
		free(r.out);
		r = run_in(sh, start, cut.data, cut.len);
		ck_assert_msg(r.status == 0 && r.len == 0, "%s (%s): a script without its \".\" line ran: "
			      "status %d, output %.*s", shells[sh][0], k < NSHELLS ? "loop" : "boot", r.status,
			      (int)r.len, (char *)r.out);
		free(r.out);
	}
	asp__buf_free(&boot);
	asp__buf_free(&script);
	asp__buf_free(&want);
	asp__buf_free(&in);
	asp__buf_free(&cut);
}
END_TEST

Suite *suite_quote(void);

Suite *suite_quote(void)
{
	Suite *s = suite_create("quote");
	TCase *tc = tcase_create("quote");

	tcase_add_test(tc, test_proxy_script_quotes_host_and_user);
	tcase_add_test(tc, test_proxy_script_escapes);
	tcase_add_test(tc, test_cut_check_stops_a_live_group);
	tcase_add_test(tc, test_cut_check_says_gone);
	suite_add_tcase(s, tc);
	tc = tcase_create("shfs");
	tcase_add_checked_fixture(tc, shfs_setup, shfs_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_shfs_printf_escape_every_byte);
	tcase_add_test(tc, test_shfs_write_read_hostile_names);
	tcase_add_test(tc, test_shfs_write_modes);
	tcase_add_test(tc, test_shfs_list_hostile_names);
	tcase_add_test(tc, test_shfs_metadata_and_codes);
	tcase_add_test(tc, test_shfs_rename_dir_onto_empty_dir);
	tcase_add_test(tc, test_shfs_list_decode);
	tcase_add_test(tc, test_shfs_sweep_scripts);
	tcase_add_test(tc, test_shfs_rofs_script_in_every_shell);
	tcase_add_test(tc, test_prime_frame_in_every_shell);
	tcase_add_test(tc, test_kill_script_reaches_escaped_in_every_shell);
	tcase_add_test(tc, test_kill_script_inside_the_group_in_every_shell);
	suite_add_tcase(s, tc);
	return s;
}
