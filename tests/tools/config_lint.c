/*
 * config_lint.c - check one .asp.json with libasp's parser, for
 * tests/schema_agree.py. Prints "ok" or the error message.
 * Exit 0 when valid, 1 when not, 2 on bad usage.
 */
#include <stdio.h>

#include "asp.h"

int main(int argc, char **argv)
{
	asp_error err = { 0 };

	if (argc != 2) {
		fprintf(stderr, "usage: %s FILE\n", argv[0]);
		return 2;
	}
	if (asp_config_check(argv[1], &err) != ASP_OK) {
		printf("%s: %s\n", asp_error_name(err.code), err.message);
		return 1;
	}
	printf("ok\n");
	return 0;
}
