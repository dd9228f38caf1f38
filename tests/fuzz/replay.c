/*
 * replay.c - run a fuzz target over corpus files without libFuzzer, so
 * `make check` replays every seed (and every crash ever found) with the
 * normal compiler, under ASan and valgrind too.
 * usage: replay-TARGET FILE-OR-DIR...   prints "replay: N passed, 0 failed"
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (!f) {
		perror(path);
		return -1;
	}
	do {
		if (len == cap && !(buf = realloc(buf, cap = cap ? cap * 2 : 4096)))
			abort();
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, len);
	free(buf);
	return 0;
}

static int run_path(const char *path, unsigned *count)
{
	struct stat st;
	struct dirent *e;
	DIR *d;
	char sub[4096];

	if (stat(path, &st))
		return perror(path), -1;
	if (!S_ISDIR(st.st_mode))
		return run_file(path) ? -1 : (int)(++*count, 0);
	if (!(d = opendir(path)))
		return perror(path), -1;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		if (run_path(sub, count)) {
			closedir(d);
			return -1;
		}
	}
	closedir(d);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned count = 0;
	int i;

	for (i = 1; i < argc; i++)
		if (run_path(argv[i], &count))
			return 1;
	printf("replay: %u passed, 0 failed\n", count);
	return 0;
}
