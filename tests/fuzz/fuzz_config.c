/* fuzz_config.c - the .asp.json parser and validator never crash, leak or accept NUL. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "hostkey.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	asp_config *cfg = NULL;
	asp_error err;

	if (asp__config_parse(&cfg, (const char *)data, size, "/fuzz/.asp.json", &err) == 0) {
		asp_pin pin;
		/* Whatever the parser accepts must be usable as-is. */
		if (!cfg->host || !cfg->user || !cfg->workspace || cfg->workspace[0] != '/' ||
		    cfg->port < 1 || cfg->port > 65535)
			__builtin_trap();
		if (cfg->host_key && asp__config_pin(&pin, cfg, &err) == 0)
			asp__pin_clear(&pin);
		asp__config_free(cfg);
	} else if (err.code != ASP_ECONFIG && err.code != ASP_ENOMEM) {
		__builtin_trap();
	} else if (!memchr(err.message, '\0', sizeof(err.message))) {
		__builtin_trap();
	}
	return 0;
}
