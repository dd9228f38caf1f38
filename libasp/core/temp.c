/*
 * temp.c - the names of atomic writes' temp files and when one is stale.
 * No I/O: both transports (fs_sftp.c, shfs.c) name their temp files here,
 * and the sweep (sweep.c) judges the ones it finds.
 */
#include "temp.h"

#include <string.h>

/*
 * An atomic write's temp file is ".NAME.asp-RRRRRRRRRRRR-L.tmp": NAME the
 * target's name (at most 100 bytes of it), R 48 random bits in lowercase
 * hex, L the writer's lease in seconds. A live writer's WRITEs keep moving
 * the file's mtime, and a writer that hears nothing from the server for
 * its io_timeout_ms (L, rounded up) gives up and never renames the file:
 * so a temp file whose mtime is older than 2 L + TEMP_SLACK_S (server
 * clock) has no live writer, and anyone may remove it. Names without "-L"
 * come from earlier versions: stale after TEMP_LEGACY_STALE_S.
 */
#define TEMP_HEX 12
#define TEMP_BASE_MAX 100
#define TEMP_SLACK_S 3
#define TEMP_LEGACY_STALE_S 3600

char *asp__temp_name(const char *path, unsigned int lease_s)
{
	const char *slash = strrchr(path, '/');
	unsigned char rnd[6];
	size_t dl = slash ? (size_t)(slash - path) : 0;
	const char *base = slash ? slash + 1 : path;

	if (asp__random(rnd, sizeof(rnd)))
		return NULL;
	/* Hidden, in the same directory (rename must not cross filesystems), recognisable. */
	return asp__sprintf("%.*s/.%.100s.asp-%02x%02x%02x%02x%02x%02x-%u.tmp", (int)dl, path, base,
			    rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], lease_s);
}

/* Does name[0, end) end in ".asp-" and 12 lowercase hex digits, after "." and 1..100 bytes? */
static int temp_stem(const char *name, size_t end)
{
	size_t k;

	if (end < 1 + 1 + 5 + TEMP_HEX || end - TEMP_HEX - 5 - 1 > TEMP_BASE_MAX)
		return 0;
	for (k = end - TEMP_HEX; k < end; k++)
		if (!((name[k] >= '0' && name[k] <= '9') || (name[k] >= 'a' && name[k] <= 'f')))
			return 0;
	return !memcmp(name + end - TEMP_HEX - 5, ".asp-", 5);
}

int asp__temp_parse(const char *name, size_t len, uint32_t *lease_s)
{
	size_t end, dash;
	uint32_t v = 0;

	if (len < 4 || name[0] != '.' || memcmp(name + len - 4, ".tmp", 4) || memchr(name, '/', len) ||
	    memchr(name, '\0', len))
		return 0;
	end = len - 4;
	if (temp_stem(name, end)) {
		*lease_s = 0;
		return 1;
	}
	for (dash = end; dash > 0 && name[dash - 1] >= '0' && name[dash - 1] <= '9'; dash--)
		;
	if (dash == end || dash == 0 || name[dash - 1] != '-' || name[dash] == '0' || end - dash > 9)
		return 0;
	for (size_t k = dash; k < end; k++)
		v = v * 10 + (uint32_t)(name[k] - '0');
	if (!temp_stem(name, dash - 1))
		return 0;
	*lease_s = v;
	return 1;
}

int asp__temp_stale(uint32_t mtime, uint32_t lease_s, uint64_t now_s)
{
	uint64_t bound = lease_s ? 2ull * lease_s + TEMP_SLACK_S : TEMP_LEGACY_STALE_S;

	return now_s > mtime && now_s - mtime > bound;
}

uint64_t asp__temp_stale_in(uint32_t mtime, uint32_t lease_s, uint64_t now_s)
{
	uint64_t bound = lease_s ? 2ull * lease_s + TEMP_SLACK_S : TEMP_LEGACY_STALE_S;
	uint64_t at = (uint64_t)mtime + bound + 1;

	return at > now_s ? at - now_s : 1;
}
