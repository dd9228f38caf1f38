/*
 * discover.c - which configuration a call uses, found the way libasp's
 * asp_find_config finds it, in the front (which does not link libasp).
 *
 * It only has to be right when it answers: whenever libasp might decide
 * otherwise or fail (nothing found, a candidate that is not a regular
 * file, an unreadable directory), it answers NULL and asp-exec-core runs
 * the call, where libasp itself searches and reports.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

#define CONFIG_NAME ".asp.json"

static int is_regular(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The directory part resolved, the name kept: libasp's absolute_path(). */
static char *absolute(const char *path)
{
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	char dir[PATH_MAX], real[PATH_MAX], *out;
	size_t n = slash ? (size_t)(slash - path) : 0;

	if (n >= sizeof(dir))
		return NULL;
	memcpy(dir, slash ? path : ".", slash ? n : 1);
	dir[slash ? n : 1] = '\0';
	if (slash && n == 0)
		strcpy(dir, "/");
	if (!realpath(dir, real))
		return NULL;
	return asprintf(&out, "%s%s%s", real, strcmp(real, "/") ? "/" : "", base) < 0 ? NULL : out;
}

/* "/a/b" -> "/a", "/a" -> "/". */
static void to_parent(char *dir)
{
	char *slash = strrchr(dir, '/');

	if (slash == dir)
		dir[1] = '\0';
	else if (slash)
		*slash = '\0';
}

static char *find_upward(void)
{
	char dir[PATH_MAX], candidate[PATH_MAX + sizeof(CONFIG_NAME) + 1];
	struct stat st;

	if (!realpath(".", dir))
		return NULL;
	for (;;) {
		snprintf(candidate, sizeof(candidate), "%s/%s", strcmp(dir, "/") ? dir : "",
			 CONFIG_NAME);
		if (lstat(candidate, &st) == 0)
			return is_regular(candidate) ? strdup(candidate) : NULL;
		if ((errno != ENOENT && errno != ENOTDIR) || !strcmp(dir, "/"))
			return NULL;
		to_parent(dir);
	}
}

char *cli_discover(const char *given)
{
	const char *env = getenv("ASP_CONFIG");

	if (given) /* already absolute (cli_parse) */
		return given[0] == '/' && is_regular(given) ? strdup(given) : NULL;
	if (env && *env)
		return is_regular(env) ? absolute(env) : NULL;
	return find_upward();
}
