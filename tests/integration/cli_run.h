/*
 * cli_run.h - running asp-exec as a program for the test_cli*.c suites
 * (tests/integration/cli_run.c). Each test gets its own sshd (fx) and its
 * own XDG_RUNTIME_DIR (rundir) from cli_setup; cli_teardown stops its
 * masters. The runner's fixtures (cli_runner_setup/_cleanup) clean up after
 * a test that ended on a failed assertion.
 */
#ifndef ASP_TESTS_CLI_RUN_H
#define ASP_TESTS_CLI_RUN_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "fixture/fixture.h"

#define NOBODY_UID 65534
#define NOBODY_GID 65534
#define RUN_TIMEOUT_MS 30000

extern fx_sshd fx;
extern char bin[PATH_MAX];     /* build/bin/asp-exec next to this test binary */
extern char top[PATH_MAX];     /* the source tree */
extern char rundir[64];        /* this test's XDG_RUNTIME_DIR */
extern int use_master;         /* 0: every call gets --no-master */
extern char run_cwd[PATH_MAX]; /* where asp-exec runs; empty: here */

typedef struct proc {
	pid_t pid;
	int in, out, err; /* our ends of the child's stdin, stdout, stderr */
} proc;

typedef struct result {
	int status; /* exit status, 128 + N for signal N, -1 when it had to be killed */
	char *out, *err;
	size_t out_len, err_len;
} result;

/* Masters of this test (their command line names our runtime dir); up to max pids. */
int find_masters(pid_t *pids, int max);
/* The one master of this test (there must be exactly one). */
pid_t the_master(void);
/* The one socket in our runtime dir's asp/ (there must be exactly one). */
void the_socket(char *out, size_t outlen);
/* How often needle occurs in the sshd's log. */
int count_in_log(const char *needle);

/* argv for asp-exec: --config, --persist 30, maybe --no-master, then args (a static array). */
const char **cli_argv(const char *const *args);
/* fork + exec argv with pipes for stdin/stdout/stderr; keep_fd (if >= 0) stays open as fd 3. */
void spawn(proc *p, const char *const *argv, int keep_fd);
/* A waitpid status as an exit status: 128 + N for signal N. */
int decode_status(int st);
/*
 * Feed `in`, collect stdout and stderr, wait up to timeout_ms (then kill:
 * status -1). A hang detector: timeout_ms scales with fx_slowdown().
 */
result finish(proc *p, const void *in, size_t in_len, long timeout_ms);
void result_free(result *r);
/* Run argv (any program) to its end with `in` on stdin. */
result run_argv(const void *in, size_t in_len, const char *const *argv);
/* Run asp-exec with cli_argv(args). */
result cli_in(const void *in, size_t in_len, const char *const *args);

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define CLI(...) cli_in(NULL, 0, ARGS(__VA_ARGS__))

/* One line of stderr: "asp-exec: " ... "\n", nothing else; mentioning needle (when not NULL). */
void assert_one_error_line(const result *r, const char *needle);
/* Read one line from fd within ms; returns malloc'd text (without "\n") or NULL. */
char *read_line(int fd, long ms);
/* A pid on a line of its own from the command, within 10 s. */
pid_t read_pid(int fd);
/* Positive control for a kill check: the process is seen alive before the kill. */
void assert_alive(pid_t pid, const char *what);

void cli_runner_setup(void);
void cli_runner_cleanup(void);
void cli_setup(void);
void cli_teardown(void);

#endif
