/* fuzz_sftp.c - the SFTP reply decoders on hostile server bytes. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fs.h"
#include "sftp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const unsigned char *p = data, *s;
	size_t len = size, sl;
	asp_sftp_attrs a;
	asp_sftp_reply r;
	uint32_t count, i;

	/* A NAME reply body: count, then name, long name, attrs per entry. */
	if (asp__sftp_get_u32(&p, &len, &count) == 0)
		for (i = 0; i < count && i < 10000; i++)
			if (asp__sftp_get_str(&p, &len, &s, &sl) || asp__sftp_get_str(&p, &len, &s, &sl) ||
			    asp__sftp_get_attrs(&p, &len, &a))
				break;
	if (len > size)
		__builtin_trap();
	/* The listing decoder: names checked, at most 100 entries kept. */
	{
		asp_list_entry *v = NULL;
		size_t n = 0, cap = 0;
		asp_error e;
		int rc = asp__fs_list_decode(data, size, "/fuzz", 100, &v, &n, &cap, &e);
		if (n > 100 || (rc && rc != ASP_EPROTO && rc != ASP_ELIMIT && rc != ASP_ENOMEM))
			__builtin_trap();
		for (size_t k = 0; k < n; k++)
			if (!v[k].name[0] || strchr(v[k].name, '/'))
				__builtin_trap();
		asp__fs_list_free(v, n);
	}
	r.type = size ? data[0] : 0;
	r.id = 1;
	r.p = data;
	r.len = size;
	(void)asp__sftp_status(&r);
	return 0;
}
