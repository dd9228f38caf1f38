/*
 * fsops.c - what both file transports share: the type of an st_mode, the
 * order of a listing, freeing one.
 */
#include "fsops.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

uint32_t asp__fsops_type_of(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return ASP_TYPE_FILE;
	case S_IFDIR:
		return ASP_TYPE_DIR;
	case S_IFLNK:
		return ASP_TYPE_SYMLINK;
	default:
		return ASP_TYPE_OTHER;
	}
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const asp_list_entry *)a)->name, ((const asp_list_entry *)b)->name);
}

void asp__fsops_sort(asp_list_entry *v, size_t n)
{
	if (n)
		qsort(v, n, sizeof(*v), cmp_entry);
}

void asp__fsops_list_free(asp_list_entry *e, size_t count)
{
	size_t i;

	for (i = 0; e && i < count; i++)
		asp__free(e[i].name);
	asp__free(e);
}

int asp__fsops_rofs_error(asp_error *err, const char *what, const char *path, const char *to)
{
	if (to)
		return asp__error(err, ASP_EROFS, "%s %s to %s: read-only file system (the sandbox mounts it "
				  "read-only)", what, SHOW(path), SHOW(to));
	return asp__error(err, ASP_EROFS, "%s %s: read-only file system (the sandbox mounts it read-only)",
			  what, SHOW(path));
}
