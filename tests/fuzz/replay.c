/*
 * replay.c - run a fuzz target over corpus files without libFuzzer, so
 * `make check` replays every seed (and every crash ever found) with the
 * normal compiler, under ASan and valgrind too.
 * usage: replay-TARGET FILE-OR-DIR...   prints "replay: N passed, 0 failed"
 * Directories are read recursively; files whose names end in ".expect"
 * (tests/configs' expected messages) are not inputs and are skipped.
 * No argument, or a directory with no input in it, fails the run: a corpus
 * that went missing must not look like a corpus that passed.
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

static int is_sidecar(const char *name)
{
	size_t len = strlen(name);

	return len >= 7 && !strcmp(name + len - 7, ".expect");
}

static int run_path(const char *path, unsigned *count)
{
	struct stat st;
	struct dirent *e;
	DIR *d;
	char sub[4096];
	unsigned before = *count;

	if (stat(path, &st))
		return perror(path), -1;
	if (!S_ISDIR(st.st_mode))
		return run_file(path) ? -1 : (int)(++*count, 0);
	if (!(d = opendir(path)))
		return perror(path), -1;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || is_sidecar(e->d_name))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		if (run_path(sub, count)) {
			closedir(d);
			return -1;
		}
	}
	closedir(d);
	if (*count == before) {
		fprintf(stderr, "replay: %s: no corpus file in this directory\n", path);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	unsigned count = 0;
	int i;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE-OR-DIR...\n", argv[0]);
		return 1;
	}
	for (i = 1; i < argc; i++)
		if (run_path(argv[i], &count))
			return 1;
	printf("replay: %u passed, 0 failed\n", count);
	return 0;
}
