/* fuzz_sftp.c - the SFTP reply decoders on hostile server bytes. */
#include <stddef.h>
#include <stdint.h>

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
	r.type = size ? data[0] : 0;
	r.id = 1;
	r.p = data;
	r.len = size;
	(void)asp__sftp_status(&r);
	return 0;
}
