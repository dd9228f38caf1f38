/*
 * rusage.c - run a command and record its peak RSS and CPU time.
 *
 *   rusage OUTFILE CMD [ARG...]
 *
 * Writes "maxrss_kb utime_s stime_s" to OUTFILE after CMD exits, and exits
 * with CMD's status (128+N for a signal). bench/run.py starts every peer
 * through it: ru_maxrss of a child also counts the memory of the process
 * that forked it (until exec), so a peer forked straight from the Python
 * driver would be charged the driver's RSS. This launcher is small.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct rusage ru;
	int status;
	pid_t pid;
	FILE *f;

	if (argc < 3) {
		fputs("usage: rusage OUTFILE CMD [ARG...]\n", stderr);
		return 2;
	}
	pid = fork();
	if (pid < 0)
		return 127;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		execvp(argv[2], argv + 2);
		perror(argv[2]);
		_exit(127);
	}
	while (wait4(pid, &status, 0, &ru) < 0)
		;
	if ((f = fopen(argv[1], "w"))) {
		fprintf(f, "%ld %.6f %.6f\n", ru.ru_maxrss,
			(double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
			(double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
		fclose(f);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
